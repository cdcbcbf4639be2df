"""benchmarks/gpu-acceptance: steps chosen with --steps, and a later call into the same --out keeps the figures
of the earlier ones (a GPU held in short turns runs the steps in several calls). The whole dry run is .ci/run's."""

import importlib.machinery
import importlib.util
import json
import signal
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "gpu-acceptance"


@pytest.fixture(scope="module")
def acceptance():
    loader = importlib.machinery.SourceFileLoader("gpu_acceptance", str(SCRIPT))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("gpu_acceptance", loader))
    loader.exec_module(module)
    return module


def test_steps_run_in_their_order_and_an_unknown_or_no_step_is_refused(acceptance):
    assert acceptance.steps("run, tests,compile") == ("tests", "run", "compile")
    with pytest.raises(click.BadParameter, match="bogus is not a step; the steps are tests,doctor,bench"):
        acceptance.steps("tests,bogus")
    with pytest.raises(click.BadParameter, match="name at least one step"):
        acceptance.steps(" , ")


@pytest.mark.slow
def test_a_call_with_some_steps_keeps_the_figures_of_earlier_calls(acceptance, tmp_path):
    earlier = acceptance.Acceptance(tmp_path, True, 60)
    earlier.resume("cpu (dry run)")
    earlier.record("doctor", True, 12.0, step_ms=3.5)
    res = CliRunner().invoke(acceptance.main, ["--dry-run", "--out", str(tmp_path), "--steps", "tests"])
    assert res.exit_code == 0, res.output
    figures = json.loads((tmp_path / "gpu-acceptance.json").read_text())
    assert list(figures["steps"]) == ["doctor", "tests"] and figures["steps"]["doctor"]["step_ms"] == 3.5
    assert [call["steps"] for call in figures["calls"]] == [["tests"]]
    assert "PASS" in res.output and "not run yet: bench, task0, graph, run, compile, jobs" in res.output
    md = (tmp_path / "gpu-acceptance.md").read_text()
    assert "| doctor | True | 12.0 |" in md and "| tests | True |" in md and "calls: tests in " in md


def test_figures_of_another_device_are_refused_and_kept(acceptance, tmp_path):
    gpu = acceptance.Acceptance(tmp_path, False, 60)
    gpu.resume("NVIDIA H100 80GB HBM3")
    gpu.record("tests", True, 30.0)
    before = (tmp_path / "gpu-acceptance.json").read_text()
    with pytest.raises(click.ClickException, match="holds the figures of 'NVIDIA H100 80GB HBM3'; give this call"):
        acceptance.Acceptance(tmp_path, True, 60).resume("cpu (dry run)")
    assert (tmp_path / "gpu-acceptance.json").read_text() == before


def test_a_step_past_its_time_is_stopped_and_says_so(acceptance, tmp_path):
    a = acceptance.Acceptance(tmp_path, True, 60)
    rc, _ = a.call("sleep", [sys.executable, "-c", "import time; time.sleep(60)"], timeout=1)
    assert a.stopped and rc == -signal.SIGTERM
    rc, _ = a.call("quick", [sys.executable, "-c", "pass"], timeout=60)
    assert not a.stopped and rc == 0


