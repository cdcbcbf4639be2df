"""One task of the method, in the order of the paper's Section 3 (`learn_task`). A run is these tasks for t = 0..T-1;
runs/run.py wraps each in the run's lock, checkpoint and record, and decides nothing of the method.

Task t:
  1. snapshot the teacher: a frozen eval-mode copy of the learner, taken just before the head grows, for a loss
     that distils (KD with lambda > 0, iCaRL's BCE), from t = 1 (Sec. 3.3; train.freeze);
  2. grow the head by C_new rows and, from t = 1, imprint them from the new classes' normalised mean features,
     before any optimisation (Sec. 3.1; `grow_head`, model.Head);
  3. fit: cfg.epochs epochs of current-task batches, each with b exemplars drawn from the memory's active sets
     (train.draw_replay), under the run's loss (Sec. 3.1, 3.3; train.fit_task); a task that diverges stops here;
  4. refresh the memory in the new representation: the policy re-selects each class's exemplars, Uniform Herding
     by herding from its candidate pools (Sec. 3.2; `refresh_memory`, memory.py);
  5. evaluate the row R[t] of the accuracy matrix under the run's readout, NME or the head (Sec. 3.3, 3.5;
     evaluate.accuracy_row).
"""

from __future__ import annotations

from functools import partial

import torch
import torch.nn.functional as F
from torch import Tensor

from uniform_herding.method import evaluate
from uniform_herding.method.config import Config
from uniform_herding.method.engine import Precision
from uniform_herding.method.memory import Memory
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream
from uniform_herding.method.train import TaskStats, fit_task, freeze


class Diverged(RuntimeError):
    """The task's training diverged (TaskStats.divergence says why): the task's steps after the fit do not run."""


def learn_task(
    t: int,
    cfg: Config,
    learner: Learner,
    memory: Memory,
    stream: TaskStream,
    generator: torch.Generator,
    precision: Precision,
    progress: bool = False,
) -> tuple[list[float], TaskStats]:
    """Task t, steps 1-5 above: the row R[t] and the task's training record. `generator` draws the batches, the
    replay and the augmentations; `precision` is the fp16 path or fp32 (engine.precision)."""
    teacher = freeze(learner) if t > 0 and distils(cfg) else None
    grow_head(learner, stream, t, cfg)
    stats = fit_task(
        cfg, learner, teacher, stream, memory.replay_items(), stream.train_items(t), generator, precision, progress
    )
    if problem := stats.divergence():
        raise Diverged(problem)
    refresh_memory(memory, learner, stream, t, cfg.eval_batch_size)
    return evaluate.accuracy_row(learner, stream, t, cfg.readout, memory.active, cfg.eval_batch_size), stats


def distils(cfg: Config) -> bool:
    """Whether the run's loss reads a teacher: KD with lambda > 0, or iCaRL's BCE (its old-class targets)."""
    return cfg.loss == "icarl_bce" or cfg.kd_lambda > 0


def grow_head(learner: Learner, stream: TaskStream, t: int, cfg: Config) -> None:
    """C_new new rows; from t = 1, unless the run does not imprint, each set to the normalised mean of the normalised
    features of its class's training images (eval transform, current backbone; Sec. 3.1)."""
    learner.head.grow(cfg.classes_per_task)
    if not (cfg.imprint and t > 0):
        return
    classes = stream.classes(t)
    means = [
        F.normalize(embed(learner, stream, stream.class_items[c], cfg.eval_batch_size), dim=1).mean(0) for c in classes
    ]
    learner.head.imprint(slice(classes.start, classes.stop), torch.stack(means))


def refresh_memory(memory: Memory, learner: Learner, stream: TaskStream, t: int, batch: int) -> None:
    """Hand the policy the task's new classes and the learner's features after training (Sec. 3.2)."""
    memory.refresh({c: stream.class_items[c] for c in stream.classes(t)}, partial(embed, learner, stream, batch=batch))


def embed(learner: Learner, stream: TaskStream, items: Tensor, batch: int) -> Tensor:
    """Raw backbone features [n, d] of training items (eval transform): what imprinting and herding read."""
    return evaluate.features(learner, stream, stream.train_x[items], batch)
