"""Train one task (Sec. 3.1, 3.3): current-task batches, each with b replayed exemplars (`draw_replay`), under
the run's loss, in one loop (`fit_task`): epochs, batches, replay draw, forward, loss, backward, (fp16: unscale),
clip, step, the task's record.

Losses (t = task index, C_old = classes seen before task t):
  ce_kd     : CE over all seen classes on margin logits (cosine head: s*m off the target logit)
              + lambda * T^2 * KL(p_teach || p) on the old classes, both softmax(z[:, :C_old] / T),
              student logits margin-free, teacher a frozen eval-mode snapshot (`freeze`); no KD at t = 0 or lambda = 0.
  icarl_bce : BCE-with-logits over all seen outputs, averaged over batch and classes; targets one-hot,
              old-class columns replaced by the teacher's sigmoid outputs.
Per task a fresh SGD (no schedule) and a gradient-norm clip. Lightning Fabric does the precision (engine.fabric:
fp16 autocast and loss scaling on the fp16 path, "16-mixed", the default on CUDA, also run on a CPU by the tests);
engine.py holds what makes the loop fast (fused SGD, compile, memory format). On the fp16 path a step never waits
for the host: images, labels and replay draws stay on the device (stream.py), the skipped steps and losses are
summed there and read once per task (`TaskStats.read`).
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor
from tqdm import tqdm

from uniform_herding.method import engine
from uniform_herding.method.config import Config
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream


def margin_logits(logits: Tensor, y: Tensor, s: float, m: float) -> Tensor:
    """Subtract s*m from each row's target logit only (cosine-margin training logits)."""
    return logits - s * m * F.one_hot(y, logits.shape[1]).to(logits.dtype)


def kd_loss(student_old: Tensor, teacher_old: Tensor, T: float) -> Tensor:
    """T^2 * KL(softmax(teacher/T) || softmax(student/T)), 'batchmean'."""
    log_p = F.log_softmax(student_old.float() / T, dim=1)
    p_teach = F.softmax(teacher_old.float() / T, dim=1)
    return T * T * F.kl_div(log_p, p_teach, reduction="batchmean")


def icarl_bce(logits: Tensor, y: Tensor, teacher_old: Tensor | None) -> Tensor:
    """iCaRL's BCE: one-hot targets with old-class columns set to the teacher's sigmoid outputs."""
    targets = F.one_hot(y, logits.shape[1]).float()
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


def inputs(cfg: Config, stream: TaskStream, batch: Tensor, replay: Tensor | None, generator: torch.Generator
           ) -> tuple[Tensor, Tensor]:  # fmt: skip
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


@dataclass
class Watch:
    """What the self-test and `uh doctor` look at inside the loop (runs watch nothing): after each backward (the
    learner's scaled gradients), after each step (the grad scaler, None in fp32)."""

    after_backward: Callable[[Learner], None] = lambda learner: None
    after_step: Callable[[torch.amp.GradScaler | None], None] = lambda scaler: None


def fit_task(cfg: Config, learner: Learner, teacher: Learner | None, stream: TaskStream, replay: Tensor | None,
             items: Tensor, generator: torch.Generator, precision: str = "32-true", progress: bool = False,
             watch: Watch | None = None) -> TaskStats:  # fmt: skip
    """cfg.epochs epochs over the task's `items`, each batch with b draws from `replay` (the memory's items); the
    learner trains in place, on its device. `generator` draws the batches, the replay and the augmentations;
    `precision` is "16-mixed" (the fp16 path) or "32-true" (engine.precision). Returns the task's record."""
    fp16, watch = precision == "16-mixed", watch or Watch()
    fabric = engine.fabric(stream.device, fp16)  # the precision: fp16 autocast and the loss scale, or fp32
    learner.train()  # evaluation left it in eval mode; the teacher stays in eval mode (freeze)
    for model in (m for m in (learner, teacher) if m is not None):
        engine.prepare(model, fp16)
    optimizer = fabric.setup_optimizers(sgd(cfg, learner.parameters(), fused=fp16))
    scaler, cuda_graphs = engine.scaler(fabric), engine.replays_cuda_graphs(engine.compile_mode())
    batches, sums = Batches(items, cfg.batch_size, generator), Sums(stream.device)
    iter(batches)  # the permutation Trainer.fit drew before its first epoch, unused: kept, R unchanged (design.md)
    bar = tqdm(total=cfg.epochs * len(batches), desc="task", leave=False, disable=not progress)
    for _ in range(cfg.epochs):
        for batch in batches:
            x, y = inputs(cfg, stream, batch, replay, generator)  # + b replay draws, augmented on the device
            if cuda_graphs:  # torch.compile's CUDA graphs: a new iteration, the last step's outputs may be overwritten
                torch.compiler.cudagraph_mark_step_begin()
            with fabric.autocast():  # fp16 path: the student and the frozen teacher forward under fp16 autocast
                logits = learner(x)[1]
                with torch.no_grad():
                    teacher_logits = teacher(x)[1] if teacher is not None else None
                loss = task_loss(cfg, logits, y, teacher_logits)
            optimizer.zero_grad()
            fabric.backward(loss)  # fp16: of the scaled loss
            watch.after_backward(learner)
            skipped = engine.unscale(scaler, optimizer.optimizer)  # fp16: 1 (on the device) if the step is skipped
            torch.nn.utils.clip_grad_norm_(learner.parameters(), cfg.grad_clip)
            optimizer.step()  # fp16: skipped on an inf in the gradients, then the loss scale is updated
            sums.add(loss, skipped)
            watch.after_step(scaler)
            bar.update()
        sums.end_epoch()
    bar.close()
    return TaskStats.read(sums, learner, scaler)


