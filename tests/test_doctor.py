"""`uh doctor`: the preflight passes on this CPU, says it is a CPU, prints estimates, and can fail."""

import json
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
from click.testing import CliRunner

from uniform_herding.catalogue import PAPER_RUNS, RUNS, resolve
from uniform_herding.cli import main
from uniform_herding.doctor import (
    estimates,
    feature_images,
    price,
    procedure_seconds,
    run_seconds,
    run_steps,
    trains_on,
)
from uniform_herding.runs.terminal import duration
from uniform_herding.verdict.decide import Procedure

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.trains
def test_doctor_passes_on_this_cpu_and_prints_estimates(tmp_path, teardown_to_meta):
    """With Lightning's teardown moving modules to `meta` (a GPU run's move to the CPU), so that the self-test
    and the timing must not read a module after fit."""
    res = CliRunner().invoke(main, ["doctor", "--profile", "smoke", "--steps", "4", "--data-dir", str(tmp_path / "d"),
                                    "--results-dir", str(tmp_path / "r")])  # fmt: skip
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


@pytest.mark.parametrize(("driver", "advice"), [
    ("550.144.03", "update the NVIDIA driver to 570.26 or newer"),  # the image's CUDA 12.8 base refuses it
    ("570.26", "use the image (docs/reproducing.md)"),  # torch 13.0 would need 580, the image's 12.8 runs
    ("575.57.08", "use the image (docs/reproducing.md)"),
])  # fmt: skip
def test_doctor_advises_the_image_only_for_a_driver_the_image_runs_on(driver, advice, tmp_path, monkeypatch):
    """A driver that torch cannot use: below CUDA 12.8's 570.26 the image does not even start, so the
    advice is a newer driver, not the image."""
    from uniform_herding.doctor import check_environment
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
    res = CliRunner().invoke(main, ["doctor", "--profile", "smoke", "--steps", "4", "--data-dir", str(tmp_path / "d"),
                                    "--results-dir", str(tmp_path / "r")])  # fmt: skip
    assert res.exit_code == 1
    assert "FAIL  self-test    weights not finite (ours False, reference True)" in res.output
    assert "\nuh doctor: FAIL: self-test (report: " in res.output
    report = json.loads((tmp_path / "r" / "doctor.json").read_text())
    assert not report["passed"] and report["selftest"]["max_weight_diff"] is None  # NaN: null in JSON


def test_estimate_arithmetic_on_the_paper_profile():
    """B3: 36 steps x 70 epochs per task; task 0 has 128 images and no teacher (3 units per image), tasks
    1-9 have 128 + 64 and a teacher (4 units). At 1 s per B3 step: 2520 * (128*3/768) + 9 * 2520 s of training.
    Per task besides: the fit's start-up, the features of every image outside training, a checkpoint; with
    --jobs, per run the start of its job process."""
    assert run_steps(resolve("B3"))[:2] == [(2520, 128, False), (2520, 192, True)]
    timing = {"step_s": 1.0, "startup_s": 2.0, "feature_image_s": 1e-4, "checkpoint_s": 0.5, "launch_s": 5.0}
    # task 0 of B3: 1,000 seen test images, 4,500 new training images, 2,000 exemplars (NME), 6,000 pool items
    assert feature_images(resolve("B3"), 0) == 1000 + 4500 + 2000 + 3 * 2000
    assert feature_images(resolve("B0"), 9) == 10 * 1000 + 4500  # no memory, head readout: test + imprint
    b3 = run_seconds("B3", "paper", timing)
    assert b3["train_s"] == pytest.approx(2520 * 0.5 + 9 * 2520)
    assert b3["other_s"] == pytest.approx(sum(2.0 + 0.5 + 1e-4 * (1000 * (t + 1) + 12500) for t in range(10)))
    assert run_seconds("B0", "paper", timing)["train_s"] == pytest.approx(10 * 2520 * 0.5)  # 128 images, no teacher
    est = estimates(timing, "paper", jobs=3, speedup=1.4)
    assert est["all_s"] == pytest.approx(3 * sum(est["per_run_s"][r]["total_s"] for r in PAPER_RUNS))
    # the measured speed-up, never 3; each of the 36 runs a job process that starts in 5 s
    assert est["all_s_with_jobs"] == pytest.approx((est["all_s"] + 36 * 5.0) / 1.4)
    assert estimates(timing, "paper", jobs=1, speedup=1.0)["all_s_with_jobs"] == est["all_s"]  # in-process
    assert estimates(timing, "paper", jobs=3, speedup=None)["all_s_with_jobs"] is None


