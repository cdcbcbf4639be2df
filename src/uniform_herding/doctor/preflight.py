"""`uh doctor`: the preflight a reviewer runs first, minutes before 39 GPU-hours.

Three parts, each printed as PASS / WARN / FAIL lines and written to a JSON report:
  environment  Python, torch, CUDA, cuDNN and Lightning against the paper's pins (App. A), the GPU,
               the archive (md5), free disk, writable data and results directories;
  self-test    selftest.compare: the fp16 GPU path against Lightning's stock "16-mixed" path, step by
               step, overflows forced (paper size on a GPU; width 8 on a CPU, said so);
  timing       timing.py: a training step and what a run does besides, measured, and from them every run ID's
               estimated time and `all`'s (and on the paper profile the whole procedure's).
Exit status 0 when nothing FAILs (WARNs allowed), 1 otherwise.
"""

from __future__ import annotations

import math
import platform
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from uniform_herding.catalogue import resolve
from uniform_herding.doctor.timing import time_runs, timing_detail
from uniform_herding.errors import UhError
from uniform_herding.method.config import Config
from uniform_herding.runs.terminal import HEARTBEAT_S, Progress

if TYPE_CHECKING:
    import torch

PAPER_PINS = {"python": "3.12", "torch": "2.11.0", "cuda": "12.8", "lightning": "2.6.5"}  # App. A
MIN_FREE_GB = 2.0  # the archive (0.17 GB), checkpoints (~45 MB per run in flight), results and reports
CPU_SELFTEST_WIDTH = 8  # fp16 convolutions have no fast CPU kernel: 10-60 s per paper-size step


class BadSetting(UhError):
    """A setting in the environment the runs would refuse (UH_COMPILE, UH_CPU_THREADS), refused in one line before
    any check runs; exit 2, bad input, as uh run refuses it (exit 1 is a FAIL the doctor found)."""


@dataclass
class Line:
    status: str  # PASS, WARN or FAIL
    what: str
    detail: str

    def __str__(self) -> str:
        return f"{self.status:4}  {self.what:12} {self.detail}"


@dataclass(frozen=True)
class Outcome:
    """What the preflight decided: the lines that FAILed (none: go), and where its report is (None: none was
    written, there being no device to test)."""

    failed: list[Line]
    report: Path | None


def check_environment(data_dir: Path, results_dir: Path, cfg: Config, jobs: int | None = None) -> list[Line]:
    """The environment's lines, in the order printed: the versions against the paper's pins, the driver and the GPU,
    the archive, and the data and results directories."""
    folders = (("data dir", data_dir), ("results dir", results_dir))
    return [*version_lines(), *gpu_lines(jobs), archive_line(cfg, data_dir), *(folder_line(*f) for f in folders)]


def pin(what: str, found: str, want: str, matches: bool) -> Line:
    """A version against the paper's: PASS where it matches, else WARN with the paper's."""
    return Line("PASS" if matches else "WARN", what, f"{found}" + ("" if matches else f" (paper: {want})"))


def version_lines() -> list[Line]:
    """Python, torch and Lightning against the paper's pins (App. A)."""
    import lightning
    import torch

    python = platform.python_version()
    return [
        pin("python", python, PAPER_PINS["python"], python.startswith("3.12")),
        pin("torch", torch.__version__, PAPER_PINS["torch"], torch.__version__.split("+")[0] == PAPER_PINS["torch"]),
        pin(
            "lightning",
            lightning.__version__,
            PAPER_PINS["lightning"],
            lightning.__version__ == PAPER_PINS["lightning"],
        ),
    ]


def gpu_lines(jobs: int | None) -> list[Line]:
    """The NVIDIA driver where there is one; the GPU torch sees (CUDA, cuDNN, its name, memory and compute
    capability), or why it cannot use it and what to do, or that this is a CPU; and the compute mode where `jobs`
    runs would share it."""
    import torch

    from uniform_herding.runs.devices import MIN_DRIVER, driver_version, gpu_problem

    driver, problem, lines = driver_version(), gpu_problem(), []
    if driver is not None:
        need = MIN_DRIVER.get(str(torch.version.cuda))
        needs = f" (torch's CUDA {torch.version.cuda} needs >= {need})" if need else ""
        lines.append(Line("PASS", "driver", f"NVIDIA {driver}{needs}"))
    if torch.cuda.is_available():
        return [*lines, *cuda_lines(problem, jobs)]
    if driver is not None:
        return [*lines, Line("FAIL", "gpu", f"{problem}; {driver_advice(driver, MIN_DRIVER[PAPER_PINS['cuda']])}")]
    return [*lines, Line("WARN", "gpu", "none: this is a CPU; the paper's runs need a GPU (docs/reproducing.md)")]


