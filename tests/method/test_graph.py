"""The training step is ready for CUDA graph capture (train.step: from its second step on, the same operators on the
same shapes, every persistent tensor updated in place, no read to the host), and graph.py's choices that a CPU can
check: which step runs, the refused capture's fallback and its record. The graph itself: tests/test_gpu.py."""

import contextlib
import dataclasses
from dataclasses import dataclass

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from uniform_herding.method import graph, train
from uniform_herding.method.engine import Precision

HOST_READ = "aten._local_scalar_dense.default"  # .item(), .tolist(), bool(), int(), float() of a tensor


class Operators(TorchDispatchMode):
    """The ATen operators dispatched while active, each with the shapes of its tensor arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[str, tuple]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        shapes = tuple(tuple(a.shape) for a in torch.utils._pytree.tree_leaves((args, kwargs)) if torch.is_tensor(a))
        self.log.append((str(func), shapes))
        return func(*args, **(kwargs or {}))


@dataclass
class Recorded:
    operators: list[tuple[str, tuple]]
    storage: dict[str, int]  # persistent tensor -> data_ptr after the step


def persistent(step) -> dict[str, torch.Tensor]:
    """Every tensor a step changes and keeps: weights and BatchNorm statistics, the teacher's, the momentum
    buffers, the grad scaler's scale and growth tracker (fp16), the task's record (train.Sums)."""
    _, learner, teacher, _, _, _, _, optimizer, scaler, sums, _ = step.args
    tensors = {f"learner {k}": v for k, v in learner.state_dict(keep_vars=True).items()}
    tensors |= {f"teacher {k}": v for k, v in teacher.state_dict(keep_vars=True).items()}
    tensors |= {f"momentum {i}": s["momentum_buffer"] for i, s in enumerate(optimizer.optimizer.state.values())}
    if scaler is not None:
        tensors |= {"loss scale": scaler._scale, "growth tracker": scaler._growth_tracker}
    return tensors | {"sums.losses": sums.losses, "sums.k": sums.k, "sums.skipped": sums.skipped}


def recorded_steps(precision: str, tiny_stream, monkeypatch) -> list[Recorded]:
    """Six steps of a B3 task 1 (teacher, replay), all full batches, through fit_task, each step's operators and
    the storage of every persistent tensor after it."""
    from method.test_train import small_task

    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    steps = []

    def call(runner, batch):
        with Operators() as ops:
            runner.step(batch)
        steps.append(Recorded(ops.log, {k: v.data_ptr() for k, v in persistent(runner.step).items()}))

    monkeypatch.setattr(graph.Runner, "__call__", call)
    train.fit_task(dataclasses.replace(cfg, epochs=3), learner, teacher, stream, replay, items[:16], gen, precision)
    return steps


@pytest.mark.trains
@pytest.mark.parametrize("precision", [Precision.FP32, Precision.FP16])
def test_the_step_is_ready_for_cuda_graph_capture(precision, tiny_stream, gpu_like_fp16_conv, monkeypatch):
    """What a capture needs of the step, which a CUDA graph then replays: from step 2 on (the first creates the
    momentum buffers and the loss scale) the same operators on the same shapes, every persistent tensor in the
    same storage (updated in place, not rebound), and no value read to the host."""
    steps = recorded_steps(precision, tiny_stream, monkeypatch)
    assert len(steps) == 6
    reads = [op for s in steps for op, _ in s.operators if op == HOST_READ]
    assert not reads, f"{len(reads)} host reads in the steps"
    for k, s in enumerate(steps[2:], start=3):
        assert s.operators == steps[1].operators, f"step {k} dispatches other operators or shapes than step 2"
        moved = sorted(name for name, ptr in s.storage.items() if steps[1].storage.get(name) != ptr)
        assert s.storage.keys() == steps[1].storage.keys() and not moved, f"step {k} rebinds {moved}"
    if precision == "16-mixed":
        assert {"loss scale", "growth tracker", "momentum 0"} <= steps[1].storage.keys()


@pytest.mark.trains
def test_the_teachers_fp16_weights_and_the_batch_counts_leave_the_models_as_eager_counting_would(
    tiny_stream, gpu_like_fp16_conv
):
    """The teacher's fp16 convolution weights live for the task only (its fp32 weights are back after it, the
    same tensors), and BatchNorm's batch counters, counted once per task, hold the task's steps after it."""
    from method.test_train import small_task

    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    before = {k: v for k, v in teacher.state_dict(keep_vars=True).items()}
    stats = train.fit_task(cfg, learner, teacher, stream, replay, items, gen, Precision.FP16)
    after = teacher.state_dict(keep_vars=True)
    assert after.keys() == before.keys() and all(after[k] is v for k, v in before.items())
    counts = {v.item() for k, v in learner.state_dict().items() if k.endswith("num_batches_tracked")}
    assert counts == {stats.steps} == {6}


@pytest.mark.parametrize(
    ("device", "env", "compiled", "watched", "why"),
    [
        ("cpu", "", False, False, "not CUDA"),
        ("cuda", "", False, False, None),
        ("cuda", "graph", False, False, None),
        ("cuda", "eager", False, False, "UH_STEP=eager"),
        ("cuda", "", True, False, "UH_COMPILE: torch.compile replays its own graphs"),
        ("cuda", "", False, True, "a watched step (doctor, self-test)"),
    ],
)
def test_which_step_runs(device, env, compiled, watched, why, monkeypatch):
    monkeypatch.setenv("UH_STEP", env)
    assert graph.why_eager(torch.device(device), compiled, watched) == why


def test_a_bad_uh_step_is_refused_before_anything_runs(monkeypatch, tmp_path):
    from click.testing import CliRunner

    from uniform_herding.cli import main

    monkeypatch.setenv("UH_STEP", "fast")
    result = CliRunner().invoke(main, ["run", "B3", "--profile", "smoke", "--results-dir", str(tmp_path)])
    assert result.exit_code == 2 and "UH_STEP='fast' is not a setting; use graph or eager" in result.output
    assert not any(tmp_path.iterdir())


def force_the_graph_path(monkeypatch):
    """The graph path forced on a CPU: warm-up steps run in place (no side stream), a capture gets a fake graph
    whose capture context runs what a CUDA capture would record."""

    class FakeGraph:
        def register_generator_state(self, generator):
            pass

    monkeypatch.setattr(graph, "why_eager", lambda device, compiled, watched: None)
    monkeypatch.setattr(
        graph.Runner, "warm_up", lambda self, batch: (self.step(batch), setattr(self, "warmed", self.warmed + 1))
    )
    monkeypatch.setattr(torch.cuda, "CUDAGraph", FakeGraph)


@pytest.mark.trains
def test_a_refused_capture_is_said_in_one_line_and_the_task_goes_on_eagerly_as_if_none_was_tried(
    tiny_stream, monkeypatch, capsys
):
    """A capture refused before the step ran (the driver's refusal at the capture's start): one line, the steps
    eager, the generator where it was, so the task's weights and record are the eager task's."""
    from method.test_train import small_task

    def eager():
        cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
        stats = train.fit_task(cfg, learner, teacher, stream, replay, items, gen)
        return stats, [p.detach().clone() for p in learner.parameters()]

    reference, weights = eager()
    force_the_graph_path(monkeypatch)

    @contextlib.contextmanager
    def refused(cuda_graph):
        raise RuntimeError("CUDA error: operation not permitted when stream is capturing\nmore detail")
        yield

    monkeypatch.setattr(torch.cuda, "graph", refused)
    stats, refused_weights = eager()
    said = capsys.readouterr().err.strip().splitlines()
    reason = "RuntimeError: CUDA error: operation not permitted when stream is capturing"
    assert said == [f"step: CUDA graph refused ({reason}); the task's steps run eagerly"]
    assert stats.step == f"eager: graph refused ({reason})" and stats.record()["step"] == stats.step
    assert dataclasses.replace(stats, step="eager") == reference
    assert all(torch.equal(a, b) for a, b in zip(weights, refused_weights, strict=True))


@pytest.mark.trains
def test_a_capture_refused_inside_the_step_leaves_no_half_step_behind(tiny_stream, gpu_like_fp16_conv, monkeypatch):
    """A capture refused after the fp16 unscale (an operator the capture refuses): the next eager step must not
    find the scaler's note that it unscaled already (which would refuse its unscale)."""
    from method.test_train import small_task

    capturing, clip = [], torch.nn.utils.clip_grad_norm_

    @contextlib.contextmanager
    def capture(cuda_graph):
        capturing.append(True)
        yield
        capturing.clear()

    def clip_or_refuse(params, max_norm):
        if capturing:
            capturing.clear()
            raise RuntimeError("operator not supported during capture")
        return clip(params, max_norm)

    force_the_graph_path(monkeypatch)
    monkeypatch.setattr(torch.cuda, "graph", capture)
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", clip_or_refuse)
    cfg, learner, teacher, stream, replay, items, gen = small_task(tiny_stream)
    stats = train.fit_task(
        dataclasses.replace(cfg, epochs=3), learner, teacher, stream, replay, items[:16], gen, Precision.FP16
    )
    assert stats.step == "eager: graph refused (RuntimeError: operator not supported during capture)"
    assert stats.steps == 6 and stats.divergence() is None
