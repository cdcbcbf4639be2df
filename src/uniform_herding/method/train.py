"""Train one task with Lightning: current-task batches + b replayed exemplars, the run's loss (Sec. 3.1, 3.3).

Losses (t = task index, C_old = classes seen before task t):
  ce_kd     : CE over all seen classes on margin logits (cosine head: s*m off the target logit)
              + lambda * T^2 * KL(p_teach || p) on the old classes, both softmax(z[:, :C_old] / T),
              student logits margin-free, teacher a frozen eval-mode snapshot; no KD at t = 0 or lambda = 0.
  icarl_bce : BCE-with-logits over all seen outputs, averaged over batch and classes; targets one-hot,
              old-class columns replaced by the teacher's sigmoid outputs.
Per task a fresh SGD (no schedule), gradient-norm clip, "16-mixed" on GPU and fp32 on CPU.

The GPU path (TaskModule.gpu_path; on with precision "16-mixed", the default on CUDA): the paper's fp16
autocast with loss scaling, fused SGD, channels_last. A step never waits for the host: images, labels
and replay draws stay on the device (stream.py); the grad scaler hands the fused SGD `found_inf` as a
tensor instead of reading it; losses and skipped steps are summed on the device and read once per task
(TaskStats), in on_train_end: after it, Lightning's teardown moves the module to the CPU.
`--precision 16-mixed` runs the same path on a CPU; there fp32 is the default, with the reference SGD,
so reruns are bit-identical. selftest.py proves the path equal to Lightning's stock
"16-mixed" path (`uh doctor`, tests/runs/test_selftest.py). UH_COMPILE also compiles the backbone
(`compile_mode`; experimental: a speed setting, not part of Config, recorded in result.json).
"""

from __future__ import annotations

import copy
import logging
import math
import os
import shutil
import sysconfig
import warnings
from dataclasses import dataclass
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.plugins import MixedPrecision
from lightning.pytorch.plugins.environments import LightningEnvironment
from torch import Tensor

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
    """One task: `training_step` is the method's observe step; memory refresh happens after fit."""

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
        self.gpu_path = precision == "16-mixed"  # + fused SGD, channels_last
        self.cuda_graphs = replays_cuda_graphs(compile_mode())
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
        if self.replay is not None and self.cfg.retrieval > 0:  # b items, uniform with replacement
            draw = torch.randint(len(self.replay), (self.cfg.retrieval,), device=items.device, generator=self.generator)
            items = torch.cat([items, self.replay[draw]])
        return self.stream.augment(items, self.generator), self.stream.train_y[items]  # replays re-augmented

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if self.cuda_graphs:  # a new iteration: outputs of the last step's graph replays may be overwritten
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
        return sgd(self.cfg, self.learner.parameters(), fused=self.gpu_path)

    def configure_gradient_clipping(
        self,
        optimizer: torch.optim.Optimizer,
        gradient_clip_val: float | None = None,
        gradient_clip_algorithm: str | None = None,
    ) -> None:
        """Clip the global gradient norm of the unscaled gradients; count a skipped step.

        Lightning unscales before clipping only for unfused optimizers and refuses to clip for fused
        ones, so with fused SGD the unscale happens here. `unscale_` records `found_inf` on the
        device and the fused step skips itself on it: no host synchronisation.
        """
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        if self.gpu_path and scaler is not None:
            scaler.unscale_(optimizer)
            self.skipped += sum(scaler._found_inf_per_device(optimizer).values())  # 1 where the step is skipped
        torch.nn.utils.clip_grad_norm_(self.learner.parameters(), gradient_clip_val)

    def on_train_end(self) -> None:
        """The task's record and health, read from the device at once (the loss scale once more), while
        everything is still on the training device: Lightning's teardown, which follows, moves the module
        to the CPU, and the sums here stay where they are."""
        finite = torch.stack([p.isfinite().all() for p in self.learner.parameters()]).all()
        values = torch.cat([torch.stack(self.epoch_losses), torch.stack(
            [self.skipped.float(), self.last_finite_loss, finite.float()])]).tolist()  # fmt: skip
        scaler = getattr(self.trainer.precision_plugin, "scaler", None)
        self.task_stats = TaskStats(
            steps=self.steps,
            skipped_steps=round(values[-3]),
            loss_scale=scaler.get_scale() if self.gpu_path and scaler is not None else None,
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


def sgd(cfg: Config, params, fused: bool) -> torch.optim.SGD:
    """A task's fresh SGD. Fused (GPU path): momentum buffers zero-filled before the first step.

    torch 2.11's fused SGD creates them with `empty_like` on its first step and lets the kernel fill
    them; when the grad scaler finds an inf on that step the kernel returns early, the buffers stay
    uninitialised, and the next finite step reads that memory (weights NaN or exploding). With zeros,
    the first step computes buf = momentum * 0 + grad = grad, bitwise what the first step would, and
    a skipped step leaves them as a fresh optimizer has them. Chosen over unfused SGD, which makes
    the scaler read `found_inf` on the host every step (benchmarks/RESULTS.md).
    """
    optimizer = torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=fused or None
    )
    if fused and cfg.momentum:
        for p in optimizer.param_groups[0]["params"]:
            optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)
    return optimizer


PRECISIONS = ("16-mixed", "32-true")


def precision(device: torch.device, requested: str | None = None) -> str:
    """`requested` (--precision, env UH_PRECISION), else the paper's "16-mixed" on GPU and fp32 on CPU
    (docs/design.md, "Training"), which keeps CPU reruns bit-identical."""
    if requested:
        if requested not in PRECISIONS:
            raise ValueError(f"precision {requested!r} is not a setting; use {' or '.join(PRECISIONS)}")
        return requested
    return "16-mixed" if device.type == "cuda" else "32-true"