def test_the_speedup_of_jobs_needs_timings_that_overlap_and_no_step_faster_in_company():
    """On an H200 the three timing processes each timed a few milliseconds of steps seconds apart (each alone):
    4.26x for 3 jobs. Windows that do not all overlap, or a step faster together than alone, measure nothing."""
    from uniform_herding.doctor import together_speedup

    assert together_speedup([(0.0, 1.0, 0.03), (0.5, 1.5, 0.03), (0.9, 2.0, 0.03)], 3, 0.02, 0.0) == (
        pytest.approx(2.0), "measured speed-up 2.00x")
    assert together_speedup([(0.0, 1.0, 0.03), (1.0, 2.0, 0.03), (0.5, 1.5, 0.03)], 3, 0.02, 0.0) == (
        None, "the 3 processes' timings did not overlap")
    assert together_speedup([(0.0, 1.0, 0.03), (0.5, 1.5, 0.03)], 2, 0.02, 0.2) == (
        None, "a timing process started before the others were ready")
    speedup, said = together_speedup([(0.0, 1.0, 0.0189), (0.1, 1.1, 0.0189)], 2, 0.0269, 0.0)
    assert speedup is None and said.startswith("a step took 18.9 ms with 2 at once, 26.9 ms alone")
    assert together_speedup([(0.0, 1.0)], 1, 0.02, 0.0)[0] is None


@pytest.mark.trains  # in the processes it starts
def test_the_jobs_timing_processes_start_their_timing_together(tmp_path):
    """Each --step-only process warms up, says "ready", and times only after jobs_speedup's "go": on the CPU too,
    their start-ups (seconds apart) would otherwise leave a smoke-size timing alone."""
    from uniform_herding.doctor import jobs_speedup
    from uniform_herding.runs.devices import select

    speedup, said = jobs_speedup(select("cpu", "smoke"), "32-true", resolve("B3", "smoke"), 2, 1e-6)
    assert speedup is not None, said


def test_the_whole_procedure_is_priced_pattern_by_pattern_with_its_share():
    """36 runs, plus each pattern of extra runs at its share: 70% none, 20% B3 +3 seeds, 10% B3 +17 seeds; the
    90th percentile is the least total with at least 90% of the shares at or below it."""
    per_run = {r: {"total_s": 100.0} for r in PAPER_RUNS} | {"B3": {"total_s": 200.0}}
    extra = pd.DataFrame([{"share": 0.7, **dict.fromkeys(PAPER_RUNS, 0)},
                          {"share": 0.2, **dict.fromkeys(PAPER_RUNS, 0), "B3": 3},
                          {"share": 0.1, **dict.fromkeys(PAPER_RUNS, 0), "B3": 17}])  # fmt: skip
    base = 3 * (11 * 100.0 + 200.0)
    got = procedure_seconds(per_run, extra)
    assert got["mean_s"] == pytest.approx(base + 0.2 * 600 + 0.1 * 3400)
    assert got["p90_s"] == pytest.approx(base + 600)


