"""Metrics on hand-made accuracy matrices, and the NME readout."""

import numpy as np
import pytest
import torch

from uniform_herding.evaluate import acc, bwt, forgetting, nme_predict, square, task_forgetting

# After task 0: 80 on task 0. After task 1: 60 on task 0, 90 on task 1. After task 2: 50, 70, 85.
R3 = square([[80.0], [60.0, 90.0], [50.0, 70.0, 85.0]])


def test_square_pads_upper_triangle_with_none():
    assert R3 == [[80.0, None, None], [60.0, 90.0, None], [50.0, 70.0, 85.0]]


def test_acc_is_mean_of_last_row():
    assert acc(R3) == pytest.approx((50 + 70 + 85) / 3)


def test_forgetting_from_best_accuracy():
    # task 0: best 80 -> 50 = 30; task 1: best 90 -> 70 = 20; mean 25.
    assert forgetting(R3) == pytest.approx(25.0)


def test_forgetting_uses_max_not_first_accuracy():
    R = square([[40.0], [70.0, 90.0], [60.0, 80.0, 85.0]])  # task 0 improved after introduction
    assert forgetting(R) == pytest.approx(((70 - 60) + (90 - 80)) / 2)
    assert bwt(R) == pytest.approx(((60 - 40) + (80 - 90)) / 2)


def test_bwt_from_introduction_accuracy():
    assert bwt(R3) == pytest.approx(((50 - 80) + (70 - 90)) / 2)


def test_task_forgetting_per_task_on_a_stack_of_matrices():
    """The per-task form the figures draw: one row per seed, the last task 0, never reads above the diagonal."""
    improved = square([[40.0], [70.0, 90.0], [60.0, 80.0, 85.0]])
    stack = np.array([R3, improved], dtype=float)  # None above the diagonal becomes NaN
    assert task_forgetting(stack).tolist() == [[30.0, 20.0, 0.0], [10.0, 10.0, 0.0]]


def test_single_task_has_no_forgetting():
    assert forgetting([[55.0]]) == 0.0 and bwt([[55.0]]) == 0.0 and acc([[55.0]]) == 55.0


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


def test_metrics_take_the_rows_as_recorded_or_the_square_matrix():
    rows = [[80.0], [60.0, 90.0], [50.0, 70.0, 85.0]]
    assert (acc(rows), forgetting(rows), bwt(rows)) == (acc(R3), forgetting(R3), bwt(R3))
