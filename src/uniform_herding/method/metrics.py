"""Record -> metrics: ACC, forgetting and BWT over the accuracy matrix R (Sec. 3.5), and metrics beyond them.

R[i][j] is the accuracy (%) on task j's test images after training through task i, predicting
among all classes seen so far (no task identity); entries j > i are undefined (None). With T tasks:
  ACC = mean_j R[T-1][j]
  F   = mean_{j<T-1} (max_{i>=j} R[i][j] - R[T-1][j])      (forgetting from the best accuracy)
  BWT = mean_{j<T-1} (R[T-1][j] - R[j][j])                 (backward transfer from introduction)
Those three are the paper's (PAPER; METRICS, their names) and are checked against it. REPORTED are metrics beyond
the paper's, recorded and shown but never checked (no paper value, no tolerance). A metric is one function of R, whose
docstring's first paragraph defines it (uh report prints it), and one entry here that declares the range
of its values (results.py refuses a result outside it, or one whose stored value R does not give);
docs/extending.md, "Adding a metric". Plain Python and numpy, no torch: aggregation, checking and
reporting use them without a model.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

Matrix = list[list[float | None]]


def acc(R: Matrix) -> float:
    """Final average accuracy, ACC = (1/T) sum_j R[T-1][j]: the mean of R's last row, the accuracy on each task's
    test images after the last task."""
    last = R[-1]
    return sum(last) / len(last)


def task_forgetting(R: np.ndarray) -> np.ndarray:
    """Per task j: max_{i>=j} R[i][j] - R[T-1][j], shape [..., T] for a stack of matrices [..., T, T].

    Only entries on or below the diagonal are read; the last task's forgetting is 0 by definition.
    """
    T = R.shape[-1]
    return np.stack([R[..., j:, j].max(axis=-1) - R[..., -1, j] for j in range(T)], axis=-1)


def forgetting(R: Matrix) -> float:
    """Forgetting, F = (1/(T-1)) sum_{j<T-1} (max_{i>=j} R[i][j] - R[T-1][j]): the mean drop of each task but the
    last from its best accuracy to its final one (0 for a single task)."""
    T = len(R)
    if T < 2:
        return 0.0
    return float(task_forgetting(np.array(square(R), dtype=float))[: T - 1].mean())  # rows or matrix


def bwt(R: Matrix) -> float:
    """Backward transfer, BWT = (1/(T-1)) sum_{j<T-1} (R[T-1][j] - R[j][j]): the mean change of each task but the
    last from just after it was learned to the end, negative where it was forgotten (0 for a single task)."""
    T = len(R)
    if T < 2:
        return 0.0
    return sum(R[-1][j] - R[j][j] for j in range(T - 1)) / (T - 1)


def square(rows: list[list[float]]) -> Matrix:
    """Pad the lower-triangular rows to a T x T matrix with None above the diagonal."""
    T = len(rows)
    return [list(row) + [None] * (T - len(row)) for row in rows]


def aia(R: Matrix) -> float:
    """Average incremental accuracy (iCaRL, PyCIL), AIA = (1/T) sum_t (1/(t+1)) sum_{j<=t} R[t][j]: the mean over
    tasks t of the accuracy on the tasks seen after t (the tasks' test sets are of equal size, so each row's mean
    is the accuracy over every seen test image)."""
    return float(np.mean([np.mean([x for x in row[: t + 1]]) for t, row in enumerate(R)]))


def learning_accuracy(R: Matrix) -> float:
    """Learning accuracy (Riemer et al. 2019), LA = (1/T) sum_j R[j][j]: the mean of R's diagonal, the accuracy on
    each task's test images just after learning it, before any later task could make it forget."""
    return float(np.mean([R[j][j] for j in range(len(R))]))


@dataclass(frozen=True)
class Metric:
    """A metric: its function of R and the range [low, high] its values lie in (results.py refuses one outside)."""

    of: Callable[[Matrix], float]
    low: float
    high: float

    @property
    def definition(self) -> str:
        """The first paragraph of the function's docstring, on one line: what uh report prints for it."""
        return " ".join((inspect.getdoc(self.of) or "").split("\n\n")[0].split())


# Percent: an accuracy is in [0, 100], so is a mean of accuracies, forgetting (best minus last); BWT in [-100, 100].
PAPER: dict[str, Metric] = {
    "acc": Metric(acc, 0, 100),
    "forgetting": Metric(forgetting, 0, 100),
    "bwt": Metric(bwt, -100, 100),
}
METRICS: tuple[str, ...] = tuple(PAPER)  # acc, forgetting, bwt: the paper's three, checked against it (uh check)
# Metrics beyond the paper's three (result.json's `metrics`, uh aggregate, uh report), never checked.
REPORTED: dict[str, Metric] = {"aia": Metric(aia, 0, 100), "la": Metric(learning_accuracy, 0, 100)}
