"""The GPU path against Lightning's stock "16-mixed" path, step by step (`uh doctor`, tests/runs/test_selftest.py).

Both paths train the same B3 step of task 1 (frozen teacher, b replayed items, CE + KD) from the
same weights, batches, replay draws and augmentations, with a fresh grad scaler at 2^16 as every
task of a run starts:
  ours       train.fit_task, as runs use it: fp16 autocast with loss scaling,
             fused SGD with zero-filled momentum buffers, our unscale before the clip, channels_last;
  reference  Lightning's own MixedPrecision("16-mixed") plugin, unfused torch SGD, Lightning's own
             gradient clipping (it unscales first), contiguous memory.
An overflow is forced at step 1 and halfway (an inf written into a scaled gradient, which is what an
fp16 overflow leaves there), so both must skip those steps (and the same natural overflows, if any),
halve the scale there, and end with the same weights up to fp16 rounding. Images are random: the
step's arithmetic, not its accuracy, is under test. Under UH_COMPILE both paths' models are compiled
alike (fit_task's compile_backbone, the same mode): inductor fuses and rounds differently from eager,
so a compiled path against an eager reference would compare kernels, not the two step implementations;
like with like, the same scale sequence and tolerance hold.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass

import lightning as L
import numpy as np
import torch
from lightning.pytorch.plugins import MixedPrecision
from lightning.pytorch.plugins.environments import LightningEnvironment
from torch import Tensor

from uniform_herding.catalogue import resolve
from uniform_herding.data.archive import RawData
from uniform_herding.method.config import Config
from uniform_herding.method.engine import (
    Precision,
    compile_backbone,
    compile_mode,
    quiet_lightning,
    replays_cuda_graphs,
)
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream
from uniform_herding.method.train import Batches, fit_task, freeze, inputs, task_loss
from uniform_herding.runs.terminal import Progress

INIT_SCALE = 2.0**16  # torch's and Lightning's default, and where every task of a run starts


class Watched:
    """Our path's watch (train.Watch): forces overflows at the given steps, records the scale after each."""

    def __init__(self, overflow_at: tuple[int, ...], progress: Progress | None) -> None:
        self.overflow_at, self.progress = overflow_at, progress
        self.scales, self.step_s, self._tic = [], [], time.perf_counter()

    def after_backward(self, learner: Learner) -> None:
        if len(self.scales) in self.overflow_at:
            grad = next(learner.parameters()).grad
            grad[(0,) * grad.dim()] = float("inf")  # what an fp16 overflow leaves in a scaled gradient

    def after_step(self, scaler: torch.amp.GradScaler | None) -> None:
        self.scales.append(scaler.get_scale())  # a host read: test only
        self.step_s.append(time.perf_counter() - self._tic)
        self._tic = time.perf_counter()
        if self.progress is not None:
            self.progress.advance()


class Reference(L.LightningModule):
    """Lightning's stock "16-mixed" path for the same step, through its Trainer: automatic optimisation, unfused
    SGD, Lightning's own clipping (it unscales first), contiguous memory; the same batch transform and loss."""

    def __init__(
        self,
        cfg: Config,
        learner: Learner,
        teacher: Learner,
        stream: TaskStream,
        replay: Tensor,
        generator: torch.Generator,
        watched: Watched,
    ) -> None:
        super().__init__()
        self.cfg, self.learner, self.stream, self.replay, self.generator = cfg, learner, stream, replay, generator
        self.__dict__["teacher"] = teacher  # not a submodule: the Trainer would switch it to train mode
        self.watched = watched
        self.cuda_graphs = replays_cuda_graphs(compile_mode())

    def on_after_batch_transfer(self, items: Tensor, dataloader_idx: int) -> tuple[Tensor, Tensor]:
        return inputs(self.cfg, self.stream, items, self.replay, self.generator)

    def training_step(self, batch: tuple[Tensor, Tensor], batch_idx: int) -> Tensor:
        if self.cuda_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        x, y = batch
        with torch.no_grad():
            teacher_logits = self.teacher(x)[1]
        return task_loss(self.cfg, self.learner(x)[1], y, teacher_logits)

    def on_after_backward(self) -> None:
        self.watched.after_backward(self.learner)

    def on_train_batch_end(self, outputs: object, batch: object, batch_idx: int) -> None:
        self.watched.after_step(self.trainer.precision_plugin.scaler)

    def on_train_end(self) -> None:
        """The final weights, read before Lightning's teardown moves the module off the device."""
        self.weights = [p.detach().to("cpu", torch.float32) for p in self.learner.parameters()]

    def configure_optimizers(self) -> torch.optim.Optimizer:
        cfg = self.cfg
        return torch.optim.SGD(
            self.learner.parameters(), lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay
        )


