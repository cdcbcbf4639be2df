"""`uh doctor`: the preflight passes on this CPU, says it is a CPU, prints estimates, and can fail."""

import json

import pytest
import torch
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.config import RUNS
from uniform_herding.doctor import estimates, run_steps


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
    assert set(report["estimates"]["per_run_hours"]) == set(RUNS)


@pytest.mark.parametrize(("driver", "advice"), [
    ("550.144.03", "update the NVIDIA driver to 570.26 or newer"),  # the image's CUDA 12.8 base refuses it
    ("570.26", "use the image (docs/reproducing.md)"),  # torch 13.0 would need 580, the image's 12.8 runs
    ("575.57.08", "use the image (docs/reproducing.md)"),
])  # fmt: skip
def test_doctor_advises_the_image_only_for_a_driver_the_image_runs_on(driver, advice, tmp_path, monkeypatch):
    """A driver that torch cannot use: below CUDA 12.8's 570.26 the image does not even start, so the
    advice is a newer driver, not the image."""
    from uniform_herding import devices
    from uniform_herding.config import resolve
    from uniform_herding.doctor import check_environment

    monkeypatch.setattr(devices, "driver_version", lambda: driver)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    lines = check_environment(tmp_path / "d", tmp_path / "r", resolve("B3", "smoke"))
    (gpu,) = [line for line in lines if line.what == "gpu"]
    assert gpu.status == "FAIL" and f"an NVIDIA driver {driver} is present" in gpu.detail
    assert advice in gpu.detail
    assert ("use the image" in gpu.detail) == advice.startswith("use the image")


def test_doctor_fails_when_the_gpu_path_diverges(tmp_path, monkeypatch, uninitialised_memory_is_nan):
    """torch's fused SGD as it is, without the zero-filled momentum buffers: the self-test fails, exit 1."""
    from uniform_herding import train

    monkeypatch.setattr(train, "sgd", lambda cfg, params, fused: torch.optim.SGD(
        params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay, fused=fused or None))
    res = CliRunner().invoke(main, ["doctor", "--profile", "smoke", "--steps", "4", "--data-dir", str(tmp_path / "d"),
                                    "--results-dir", str(tmp_path / "r")])  # fmt: skip
    assert res.exit_code == 1
    assert "FAIL  self-test    weights not finite (ours False, reference True)" in res.output
    assert "\nuh doctor: FAIL: self-test (report: " in res.output
    report = json.loads((tmp_path / "r" / "doctor.json").read_text())
    assert not report["passed"] and report["selftest"]["max_weight_diff"] is None  # NaN: null in JSON


def test_estimate_arithmetic_on_the_paper_profile():
    """B3: 36 steps x 70 epochs per task; task 0 has 128 images and no teacher (3 units per image), tasks
    1-9 have 128 + 64 and a teacher (4 units). At 1 s per B3 step: 2520 * (128*3/768) + 9 * 2520 s."""
    assert run_steps(__import__("uniform_herding.config").config.resolve("B3"))[:2] == [(2520, 128, False),
                                                                                     (2520, 192, True)]
    est = estimates(1.0, "paper", cuda=True, cores=16)
    assert est["per_run_hours"]["B3"] == pytest.approx((2520 * 0.5 + 9 * 2520) / 3600)
    assert est["per_run_hours"]["B0"] == pytest.approx(10 * 2520 * 0.5 / 3600)  # 128 images, no teacher
    assert est["all_hours_with_jobs"] == pytest.approx(est["all_hours"] / 3)
    from uniform_herding.config import PAPER_RUNS  # `all`: the paper's twelve, not r1-r3

    assert est["all_hours"] == pytest.approx(3 * sum(est["per_run_hours"][r] for r in PAPER_RUNS))


@pytest.mark.parametrize(("variable", "value", "message"), [
    ("UH_CPU_THREADS", "two", "UH_CPU_THREADS='two' is not a thread count; set an integer >= 1"),
    ("UH_COMPILE", "fast", "UH_COMPILE='fast' is not a setting; use 0, 1, reduce-overhead, max-autotune"),
])  # fmt: skip
def test_a_bad_setting_in_the_environment_is_one_line_before_any_check(variable, value, message, tmp_path,
                                                                      monkeypatch):  # fmt: skip
    monkeypatch.setenv(variable, value)
    res = CliRunner().invoke(main, ["doctor", "--profile", "smoke", "--data-dir", str(tmp_path / "d"),
                                    "--results-dir", str(tmp_path / "r")])  # fmt: skip
    assert res.exit_code == 1 and res.output.startswith(f"Error: {message}") and res.output.count("\n") == 1
    assert not (tmp_path / "r").exists()
