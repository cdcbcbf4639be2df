"""Backbone shape, head growth keeps old rows, imprinting, margin-free logits."""

import torch
import torch.nn.functional as F

from uniform_herding.method.model import Head, Learner


def test_resnet18_feature_dim_and_shapes():
    learner = Learner(width=8, head="cosine", cos_scale=30.0)
    learner.head.grow(10)
    feats, logits = learner(torch.randn(2, 3, 32, 32))
    assert feats.shape == (2, 64) and logits.shape == (2, 10)
    n_blocks = sum(1 for m in learner.backbone.modules() if type(m).__name__ == "BasicBlock")
    assert n_blocks == 8


def test_head_growth_keeps_old_rows():
    for kind in ("cosine", "linear"):
        head = Head(16, kind, 30.0)
        head.grow(3)
        old = head.weight.detach().clone()
        head.grow(2)
        assert head.n_classes == 5 and torch.equal(head.weight[:3], old)
        assert (head.bias is None) == (kind == "cosine")


def test_cosine_logits_are_scaled_cosines_bounded_by_s():
    head = Head(8, "cosine", 30.0)
    head.grow(4)
    f = torch.randn(5, 8)
    expected = 30.0 * F.normalize(f, dim=1) @ F.normalize(head.weight, dim=1).T
    assert torch.allclose(head(f), expected, atol=1e-5) and head(f).abs().max() <= 30.0 + 1e-4


def test_imprint_sets_normalised_means_and_zero_bias():
    head = Head(4, "linear", 30.0)
    head.grow(4)
    means = torch.tensor([[3.0, 0, 0, 0], [0, 0, 2.0, 0]])
    head.imprint(slice(2, 4), means)
    assert torch.allclose(head.weight[2:], F.normalize(means, dim=1)) and torch.all(head.bias[2:] == 0)
