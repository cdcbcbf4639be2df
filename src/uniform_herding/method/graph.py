"""The training step replayed as one CUDA graph (train.step; docs/design.md, "The GPU path").

On CUDA a step is hundreds of kernel launches, and the host's launches, not the GPU, bound an eager step. A CUDA
graph captures them once and replays them with one launch. It computes what the eager step computes, on the same
tensors: train.step keeps every piece of its state in device tensors updated in place and reads nothing to the
host (tests/method/test_graph.py checks both on a CPU), and the graph owns the data generator's state, so the
replay draws the numbers the eager step would.

One graph per task, for the batch of `batch_size` items: its first WARMUP full batches run eagerly on a side stream
(real steps: the lazy set-ups happen there, as capture requires), the next is captured and every later one replays
it, its items copied into the graph's input. The last partial batch of an epoch, another shape, runs eagerly.
UH_STEP=eager (or torch.compile, or a watched step: the doctor's, the self-test's) keeps every step eager; a capture
that fails (driver, operator, memory) is said in one line, and the task goes on eagerly, its record saying why.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable

import torch
from torch import Tensor

SETTINGS = ("graph", "eager")
WARMUP = 3  # eager steps before the capture


def setting() -> str:
    """UH_STEP: "graph" (the default; used on CUDA only) or "eager"."""
    value = os.environ.get("UH_STEP", "") or "graph"
    if value not in SETTINGS:
        raise ValueError(f"UH_STEP={value!r} is not a setting; use graph or eager")
    return value


def why_eager(device: torch.device, compiled: bool, watched: bool) -> str | None:
    """Why a task's steps run eagerly, or None where they are replayed as a CUDA graph."""
    if device.type != "cuda":
        return "not CUDA"
    if setting() == "eager":
        return "UH_STEP=eager"
    if compiled:
        return "UH_COMPILE: torch.compile replays its own graphs"
    if watched:
        return "a watched step (doctor, self-test)"
    return None


class Runner:
    """Runs a task's steps: `step(batch)` eagerly, or as one CUDA graph per task (see the module's docstring).
    `forget` clears what a step left half done when its capture fails (engine.forget_step)."""

    def __init__(
        self,
        step: Callable[[Tensor], None],
        batch_size: int,
        generator: torch.Generator,
        why: str | None,
        forget: Callable[[], None],
    ) -> None:
        self.step, self.batch_size, self.generator, self.why, self.forget = step, batch_size, generator, why, forget
        self.warmed, self.replays, self.refused = 0, 0, None
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static = torch.empty(0)  # the graph's input: a batch's items

    def __call__(self, batch: Tensor) -> None:
        if self.why is not None or self.refused is not None or len(batch) != self.batch_size:
            self.step(batch)  # eager: off CUDA, asked for, refused, or the last partial batch
        elif self.warmed < WARMUP:
            self.warm_up(batch)
        elif self.graph is None and not self.capture(batch):
            self.step(batch)
        else:
            self.static.copy_(batch)
            self.graph.replay()
            self.replays += 1

    def warm_up(self, batch: Tensor) -> None:
        """One real step on a side stream: the lazy set-ups happen outside the capture."""
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.step(batch)
        torch.cuda.current_stream().wait_stream(side)
        self.warmed += 1

    def capture(self, batch: Tensor) -> bool:
        """Capture the step on a copy of `batch`'s items (nothing runs); False, said and recorded, if refused."""
        state = self.generator.get_state()
        try:
            static, cuda_graph = batch.clone(), torch.cuda.CUDAGraph()
            cuda_graph.register_generator_state(self.generator)  # the replays draw from the run's data generator
            with torch.cuda.graph(cuda_graph):
                self.step(static)
        except Exception as e:  # any refusal (driver, operator, memory): the eager step is the fallback
            self.refuse(e, state)
            return False
        self.graph, self.static = cuda_graph, static
        return True

    def refuse(self, error: Exception, state: Tensor) -> None:
        """Say why in one line, undo the half-captured step, go on eagerly."""
        lines = str(error).strip().splitlines()
        self.refused = f"{type(error).__name__}: {lines[0] if lines else ''}".strip()
        print(f"step: CUDA graph refused ({self.refused}); the task's steps run eagerly", file=sys.stderr, flush=True)
        self.generator.set_state(state)
        self.forget()

    def record(self) -> str:
        """How the task's steps ran: "graph" (replayed), or "eager", with why a graph was refused."""
        if self.refused is not None:
            return f"eager: graph refused ({self.refused})"
        return "graph" if self.replays else "eager"
