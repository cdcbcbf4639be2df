"""Record -> metrics: ACC, forgetting and BWT over the accuracy matrix R (Sec. 3.6).

R[i][j] is the accuracy (%) on task j's test images after training through task i, predicting
among all classes seen so far (no task identity); entries j > i are undefined (None). With T tasks:
  ACC = mean_j R[T-1][j]
  F   = mean_{j<T-1} (max_{i>=j} R[i][j] - R[T-1][j])      (forgetting from the best accuracy)
  BWT = mean_{j<T-1} (R[T-1][j] - R[j][j])                 (backward transfer from introduction)
Those three are the paper's and are checked against it. REPORTED are metrics beyond the paper's, recorded
and shown but never checked (no paper value, no tolerance); adding one is one function and one entry:
  AIA = mean_t mean_{j<=t} R[t][j]                         (average incremental accuracy, iCaRL, PyCIL)
Plain Python and numpy, no torch: aggregation, checking and reporting use them without a model.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

Matrix = list[list[float | None]]


def acc(R: Matrix) -> float:
    """Final average accuracy: mean of the last row."""
    last = R[-1]
    return sum(last) / len(last)


def task_forgetting(R: np.ndarray) -> np.ndarray:
    """Per task j: max_{i>=j} R[i][j] - R[T-1][j], shape [..., T] for a stack of matrices [..., T, T].

    Only entries on or below the diagonal are read; the last task's forgetting is 0 by definition.
    """
    T = R.shape[-1]
    return np.stack([R[..., j:, j].max(axis=-1) - R[..., -1, j] for j in range(T)], axis=-1)


def forgetting(R: Matrix) -> float:
    """Mean drop of each earlier task from its best accuracy (over i >= j) to its final accuracy."""
    T = len(R)
    if T < 2:
        return 0.0
    return float(task_forgetting(np.array(square(R), dtype=float))[: T - 1].mean())  # rows or matrix


def bwt(R: Matrix) -> float:
    """Backward transfer: mean of final minus just-learned accuracy over the earlier tasks."""
    T = len(R)
    if T < 2:
        return 0.0
    return sum(R[-1][j] - R[j][j] for j in range(T - 1)) / (T - 1)


def square(rows: list[list[float]]) -> Matrix:
    """Pad the lower-triangular rows to a T x T matrix with None above the diagonal."""
    T = len(rows)
    return [list(row) + [None] * (T - len(row)) for row in rows]


def aia(R: Matrix) -> float:
    """Average incremental accuracy: the mean over tasks t of the accuracy on the tasks seen after t (row t's
    entries j <= t; the tasks' test sets are of equal size, so this is the accuracy over every seen image)."""
    return float(np.mean([np.mean([x for x in row[: t + 1]]) for t, row in enumerate(R)]))


# Metrics beyond the paper's three: name -> function of R (result.json's `metrics`, uh aggregate, uh report).
REPORTED: dict[str, Callable[[Matrix], float]] = {"aia": aia}
