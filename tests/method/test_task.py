"""task.py: one task runs the paper's steps in Section 3's order (the teacher before the head grows, the memory
refreshed after the fit, R's row last), a diverging fit stops the task before the memory changes, and the head's
new rows are imprinted from the new classes' mean features from task 1 on."""

import dataclasses

import pytest
import torch
import torch.nn.functional as F

from uniform_herding.catalogue import resolve
from uniform_herding.method import evaluate, task
from uniform_herding.method.memory import make_memory
from uniform_herding.method.model import Learner
from uniform_herding.method.train import TaskStats

HEALTHY = TaskStats(
    steps=3, skipped_steps=0, loss_scale=None, epoch_loss=[1.0], last_finite_loss=1.0, weights_finite=True
)


def recorded_task(t: int, run_id: str, stats: TaskStats, tiny_stream, monkeypatch) -> list[str]:
    """The steps learn_task takes for task `t` of `run_id` (smoke), each replaced by a recorder; their names."""
    calls: list[str] = []

    def step(name: str, result: object = None):
        return lambda *args, **kwargs: (calls.append(name), result)[1]

    monkeypatch.setattr(task, "freeze", step("snapshot the teacher", "a teacher"))
    monkeypatch.setattr(task, "grow_head", step("grow and imprint the head"))
    monkeypatch.setattr(task, "fit_task", step("fit", stats))
    monkeypatch.setattr(task, "refresh_memory", step("refresh the memory"))
    monkeypatch.setattr(evaluate, "accuracy_row", step("evaluate R[t]", [50.0] * (t + 1)))
    cfg = resolve(run_id, "smoke")
    gen = torch.Generator().manual_seed(0)
    learner, memory = Learner(cfg.width, cfg.head, cfg.cos_scale), make_memory(cfg, gen)
    try:
        assert task.learn_task(t, cfg, learner, memory, tiny_stream(cfg), gen, "32-true") == ([50.0] * (t + 1), stats)
    except task.Diverged:
        calls.append("stopped: diverged")
    return calls


@pytest.mark.parametrize(
    ("t", "run_id", "teacher"), [(0, "B3", False), (1, "B3", True), (1, "B1", True), (1, "a1", False), (1, "B2", False)]
)
def test_a_task_takes_the_papers_steps_in_section_3s_order(t, run_id, teacher, tiny_stream, monkeypatch):
    """The teacher is snapshot before the head grows, and only where the loss distils (KD with lambda > 0, iCaRL's
    BCE) from task 1 on; the memory is refreshed after the fit, in the representation it learned; R's row is last."""
    steps = ["grow and imprint the head", "fit", "refresh the memory", "evaluate R[t]"]
    assert recorded_task(t, run_id, HEALTHY, tiny_stream, monkeypatch) == ["snapshot the teacher"] * teacher + steps


def test_a_diverging_fit_stops_the_task_before_the_memory_is_refreshed(tiny_stream, monkeypatch):
    diverged = dataclasses.replace(HEALTHY, weights_finite=False)
    calls = recorded_task(1, "B3", diverged, tiny_stream, monkeypatch)
    assert calls == ["snapshot the teacher", "grow and imprint the head", "fit", "stopped: diverged"]


@pytest.mark.parametrize(("run_id", "t", "imprinted"), [("B3", 0, False), ("B3", 1, True), ("B1", 1, False)])
def test_new_rows_are_imprinted_from_the_new_classes_mean_features_from_task_1(run_id, t, imprinted, tiny_stream):
    """Sec. 3.1: before any optimisation, each new row is the normalised mean of the normalised features of its class's
    training images; task 0's rows, and every row of a run that does not imprint (iCaRL), keep nn.Linear's start."""
    cfg = resolve(run_id, "smoke")
    stream = tiny_stream(cfg)
    torch.manual_seed(0)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    for _ in range(t):
        learner.head.grow(cfg.classes_per_task)
    task.grow_head(learner, stream, t, cfg)
    rows = learner.head.weight[cfg.classes_per_task * t :].detach()
    assert learner.head.n_classes == cfg.classes_per_task * (t + 1)
    features = [
        evaluate.features(learner, stream, stream.train_x[stream.class_items[c]], 64) for c in stream.classes(t)
    ]
    means = F.normalize(torch.stack([F.normalize(f, dim=1).mean(0) for f in features]), dim=1)
    assert torch.allclose(rows, means, atol=1e-6) is imprinted
