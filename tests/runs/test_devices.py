"""Which device a run trains on: --device auto|cuda|cpu, a paper-size run refused on a CPU, GPU usability."""

import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from uniform_herding.catalogue import PROFILE_DEVICE, PROFILES
from uniform_herding.cli import main
from uniform_herding.runs import devices

CU128 = ["sm_75", "sm_80", "sm_86", "sm_90", "sm_100", "sm_120", "compute_120"]  # the paper's build


@pytest.mark.parametrize(
    ("gpu", "capability", "usable"),
    [
        ("V100", (7, 0), False),
        ("T4", (7, 5), True),
        ("A100", (8, 0), True),
        ("L40S", (8, 9), True),
        ("H100", (9, 0), True),
        ("a later major, through PTX", (13, 0), True),
        ("P100", (6, 0), False),
    ],
)
def test_which_gpus_the_papers_cu128_build_runs_on(gpu, capability, usable):
    """A cubin for sm_XY runs on X.Y' with Y' >= Y; PTX (compute_XY) on any later capability."""
    assert devices.arch_supported(capability, CU128) is usable


def test_a_build_without_ptx_does_not_run_on_a_later_major():
    assert not devices.arch_supported((10, 0), ["sm_80", "sm_90"])


def test_every_profile_says_where_it_runs():
    assert set(PROFILE_DEVICE) == set(PROFILES)
    assert PROFILE_DEVICE["paper"] == PROFILE_DEVICE["cifar10"] == "cuda" and PROFILE_DEVICE["smoke"] == "cpu"


@pytest.fixture
def usable_gpu(monkeypatch):
    """A host where torch can use a GPU (nothing runs on it in these tests); select's TF32 setting is undone after."""
    monkeypatch.setattr(devices, "gpu_problem", lambda: None)
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", torch.backends.cudnn.allow_tf32)


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(devices, "gpu_problem", lambda: "no NVIDIA GPU is visible (no driver found)")


def test_auto_takes_the_gpu_for_the_paper_and_the_cpu_for_the_smoke(usable_gpu, monkeypatch):
    monkeypatch.delenv("UH_DEVICE")
    assert devices.select(None, "paper").type == "cuda"
    assert devices.select(None, "smoke").type == "cpu"  # its expected results are a CPU's
    assert devices.select("cuda", "smoke").type == "cuda"  # insisted on


def test_on_the_gpu_fp32_convolutions_are_ieee_not_tf32(usable_gpu, monkeypatch):
    """torch runs fp32 convolutions in TF32 by default on Ampere and later; the paper's T4 has no TF32, so the
    fp32 work outside autocast (evaluation, herding, imprint) must not either."""
    monkeypatch.setattr(torch.backends.cudnn, "allow_tf32", True)  # torch's default, restored after the test
    assert devices.select("cuda", "paper").type == "cuda"
    assert torch.backends.cudnn.allow_tf32 is False and torch.backends.cuda.matmul.allow_tf32 is False


def test_auto_refuses_a_paper_size_profile_without_a_usable_gpu(no_gpu, monkeypatch):
    monkeypatch.delenv("UH_DEVICE")
    for profile in ("paper", "cifar10"):
        with pytest.raises(devices.DeviceError, match="or insist with --device cpu") as e:
            devices.select(None, profile)
        assert "no NVIDIA GPU is visible" in str(e.value) and "\n" not in str(e.value)
    assert devices.select("cpu", "paper").type == "cpu"
    with pytest.raises(devices.DeviceError, match=r"^--device cuda: no NVIDIA GPU is visible"):
        devices.select("cuda", "smoke")
    monkeypatch.setenv("UH_DEVICE", "gpu")
    with pytest.raises(devices.DeviceError, match="UH_DEVICE='gpu' is not a device; use auto, cuda, cpu"):
        devices.select(None, "smoke")


def test_a_driver_too_old_for_torch_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "driver_version", lambda: "535.104.05")
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    problem = devices.gpu_problem()
    assert "an NVIDIA driver 535.104.05 is present but torch" in problem and "needs driver >= 580.65.06" in problem