def test_doctor_prices_uh_ocs_procedure_as_uh_oc_does(tmp_path):
    """The extra runs uh oc writes, priced by uh doctor at the paper's T4 seconds: the same mean and 90th
    percentile as uh oc prints (one definition of the percentile, the least with 90% at or below it)."""
    import numpy as np

    from uniform_herding.verdict.expected import load_expected
    from uniform_herding.verdict.oc import CENTER, Model, paper_seconds, simulate, write_extra_runs

    expected = load_expected(Path(__file__).resolve().parents[1] / "expected_results")
    seconds = paper_seconds(expected)
    s = simulate(expected, Model("a", faithful="a", rho=CENTER[0], tau=CENTER[1], kind="faithful"), 40, seconds,
                 np.random.default_rng(9))  # fmt: skip
    write_extra_runs(tmp_path / "runs.csv", s)
    # these draws' p90 is 80.27 h (36 of 40 at or below it); interpolated between neighbours (numpy's default),
    # 80.99; and the shares' float sum missing 0.9 by 1e-16 once moved uh doctor's to the next total, 87.50
    assert s.hours[1] < 80.5
    got = procedure_seconds({r: {"total_s": seconds[r]} for r in PAPER_RUNS}, pd.read_csv(tmp_path / "runs.csv"))
    assert got["mean_s"] / 3600 == pytest.approx(s.hours[0], rel=1e-4)
    assert got["p90_s"] / 3600 == pytest.approx(s.hours[1], rel=1e-9)


def test_the_docs_state_the_whole_procedures_cost_that_the_shipped_procedure_runs_give():
    """README, ARTIFACT.md and docs/reproducing.md quote the whole procedure's T4 hours: uh doctor's price of
    expected_results/procedure_runs.csv (uh oc --runs-out) at the paper's T4 seconds, to one decimal."""
    from uniform_herding.verdict.expected import load_expected
    from uniform_herding.verdict.oc import RUNS_CSV, paper_seconds

    root = Path(__file__).resolve().parents[1]
    seconds = paper_seconds(load_expected(root / "expected_results"))
    got = procedure_seconds({r: {"total_s": seconds[r]} for r in PAPER_RUNS},
                            pd.read_csv(root / "expected_results" / RUNS_CSV))  # fmt: skip
    mean, p90 = f"{got['mean_s'] / 3600:.1f}", f"{got['p90_s'] / 3600:.1f}"
    for doc in ("README.md", "ARTIFACT.md", "docs/reproducing.md"):
        text = " ".join((root / doc).read_text().split())
        assert mean in text and p90 in text, (doc, mean, p90)


def test_the_price_of_all_is_its_36_runs_then_the_procedures_mean_p90_and_most():
    """The runs `all` asks for at hand-set seconds: the 36; the whole procedure as procedure_seconds prices it; at
    most every look run, claims C1-C5's run IDs (B1 B2 B3 a1 a2 a4 s1-s4) on the last look's 6 seeds and the
    others (B0 a3) on the paper's 3. Without a procedure (or on seeds of one's own), the paper's runs alone."""
    per_run = {r: 100.0 for r in PAPER_RUNS} | {"B0": 1000.0}
    extra = pd.DataFrame([{"share": 0.5, **dict.fromkeys(PAPER_RUNS, 0)},
                          {"share": 0.5, **dict.fromkeys(PAPER_RUNS, 0), "B3": 3}])  # fmt: skip
    got = price(per_run, 3, Procedure(tuple(range(6)), (3, 6), (0.01, 0.04)), extra)
    base = 3 * (11 * 100 + 1000)
    assert got == {"paper": base, "most": 10 * 6 * 100 + 3 * 1000 + 3 * 100, "mean": base + 150, "p90": base + 300}
    assert price(per_run, 1, None, extra) == {"paper": 11 * 100 + 1000}


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
    res = CliRunner().invoke(main, ["price", "--profile", "smoke", "--results-dir", "r"])
    assert res.exit_code == 0, res.output
    cpu = trains_on(torch.device("cpu"))[0]
    assert res.output.splitlines() == [
        f"the price of ./reproduce.sh all (profile smoke), one run at a time on {cpu}; hours: none until `uh doctor "
        "--profile smoke --device cpu` has timed them:",
        "  the paper's 12 run IDs on seeds 1993 2023 42: 36 runs",
        "  at most, every look run (claims C1-C5's run IDs on 5 seeds, the others' on 3): 56 runs",
    ]  # fmt: skip
    (tmp_path / "r").mkdir()
    timed = {"profile": "smoke", "device": "cuda:0", "estimates": {"per_run_s": {r: {"total_s": 60.0} for r in RUNS}}}
    (tmp_path / "r" / "doctor.json").write_text(json.dumps(timed))  # a GPU's times: not this CPU's
    res = CliRunner().invoke(main, ["price", "--profile", "smoke", "--results-dir", "r"])
    assert res.exit_code == 0 and "hours: none until `uh doctor --profile smoke --device cpu`" in res.output
    (tmp_path / "r" / "doctor.json").write_text(json.dumps(timed | {"device": "cpu"}))
    res = CliRunner().invoke(main, ["price", "--profile", "smoke", "--results-dir", "r"])
    assert res.exit_code == 0, res.output
    assert f"on {cpu}; hours: this CPU's own, as uh doctor timed them (r/doctor.json):" in res.output
    assert "36 runs, 36.0 min" in res.output and "56 runs, 56.0 min" in res.output