def precision_plugins(gpu_path: bool, device: torch.device) -> list[MixedPrecision]:
    """The paper's "16-mixed" (fp16 autocast, dynamic loss scaling) on the GPU path; none (fp32) otherwise.

    Built by hand rather than as `precision="16-mixed"` because Lightning turns that into bf16 on a
    CPU, and the GPU path must run unchanged on a CPU in the tests.
    """
    if not gpu_path:
        return []
    return [MixedPrecision("16-mixed", device.type, scaler=torch.amp.GradScaler(device.type))]


def quiet_lightning() -> None:
    """Drop Lightning's per-fit banners (devices, tips, "max_epochs reached"): a run fits once per task.

    They are INFO records of the `lightning.pytorch` loggers, among them the tip to call
    `torch.set_float32_matmul_precision` on a GPU with tensor cores, which is not followed: it would
    change the fp32 numerics (TF32 matmuls). Lightning's warnings go through `warnings`
    and stay visible, except one deprecation notice that Lightning 2.6.5 itself triggers on torch 2.11, and
    its hint to launch with `srun` wherever srun is on the PATH (every fit asks SLURMEnvironment.detect()
    whatever the environment plugin): a run is one process by design (fit_task's LightningEnvironment).
    """
    logging.getLogger("lightning.pytorch").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")


COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


def compile_mode() -> str | None:
    """The torch.compile mode asked for by UH_COMPILE, or None for eager (the default).

    UH_COMPILE=1 compiles with the default mode; `reduce-overhead` also replays the compiled graphs
    as CUDA graphs (one launch per graph instead of one per kernel: pays when the host, not the GPU,
    limits a step); `max-autotune` also searches kernel configurations, and replays CUDA graphs too.
    All change speed only. torch.compile builds C code (Triton's launcher on a GPU, inductor's kernels
    on a CPU), so a host without a C compiler or Python's headers is refused here, before any work.
    """
    value = os.environ.get("UH_COMPILE", "")
    if value in ("", "0"):
        return None
    mode = "default" if value == "1" else value
    if mode not in COMPILE_MODES:
        raise ValueError(f"UH_COMPILE={value!r} is not a setting; use 0, 1, {', '.join(COMPILE_MODES[1:])}")
    if need := compiler_missing():
        raise ValueError(f"UH_COMPILE={value!r} needs {need} to build torch.compile's kernels; install it "
                         "(Debian/Ubuntu: gcc python3-dev; the image has neither), or unset UH_COMPILE")  # fmt: skip
    return mode


def compiler_missing() -> str | None:
    """What torch.compile lacks on this host to build its kernels (a C compiler, Python's headers), or None."""
    if not (shutil.which(os.environ.get("CC") or "gcc") or shutil.which("clang")):
        return "a C compiler (gcc or clang, or CC)"
    headers = Path(sysconfig.get_paths()["include"], "Python.h")
    return None if headers.exists() else f"Python's headers ({headers})"


def replays_cuda_graphs(mode: str | None) -> bool:
    """Whether torch.compile's `mode` replays CUDA graphs (then every training step marks a new iteration)."""
    from torch._inductor import list_mode_options  # the modes' own settings, as torch.compile applies them

    return mode is not None and bool(list_mode_options(mode).get("triton.cudagraphs"))


def compile_backbone(learner: Learner) -> None:
    """Compile the backbone in place once (UH_COMPILE); the head grows per task and stays eager."""
    mode = compile_mode()
    if mode and learner.backbone._compiled_call_impl is None:
        learner.backbone.compile(mode=mode)


def channels_last(model: Learner, gpu_path: bool) -> None:
    """The GPU path's layout, NHWC: it suits fp16 tensor cores, and augment() already returns NHWC images.

    A run's learner gets it when made, before a checkpoint is loaded into it (loading copies into the
    parameters and keeps their layout): a resumed run's first forward, the next task's imprint, then runs
    the convolution kernels an uninterrupted run's does, which round alike.
    """
    if gpu_path:
        model.to(memory_format=torch.channels_last)


def fit_task(module: TaskModule, items: Tensor, device: torch.device, progress: bool) -> TaskStats:
    """One Trainer.fit: cfg.epochs epochs over the task's items; the task's stats, read once before
    Lightning's teardown. Returns with the learner on `device`, wherever the teardown left it."""
    cfg = module.cfg
    quiet_lightning()
    module.learner.train()  # Lightning keeps the mode it finds; evaluation left the learner in eval mode
    for model in (m for m in (module.learner, module.teacher) if m is not None):
        channels_last(model, module.gpu_path)
        compile_backbone(model)
    trainer = L.Trainer(
        accelerator=device.type,
        devices=1,
        max_epochs=cfg.epochs,
        # One plain process: inside a Slurm job Lightning would otherwise pick SLURMEnvironment, warn about
        # srun and install its own requeue handler, which fights submitit's (docs/cluster.md).
        plugins=[*precision_plugins(module.gpu_path, device), LightningEnvironment()],
        gradient_clip_val=cfg.grad_clip,
        gradient_clip_algorithm="norm",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=progress,
        num_sanity_val_steps=0,
    )
    trainer.fit(module, train_dataloaders=Batches(items, cfg.batch_size, module.generator))
    module.learner.to(device)  # Lightning's teardown left it on the CPU (a GPU run's training device is not)
    assert module.task_stats is not None, "on_train_end did not run"
    return module.task_stats


def freeze(learner: Learner) -> Learner:
    """A frozen eval-mode copy of the learner: the distillation teacher, taken before the head grows."""
    teacher = copy.deepcopy(learner).eval()
    teacher.requires_grad_(False)
    teacher.backbone._compiled_call_impl = None  # a copied compiled call would run the student
    return teacher
