"""Train one task (Sec. 3.1, 3.3): current-task batches, each with b replayed exemplars (`draw_replay`), under
the run's loss, in one Lightning fit (`TaskModule`, `fit_task`).

Losses (t = task index, C_old = classes seen before task t):
  ce_kd     : CE over all seen classes on margin logits (cosine head: s*m off the target logit)
              + lambda * T^2 * KL(p_teach || p) on the old classes, both softmax(z[:, :C_old] / T),
              student logits margin-free, teacher a frozen eval-mode snapshot (`freeze`); no KD at t = 0 or lambda = 0.
  icarl_bce : BCE-with-logits over all seen outputs, averaged over batch and classes; targets one-hot,
              old-class columns replaced by the teacher's sigmoid outputs.
Per task a fresh SGD (no schedule) and a gradient-norm clip. How the fit runs (precision, the fused SGD, compile,
memory format, Lightning's settings) is engine.py's. On the fp16 path (`TaskModule.fp16`: precision "16-mixed", the
default on CUDA, also run on a CPU by the tests) a step never waits for the host: images, labels and replay draws
stay on the device (stream.py), the skipped steps and losses are summed there and read once per task (TaskStats), in
on_train_end.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor

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


class Batches:
    """One epoch of shuffled current-task minibatches as item tensors (last partial batch kept)."""

    def __init__(self, items: Tensor, batch_size: int, generator: torch.Generator) -> None:
        self.items, self.batch_size, self.generator = items, batch_size, generator

    def __len__(self) -> int:
        return -(-len(self.items) // self.batch_size)

    def __iter__(self):
        perm = torch.randperm(len(self.items), device=self.items.device, generator=self.generator)
        return iter(self.items[perm].split(self.batch_size))


class TaskModule(L.LightningModule):
    """One task's training: `on_after_batch_transfer` adds the replay draw to each batch, `training_step` is the
    method's observe step (the run's loss); the memory is refreshed after the fit (task.py)."""

    def __init__(
        self,
        cfg: Config,
        learner: Learner,
        teacher: Learner | None,
        stream: TaskStream,
        replay: Tensor | None,
        generator: torch.Generator,
        precision: str = "32-true",
    ) -> None:
        super().__init__()
        self.cfg, self.learner = cfg, learner
        # Not a submodule: Lightning would switch the frozen eval-mode snapshot to train mode and move it.
        self.__dict__["teacher"] = teacher
        self.stream, self.replay, self.generator = stream, replay, generator
        self.fp16 = precision == "16-mixed"  # the paper's fp16 path: + fused SGD, channels_last (engine.py)
        self.cuda_graphs = engine.replays_cuda_graphs(engine.compile_mode())
        self.steps, self.epoch_losses = 0, []  # loss sums stay on the device until the task ends
        self.skipped = self.last_finite_loss = self.epoch_sum = self.epoch_finite = None
        self.task_stats: TaskStats | None = None  # read in on_train_end, before Lightning's teardown

    def on_train_start(self) -> None:
        """Each fit's own record (doctor and bench fit one module several times)."""
        self.steps, self.epoch_losses = 0, []
        self.skipped = torch.zeros((), device=self.device)
        self.last_finite_loss = torch.full((), math.nan, device=self.device)

    def on_train_epoch_start(self) -> None:
        self.epoch_sum, self.epoch_finite = torch.zeros((), device=self.device), torch.zeros((), device=self.device)

    def on_after_batch_transfer(self, items: Tensor, dataloader_idx: int) -> tuple[Tensor, Tensor]:
        """The batch transform, on the device: b replay draws appended, then crop, flip and normalise."""
        if self.replay is not None and self.cfg.retrieval > 0:
            items = torch.cat([items, draw_replay(self.replay, self.cfg.retrieval, self.generator)])
        return self.stream.augment(items, self.generator), self.stream.train_y[items]  # replays re-augmented

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if self.cuda_graphs:  # torch.compile's CUDA graphs: a new iteration, the last step's outputs may be overwritten
            torch.compiler.cudagraph_mark_step_begin()
        x, y = batch
        _, logits = self.learner(x)
        teacher_logits = None
        if self.teacher is not None:
            with torch.no_grad():
                teacher_logits = self.teacher(x)[1]
        loss = task_loss(self.cfg, logits, y, teacher_logits)
        value = loss.detach().float()
        finite = value.isfinite()  # an fp16 overflow may make a loss inf; the scaler then skips the step
        self.epoch_sum += torch.where(finite, value, 0.0)
        self.epoch_finite += finite
        self.last_finite_loss = torch.where(finite, value, self.last_finite_loss)
        self.steps += 1
        return loss

    def on_train_epoch_end(self) -> None:
        self.epoch_losses.append(self.epoch_sum / self.epoch_finite)  # mean finite loss; NaN if none was

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return engine.sgd(self.cfg, self.learner.parameters(), fused=self.fp16)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the global gradient norm of the unscaled gradients; count a step the fp16 scaler will skip."""
        if self.fp16:
            self.skipped += engine.unscale(self.trainer, optimizer)
        torch.nn.utils.clip_grad_norm_(self.learner.parameters(), gradient_clip_val)

    def on_train_end(self) -> None:
        """The task's record and health, read from the device at once (the loss scale once more)."""
        # Here, not after fit: Lightning's teardown then moves the module to the CPU, and the sums here stay put.
        finite = torch.stack([p.isfinite().all() for p in self.learner.parameters()]).all()
        values = torch.cat([torch.stack(self.epoch_losses), torch.stack(
            [self.skipped.float(), self.last_finite_loss, finite.float()])]).tolist()  # fmt: skip
        self.task_stats = TaskStats(
            steps=self.steps,
            skipped_steps=round(values[-3]),
            loss_scale=engine.loss_scale(self.trainer) if self.fp16 else None,
            epoch_loss=[round(v, 5) if math.isfinite(v) else None for v in values[:-3]],
            last_finite_loss=values[-2] if math.isfinite(values[-2]) else None,
            weights_finite=values[-1] == 1.0,
        )