@pytest.mark.parametrize("step", ["tests", "doctor", "bench", "task0", "graph"])
def test_every_step_is_bounded_by_the_budget_and_a_stopped_step_says_so(acceptance, tmp_path, monkeypatch, step):
    """A step that hangs (here: its process sleeps) is stopped when the budget is spent, SIGKILLed if it ignores
    SIGTERM, and its record says it was stopped and did not pass."""
    a = acceptance.Acceptance(tmp_path, True, 2)
    a.resume("cpu (dry run)")
    monkeypatch.setattr(acceptance, "GRACE_S", 1)
    hang = [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"]
    call = a.call
    monkeypatch.setattr(a, "call", lambda name, argv, *rest, **kw: call(name, hang, *rest, **kw))
    acceptance.STEP_FUNCTIONS[step](a)
    record = json.loads((tmp_path / "gpu-acceptance.json").read_text())["steps"][step]
    assert record["stopped_at_budget"] is True and record["passed"] is False
    assert record["seconds"] < 30


def test_each_compile_mode_is_bounded_by_the_budget_and_recorded_at_once(acceptance, tmp_path, monkeypatch):
    """A mode that outlasts the budget (max-autotune tunes every convolution) is stopped, not waited for, and
    the modes measured before it are already in the file; only a mode that exits with an error fails the step."""
    a = acceptance.Acceptance(tmp_path, False, 3600)
    a.resume("NVIDIA H100 80GB HBM3")
    a.figures["task0_eager_s"] = 20.0
    seen = []

    def task0(a, deterministic, mode, timeout=None):
        seen.append((mode, timeout is not None and timeout <= a.left() + 1))
        path = tmp_path / "gpu-acceptance.json"
        written = json.loads(path.read_text())["steps"].get("compile", {}) if path.exists() else {}
        assert all(m in written for m, _ in seen[:-1]), "each mode is written before the next starts"
        return {"failed": "stopped at the budget after 3000 s"} if mode == "max-autotune" else {"seconds": 12.5}

    monkeypatch.setattr(acceptance, "task0", task0)
    monkeypatch.setattr(acceptance, "two_tasks_compiled", lambda a, mode: {"mode": mode, "passed": True})
    acceptance.compiled(a)
    step = json.loads((tmp_path / "gpu-acceptance.json").read_text())["steps"]["compile"]
    assert seen == [(mode, True) for mode in acceptance.COMPILE_MODES]
    assert step["passed"] and step["default"] == 12.5 and step["max-autotune"].startswith("stopped at the budget")


def test_a_host_that_cannot_build_kernels_skips_the_compile_modes_saying_why(acceptance, tmp_path, monkeypatch):
    from uniform_herding.method import engine

    a = acceptance.Acceptance(tmp_path, False, 3600)
    a.resume("NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(engine, "compiler_missing", lambda: "a C compiler (gcc or clang, or CC)")
    monkeypatch.setattr(acceptance, "task0", lambda *args, **kwargs: pytest.fail("no mode can run here"))
    acceptance.compiled(a)
    step = json.loads((tmp_path / "gpu-acceptance.json").read_text())["steps"]["compile"]
    assert step["passed"] and {step[m] for m in acceptance.COMPILE_MODES} == {
        "skipped: torch.compile needs a C compiler (gcc or clang, or CC)"
    }


TWO_TASKS = (
    "B3 seed 1993 task 1/10: accuracy on seen tasks 80.10% (95.2 s)\n"
    "B3 seed 1993 task 2/10: accuracy on seen tasks 61.00% (41.0 s)\n"
)


@pytest.mark.parametrize(
    ("extra", "passed"),
    [
        ("", True),
        ("V1125 torch/_inductor/cudagraph_trees.py] skipping cudagraphs due to mutated inputs (1 instances)\n", False),
        ("W1125 torch._dynamo hit config.recompile_limit (8)\n   function: 'forward' (resnet.py:40)\n", False),
    ],
)
def test_the_compiled_two_task_run_fails_on_a_recompile_limit_hit_or_a_skipped_cuda_graph(
    acceptance, tmp_path, monkeypatch, extra, passed
):
    """The compiled run past task 0 is read from torch's own log lines (TORCH_LOGS): a frame past the recompile
    limit falls back to eager, a skipped CUDA graph runs without replay; neither raises, so the log must be read."""
    a = acceptance.Acceptance(tmp_path, False, 3600)
    a.resume("NVIDIA H100 80GB HBM3")
    seen = {}

    def call(name, argv, timeout=None, env=None, until=None):
        seen.update(env=env, until=until)
        return 0, "Recompiling function forward\n" + TWO_TASKS + extra

    monkeypatch.setattr(a, "call", call)
    monkeypatch.setattr(acceptance, "ensure_archive", lambda a: None)
    monkeypatch.setattr("uniform_herding.method.engine.compiler_missing", lambda: None)
    figures = acceptance.two_tasks_compiled(a, "reduce-overhead")
    assert seen["env"] == {"UH_COMPILE": "reduce-overhead", "TORCH_LOGS": "recompiles,cudagraphs,perf_hints"}
    assert seen["until"].search(TWO_TASKS) and not seen["until"].search(TWO_TASKS.splitlines()[0])
    assert figures["passed"] is passed and figures["task_s"] == [95.2, 41.0] and figures["recompiles"] == 1
    assert bool(figures["cudagraph_skips"] or figures["recompile_limit_hits"]) is not passed
