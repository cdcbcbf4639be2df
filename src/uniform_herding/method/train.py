"""Train one task (Sec. 3.1, 3.3): current-task batches, each with b replayed exemplars (`draw_replay`), under
the run's loss, in one loop (`fit_task`) over epochs and batches, each batch one `step`: replay draw, forward, loss,
backward, (fp16: unscale), clip, SGD step, the task's record.

Losses (t = task index, C_old = classes seen before task t):
  ce_kd     : CE over all seen classes on margin logits (cosine head: s*m off the target logit)
              + lambda * T^2 * KL(p_teach || p) on the old classes, both softmax(z[:, :C_old] / T),
              student logits margin-free, teacher a frozen eval-mode snapshot (`freeze`); no KD at t = 0 or lambda = 0.
  icarl_bce : BCE-with-logits over all seen outputs, averaged over batch and classes; targets one-hot,
              old-class columns replaced by the teacher's sigmoid outputs.
Per task a fresh SGD (no schedule) and a gradient-norm clip. Lightning Fabric does the precision (engine.fabric:
fp16 autocast and loss scaling on the fp16 path, "16-mixed", the default on CUDA, also run on a CPU by the tests);
engine.py holds what makes the loop fast (fused SGD, compile, memory format), graph.py the step replayed as one
CUDA graph. A step never waits for the host and keeps its state in place: images, labels and replay draws stay on
the device (stream.py), each step's loss and skip are written into the task's record there (`Sums`) and read once
per task (`TaskStats.read`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial

import numpy as np
import torch
import torch.nn.functional as F
from lightning.fabric import Fabric
from torch import Tensor
from tqdm import tqdm

from uniform_herding.method import engine, graph
from uniform_herding.method.config import Config
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream


def one_hot(y: Tensor, n: int, dtype: torch.dtype) -> Tensor:
    """F.one_hot(y, n).to(dtype), the same values, without its host reads (on a CPU it reads the labels' range with
    two .item()) and in fewer operators: a step reads nothing to the host (graph.py)."""
    return torch.zeros(len(y), n, dtype=dtype, device=y.device).scatter_(1, y.unsqueeze(1), 1)


def margin_logits(logits: Tensor, y: Tensor, s: float, m: float) -> Tensor:
    """Subtract s*m from each row's target logit only (cosine-margin training logits)."""
    return logits - s * m * one_hot(y, logits.shape[1], logits.dtype)


def kd_loss(student_old: Tensor, teacher_old: Tensor, T: float) -> Tensor:
    """T^2 * KL(softmax(teacher/T) || softmax(student/T)), 'batchmean'."""
    log_p = F.log_softmax(student_old.float() / T, dim=1)
    p_teach = F.softmax(teacher_old.float() / T, dim=1)
    return T * T * F.kl_div(log_p, p_teach, reduction="batchmean")


def icarl_bce(logits: Tensor, y: Tensor, teacher_old: Tensor | None) -> Tensor:
    """iCaRL's BCE: one-hot targets with old-class columns set to the teacher's sigmoid outputs."""
    targets = one_hot(y, logits.shape[1], torch.float32)
    if teacher_old is not None:
        targets[:, : teacher_old.shape[1]] = torch.sigmoid(teacher_old.float())
    return F.binary_cross_entropy_with_logits(logits.float(), targets)


def task_loss(cfg: Config, logits: Tensor, y: Tensor, teacher_logits: Tensor | None) -> Tensor:
    """The run's loss on margin-free student logits [B, C_seen] (teacher's [B, C_old] or None)."""
    if cfg.loss == "icarl_bce":
        return icarl_bce(logits, y, teacher_logits)
    train_logits = margin_logits(logits, y, cfg.cos_scale, cfg.cos_margin) if cfg.head == "cosine" else logits
    loss = F.cross_entropy(train_logits.float(), y)
    if teacher_logits is not None and cfg.kd_lambda > 0:
        C_old = teacher_logits.shape[1]
        loss = loss + cfg.kd_lambda * kd_loss(logits[:, :C_old], teacher_logits, cfg.kd_temperature)
    return loss


def draw_replay(replay: Tensor, b: int, generator: torch.Generator) -> Tensor:
    """b replayed exemplars: drawn uniformly with replacement over the stored items, not over classes (Sec. 3.3)."""
    return replay[torch.randint(len(replay), (b,), device=replay.device, generator=generator)]


def inputs(
    cfg: Config, stream: TaskStream, batch: Tensor, replay: Tensor | None, generator: torch.Generator
) -> tuple[Tensor, Tensor]:
    """A step's images and labels: the batch's items and b replay draws, then crop, flip and normalise on the
    device (replays re-augmented)."""
    if replay is not None and cfg.retrieval > 0:
        batch = torch.cat([batch, draw_replay(replay, cfg.retrieval, generator)])
    return stream.augment(batch, generator), stream.train_y[batch]