def cuda_lines(problem: str | None, jobs: int | None) -> list[Line]:
    """The GPU torch sees: CUDA against the paper's, cuDNN, the GPU (FAIL with `problem`, gpu_problem's), and a
    FAIL where `jobs` runs would share a GPU in Exclusive_Process mode."""
    import torch

    from uniform_herding.runs.devices import compute_modes

    props = torch.cuda.get_device_properties(0)
    gpu = f"{props.name}, {props.total_memory / 2**30:.1f} GiB, compute capability {props.major}.{props.minor}"
    lines = [
        pin("cuda", str(torch.version.cuda), PAPER_PINS["cuda"], torch.version.cuda == PAPER_PINS["cuda"]),
        Line("PASS", "cudnn", str(torch.backends.cudnn.version())),
        Line("FAIL" if problem else "PASS", "gpu", problem or gpu),
    ]
    if jobs and jobs > 1 and "Exclusive_Process" in compute_modes():
        one = f"the GPU is in Exclusive_Process mode: one process at a time, so --jobs {jobs} fails"
        lines.append(Line("FAIL", "compute mode", f"{one}; use --jobs 1 or ask for the Default mode"))
    return lines


def driver_advice(driver: str, image_driver: str) -> str:
    """What to do where torch cannot use the GPU of this NVIDIA driver. The image is the answer only for a
    driver of at least `image_driver`, its CUDA 12.8's: below it the NVIDIA runtime refuses to start the
    image, bar forward compatibility on data-centre GPUs (docs/reproducing.md, "An NVIDIA driver older
    than R570")."""

    def version(text: str) -> tuple[int, ...]:
        return tuple(int(n) for n in text.split(".") if n.isdigit())

    if version(driver) < version(image_driver):
        return (
            f"update the NVIDIA driver to {image_driver} or newer (the image's CUDA 12.8 needs it: docs/reproducing.md)"
        )
    return "use the image (docs/reproducing.md) or a torch build for this driver"


def archive_line(cfg: Config, data_dir: Path) -> Line:
    """The profile's archive: synthetic (written on first use), absent (uh run downloads it), or verified by md5."""
    from uniform_herding.data.archive import DATASETS, DataError, locate_archive

    dataset = "cifar100" if cfg.dataset == "synthetic" else cfg.dataset
    spec = DATASETS[dataset]
    if cfg.dataset == "synthetic":
        return Line("PASS", "archive", "synthetic (written by uh on first use)")
    if not (data_dir / spec.filename).exists():
        offline = f"offline, put the official file (md5 {spec.md5}) there"
        return Line("WARN", "archive", f"{data_dir / spec.filename} absent: `uh run` downloads it; {offline}")
    try:
        path, md5 = locate_archive(dataset, data_dir, download=False)
    except DataError as e:
        return Line("FAIL", "archive", str(e))
    return Line("PASS", "archive", f"{path}, md5 {md5} verified")


def folder_line(what: str, folder: Path) -> Line:
    """A directory the runs write to: created where absent, writable, and with MIN_FREE_GB free (else WARN)."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
            pass
        free = shutil.disk_usage(folder).free / 2**30
    except OSError as e:
        return Line("FAIL", what, f"{folder} not writable ({e.strerror or e}); choose another directory")
    ok = free >= MIN_FREE_GB
    return Line(
        "PASS" if ok else "WARN",
        what,
        f"{folder} writable, {free:.1f} GB free" + ("" if ok else f" (< {MIN_FREE_GB} GB)"),
    )


def check_selftest(device, steps: int) -> tuple[Line, dict]:
    """The self-test's line and its part of the report: `steps` fp16 steps through our path and Lightning's
    (selftest.compare), at the paper's width on a GPU and CPU_SELFTEST_WIDTH on a CPU."""
    from uniform_herding.runs import selftest

    width = 64 if device.type == "cuda" else CPU_SELFTEST_WIDTH
    size = "paper size (width 64)" if width == 64 else f"CPU size (width {width}; the paper's is 64)"
    what = f"self-test: {steps} fp16 steps through our path, then Lightning's, at width {width}"
    with Progress(what, total=2 * steps, every=HEARTBEAT_S) as progress:
        c = selftest.compare(device, width=width, steps=steps, progress=progress)
    failures = c.failures()
    detail = (
        f"{steps} steps at {size}, batch 128 + 64 replayed, scale from 2^16, overflows forced at "
        f"{list(c.overflow_at)}: skipped {c.ours.skipped} (reference {c.reference.skipped}), max weight "
        f"difference {c.max_weight_diff:.2g} (tolerance {c.tolerance:.2g})"
    )

    def number(x: float) -> float | None:  # JSON has no NaN or inf: a diverged path records null
        return x if math.isfinite(x) else None

    report = {
        "width": width,
        "steps": steps,
        "failures": failures,
        "scales": c.ours.scales,
        "reference_scales": c.reference.scales,
        "skipped": c.ours.skipped,
        "max_weight_diff": number(c.max_weight_diff),
        "tolerance": number(c.tolerance),
    }
    return Line("FAIL" if failures else "PASS", "self-test", "; ".join(failures) or detail), report