def test_uh_price_on_the_paper_profile_is_the_t4s_without_uh_doctors_timing(tmp_path, monkeypatch):
    """The shipped set on the paper's T4 seconds (expected_results/paper_compute.csv): the 36 runs as the
    reproducing guide tables them, the whole procedure as uh doctor prices procedure_runs.csv, and at most
    claims C1-C5's run IDs on 20 seeds."""
    monkeypatch.chdir(ROOT)
    res = CliRunner().invoke(main, ["price", "--device", "cpu", "--results-dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    t4 = pd.read_csv(ROOT / "expected_results" / "paper_compute.csv").set_index("run_id")["seconds_mean"]
    whole = procedure_seconds({r: {"total_s": t4[r]} for r in PAPER_RUNS},
                              pd.read_csv(ROOT / "expected_results" / "procedure_runs.csv"))  # fmt: skip
    runs = procedure_seconds({r: {"total_s": 1.0} for r in PAPER_RUNS},
                             pd.read_csv(ROOT / "expected_results" / "procedure_runs.csv"))  # fmt: skip
    claims = ["B1", "B2", "B3", "a1", "a2", "a4", "s1", "s2", "s3", "s4"]
    most = 20 * t4[claims].sum() + 3 * t4[["B0", "a3"]].sum()
    # issue 52: the device that will train named, and the T4's hours named as such, not as this CPU's
    assert res.output.splitlines()[0] == (
        f"the price of ./reproduce.sh all (profile paper), one run at a time on {trains_on(torch.device('cpu'))[0]}; "
        "hours: the paper's Tesla T4's (expected_results/paper_compute.csv), not this CPU's: `uh doctor --profile "
        "paper --device cpu` times them:")  # fmt: skip
    assert f"36 runs, {duration(3 * t4.sum())}" in res.output
    assert (f"mean {runs['mean_s']:.1f} runs, {duration(whole['mean_s'])}; 90th percentile {runs['p90_s']:.0f} runs, "
            f"{duration(whole['p90_s'])}") in res.output
    assert f"on 20 seeds, the others' on 3): 206 runs, {duration(most)}" in res.output


def test_uh_price_refuses_a_machine_that_cannot_train_the_profile_in_one_line(tmp_path, monkeypatch):
    """Issue 46.3: where `uh run` would refuse each run (no usable GPU for the paper's profile), uh price refuses
    once, saying what to do; on Slurm the nodes' GPUs count, not this machine's."""
    from uniform_herding.runs import devices

    monkeypatch.delenv("UH_DEVICE")
    monkeypatch.setattr(devices, "gpu_problem", lambda: "no NVIDIA GPU is visible (no driver found)")
    res = CliRunner().invoke(main, ["price", "--results-dir", str(tmp_path)])
    assert res.exit_code == 1 and res.output.count("\n") == 1
    assert res.output.startswith("Error: profile 'paper' trains at the paper's size, which takes days on a CPU, and "
                                 "no NVIDIA GPU is visible") and res.output.endswith(": ./reproduce.sh smoke\n")
    assert CliRunner().invoke(main, ["price", "--executor", "slurm", "--results-dir", str(tmp_path)]).exit_code == 0


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("UH_CPU_THREADS", "two", "UH_CPU_THREADS='two' is not a thread count; set an integer >= 1"),
    ("UH_COMPILE", "fast", "UH_COMPILE='fast' is not a setting; use 0, 1, reduce-overhead, max-autotune"),
])  # fmt: skip
def test_a_bad_setting_in_the_environment_is_one_line_before_any_check(variable, value, message, tmp_path,
                                                                      monkeypatch):  # fmt: skip
    monkeypatch.setenv(variable, value)
    res = CliRunner().invoke(main, ["doctor", "--profile", "smoke", "--data-dir", str(tmp_path / "d"),
                                    "--results-dir", str(tmp_path / "r")])  # fmt: skip
    # no check printed (standard output), the error one line, after the line that says what is being checked
    assert res.exit_code == 1 and res.stdout == "" and res.stderr.count("\n") == 2
    assert res.stderr.splitlines()[-1].startswith(f"Error: {message}")
    assert not (tmp_path / "r").exists()


