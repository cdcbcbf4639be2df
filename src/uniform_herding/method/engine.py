"""The engine under a task's training: what makes it fast and quiet on torch and Lightning, none of it the paper's
method (train.py holds the losses and the training loop, task.py the order of a task's steps).

- precision: the paper's "16-mixed" on a GPU (fp16 autocast, dynamic loss scaling), fp32 on a CPU (`precision`),
  done by Lightning Fabric (`fabric`, `scaler`); the fp16 path also runs on a CPU, in the tests and with
  `--precision 16-mixed`;
- the fp16 path's fused SGD: momentum zero-filled (`zero_fill_momentum`), and the unscale before the clip, which
  Lightning leaves to a fused optimiser (`unscale`);
- torch.compile of the backbone (UH_COMPILE: `compile_mode`, `compile_backbone`; experimental, a speed setting
  recorded in result.json, not part of Config) and the CUDA graphs some of its modes replay;
- the memory format: channels_last on the fp16 path (`channels_last`);
- operators a step need not dispatch: the teacher's fp16 weights cast once per task (`fp16_weights`), BatchNorm's
  batch counters added to once per task (`batch_counts_per_task`);
- Lightning's quiet settings (`quiet_lightning`).

Every workaround of a torch or Lightning behaviour is marked where it is made, with its reason in one line.
"""

from __future__ import annotations

import enum
import logging
import os
import shutil
import sysconfig
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch
from lightning.fabric import Fabric
from lightning.fabric.plugins import MixedPrecision
from torch import Tensor, nn

from uniform_herding.method.config import NUMERIC_DEFAULTS
from uniform_herding.method.model import Learner

COMPILE_MODES = ("default", "reduce-overhead", "max-autotune")


class Precision(enum.StrEnum):
    """--precision, decoded once (`precision`) into what the loop reads: `fp16`, the paper's fp16 path. Its value is
    the setting's name, which a checkpoint and result.json record."""

    FP16 = "16-mixed"
    FP32 = "32-true"

    @property
    def fp16(self) -> bool:
        """The fp16 path: fp16 autocast and loss scaling, the fused SGD, channels_last."""
        return self is Precision.FP16


def precision(device: torch.device, requested: str | None = None) -> Precision:
    """`requested` (--precision, env UH_PRECISION), else the paper's "16-mixed" on GPU and fp32 on CPU
    (docs/design.md, "Training"), which keeps CPU reruns bit-identical."""
    if requested:
        try:
            return Precision(requested)
        except ValueError:
            raise ValueError(f"precision {requested!r} is not a setting; use {' or '.join(Precision)}") from None
    return Precision(NUMERIC_DEFAULTS["cuda" if device.type == "cuda" else "cpu"]["precision"])


def fabric(device: torch.device, fp16: bool) -> Fabric:
    """One task's Lightning Fabric on `device`: the paper's "16-mixed" (fp16 autocast, dynamic loss scaling from
    2^16) on the fp16 path, fp32 otherwise. Fabric installs no signal handler: inside a Slurm job submitit's
    requeue handler stays the only one (docs/cluster.md)."""
    quiet_lightning()
    # Built by hand: Fabric turns precision="16-mixed" into bf16 on a CPU, where the tests run the fp16 path.
    plugins = [MixedPrecision("16-mixed", device.type, scaler=torch.amp.GradScaler(device.type))] if fp16 else []
    return Fabric(accelerator=device.type, devices=1, plugins=plugins)


def scaler(fabric: Fabric) -> torch.amp.GradScaler | None:
    """The fp16 path's grad scaler, None in fp32."""
    return getattr(fabric.strategy.precision, "scaler", None)


def zero_fill_momentum(optimizer: torch.optim.SGD) -> None:
    """A fused SGD's momentum buffers zero-filled before the first step (the fp16 path's SGD).

    torch 2.11's fused SGD creates them with `empty_like` on its first step and lets the kernel fill
    them; when the grad scaler finds an inf on that step the kernel returns early, the buffers stay
    uninitialised, and the next finite step reads that memory (weights NaN or exploding). With zeros,
    the first step computes buf = momentum * 0 + grad = grad, bitwise what the first step would, and
    a skipped step leaves them as a fresh optimizer has them. Chosen over unfused SGD, which makes
    the scaler read `found_inf` on the host every step (benchmarks/RESULTS.md).
    """
    group = optimizer.param_groups[0]
    if group["fused"] and group["momentum"]:
        for p in group["params"]:
            optimizer.state[p]["momentum_buffer"] = torch.zeros_like(p)


