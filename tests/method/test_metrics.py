"""ACC, forgetting and BWT on hand-made accuracy matrices."""

import numpy as np
import pytest

from uniform_herding.method.metrics import acc, bwt, forgetting, square, task_forgetting

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
    from uniform_herding.method.metrics import REPORTED, aia, square

    R = square([[80.0], [60.0, 70.0], [40.0, 50.0, 90.0]])
    assert aia(R) == pytest.approx(205 / 3) and REPORTED["aia"].of is aia


def test_learning_accuracy_is_the_mean_of_the_diagonal():
    """LA (Riemer et al. 2019): the accuracy on each task just after learning it; R3's diagonal 80, 90, 85 gives 85,
    whatever came after (the last row alone gives ACC 68.33)."""
    from uniform_herding.method.metrics import REPORTED, learning_accuracy

    assert learning_accuracy(R3) == pytest.approx(85.0) and REPORTED["la"].of is learning_accuracy
    assert learning_accuracy([[80.0], [0.0, 90.0], [0.0, 0.0, 85.0]]) == pytest.approx(85.0)  # forgetting is not LA's


def test_every_metric_declares_a_range_and_defines_itself_in_its_docstring():
    """uh report prints a metric's definition from its docstring, and results.py checks its declared range: each
    metric's docstring's first paragraph states its formula over R, and every value R can give lies in its range."""
    from uniform_herding.method.metrics import PAPER, REPORTED

    rng = np.random.default_rng(0)
    for name, metric in {**PAPER, **REPORTED}.items():
        assert metric.low < metric.high and " = " in metric.definition and "R[" in metric.definition, name
        for _ in range(200):
            T = int(rng.integers(1, 8))
            R = square([list(rng.choice([0.0, 100.0, rng.uniform(0, 100)], size=i + 1)) for i in range(T)])
            assert metric.low <= metric.of(R) <= metric.high, (name, R)


def test_bwt_is_never_below_minus_forgetting():
    """The bound read_per_seed_csv holds a row to: F_j = max_{i>=j} R[i][j] - R[T-1][j] >= R[j][j] - R[T-1][j] = -BWT_j
    for each task, so BWT >= -F for every R (equal where no task ever beat its first accuracy)."""
    rng = np.random.default_rng(0)
    for _ in range(200):
        T = int(rng.integers(1, 8))
        R = square([list(rng.choice([0.0, 100.0, rng.uniform(0, 100)], size=i + 1)) for i in range(T)])
        assert bwt(R) >= -forgetting(R) - 1e-9, R
    assert bwt(R3) == -forgetting(R3)