@dataclass(frozen=True)
class Trace:
    """One path's run: the scale after each step, the skipped steps (0-based), the final weights."""

    scales: list[float]
    skipped: list[int]
    weights: list[Tensor]
    step_s: list[float]

    @property
    def finite(self) -> bool:
        return all(bool(w.isfinite().all()) for w in self.weights)


@dataclass(frozen=True)
class Comparison:
    ours: Trace
    reference: Trace
    overflow_at: tuple[int, ...]
    skipped_counted: int  # TaskStats.skipped_steps of our path: the on-device count runs record
    max_weight_diff: float  # max |w_ours - w_ref| over all parameters
    max_update: float  # max |w_ref - w_0|: how far the weights moved

    @property
    def tolerance(self) -> float:
        """fp16 rounding of the updates: 2^-7 of the largest update (fp16 keeps 11 bits; the two paths'
        convolution algorithms and summation orders differ, and differences compound over steps)."""
        return self.max_update * 2.0**-7

    def failures(self) -> list[str]:
        """What disagrees; empty when the two paths agree."""
        problems = []
        if not (self.ours.finite and self.reference.finite):
            problems.append(f"weights not finite (ours {self.ours.finite}, reference {self.reference.finite})")
        if self.ours.skipped != self.reference.skipped or not set(self.overflow_at) <= set(self.ours.skipped):
            problems.append(
                f"skipped steps differ: ours {self.ours.skipped}, reference {self.reference.skipped}, "
                f"forced {list(self.overflow_at)}"
            )
        if self.ours.scales != self.reference.scales:
            problems.append(f"scale sequences differ: ours {self.ours.scales}, reference {self.reference.scales}")
        if self.skipped_counted != len(self.ours.skipped):
            problems.append(f"the run's skip counter says {self.skipped_counted}, the scale {len(self.ours.skipped)}")
        if not self.max_weight_diff <= self.tolerance:
            problems.append(f"weights differ by {self.max_weight_diff:.3g} > {self.tolerance:.3g}")
        return problems


def random_stream(cfg: Config, images_per_class: int, device: torch.device) -> TaskStream:
    """A stream of random images with `images_per_class` training images per class after the hold-out."""
    rng = np.random.default_rng(0)
    n_train = cfg.probe_per_class + cfg.val_per_class + images_per_class
    y, test_y = np.repeat(np.arange(100), n_train), np.repeat(np.arange(100), 1)
    raw = RawData(
        rng.integers(0, 256, (len(y), 3, 32, 32), dtype=np.uint8),
        y,
        rng.integers(0, 256, (len(test_y), 3, 32, 32), dtype=np.uint8),
        test_y,
        [f"c{i}" for i in range(100)],
        "0" * 32,
        "synthetic",
    )
    return TaskStream(raw, cfg, device)


def step_config(width: int) -> Config:
    """Paper B3 (batch 128 + b = 64 replayed, lr, momentum, clip, KD) at `width`, one epoch per fit."""
    return dataclasses.replace(resolve("B3", "paper"), width=width, epochs=1, train_per_class=None)