def test_a_gpu_without_kernels_in_this_build_is_named(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda device=None: (7, 0))
    monkeypatch.setattr(torch.cuda, "get_arch_list", lambda: CU128)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda device=None: "Tesla V100-SXM2-32GB")
    problem = devices.gpu_problem()
    assert problem.startswith("Tesla V100-SXM2-32GB (compute capability 7.0) has no kernels in torch")
    assert "needs 7.5 or newer" in problem


def test_the_driver_version_is_read_from_the_kernel_module(tmp_path):
    proc = tmp_path / "version"
    proc.write_text(
        "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.15  Tue Mar  5 22:23:56 UTC 2024\n"
        "GCC version:  gcc version 12.2.0 (Debian 12.2.0-14)\n"
    )
    assert devices.driver_version(proc) == "550.54.15"


@pytest.mark.slow
def test_uh_run_of_the_paper_profile_on_this_cpu_refuses_at_once_and_writes_nothing(tmp_path):
    """The reviewer's `uh run B3` on a host where torch sees no GPU: one line naming --device cpu, exit 1,
    no file (the data dir and results dir stay empty), instead of days of training on one thread."""
    if devices.gpu_problem() is None:
        pytest.skip("this host has a usable GPU")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "uniform_herding",
            "run",
            "B3",
            "--data-dir",
            str(tmp_path / "d"),
            "--results-dir",
            str(tmp_path / "r"),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 1, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: profile 'paper' trains at the paper's size"), lines
    assert "insist with --device cpu" in lines[0]
    assert not any(tmp_path.glob("[dr]/**/*")) and not (tmp_path / "r").exists()


def test_uh_run_device_cuda_without_a_gpu_is_one_line(no_gpu, tmp_path):
    res = CliRunner().invoke(
        main,
        [
            "run",
            "B0",
            "--profile",
            "smoke",
            "--device",
            "cuda",
            "--results-dir",
            str(tmp_path / "r"),
            "--data-dir",
            str(tmp_path / "d"),
        ],
    )
    assert res.exit_code == 1
    assert (
        res.output.strip() == "Error: --device cuda: no NVIDIA GPU is visible (no driver found); run on a host "
        "whose GPU torch can use"
    )
    assert not (tmp_path / "r").exists() and not (tmp_path / "d").exists()


def test_doctor_fails_where_torch_cannot_use_the_hosts_gpu(monkeypatch, tmp_path):
    """A driver too old for torch's CUDA: the GPU is there but unusable; the doctor says so and exits 1."""
    monkeypatch.delenv("UH_DEVICE")  # auto, as a reviewer runs it
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(devices, "driver_version", lambda proc=None: "535.104.05")
    res = CliRunner().invoke(main, ["doctor", "--data-dir", str(tmp_path / "d"), "--results-dir", str(tmp_path / "r")])
    assert res.exit_code == 1
    assert "PASS  driver       NVIDIA 535.104.05" in res.output
    assert "FAIL  gpu          an NVIDIA driver 535.104.05 is present but torch" in res.output
    assert "FAIL  device       profile 'paper' trains at the paper's size" in res.output
    assert res.output.rstrip().endswith("uh doctor: FAIL: device")


def test_doctor_warns_of_exclusive_process_mode_with_jobs(monkeypatch, tmp_path):
    """--jobs 2 on a GPU in Exclusive_Process mode: the second process would fail; the doctor FAILs first."""
    from uniform_herding.catalogue import resolve
    from uniform_herding.doctor.preflight import check_environment

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(devices, "gpu_problem", lambda: None)
    monkeypatch.setattr(devices, "driver_version", lambda proc=None: "570.86.15")
    monkeypatch.setattr(devices, "compute_modes", lambda: ["Exclusive_Process"])
    monkeypatch.setattr(torch.backends.cudnn, "version", lambda: 91900)
    props = type("Props", (), {"name": "NVIDIA H100", "total_memory": 80 * 2**30, "major": 9, "minor": 0})
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda device=None: props)
    cfg = resolve("B3", "smoke")
    lines = {line.what: line for line in check_environment(tmp_path / "d", tmp_path / "r", cfg, jobs=2)}
    assert lines["compute mode"].status == "FAIL" and "--jobs 2 fails" in lines["compute mode"].detail
    assert lines["gpu"].status == "PASS" and "compute capability 9.0" in lines["gpu"].detail
    assert "compute mode" not in {line.what for line in check_environment(tmp_path / "d", tmp_path / "r", cfg, jobs=1)}
