"""`uh doctor`: the preflight passes on this CPU, says it is a CPU, prints estimates, and can fail."""

import json
import re
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from uniform_herding.catalogue import PAPER_RUNS, RUNS, resolve
from uniform_herding.cli import main
from uniform_herding.doctor.price import trains_on
from uniform_herding.estimate import procedure_seconds
from uniform_herding.runs.terminal import duration

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.trains
def test_doctor_passes_on_this_cpu_and_prints_estimates(tmp_path, teardown_to_meta):
    """With Lightning's teardown moving modules to `meta` (a GPU run's move to the CPU), so that the self-test
    and the timing must not read a module after fit."""
    res = CliRunner().invoke(
        main,
        [
            "doctor",
            "--profile",
            "smoke",
            "--steps",
            "4",
            "--data-dir",
            str(tmp_path / "d"),
            "--results-dir",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 0, res.output
    out = res.output
    assert "uh doctor on a CPU" in out and "the self-test runs at width 8, not the paper's 64" in out
    assert "PASS  self-test" in out and "overflows forced at [1, 2]" in out
    assert all(f"      {run_id:3} " in out for run_id in RUNS)
    assert "for 12 run IDs x 3 seeds one at a time" in out
    assert "\nuh doctor: PASS (report: " in out
    report = json.loads((tmp_path / "r" / "doctor.json").read_text())
    assert report["passed"] and report["selftest"]["failures"] == [] and report["step_seconds"] > 0
    assert set(report["estimates"]["per_run_s"]) == set(RUNS)
    assert " h " not in out.split("estimate, one seed")[1].split("\n")[1]  # smoke runs take seconds: no "0.00 h"
    if report["estimates"]["jobs_speedup"] is None:  # a loaded CPU's 3 steps alone can read slower than in company
        assert "ms alone; run uh doctor again\n" in out, out  # said so; a failed timing process is no such case
    else:
        assert report["estimates"]["jobs_speedup"] > 0 and "measured speed-up" in out
    assert all(report["timing"][k] > 0 for k in ("feature_image_s", "checkpoint_s", "launch_s"))
    assert report["peak_gpu_memory_gb"] is None  # a CPU


@pytest.mark.parametrize(
    ("driver", "advice"),
    [
        ("550.144.03", "update the NVIDIA driver to 570.26 or newer"),  # the image's CUDA 12.8 base refuses it
        ("570.26", "use the image (docs/reproducing.md)"),  # torch 13.0 would need 580, the image's 12.8 runs
        ("575.57.08", "use the image (docs/reproducing.md)"),
    ],
)
def test_doctor_advises_the_image_only_for_a_driver_the_image_runs_on(driver, advice, tmp_path, monkeypatch):
    """A driver that torch cannot use: below CUDA 12.8's 570.26 the image does not even start, so the
    advice is a newer driver, not the image."""
    from uniform_herding.doctor.preflight import check_environment
    from uniform_herding.runs import devices

    monkeypatch.setattr(devices, "driver_version", lambda: driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lines = check_environment(tmp_path / "d", tmp_path / "r", resolve("B3", "smoke"))
    (gpu,) = [line for line in lines if line.what == "gpu"]
    assert gpu.status == "FAIL" and f"an NVIDIA driver {driver} is present" in gpu.detail
    assert advice in gpu.detail
    assert ("use the image" in gpu.detail) == advice.startswith("use the image")


@pytest.mark.trains
def test_doctor_fails_when_the_gpu_path_diverges(tmp_path, monkeypatch, uninitialised_memory_is_nan):
    """torch's fused SGD as it is, without the zero-filled momentum buffers: the self-test fails, exit 1."""
    from uniform_herding.method import engine

    monkeypatch.setattr(engine, "zero_fill_momentum", lambda optimizer: None)
    res = CliRunner().invoke(
        main,
        [
            "doctor",
            "--profile",
            "smoke",
            "--steps",
            "4",
            "--data-dir",
            str(tmp_path / "d"),
            "--results-dir",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 1
    assert "FAIL  self-test    weights not finite (ours False, reference True)" in res.output
    assert "\nuh doctor: FAIL: self-test (report: " in res.output
    report = json.loads((tmp_path / "r" / "doctor.json").read_text())
    assert not report["passed"] and report["selftest"]["max_weight_diff"] is None  # NaN: null in JSON


def test_the_speedup_of_jobs_needs_timings_that_overlap_and_no_step_faster_in_company():
    """On an H200 the three timing processes each timed a few milliseconds of steps seconds apart (each alone):
    4.26x for 3 jobs. Windows that do not all overlap, or a step faster together than alone, measure nothing."""
    from uniform_herding.doctor.timing import together_speedup

    assert together_speedup([(0.0, 1.0, 0.03), (0.5, 1.5, 0.03), (0.9, 2.0, 0.03)], 3, 0.02, 0.0) == (
        pytest.approx(2.0),
        "measured speed-up 2.00x",
    )
    assert together_speedup([(0.0, 1.0, 0.03), (1.0, 2.0, 0.03), (0.5, 1.5, 0.03)], 3, 0.02, 0.0) == (
        None,
        "the 3 processes' timings did not overlap",
    )
    assert together_speedup([(0.0, 1.0, 0.03), (0.5, 1.5, 0.03)], 2, 0.02, 0.2) == (
        None,
        "a timing process started before the others were ready",
    )
    speedup, said = together_speedup([(0.0, 1.0, 0.0189), (0.1, 1.1, 0.0189)], 2, 0.0269, 0.0)
    assert speedup is None and said.startswith("a step took 18.9 ms with 2 at once, 26.9 ms alone")
    assert together_speedup([(0.0, 1.0)], 1, 0.02, 0.0)[0] is None


@pytest.mark.trains  # in the processes it starts
def test_the_jobs_timing_processes_start_their_timing_together(tmp_path):
    """Each --step-only process warms up, says "ready", and times only after jobs_speedup's "go": on the CPU too,
    their start-ups (seconds apart) would otherwise leave a smoke-size timing alone."""
    from uniform_herding.doctor.timing import jobs_speedup
    from uniform_herding.runs.devices import select

    speedup, said = jobs_speedup(select("cpu", "smoke"), "32-true", resolve("B3", "smoke"), 2, 1e-6)
    assert speedup is not None, said


def expected_root(tmp_path: Path, procedure: str) -> Path:
    """A copy of the smoke expected set with `procedure` appended, under tmp_path/expected_results (found from
    the current directory, as uh check finds it)."""
    root = tmp_path / "expected_results"
    (root / "smoke").mkdir(parents=True)
    (root / "tolerances.toml").write_text("")
    (root / "smoke" / "per_seed.csv").write_text((ROOT / "expected_results" / "smoke" / "per_seed.csv").read_text())
    toml = (ROOT / "expected_results" / "smoke" / "tolerances.toml").read_text()
    (root / "smoke" / "tolerances.toml").write_text(f"{toml}\n{procedure}")
    return root


def test_uh_price_on_the_smoke_profile_with_a_registered_procedure(tmp_path, monkeypatch):
    """Issue 46.3: the runs of `all` under a procedure of 2 looks (3 and 5 seeds): 36, and at most 10 x 5 + 2 x 3;
    in hours where uh doctor timed the device that will train (doctor.json of the profile and that device: issue
    52), else runs alone, saying so."""
    expected_root(tmp_path, "[procedure]\nseeds = [1993, 2023, 42, 1, 2]\nlooks = [3, 5]\nalpha = [0.01, 0.04]\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("COLUMNS", "1000")  # no line wrapped, however long this CPU's name
    res = CliRunner().invoke(main, ["price", "--profile", "smoke", "--results-dir", "r"])
    assert res.exit_code == 0, res.output
    cpu = trains_on(torch.device("cpu"))[0]
    assert res.output.splitlines() == [
        f"the price of ./reproduce.sh all (profile smoke), one run at a time on {cpu}:",
        "  the paper's 12 run IDs on seeds 1993 2023 42: 36 runs",
        "  at most, every look run (claims C1-C5's run IDs on 5 seeds, the others' on 3): 56 runs",
        "no price in hours for this CPU until `uh doctor --profile smoke --device cpu` times it",
    ]
    (tmp_path / "r").mkdir()
    timed = {"profile": "smoke", "device": "cuda:0", "estimates": {"per_run_s": {r: {"total_s": 60.0} for r in RUNS}}}
    (tmp_path / "r" / "doctor.json").write_text(json.dumps(timed))  # a GPU's times: not this CPU's
    res = CliRunner().invoke(main, ["price", "--profile", "smoke", "--results-dir", "r"])
    assert res.exit_code == 0 and "no price in hours for this CPU until `uh doctor --profile smoke" in res.output
    (tmp_path / "r" / "doctor.json").write_text(json.dumps(timed | {"device": "cpu"}))
    res = CliRunner().invoke(main, ["price", "--profile", "smoke", "--results-dir", "r"])
    assert res.exit_code == 0, res.output
    assert "  hours: this CPU's own, as uh doctor timed them (r/doctor.json)" in res.output.splitlines()
    assert "36 runs, 36.0 min" in res.output and "56 runs, 56.0 min" in res.output


def test_uh_price_on_the_paper_profile_is_the_t4s_without_uh_doctors_timing(tmp_path, monkeypatch):
    """The shipped set on the paper's T4 seconds (expected_results/paper_compute.csv) for GPUs (here the Slurm
    nodes'): the 36 runs as the reproducing guide tables them, the whole procedure as uh doctor prices
    procedure_runs.csv, and at most claims C1-C5's run IDs on 20 seeds."""
    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("COLUMNS", "120")
    res = CliRunner().invoke(main, ["price", "--executor", "slurm", "--results-dir", str(tmp_path)])
    assert res.exit_code == 0 and max(map(len, res.output.splitlines())) <= 120, res.output  # issue 61.5
    t4 = pd.read_csv(ROOT / "expected_results" / "paper_compute.csv").set_index("run_id")["seconds_mean"]
    whole = procedure_seconds(
        {r: {"total_s": t4[r]} for r in PAPER_RUNS}, pd.read_csv(ROOT / "expected_results" / "procedure_runs.csv")
    )
    runs = procedure_seconds(
        {r: {"total_s": 1.0} for r in PAPER_RUNS}, pd.read_csv(ROOT / "expected_results" / "procedure_runs.csv")
    )
    claims = ["B1", "B2", "B3", "a1", "a2", "a4", "s1", "s2", "s3", "s4"]
    most = 20 * t4[claims].sum() + 3 * t4[["B0", "a3"]].sum()
    # issue 52: the device that will train named, and the T4's hours named as such, not as the nodes'
    header = "the price of ./reproduce.sh all (profile paper), one run at a time on the Slurm nodes' devices:"
    assert res.output.splitlines()[0] == header
    hours = (
        "hours: the paper's Tesla T4's (expected_results/paper_compute.csv), not the nodes': `uh doctor --profile "
        "paper` times them"
    )
    assert f"devices: {hours} the paper's 12 run IDs" in " ".join(res.output.split())  # however it is wrapped
    assert f"36 runs, {duration(3 * t4.sum())}" in res.output
    assert (
        f"mean {runs['mean_s']:.1f} runs, {duration(whole['mean_s'])}; 90th percentile {runs['p90_s']:.0f} runs, "
        f"{duration(whole['p90_s'])}"
    ) in res.output
    assert f"on 20 seeds, the others' on 3): 206 runs, {duration(most)}" in res.output


def test_uh_price_of_a_cpu_without_its_timing_says_in_a_short_line_that_it_has_none(tmp_path, monkeypatch):
    """Issue 61.6: the paper's hours are a Tesla T4's, a GPU's, and say nothing of a CPU's: on a CPU that uh doctor
    has not timed, uh price gives the runs alone and says, in a short line of its own, that no price in hours
    exists until uh doctor times it; every line fits COLUMNS (issue 61.5)."""
    monkeypatch.chdir(ROOT)
    res = CliRunner(env={"COLUMNS": "120"}).invoke(main, ["price", "--device", "cpu", "--results-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    lines = res.output.splitlines()
    assert lines[-1] == (
        "no price in hours for this CPU until `uh doctor --profile paper --device cpu` times it (the paper's hours "
        "are a GPU's)"
    )
    assert "  the paper's 12 run IDs on seeds 1993 2023 42: 36 runs" in lines
    assert not re.search(r"\d (h|min)\b", res.output) and max(map(len, lines)) <= 120


def test_uh_price_refuses_a_machine_that_cannot_train_the_profile_in_one_line(tmp_path, monkeypatch):
    """Issue 46.3: where `uh run` would refuse each run (no usable GPU for the paper's profile), uh price refuses
    once, saying what to do; on Slurm the nodes' GPUs count, not this machine's."""
    from uniform_herding.runs import devices

    monkeypatch.delenv("UH_DEVICE")
    monkeypatch.setattr(devices, "gpu_problem", lambda: "no NVIDIA GPU is visible (no driver found)")
    res = CliRunner().invoke(main, ["price", "--results-dir", str(tmp_path)])
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith(
        "Error: profile 'paper' trains at the paper's size, which takes days on a CPU, and no NVIDIA GPU is visible"
    ) and res.output.endswith(": ./reproduce.sh smoke\n")
    assert CliRunner().invoke(main, ["price", "--executor", "slurm", "--results-dir", str(tmp_path)]).exit_code == 0


@pytest.mark.parametrize(
    ("variable", "value", "message"),
    [
        ("UH_CPU_THREADS", "two", "UH_CPU_THREADS='two' is not a thread count; set an integer >= 1"),
        ("UH_COMPILE", "fast", "UH_COMPILE='fast' is not a setting; use 0, 1, reduce-overhead, max-autotune"),
    ],
)
def test_a_bad_setting_in_the_environment_is_one_line_before_any_check(variable, value, message, tmp_path, monkeypatch):
    monkeypatch.setenv(variable, value)
    res = CliRunner().invoke(
        main, ["doctor", "--profile", "smoke", "--data-dir", str(tmp_path / "d"), "--results-dir", str(tmp_path / "r")]
    )
    # no check printed (standard output), the error one line, after the line that says what is being checked
    assert res.exit_code == 2 and res.stdout == "" and res.stderr.count("\n") == 2
    assert res.stderr.splitlines()[-1].startswith(f"Error: {message}")
    assert not (tmp_path / "r").exists()


def test_doctor_says_each_step_as_it_starts_and_beats_while_it_times(tmp_path, monkeypatch):
    """Issue 52: `uh doctor --device cpu` printed "PASS self-test", then nothing for 400 s while it timed a paper-size
    step (13.6 s each here), the features, a job's start and two processes at once. Each step now says what it
    times as it starts and, away from a terminal, beats at least every HEARTBEAT_S (here each step is a fake that
    takes a second, and the beat 0.3 s)."""
    from uniform_herding.doctor import preflight, timing
    from uniform_herding.runs import selftest

    def slow(value, progress=None):
        time.sleep(1.0)
        if progress is not None:
            progress.advance()
        return value

    trace = selftest.Trace([1.0], [1], [torch.zeros(1)], [0.1])
    monkeypatch.setattr(preflight, "HEARTBEAT_S", 0.3)
    monkeypatch.setattr(timing, "HEARTBEAT_S", 0.3)
    monkeypatch.setattr(
        selftest,
        "compare",
        lambda *a, progress=None, **k: slow(selftest.Comparison(trace, trace, (1,), 1, 0.0, 1.0), progress),
    )
    monkeypatch.setattr(timing, "step_seconds", lambda *a: slow((0.01, 0.1), a[-1]))
    overhead = {
        "feature_image_s": 1e-4,
        "herd_step_s": 1e-4,
        "herd_row_s": 1e-8,
        "herd_together": False,
        "checkpoint_s": 0.1,
    }
    monkeypatch.setattr(timing, "overhead_seconds", lambda *a: slow(overhead))
    monkeypatch.setattr(timing, "run_startup_seconds", lambda *a: slow(0.5))
    monkeypatch.setattr(timing, "launch_seconds", lambda: slow(2.0))
    monkeypatch.setattr(timing, "jobs_speedup", lambda *a: slow((1.5, "measured speed-up 1.50x")))
    res = CliRunner().invoke(
        main,
        [
            "doctor",
            "--profile",
            "smoke",
            "--device",
            "cpu",
            "--jobs",
            "2",
            "--data-dir",
            str(tmp_path / "d"),
            "--results-dir",
            str(tmp_path / "r"),
        ],
    )
    assert res.exit_code == 0, res.output
    steps = [
        "environment: Python, torch, Lightning, the GPU, the archive, the disk",
        "self-test: 8 fp16 steps through our path, then Lightning's, at width 8",
        "timing: a B3 training step (32+16 images, width 8, 32-true), fits of 1, 1 and 4 or more steps",
        "timing: the features of 512 images, herding's selection, writing a checkpoint",
        "timing: a run's start-up (its archive read and put on the device)",
        "timing: the start of a process (a fresh one importing a run)",
        "timing: 2 processes each timing a step at once (the speed-up of --jobs 2)",
    ]
    err = res.stderr.splitlines()
    starts = [err.index(f"{step} ...") for step in steps]
    assert starts == sorted(starts)
    for step in steps[1:]:  # the environment's check may take under a beat
        assert any(line.startswith(f"{step}: ") and line.endswith(" so far") for line in err), (step, err)
        assert any(line.startswith(f"{step}: done") for line in err)
    assert "1 of 16 steps" in res.stderr and "1 of 6 steps" in res.stderr  # what the fakes counted
    assert "PASS  timing" in res.stdout and "so far" not in res.stdout


@pytest.mark.parametrize(("device", "watched"), [("cuda", False), ("cpu", True)])
def test_the_doctor_times_on_cuda_the_step_a_run_replays(device, watched, monkeypatch):
    """A watched step runs eagerly (graph.why_eager), and the doctor watched its timing fits to count progress: on a GPU
    it would time the eager step while a run replays the CUDA graph. On CUDA it counts whole fits instead (every step
    still counted), and watches per step only where no graph runs. No GPU needed: the fits are recorded, not run."""
    from uniform_herding.doctor import timing
    from uniform_herding.method import train
    from uniform_herding.runs import selftest
    from uniform_herding.runs.terminal import Progress

    class Stream:
        def train_items(self, t: int) -> torch.Tensor:
            return torch.arange(10_000)

    watches = []
    monkeypatch.setattr(selftest, "task_one", lambda *args: (Stream(), None, None))
    monkeypatch.setattr(train, "fit_task", lambda *args, watch=None: watches.append(watch))
    cpu_generator = torch.Generator
    monkeypatch.setattr(torch, "Generator", lambda device=None: cpu_generator())  # no CUDA here
    monkeypatch.setattr(timing, "MIN_TIMED_S", 0.0)
    progress = Progress("timing", total=0)
    with progress:
        timing.step_seconds(torch.device(device), "16-mixed", resolve("B3", "smoke"), 4, progress)
    assert {watch is not None for watch in watches} == {watched}
    if not watched:  # counted per fit: 1 + 1 + (1 + 4) steps, as the watch would count them
        assert progress.count == 3 + 4