def test_doctor_says_each_step_as_it_starts_and_beats_while_it_times(tmp_path, monkeypatch):
    """Issue 52: `uh doctor --device cpu` printed "PASS self-test", then nothing for 400 s while it timed a paper-size
    step (13.6 s each here), the features, a job's start and two processes at once. Each step now says what it
    times as it starts and, away from a terminal, beats at least every HEARTBEAT_S (here each step is a fake that
    takes a second, and the beat 0.3 s)."""
    from uniform_herding import doctor
    from uniform_herding.runs import selftest

    def slow(value, progress=None):
        time.sleep(1.0)
        if progress is not None:
            progress.advance()
        return value

    trace = selftest.Trace([1.0], [1], [torch.zeros(1)], [0.1])
    monkeypatch.setattr(doctor, "HEARTBEAT_S", 0.3)
    monkeypatch.setattr(selftest, "compare", lambda *a, progress=None, **k: slow(
        selftest.Comparison(trace, trace, (1,), 1, 0.0, 1.0), progress))  # fmt: skip
    monkeypatch.setattr(doctor, "step_seconds", lambda *a: slow((0.01, 0.1), a[-1]))
    monkeypatch.setattr(doctor, "overhead_seconds", lambda *a: slow({"feature_image_s": 1e-4, "checkpoint_s": 0.1}))
    monkeypatch.setattr(doctor, "launch_seconds", lambda: slow(2.0))
    monkeypatch.setattr(doctor, "jobs_speedup", lambda *a: slow((1.5, "measured speed-up 1.50x")))
    res = CliRunner().invoke(main, ["doctor", "--profile", "smoke", "--device", "cpu", "--jobs", "2", "--data-dir",
                                    str(tmp_path / "d"), "--results-dir", str(tmp_path / "r")])  # fmt: skip
    assert res.exit_code == 0, res.output
    steps = ["environment: Python, torch, Lightning, the GPU, the archive, the disk",
             "self-test: 8 fp16 steps through our path, then Lightning's, at width 8",
             "timing: a B3 training step (32+16 images, width 8, 32-true), fits of 1, 1 and 4 steps",
             "timing: the features of 512 images and the writing of a checkpoint",
             "timing: the start of a job (a fresh process importing a run)",
             "timing: 2 processes each timing a step at once (the speed-up of --jobs 2)"]  # fmt: skip
    err = res.stderr.splitlines()
    starts = [err.index(f"{step} ...") for step in steps]
    assert starts == sorted(starts)
    for step in steps[1:]:  # the environment's check may take under a beat
        assert any(line.startswith(f"{step}: ") and line.endswith(" so far") for line in err), (step, err)
        assert any(line.startswith(f"{step}: done") for line in err)
    assert "1 of 16 steps" in res.stderr and "1 of 6 steps" in res.stderr  # what the fakes counted
    assert "PASS  timing" in res.stdout and "so far" not in res.stdout