def task_one(cfg: Config, steps: int, device: torch.device) -> tuple[TaskStream, Learner, Learner]:
    """Task 1 of a run at cfg's size, on random images enough for `steps` batches: the stream, the
    learner (20 seen classes) and its frozen teacher (the 10 of task 0), from torch seed 0."""
    stream = random_stream(cfg, -(-steps * cfg.batch_size // cfg.classes_per_task), device)
    torch.manual_seed(0)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale).to(device)
    learner.head.grow(cfg.classes_per_task)
    teacher = freeze(learner)
    learner.head.grow(cfg.classes_per_task)
    return stream, learner, teacher


def compare(device: torch.device, width: int = 64, steps: int = 6, progress: Progress | None = None) -> Comparison:
    """Train `steps` steps of task 1 through both paths; overflows forced at step 1 and steps // 2; each step
    counted in `progress`, where given."""
    quiet_lightning()
    cfg = step_config(width)
    stream, learner, teacher = task_one(cfg, steps, device)
    start = [p.detach().to("cpu", torch.float32, copy=True) for p in learner.parameters()]
    items, replay = stream.train_items(1)[: steps * cfg.batch_size], stream.train_items(0)
    overflow_at = (1, steps // 2)

    ours = Watched(overflow_at, progress)
    ours_learner, gen = copy.deepcopy(learner), torch.Generator(device=device).manual_seed(0)
    stats = fit_task(cfg, ours_learner, copy.deepcopy(teacher), stream, replay, items, gen, Precision.FP16, watch=ours)
    ours.weights = [p.detach().to("cpu", torch.float32) for p in ours_learner.parameters()]
    gen = torch.Generator(device=device).manual_seed(0)
    ref = Reference(
        cfg, copy.deepcopy(learner), copy.deepcopy(teacher), stream, replay, gen, Watched(overflow_at, progress)
    )
    fit_reference(ref, items, device)
    a = trace(ours.scales, ours.weights, ours.step_s)
    b = trace(ref.watched.scales, ref.weights, ref.watched.step_s)
    return Comparison(
        ours=a,
        reference=b,
        overflow_at=overflow_at,
        skipped_counted=stats.skipped_steps,
        max_weight_diff=max(float((x - y).abs().max()) for x, y in zip(a.weights, b.weights, strict=True)),
        max_update=max(float((y - w).abs().max()) for y, w in zip(b.weights, start, strict=True)),
    )


def fit_reference(ref: Reference, items: Tensor, device: torch.device) -> None:
    """The reference path's fit: Lightning's Trainer with its stock "16-mixed" plugin and its own norm clipping, one
    epoch over `items`; its models compiled as fit_task compiles ours (UH_COMPILE), like with like."""
    ref.learner.train()
    for model in (ref.learner, ref.teacher):
        compile_backbone(model)
    L.Trainer(
        accelerator=device.type,
        devices=1,
        max_epochs=1,
        plugins=[
            MixedPrecision("16-mixed", device.type, scaler=torch.amp.GradScaler(device.type)),
            LightningEnvironment(),
        ],  # one plain process, inside a Slurm job too (no requeue handler)
        gradient_clip_val=ref.cfg.grad_clip,
        gradient_clip_algorithm="norm",
        logger=False,
        enable_checkpointing=False,
        enable_model_summary=False,
        enable_progress_bar=False,
    ).fit(ref, train_dataloaders=Batches(items, ref.cfg.batch_size, ref.generator))


def trace(scales: list[float], weights: list[Tensor], step_s: list[float]) -> Trace:
    """A path's Trace: a step is skipped where the scale after it fell (from INIT_SCALE before the first)."""
    previous = [INIT_SCALE, *scales[:-1]]
    skipped = [k for k, (a, b) in enumerate(zip(previous, scales, strict=True)) if b < a]
    return Trace(scales, skipped, weights, step_s)