class Batches:
    """One epoch of shuffled current-task minibatches as item tensors (last partial batch kept)."""

    def __init__(self, items: Tensor, batch_size: int, generator: torch.Generator) -> None:
        self.items, self.batch_size, self.generator = items, batch_size, generator

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self):
        perm = torch.randperm(len(self.items), device=self.items.device, generator=self.generator)
        return iter(self.items[perm].split(self.batch_size))


def draw_legacy_unused_permutation(batches: Batches) -> None:
    """Draw one epoch's permutation and use none of it: Lightning's Trainer.fit, which ran each task before
    fit_task, opened the task's loader once before its first epoch. The draw advances the run's generator, so
    every R equals the old Trainer's (docs/design.md). It may go only together with a re-derived smoke set
    (expected_results/README.md) and golden R (tests/golden/B3-smoke-1993.json, docs/testing.md)."""
    iter(batches)


@dataclass
class Watch:
    """What the self-test and `uh doctor` look at inside the loop (runs watch nothing): after each backward (the
    learner's scaled gradients), after each step (the grad scaler, None in fp32)."""

    after_backward: Callable[[Learner], None] = lambda learner: None
    after_step: Callable[[torch.amp.GradScaler | None], None] = lambda scaler: None


def fit_task(
    cfg: Config,
    learner: Learner,
    teacher: Learner | None,
    stream: TaskStream,
    replay: Tensor | None,
    items: Tensor,
    generator: torch.Generator,
    precision: engine.Precision = engine.Precision.FP32,
    progress: bool = False,
    watch: Watch | None = None,
) -> TaskStats:
    """cfg.epochs epochs over the task's `items`, each batch with b draws from `replay` (the memory's items); the
    learner trains in place, on its device. `generator` draws the batches, the replay and the augmentations;
    `precision` is the run's, decoded once (engine.precision): `fp16` is the fp16 path. Returns the task's record."""
    fp16, watched = precision.fp16, watch is not None
    fabric = engine.fabric(stream.device, fp16)  # the precision: fp16 autocast and the loss scale, or fp32
    learner.train()  # evaluation left it in eval mode; the teacher stays in eval mode (freeze)
    for model in (m for m in (learner, teacher) if m is not None):
        engine.prepare(model, fp16)
    optimizer = fabric.setup_optimizers(sgd(cfg, learner.parameters(), fused=fp16))
    scaler, cuda_graphs = engine.scaler(fabric), engine.replays_cuda_graphs(engine.compile_mode())
    batches = Batches(items, cfg.batch_size, generator)
    sums = Sums(stream.device, cfg.epochs, len(batches))
    watch = watch or Watch()
    one_step = partial(step, cfg, learner, teacher, stream, replay, generator, fabric, optimizer, scaler, sums, watch)
    why_eager = graph.why_eager(stream.device, engine.compile_mode() is not None, watched)
    forget = partial(engine.forget_step, scaler, optimizer)
    runner = graph.Runner(one_step, cfg.batch_size, generator, why_eager, forget)
    draw_legacy_unused_permutation(batches)  # before the first epoch, as Trainer.fit did
    bar = tqdm(total=sums.steps, desc="task", leave=False, disable=not progress)
    with engine.fp16_weights(teacher if fp16 else None), engine.batch_counts_per_task(learner, sums.steps):
        for _ in range(cfg.epochs):
            for batch in batches:
                if cuda_graphs:  # torch.compile's CUDA graphs: a new iteration, the last outputs may be overwritten
                    torch.compiler.cudagraph_mark_step_begin()
                runner(batch)  # one step: eagerly, or replayed as a CUDA graph (graph.py)
                bar.update()
    bar.close()
    return TaskStats.read(sums, learner, scaler, runner.record())


def step(
    cfg: Config,
    learner: Learner,
    teacher: Learner | None,
    stream: TaskStream,
    replay: Tensor | None,
    generator: torch.Generator,
    fabric: Fabric,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None,
    sums: Sums,
    watch: Watch,
    batch: Tensor,
) -> None:
    """One training step on a batch of current-task items. What a CUDA graph captures (graph.py): it changes only
    device tensors, in place (weights, BatchNorm statistics, momentum, the loss scale, `sums`), and reads nothing
    to the host."""
    x, y = inputs(cfg, stream, batch, replay, generator)  # + b replay draws, augmented on the device
    with fabric.autocast():  # fp16 path: the student and the frozen teacher forward under fp16 autocast
        logits = learner(x)[1]
        with torch.no_grad():
            teacher_logits = teacher(x)[1] if teacher is not None else None
        loss = task_loss(cfg, logits, y, teacher_logits)
    learner.zero_grad()  # as optimizer.zero_grad() (the same parameters), without its profiler record
    fabric.backward(loss)  # fp16: of the scaled loss
    watch.after_backward(learner)
    skipped = engine.unscale(scaler, optimizer.optimizer)  # fp16: 1 (on the device) if the step is skipped
    torch.nn.utils.clip_grad_norm_(learner.parameters(), cfg.grad_clip)
    optimizer.step()  # fp16: skipped on an inf in the gradients, then the loss scale is updated
    sums.add(loss, skipped)
    watch.after_step(scaler)


