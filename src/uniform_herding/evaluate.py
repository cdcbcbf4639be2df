"""Evaluate: readouts (NME, head-logit), one row of the accuracy matrix R, and the metrics (Sec. 3.6).

R[i][j] is the accuracy (%) on task j's test images after training through task i, predicting
among all classes seen so far (no task identity); entries j > i are undefined (None). With T tasks:
  ACC = mean_j R[T-1][j]
  F   = mean_{j<T-1} (max_{i>=j} R[i][j] - R[T-1][j])      (forgetting from the best accuracy)
  BWT = mean_{j<T-1} (R[T-1][j] - R[j][j])                 (backward transfer from introduction)
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from uniform_herding.model import Learner
from uniform_herding.stream import TaskStream

Matrix = list[list[float | None]]


@torch.no_grad()
def features(learner: Learner, stream: TaskStream, images: Tensor, batch: int) -> Tensor:
    """Raw backbone features [n, d] with the evaluation transform, in eval mode, large batches."""
    learner.eval()
    # clone: under UH_COMPILE=reduce-overhead the next CUDA-graph replay would overwrite this batch's output
    chunks = (images[i : i + batch] for i in range(0, len(images), batch))
    out = [learner.backbone(stream.normalize(chunk)).float().clone() for chunk in chunks]
    return torch.cat(out) if out else torch.zeros(0, learner.backbone.feature_dim, device=images.device)


def prototypes(learner: Learner, stream: TaskStream, active: dict[int, Tensor], batch: int) -> Tensor:
    """mu_c: mean raw feature of each class's active exemplars, in the current representation [C, d]."""
    classes = sorted(active)
    feats = features(learner, stream, stream.train_x[torch.cat([active[c] for c in classes])], batch)
    return torch.stack([f.mean(dim=0) for f in feats.split([len(active[c]) for c in classes])])


def nme_predict(feats: Tensor, mu: Tensor) -> Tensor:
    """argmin_c || f(x)/|f(x)| - mu_c/|mu_c| ||: one matrix product on normalised vectors."""
    return (F.normalize(feats, dim=1) @ F.normalize(mu, dim=1).T).argmax(dim=1)


@torch.no_grad()
def accuracy_row(
    learner: Learner, stream: TaskStream, t: int, readout: str, active: dict[int, Tensor], batch: int
) -> list[float]:
    """R[t][j] for j = 0..t under the run's readout: one pass over all seen test images, one copy to the host."""
    mu = prototypes(learner, stream, active, batch) if readout == "nme" else None
    seen = torch.cat([stream.test_items(j) for j in range(t + 1)])
    feats = features(learner, stream, stream.test_x[seen], batch)
    pred = nme_predict(feats, mu) if mu is not None else learner.head(feats).argmax(dim=1)
    y = stream.test_y[seen]
    task = y // stream.cfg.classes_per_task  # [n] task of each test image
    hits = torch.bincount(task, weights=(pred == y).double(), minlength=t + 1)
    return (100.0 * hits / torch.bincount(task, minlength=t + 1)).tolist()


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
