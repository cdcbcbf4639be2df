"""Which device a run trains on (`--device auto|cuda|cpu`, env UH_DEVICE), and why a GPU is not usable.

`auto` takes the profile's own device (catalogue.PROFILE_DEVICE): the GPU for the paper-size profiles
when one is usable, the CPU for the small profiles whose expectations were made on a CPU. A
paper-size profile with no usable GPU is refused at once, with the reason, instead of training
for days on one CPU thread; `--device cpu` insists. "Usable" means torch sees the GPU and this torch
build has kernels for its compute capability (the paper's cu128 build: 7.5 and up, so no V100).
"""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import torch

from uniform_herding.catalogue import PROFILE_DEVICE
from uniform_herding.method.config import DEVICES, NUMERIC_DEFAULTS

# The NVIDIA driver each CUDA major.minor needs on Linux (NVIDIA's CUDA release notes, table 3).
MIN_DRIVER = {"12.8": "570.26", "13.0": "580.65.06"}


class DeviceError(ValueError):
    """The requested device cannot run: one line with the reason and what to do."""


def driver_version(proc: Path = Path("/proc/driver/nvidia/version")) -> str | None:
    """The NVIDIA kernel driver's version, or None where there is no NVIDIA driver (read without torch)."""
    try:
        text = proc.read_text()
    except OSError:
        text = ""
    if match := re.search(r"Kernel Module\s+(?:for \S+\s+)?([\d.]+)", text):
        return match.group(1)
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    if out.returncode != 0:
        return None
    return out.stdout.split("\n")[0].strip() or None


def compute_modes() -> list[str]:
    """Each visible GPU's compute mode as nvidia-smi says it ("Default", "Exclusive_Process", ...); [] without it.
    In Exclusive_Process mode a second process cannot use the GPU: `--jobs N` > 1 then fails."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-gpu=compute_mode", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()] if out.returncode == 0 else []


def arch_supported(capability: tuple[int, int], arch_list: list[str]) -> bool:
    """Whether a build with these kernels runs on a GPU of this compute capability: a cubin for sm_XY
    runs on X.Y' with Y' >= Y (same major), PTX for compute_XY on any capability >= X.Y."""
    major, minor = capability
    for arch in arch_list:
        kind, _, number = arch.partition("_")
        if not number.isdigit():
            continue
        a_major, a_minor = int(number[:-1]), int(number[-1])
        if kind == "sm" and a_major == major and a_minor <= minor:
            return True
        if kind == "compute" and (a_major, a_minor) <= (major, minor):
            return True
    return False


def gpu_problem() -> str | None:
    """Why this process cannot train on a GPU, or None when it can."""
    if not torch.cuda.is_available():
        driver = driver_version()
        if driver is None:
            return "no NVIDIA GPU is visible (no driver found)"
        need = MIN_DRIVER.get(str(torch.version.cuda))
        return (
            f"an NVIDIA driver {driver} is present but torch {torch.__version__} (CUDA {torch.version.cuda}) "
            f"cannot use it" + (f": it needs driver >= {need}" if need else "")
        )
    capability = torch.cuda.get_device_capability()
    arch_list = torch.cuda.get_arch_list()
    if arch_list and not arch_supported(capability, arch_list):  # an empty list: a build that does not say
        name = torch.cuda.get_device_name()
        return (
            f"{name} (compute capability {capability[0]}.{capability[1]}) has no kernels in torch "
            f"{torch.__version__}, built for {' '.join(arch_list)}: the paper's CUDA 12.8 build needs 7.5 or newer"
        )
    return None


def requested(device: str | None) -> str:
    """--device, else UH_DEVICE, else auto; checked."""
    device = device or os.environ.get("UH_DEVICE") or "auto"
    if device not in DEVICES:
        raise DeviceError(f"UH_DEVICE={device!r} is not a device; use {', '.join(DEVICES)}")
    return device


def wanted(device: str | None, profile: str) -> str:
    """The device type a run of `profile` asks for ("cuda" or "cpu"), before asking whether it is usable:
    what a Slurm submission requests for its jobs (a login node's own GPU does not matter)."""
    device = requested(device)
    return PROFILE_DEVICE[profile] if device == "auto" else device


def select(device: str | None, profile: str) -> torch.device:
    """The run's device for `--device` (None: UH_DEVICE, else auto) and `profile`; on the CPU the fixed
    thread count is set, on the GPU fp32 convolutions without TF32. Raises DeviceError, before anything is
    written, when it cannot run."""
    want = wanted(device, profile)
    if want == "cuda":
        if problem := gpu_problem():
            if requested(device) == "cuda":
                raise DeviceError(f"--device cuda: {problem}; run on a host whose GPU torch can use")
            raise DeviceError(
                f"profile {profile!r} trains at the paper's size, which takes days on a CPU, and {problem}; "
                "run it on a GPU host (docs/reproducing.md, `uh doctor`), or insist with --device cpu"
            )
        # fp32 work outside autocast (evaluation, herding and imprint features) in IEEE fp32, as on the paper's
        # T4, which has no TF32: torch's default runs fp32 convolutions in TF32 on Ampere and later GPUs
        torch.backends.cudnn.allow_tf32 = False
        return torch.device("cuda")
    torch.set_num_threads(cpu_threads())
    return torch.device("cpu")


def cpu_threads() -> int:
    """UH_CPU_THREADS (default 1), checked: a bad value fails before anything is read or written.

    A CPU run's numbers depend on its thread count (reductions split differently), so the count is
    fixed rather than taken from the machine: the same seed gives the same result on any machine of one CPU kind.
    """
    value = os.environ.get("UH_CPU_THREADS", str(NUMERIC_DEFAULTS["cpu"]["cpu_threads"]))
    if not value.strip().isdigit() or int(value) < 1:
        raise ValueError(f"UH_CPU_THREADS={value!r} is not a thread count; set an integer >= 1 (default 1)")
    return int(value)


def deterministic_algorithms(on: bool) -> None:
    """`--deterministic`: torch's deterministic algorithms (and cuBLAS's fixed workspace) so that two
    GPU runs of one seed agree bitwise; slower. A CPU run is deterministic without it."""
    if on:
        os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(on)
    torch.backends.cudnn.benchmark = False


def peak_gpu_memory_gb(device: torch.device) -> float | None:
    """The most GPU memory torch has allocated in this process, in GB; None on a CPU."""
    return torch.cuda.max_memory_allocated(device) / 1e9 if device.type == "cuda" else None
