"""ACC, forgetting and BWT on hand-made accuracy matrices."""

import numpy as np
import pytest

from uniform_herding.metrics import acc, bwt, forgetting, square, task_forgetting

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


def test_metrics_take_the_rows_as_recorded_or_the_square_matrix():
    rows = [[80.0], [60.0, 90.0], [50.0, 70.0, 85.0]]
    assert (acc(rows), forgetting(rows), bwt(rows)) == (acc(R3), forgetting(R3), bwt(R3))


def test_average_incremental_accuracy_is_the_mean_of_each_rows_seen_tasks():
    """AIA (iCaRL, PyCIL): rows 80; 60, 70; 40, 50, 90 have seen-task means 80, 65, 60, so AIA is 205 / 3.
    ACC is the last row's mean only (60): the paper reports ACC, not AIA."""
    from uniform_herding.metrics import REPORTED, aia, square

    R = square([[80.0], [60.0, 70.0], [40.0, 50.0, 90.0]])
    assert aia(R) == pytest.approx(205 / 3) and REPORTED["aia"] is aia