def sgd(cfg: Config, params: Iterable[Tensor], fused: bool) -> torch.optim.SGD:
    """A task's fresh SGD with the paper's settings, no schedule; fused on the fp16 path (engine.zero_fill_momentum)."""
    optimizer = torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=fused or None
    )
    engine.zero_fill_momentum(optimizer)
    return optimizer


class Sums:
    """The task's record on the training device, written in place by each step (a CUDA graph replays the writes):
    step k's loss at losses[k], the skipped steps summed; read once, when the task ends (`TaskStats.read`)."""

    def __init__(self, device: torch.device, epochs: int, per_epoch: int) -> None:
        self.epochs, self.per_epoch, self.steps = epochs, per_epoch, epochs * per_epoch
        self.losses = torch.zeros(self.steps, device=device)
        self.k = torch.zeros((), dtype=torch.long, device=device)  # the next step's index
        self.skipped = torch.zeros((), device=device)

    @torch.no_grad()
    def add(self, loss: Tensor, skipped: Tensor | int) -> None:
        self.losses.index_put_((self.k,), loss.float())
        if isinstance(skipped, Tensor):  # fp16: found_inf; in fp32 no step is skipped
            self.skipped += skipped
        self.k += 1

    def epoch_losses(self, losses: list[float]) -> list[float]:
        """Each epoch's mean finite loss (NaN if none was: an fp16 overflow may make a loss inf, and the scaler then
        skips the step), summed step by step in fp32 as the device summed them before (bitwise the same means)."""
        means = []
        for e in range(self.epochs):
            total, count = np.float32(0), np.float32(0)
            for value in losses[e * self.per_epoch : (e + 1) * self.per_epoch]:
                if math.isfinite(value):
                    total, count = total + np.float32(value), count + np.float32(1)
            means.append(float(total / count) if count else math.nan)
        return means


@dataclass(frozen=True)
class TaskStats:
    """One task's training record (result.json's `tasks`) and the divergence guard's inputs."""

    steps: int
    skipped_steps: int  # steps whose scaled gradients overflowed; the fp16 scaler skipped them
    loss_scale: float | None  # the scale at the task's end (16-mixed), else None
    epoch_loss: list[float | None]  # mean finite training loss of each epoch (None: no step's loss was finite)
    last_finite_loss: float | None  # the loss of the task's last step whose loss was finite
    weights_finite: bool
    step: str = "eager"  # how the steps ran (graph.Runner.record): "graph", "eager", or why a graph was refused

    @classmethod
    def read(cls, sums: Sums, learner: Learner, scaler: torch.amp.GradScaler | None, step: str = "eager") -> TaskStats:
        """The task's record and health, read from the device at once (the loss scale once more)."""
        finite = torch.stack([p.isfinite().all() for p in learner.parameters()]).all()
        values = torch.cat([sums.losses, torch.stack([sums.skipped, finite.float()])]).tolist()
        losses, finite_losses = values[:-2], [v for v in values[:-2] if math.isfinite(v)]
        return cls(
            steps=sums.steps,
            skipped_steps=round(values[-2]),
            loss_scale=engine.loss_scale(scaler),
            epoch_loss=[round(v, 5) if math.isfinite(v) else None for v in sums.epoch_losses(losses)],
            last_finite_loss=finite_losses[-1] if finite_losses else None,
            weights_finite=values[-1] == 1.0,
            step=step,
        )

    @property
    def max_skipped(self) -> int:
        """The most skipped steps a healthy task shows: 16 (the halvings from the fresh scale 2^16 down to 1)
        plus 1% of its steps (a scale that grows back is probed, and may be halved, every 2,000 steps)."""
        return 16 + math.ceil(0.01 * self.steps)

    def divergence(self) -> str | None:
        """Why the task diverged, or None when it is healthy."""
        if not self.weights_finite:
            return "weights not finite"
        if self.last_finite_loss is None:
            return "no training step had a finite loss"
        if self.skipped_steps > self.max_skipped:
            return f"{self.skipped_steps} of {self.steps} steps skipped on fp16 overflow (at most {self.max_skipped})"
        return None

    def record(self) -> dict:
        return {
            "skipped_steps": self.skipped_steps,
            "loss_scale": self.loss_scale,
            "epoch_loss": self.epoch_loss,
            "step": self.step,
        }


def freeze(learner: Learner) -> Learner:
    """A frozen eval-mode copy of the learner: the distillation teacher, taken before the head grows."""
    teacher = copy.deepcopy(learner).eval()
    teacher.requires_grad_(False)
    teacher.backbone._compiled_call_impl = None  # torch.compile: a copied compiled call would run the student
    return teacher