def unscale(scaler: torch.amp.GradScaler | None, optimizer: torch.optim.Optimizer) -> Tensor | int:
    """Unscale the fp16 path's gradients before the clip; 1 (on the device) where the step will be skipped, else 0.

    `unscale_` records `found_inf` on the device and the fused step skips itself on it: no host synchronisation.
    """
    # By hand: Fabric (as the Trainer) refuses to unscale for a fused optimizer, which unscales in its own step.
    if scaler is None:
        return 0
    scaler.unscale_(optimizer)
    (found_inf,) = scaler._found_inf_per_device(optimizer).values()  # one device
    return found_inf


def forget_step(scaler: torch.amp.GradScaler | None, optimizer: torch.optim.Optimizer) -> None:
    """Forget a step that did not run to its end (a refused CUDA graph capture, graph.py): its gradients, and the
    grad scaler's note that it unscaled them, which would refuse the next step's unscale."""
    optimizer.zero_grad()
    if scaler is not None:
        scaler._per_optimizer_states.clear()  # by hand: GradScaler resets it only in update()


@contextmanager
def fp16_weights(teacher: Learner | None) -> Iterator[None]:
    """The frozen teacher's convolution weights in fp16 for the task, cast once: fp16 autocast casts them on every
    step otherwise (it caches only the casts of weights that take gradients), to the same values and layout. The
    fp32 weights are put back after the task (None: nothing to do, fp32 or no teacher)."""
    convs = [m for m in teacher.modules() if isinstance(m, nn.Conv2d)] if teacher is not None else []
    fp32 = [conv.weight for conv in convs]
    for conv in convs:
        conv.weight = nn.Parameter(conv.weight.detach().half(), requires_grad=False)
    try:
        yield
    finally:
        for conv, weight in zip(convs, fp32, strict=True):
            conv.weight = weight


@contextmanager
def batch_counts_per_task(model: nn.Module, steps: int) -> Iterator[None]:
    """BatchNorm's `num_batches_tracked`, which nothing reads where the momentum is set, counted once per task
    (+ `steps` after it) instead of by one operator per layer and step: it ends the task holding what it did."""
    norms = (m for m in model.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm))
    layers = [m for m in norms if m.momentum is not None and m.num_batches_tracked is not None]
    counts = [layer.num_batches_tracked for layer in layers]
    for layer in layers:
        layer.num_batches_tracked = None  # BatchNorm's forward then counts nothing
    try:
        yield
        if counts:
            torch._foreach_add_(counts, steps)
    finally:
        for layer, count in zip(layers, counts, strict=True):
            layer.num_batches_tracked = count


def loss_scale(scaler: torch.amp.GradScaler | None) -> float | None:
    """The fp16 path's loss scale now (a host read), or None without a grad scaler (fp32)."""
    return scaler.get_scale() if scaler is not None else None


def quiet_lightning() -> None:
    """Keep Lightning's notices out of a run's output: the tip to call `torch.set_float32_matmul_precision` on a
    GPU with tensor cores (an INFO record of the `lightning` loggers), which is not followed: it would change the
    fp32 numerics (TF32 matmuls); and the hint to launch with `srun` wherever srun is on the PATH (every Fabric
    asks SLURMEnvironment.detect()): a run is one process by design; and a deprecation notice that Lightning
    2.6.5's Trainer (the self-test's reference path) itself triggers on torch 2.11. Other warnings stay visible."""
    for name in ("lightning.pytorch", "lightning.fabric"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated")
    warnings.filterwarnings("ignore", message="The `srun` command is available on your system but is not used")


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
        raise ValueError(
            f"UH_COMPILE={value!r} needs {need} to build torch.compile's kernels; install it "
            "(Debian/Ubuntu: gcc python3-dev; the image has neither), or unset UH_COMPILE"
        )
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


def channels_last(model: Learner, fp16: bool) -> None:
    """The fp16 path's layout, NHWC: it suits fp16 tensor cores, and augment() already returns NHWC images.

    A run's learner gets it when made, before a checkpoint is loaded into it (loading copies into the
    parameters and keeps their layout): a resumed run's first forward, the next task's imprint, then runs
    the convolution kernels an uninterrupted run's does, which round alike.
    """
    if fp16:
        model.to(memory_format=torch.channels_last)


def prepare(model: Learner, fp16: bool) -> None:
    """A model as the task trains it: channels_last on the fp16 path, its backbone compiled under UH_COMPILE."""
    channels_last(model, fp16)
    compile_backbone(model)