def sgd(cfg: Config, params: Iterable[Tensor], fused: bool) -> torch.optim.SGD:
    """A task's fresh SGD with the paper's settings, no schedule; fused on the fp16 path (engine.zero_fill_momentum)."""
    optimizer = torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay,
                                fused=fused or None)  # fmt: skip
    engine.zero_fill_momentum(optimizer)
    return optimizer


class Sums:
    """The task's running record on the training device: no host read until the task ends."""

    def __init__(self, device: torch.device) -> None:
        self.steps, self.epoch_losses = 0, []
        self.skipped = torch.zeros((), device=device)
        self.last_finite_loss = torch.full((), math.nan, device=device)
        self.epoch_sum, self.epoch_finite = torch.zeros((), device=device), torch.zeros((), device=device)

    def add(self, loss: Tensor, skipped: Tensor | int) -> None:
        value = loss.detach().float()
        finite = value.isfinite()  # an fp16 overflow may make a loss inf; the scaler then skips the step
        self.epoch_sum += torch.where(finite, value, 0.0)
        self.epoch_finite += finite
        self.last_finite_loss = torch.where(finite, value, self.last_finite_loss)
        self.skipped += skipped
        self.steps += 1

    def end_epoch(self) -> None:
        self.epoch_losses.append(self.epoch_sum / self.epoch_finite)  # mean finite loss; NaN if none was
        self.epoch_sum, self.epoch_finite = torch.zeros_like(self.epoch_sum), torch.zeros_like(self.epoch_finite)


@dataclass(frozen=True)
class TaskStats:
    """One task's training record (result.json's `tasks`) and the divergence guard's inputs."""

    steps: int
    skipped_steps: int  # steps whose scaled gradients overflowed; the fp16 scaler skipped them
    loss_scale: float | None  # the scale at the task's end (16-mixed), else None
    epoch_loss: list[float | None]  # mean finite training loss of each epoch (None: no step's loss was finite)
    last_finite_loss: float | None  # the loss of the task's last step whose loss was finite
    weights_finite: bool

    @classmethod
    def read(cls, sums: Sums, learner: Learner, scaler: torch.amp.GradScaler | None) -> TaskStats:
        """The task's record and health, read from the device at once (the loss scale once more)."""
        finite = torch.stack([p.isfinite().all() for p in learner.parameters()]).all()
        values = torch.cat([torch.stack(sums.epoch_losses), torch.stack(
            [sums.skipped.float(), sums.last_finite_loss, finite.float()])]).tolist()  # fmt: skip
        return cls(
            steps=sums.steps,
            skipped_steps=round(values[-3]),
            loss_scale=engine.loss_scale(scaler),
            epoch_loss=[round(v, 5) if math.isfinite(v) else None for v in values[:-3]],
            last_finite_loss=values[-2] if math.isfinite(values[-2]) else None,
            weights_finite=values[-1] == 1.0,
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
        return {"skipped_steps": self.skipped_steps, "loss_scale": self.loss_scale, "epoch_loss": self.epoch_loss}


def freeze(learner: Learner) -> Learner:
    """A frozen eval-mode copy of the learner: the distillation teacher, taken before the head grows."""
    teacher = copy.deepcopy(learner).eval()
    teacher.requires_grad_(False)
    teacher.backbone._compiled_call_impl = None  # torch.compile: a copied compiled call would run the student
    return teacher
