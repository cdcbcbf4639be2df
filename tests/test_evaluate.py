"""The readouts: NME on hand-made prototypes, and one accuracy row against a per-task loop."""

import pytest
import torch

from uniform_herding.evaluate import nme_predict


def test_nme_predicts_nearest_normalised_prototype():
    mu = torch.tensor([[10.0, 0.0], [0.0, 1.0]])  # class 0 far away but same direction as x0
    x = torch.tensor([[1.0, 0.1], [0.1, 5.0], [3.0, 2.0]])
    assert nme_predict(x, mu).tolist() == [0, 1, 0]


def test_accuracy_row_equals_a_per_task_loop(tiny_stream):
    """The one-pass readout gives, per task, the accuracy of predicting that task's test images alone."""
    import dataclasses

    from uniform_herding.config import resolve
    from uniform_herding.evaluate import accuracy_row, features, nme_predict, prototypes
    from uniform_herding.model import Learner

    cfg = dataclasses.replace(resolve("B3", "smoke"), train_per_class=10)
    stream = tiny_stream(cfg)
    torch.manual_seed(0)
    learner = Learner(cfg.width, "cosine", cfg.cos_scale)
    learner.head.grow(3 * cfg.classes_per_task)
    active = {c: stream.class_items[c][:4] for c in range(3 * cfg.classes_per_task)}
    for readout in ("nme", "head"):
        row = accuracy_row(learner, stream, 2, readout, active, 7)
        mu = prototypes(learner, stream, active, 7)
        for j in range(3):
            items = stream.test_items(j)
            f = features(learner, stream, stream.test_x[items], 5)
            pred = nme_predict(f, mu) if readout == "nme" else learner.head(f).argmax(1)
            assert row[j] == pytest.approx(100.0 * (pred == stream.test_y[items]).double().mean().item())


def test_the_accuracy_row_uses_no_op_without_a_deterministic_cuda_kernel(tiny_stream, monkeypatch):
    """Under --deterministic a GPU run raises on ops that have no deterministic CUDA kernel, among them a
    bincount with weights; a CPU does not, so here bincount raises as CUDA would."""
    import dataclasses

    from uniform_herding.config import resolve
    from uniform_herding.evaluate import accuracy_row
    from uniform_herding.model import Learner

    bincount = torch.bincount

    def as_on_cuda(input, weights=None, minlength=0):
        if weights is not None and torch.are_deterministic_algorithms_enabled():
            raise RuntimeError("bincount_cuda does not have a deterministic implementation")
        return bincount(input, weights, minlength)

    cfg = dataclasses.replace(resolve("B3", "smoke"), train_per_class=10)
    stream = tiny_stream(cfg)
    torch.manual_seed(0)
    learner = Learner(cfg.width, "cosine", cfg.cos_scale)
    learner.head.grow(2 * cfg.classes_per_task)
    active = {c: stream.class_items[c][:4] for c in range(2 * cfg.classes_per_task)}
    expected = accuracy_row(learner, stream, 1, "head", active, 16)
    monkeypatch.setattr(torch, "bincount", as_on_cuda)
    torch.use_deterministic_algorithms(True)
    try:
        assert accuracy_row(learner, stream, 1, "head", active, 16) == expected
    finally:
        torch.use_deterministic_algorithms(False)
