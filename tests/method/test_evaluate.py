"""The readouts: NME on hand-made prototypes, prototypes over the active exemplars only, and one accuracy row
against a per-task loop written from the definitions (features, prototypes and predictions by hand)."""

import dataclasses

import pytest
import torch

from uniform_herding.catalogue import resolve
from uniform_herding.method.evaluate import ReadoutError, accuracy_row, nme_predict, prototypes
from uniform_herding.method.model import Learner

CIFAR100_MEAN, CIFAR100_STD = (0.5071, 0.4865, 0.4409), (0.2673, 0.2564, 0.2762)  # docs/design.md's normalisation
SEEN_TASKS = 3


def test_nme_predicts_nearest_normalised_prototype():
    mu = torch.tensor([[10.0, 0.0], [0.0, 1.0]])  # class 0 far away but same direction as x0
    x = torch.tensor([[1.0, 0.1], [0.1, 5.0], [3.0, 2.0]])
    assert nme_predict(x, mu).tolist() == [0, 1, 0]


@torch.no_grad()
def features_by_hand(learner: Learner, images: torch.Tensor) -> torch.Tensor:
    """Raw backbone features under the evaluation transform (scale to [0, 1], normalise), eval mode, one batch."""
    mean, std = torch.tensor(CIFAR100_MEAN).view(1, 3, 1, 1), torch.tensor(CIFAR100_STD).view(1, 3, 1, 1)
    return learner.eval().backbone((images.float() / 255 - mean) / std)


@pytest.fixture
def seen(tiny_stream):
    """A learner after task 2 (6 classes) with a strict subset of each class active, and test images that are
    copies of active exemplars (so that the readouts get some, not all, of them right)."""
    cfg = dataclasses.replace(resolve("B3", "smoke"), train_per_class=10)
    stream = tiny_stream(cfg)
    torch.manual_seed(0)
    learner = Learner(cfg.width, "cosine", cfg.cos_scale)
    n_classes = SEEN_TASKS * cfg.classes_per_task
    learner.head.grow(n_classes)
    active = {c: stream.class_items[c][c % 3 :: 2] for c in range(n_classes)}  # 4 or 5 of 10, not a prefix
    for c in range(n_classes):
        test = torch.nonzero(stream.test_y == c).squeeze(1)
        stream.test_x[test] = stream.train_x[active[(c + 1) % n_classes][: len(test)]]  # another class's exemplars
        stream.test_x[test[:2]] = stream.train_x[active[c][:2]]  # and two of its own
    return cfg, stream, learner, active


def test_prototypes_average_the_active_exemplars_only(seen):
    """mu_c is the mean raw feature of class c's active exemplars, not of all its training images."""
    _, stream, learner, active = seen
    mu = prototypes(learner, stream, active, len(active), batch=3)  # batches cut across classes
    for c, items in active.items():
        assert len(items) < len(stream.class_items[c])
        torch.testing.assert_close(mu[c], features_by_hand(learner, stream.train_x[items]).mean(0))
        every = features_by_hand(learner, stream.train_x[stream.class_items[c]]).mean(0)
        assert not torch.allclose(mu[c], every, rtol=1e-3, atol=1e-4)  # the subset's mean is another vector


@pytest.mark.parametrize(
    ("fault", "words"),
    [
        ("empty", "holds no exemplar of class 4 (task 3)"),
        ("dropped", "holds no exemplar of class 4 (task 3)"),
        ("unseen", "holds exemplars of the unseen class 6 (task 4)"),
    ],
)
def test_nme_refuses_a_memory_without_an_exemplar_of_every_seen_class(seen, fault, words):
    """A seen class with no exemplar would average to a NaN prototype that takes every test image; a class left
    out of the memory would shift every later class's label: NME refuses both in one line, naming the class."""
    _, stream, learner, active = seen
    active = dict(active)
    if fault == "empty":
        active[4] = active[4][:0]
    elif fault == "dropped":
        del active[4]
    else:
        active[6] = stream.class_items[6][:2]
    with pytest.raises(ReadoutError) as e:
        accuracy_row(learner, stream, SEEN_TASKS - 1, "nme", active, 7)
    assert words in str(e.value) and "readout=head" in str(e.value) and "\n" not in str(e.value)
    assert len(accuracy_row(learner, stream, SEEN_TASKS - 1, "head", active, 7)) == SEEN_TASKS  # head: no exemplars


def test_accuracy_row_equals_a_per_task_loop(seen):
    """R[t][j]: the share of task j's test images predicted right among all seen classes, by the nearest
    normalised prototype (NME) or the head's largest logit, each computed here from its definition."""
    cfg, stream, learner, active = seen
    mu = torch.stack([features_by_hand(learner, stream.train_x[active[c]]).mean(0) for c in sorted(active)])
    rows = {}
    for readout in ("nme", "head"):
        row = accuracy_row(learner, stream, SEEN_TASKS - 1, readout, active, 7)
        expected = []
        for j in range(SEEN_TASKS):
            in_task = (stream.test_y // cfg.classes_per_task) == j
            f = features_by_hand(learner, stream.test_x[in_task])
            if readout == "nme":
                distance = torch.cdist(f / f.norm(dim=1, keepdim=True), mu / mu.norm(dim=1, keepdim=True))
                pred = distance.argmin(dim=1)
            else:
                pred = learner.head(f).argmax(dim=1)
            expected.append(100.0 * (pred == stream.test_y[in_task]).sum().item() / in_task.sum().item())
        assert row == pytest.approx(expected)
        rows[readout] = row
    assert all(0 < acc < 100 for acc in rows["nme"]), rows  # neither all right nor all wrong: it can see a bug


def test_the_accuracy_row_uses_no_op_without_a_deterministic_cuda_kernel(tiny_stream, monkeypatch):
    """Under --deterministic a GPU run raises on ops that have no deterministic CUDA kernel, among them a
    bincount with weights; a CPU does not, so here bincount raises as CUDA would."""
    import dataclasses

    from uniform_herding.catalogue import resolve
    from uniform_herding.method.evaluate import accuracy_row
    from uniform_herding.method.model import Learner

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


class ReplayedBackbone(torch.nn.Module):
    """A backbone that returns one buffer, overwritten by every call, as a CUDA-graph replay does
    (UH_COMPILE=reduce-overhead): an output kept past the next call silently becomes the next output."""

    def __init__(self, backbone: torch.nn.Module) -> None:
        super().__init__()
        self.backbone, self.feature_dim, self.out = backbone, backbone.feature_dim, None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.backbone(x)
        if self.out is None or self.out.shape != y.shape:
            self.out = torch.empty_like(y)
        return self.out.copy_(y)


def test_features_survive_a_backbone_that_overwrites_its_output(seen):
    """evaluate.features keeps each batch's output (a clone) before the next batch is run: under CUDA-graph
    replay, keeping the returned tensor itself would give every batch the last batch's features, without error."""
    from uniform_herding.method.evaluate import features

    _, stream, learner, _ = seen
    images = stream.test_x[:12]
    expected = features(learner, stream, images, batch=4)
    learner.backbone = ReplayedBackbone(learner.backbone)
    torch.testing.assert_close(features(learner, stream, images, batch=4), expected)
    torch.testing.assert_close(expected, features_by_hand(learner, images))