def environment(
    cfg: Config, data_dir: Path, results_dir: Path, device: str | None, profile: str, jobs: int | None
) -> tuple[list[Line], torch.device | Line]:
    """The environment's lines, and the device the runs would train on, or the FAIL line that says why none can.
    The settings the runs read (UH_COMPILE, UH_CPU_THREADS) first: a bad one is refused before any check runs."""
    from uniform_herding.method.engine import compile_mode
    from uniform_herding.runs.devices import DeviceError, cpu_threads, select

    try:
        compile_mode(), cpu_threads()
    except ValueError as e:
        raise BadSetting(str(e)) from None
    lines = check_environment(data_dir, results_dir, cfg, jobs)
    try:
        return lines, select(device, profile)
    except DeviceError as e:
        return lines, Line("FAIL", "device", str(e))


def preflight(
    profile: str,
    data_dir: Path,
    results_dir: Path,
    precision: str | None,
    device: str | None,
    jobs: int | None,
    steps: int,
    json_path: Path | None,
    say: Callable[[str], None],
) -> Outcome:
    """The environment, the self-test and the timing, each line said (`say`) as it is decided, then the JSON report
    written (RESULTS_DIR/doctor.json unless `json_path`). Without a device to test, the environment's lines and why,
    and no report."""
    cfg = resolve("B3", profile)
    with Progress("environment: Python, torch, Lightning, the GPU, the archive, the disk", every=HEARTBEAT_S):
        lines, chosen = environment(cfg, data_dir, results_dir, device, profile, jobs)  # torch's import: seconds
    if isinstance(chosen, Line):
        for line in [*lines, chosen]:
            say(str(line))
        return Outcome([chosen], None)
    from uniform_herding.method.engine import precision as run_precision  # torch: imported above, in the progress

    precision = run_precision(chosen, precision)
    if chosen.type == "cpu":
        say(cpu_note())
    for line in lines:
        say(str(line))
    selftest_line, selftest_report = check_selftest(chosen, steps)
    say(str(selftest_line))
    timed = time_and_say(chosen, precision, profile, data_dir, jobs, say)
    lines += [selftest_line, timed.line]
    report = report_of(lines, profile, str(chosen), precision, selftest_report, timed)
    return write_report(report, lines, json_path or results_dir / "doctor.json")


def cpu_note() -> str:
    """What a CPU's preflight leaves out, said first."""
    import torch

    return (
        f"uh doctor on a CPU ({torch.get_num_threads()} thread(s), UH_CPU_THREADS): the self-test runs "
        f"at width {CPU_SELFTEST_WIDTH}, not the paper's 64; a CPU cannot run the paper's fp16 path fast"
    )


@dataclass(frozen=True)
class Timed:
    """The preflight's timing: its line, and what the report records of it."""

    line: Line
    timing: dict[str, float | None]
    estimates: dict
    peak_gpu_memory_gb: float | None


def time_and_say(device, precision: str, profile: str, data_dir: Path, jobs: int | None, say) -> Timed:
    """The timing (timing.time_runs), its line (with the peak GPU memory of all that ran) and the estimates said."""
    from uniform_herding.runs.devices import peak_gpu_memory_gb

    timing, est, said = time_runs(device, precision, profile, data_dir, jobs)
    peak = peak_gpu_memory_gb(device)
    memory = "" if peak is None else f"; peak GPU memory {peak:.2f} GB"
    line = Line("PASS", "timing", timing_detail(timing, resolve("B3", profile), precision) + memory)
    for text in [str(line), *said]:
        say(text)
    return Timed(line, timing, est, peak)


def report_of(lines: list[Line], profile: str, device: str, precision: str, selftest: dict, timed: Timed) -> dict:
    """The JSON report (doctor.json): passed, every line, the self-test's, the timings and the estimates."""
    return {
        "passed": not any(line.status == "FAIL" for line in lines),
        "device": device,
        "precision": precision,
        "profile": profile,
        "lines": [asdict(line) for line in lines],
        "selftest": selftest,
        "step_seconds": timed.timing["step_s"],
        "timing": timed.timing,
        "estimates": timed.estimates,
        "peak_gpu_memory_gb": timed.peak_gpu_memory_gb,
        "command": " ".join(sys.argv),
    }


def write_report(report: dict, lines: list[Line], path: Path) -> Outcome:
    """Write the report atomically; the lines that FAILed, and a FAIL of its own where it cannot be written."""
    from uniform_herding.runs.results import write_json_atomic

    failed = [line for line in lines if line.status == "FAIL"]
    try:
        write_json_atomic(path, report)
    except OSError as e:
        failed.append(Line("FAIL", "report", f"cannot write {path} ({e.strerror or e})"))
    return Outcome(failed, path)
