"""Evaluate: readouts (NME, head-logit; Sec. 3.3) and one row of the accuracy matrix R (Sec. 3.5).

R[t][j] is the accuracy (%) on task j's test images after training through task t, predicting
among all classes seen so far (no task identity). The metrics over R are in metrics.py.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream


@torch.no_grad()
def features(learner: Learner, stream: TaskStream, images: Tensor, batch: int) -> Tensor:
    """Raw backbone features [n, d] with the evaluation transform, in eval mode, large batches."""
    learner.eval()
    # clone: under UH_COMPILE=reduce-overhead the next CUDA-graph replay would overwrite this batch's output
    chunks = (images[i : i + batch] for i in range(0, len(images), batch))
    out = [learner.backbone(stream.normalize(chunk)).float().clone() for chunk in chunks]
    return torch.cat(out) if out else torch.zeros(0, learner.backbone.feature_dim, device=images.device)


class ReadoutError(ValueError):
    """The NME readout cannot classify: the memory does not hold an exemplar of every seen class."""


def prototypes(learner: Learner, stream: TaskStream, active: dict[int, Tensor], seen: int, batch: int) -> Tensor:
    """mu_c for c = 0..seen-1: mean raw feature of each class's active exemplars, in the current representation.

    Refused unless the memory holds exemplars of exactly the seen classes: an empty class would average
    to a NaN prototype that takes every test image, and a class left out would shift every later label.
    """
    wrong = [c for c in range(seen) if len(active.get(c, ())) == 0] + [c for c in sorted(active) if not 0 <= c < seen]
    if wrong:
        c = wrong[0]
        problem = "holds no exemplar of" if c < seen else "holds exemplars of the unseen"
        raise ReadoutError(
            f"the memory {problem} class {c} (task {c // stream.cfg.classes_per_task + 1}), and readout=nme needs "
            f"exemplars of each of the {seen} seen classes and no other; use readout=head or a memory policy that "
            "keeps every class"
        )
    feats = features(learner, stream, stream.train_x[torch.cat([active[c] for c in range(seen)])], batch)
    return torch.stack([f.mean(dim=0) for f in feats.split([len(active[c]) for c in range(seen)])])


def nme_predict(feats: Tensor, mu: Tensor) -> Tensor:
    """argmin_c || f(x)/|f(x)| - mu_c/|mu_c| ||: one matrix product on normalised vectors."""
    return (F.normalize(feats, dim=1) @ F.normalize(mu, dim=1).T).argmax(dim=1)


@torch.no_grad()
def accuracy_row(
    learner: Learner, stream: TaskStream, t: int, readout: str, active: dict[int, Tensor], batch: int
) -> list[float]:
    """R[t][j] for j = 0..t under the run's readout: one pass over all seen test images, one copy to the host."""
    seen_classes = stream.cfg.classes_per_task * (t + 1)
    mu = prototypes(learner, stream, active, seen_classes, batch) if readout == "nme" else None
    seen = torch.cat([stream.test_items(j) for j in range(t + 1)])
    feats = features(learner, stream, stream.test_x[seen], batch)
    pred = nme_predict(feats, mu) if mu is not None else learner.head(feats).argmax(dim=1)
    y = stream.test_y[seen]
    task = y // stream.cfg.classes_per_task  # [n] task of each test image
    # counts, not a weighted bincount: that has no deterministic CUDA kernel (--deterministic)
    hits = torch.bincount(task[pred == y], minlength=t + 1).double()
    return (100.0 * hits / torch.bincount(task, minlength=t + 1)).tolist()