@dataclass(frozen=True)
class TaskStats:
    """One task's training record (result.json's `tasks`) and the divergence guard's inputs."""

    steps: int
    skipped_steps: int  # steps whose scaled gradients overflowed; the fp16 scaler skipped them
    loss_scale: float | None  # the scale at the task's end (16-mixed), else None
    epoch_loss: list[float | None]  # mean finite training loss of each epoch (None: no step's loss was finite)
    last_finite_loss: float | None  # the loss of the task's last step whose loss was finite
    weights_finite: bool

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


def fit_task(module: TaskModule, items: Tensor, device: torch.device, progress: bool) -> TaskStats:
    """One Trainer.fit: cfg.epochs epochs over the task's items; the task's stats, read once before
    Lightning's teardown. Returns with the learner on `device`, wherever the teardown left it."""
    engine.quiet_lightning()
    module.learner.train()  # Lightning keeps the mode it finds; evaluation left the learner in eval mode
    for model in (m for m in (module.learner, module.teacher) if m is not None):
        engine.prepare(model, module.fp16)
    trainer = engine.trainer(module.cfg, device, module.fp16, progress)
    trainer.fit(module, train_dataloaders=Batches(items, module.cfg.batch_size, module.generator))
    module.learner.to(device)  # Lightning's teardown left it on the CPU (a GPU run's training device is not)
    assert module.task_stats is not None, "on_train_end did not run"
    return module.task_stats


def freeze(learner: Learner) -> Learner:
    """A frozen eval-mode copy of the learner: the distillation teacher, taken before the head grows."""
    teacher = copy.deepcopy(learner).eval()
    teacher.requires_grad_(False)
    teacher.backbone._compiled_call_impl = None  # torch.compile: a copied compiled call would run the student
    return teacher
