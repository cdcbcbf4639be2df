"""`uh doctor`: the preflight a reviewer runs first, minutes before 39 GPU-hours.

Three parts, each printed as PASS / WARN / FAIL lines and written to a JSON report:
  environment  Python, torch, CUDA, cuDNN and Lightning against the paper's pins (App. A), the GPU,
               the archive (md5), free disk, writable data and results directories;
  self-test    selftest.compare: the fp16 GPU path against Lightning's stock "16-mixed" path, step by
               step, overflows forced (paper size on a GPU; width 8 on a CPU, said so);
  timing       the measured time of a training step at the profile's size and the run's precision, and of
               what a run does besides (start-ups, feature passes, herding, checkpoints); from them the model
               of estimate.py gives every run ID's time and `all`'s, with and without --jobs; on the paper
               profile also for the whole procedure `all` follows (the 36 runs, then the claims' looks
               next_step asks for), mean and 90th percentile over uh oc's simulated faithful re-runs.
Exit status 0 when nothing FAILs (WARNs allowed), 1 otherwise.

`uh price`, from that timing (else, for a GPU, from the paper's T4 seconds), says what `./reproduce.sh all` will
cost before it starts, and refuses a machine that cannot train the profile once rather than at every run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import platform
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import click
import pandas as pd

from uniform_herding.catalogue import PAPER_RUNS, PROFILES, resolve
from uniform_herding.estimate import estimates, price, procedure_seconds
from uniform_herding.method.config import DEVICES, SEEDS, TRAINING_ENVIRONMENT, Config
from uniform_herding.runs.terminal import HEARTBEAT_S, Progress, columns, duration, fit_line

PAPER_PINS = {"python": "3.12", "torch": "2.11.0", "cuda": "12.8", "lightning": "2.6.5"}  # App. A
MIN_FREE_GB = 2.0  # the archive (0.17 GB), checkpoints (~45 MB per run in flight), results and reports
CPU_SELFTEST_WIDTH = 8  # fp16 convolutions have no fast CPU kernel: 10-60 s per paper-size step
TIMING_STEPS = {"cpu": 3, "cuda": 30}  # the timed fit's fewest steps beyond the one-step fit it is compared with:
# on a GPU a step lasts ~20 ms, and 3 of them read 26.9 ms on an H200 where bench's 108 read 18.41 ms
MIN_TIMED_S, MAX_TIMING_STEPS = 2.0, 30  # more steps where the fewest take under 2 s: a smoke step on a shared CPU
# read 66 ms, then 156 ms minutes later (benchmarks/RESULTS.md, "The rest of a run"); 3 steps sampled one moment
STEP_ONLY_TIMEOUT_S = 900  # a timing process's start, warm-up or timing, at most


@dataclass
class Line:
    status: str  # PASS, WARN or FAIL
    what: str
    detail: str


def check_environment(data_dir: Path, results_dir: Path, cfg: Config, jobs: int | None = None) -> list[Line]:
    import lightning
    import torch

    from uniform_herding.data.archive import DATASETS, DataError, locate_archive
    from uniform_herding.runs.devices import MIN_DRIVER, compute_modes, driver_version, gpu_problem

    lines = []

    def pin(what: str, found: str, want: str, matches: bool) -> None:
        lines.append(Line("PASS" if matches else "WARN", what, f"{found}" + ("" if matches else f" (paper: {want})")))

    pin("python", platform.python_version(), PAPER_PINS["python"], platform.python_version().startswith("3.12"))
    pin("torch", torch.__version__, PAPER_PINS["torch"], torch.__version__.split("+")[0] == PAPER_PINS["torch"])
    pin("lightning", lightning.__version__, PAPER_PINS["lightning"], lightning.__version__ == PAPER_PINS["lightning"])
    driver, problem = driver_version(), gpu_problem()
    if driver is not None:
        need = MIN_DRIVER.get(str(torch.version.cuda))
        lines.append(
            Line(
                "PASS",
                "driver",
                f"NVIDIA {driver}" + (f" (torch's CUDA {torch.version.cuda} needs >= {need})" if need else ""),
            )
        )
    if torch.cuda.is_available():
        pin("cuda", str(torch.version.cuda), PAPER_PINS["cuda"], torch.version.cuda == PAPER_PINS["cuda"])
        lines.append(Line("PASS", "cudnn", str(torch.backends.cudnn.version())))
        props = torch.cuda.get_device_properties(0)
        lines.append(
            Line(
                "FAIL" if problem else "PASS",
                "gpu",
                problem
                or f"{props.name}, {props.total_memory / 2**30:.1f} GiB, compute capability "
                f"{props.major}.{props.minor}",
            )
        )
        if jobs and jobs > 1 and "Exclusive_Process" in compute_modes():
            lines.append(
                Line(
                    "FAIL",
                    "compute mode",
                    f"the GPU is in Exclusive_Process mode: one process at a "
                    f"time, so --jobs {jobs} fails; use --jobs 1 or ask for the Default mode",
                )
            )
    elif driver is not None:
        lines.append(Line("FAIL", "gpu", f"{problem}; {driver_advice(driver, MIN_DRIVER[PAPER_PINS['cuda']])}"))
    else:
        lines.append(Line("WARN", "gpu", "none: this is a CPU; the paper's runs need a GPU (docs/reproducing.md)"))

    dataset = "cifar100" if cfg.dataset == "synthetic" else cfg.dataset
    spec = DATASETS[dataset]
    if cfg.dataset == "synthetic":
        lines.append(Line("PASS", "archive", "synthetic (written by uh on first use)"))
    elif not (data_dir / spec.filename).exists():
        lines.append(
            Line(
                "WARN",
                "archive",
                f"{data_dir / spec.filename} absent: `uh run` downloads it; "
                f"offline, put the official file (md5 {spec.md5}) there",
            )
        )
    else:
        try:
            path, md5 = locate_archive(dataset, data_dir, download=False)
            lines.append(Line("PASS", "archive", f"{path}, md5 {md5} verified"))
        except DataError as e:
            lines.append(Line("FAIL", "archive", str(e)))

    for what, folder in (("data dir", data_dir), ("results dir", results_dir)):
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=folder, prefix=".doctor-"):
                pass
            free = shutil.disk_usage(folder).free / 2**30
            ok = free >= MIN_FREE_GB
            lines.append(
                Line(
                    "PASS" if ok else "WARN",
                    what,
                    f"{folder} writable, {free:.1f} GB free" + ("" if ok else f" (< {MIN_FREE_GB} GB)"),
                )
            )
        except OSError as e:
            lines.append(Line("FAIL", what, f"{folder} not writable ({e.strerror or e}); choose another directory"))
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


def check_selftest(device, steps: int) -> tuple[Line, dict]:
    from uniform_herding.runs import selftest

    width = 64 if device.type == "cuda" else CPU_SELFTEST_WIDTH
    size = "paper size (width 64)" if width == 64 else f"CPU size (width {width}; the paper's is 64)"
    with Progress(
        f"self-test: {steps} fp16 steps through our path, then Lightning's, at width {width}",
        total=2 * steps,
        every=HEARTBEAT_S,
    ) as progress:
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


def step_seconds(
    device,
    precision: str,
    cfg: Config,
    steps: int,
    progress: Progress | None = None,
    ready: Callable[[], None] | None = None,
) -> tuple[float, float]:
    """Seconds per B3 training step (task 1: teacher, replay) at cfg's size and `precision`, from a fit of
    1 + n steps minus a fit of 1 step, after a warm-up fit of 1 (3 + n steps in all, each counted in `progress`
    where given, its total set once n is known): n is `steps`, or more (up to MAX_TIMING_STEPS) where the warm-up,
    an upper bound of a step, says that `steps` would take under MIN_TIMED_S. Also the seconds of a fit beyond its
    steps (its set-up: Fabric, the optimiser; and the read of its record, which every task pays once). `ready`,
    called after the warm-up, returns when the timing may start (jobs_speedup's processes start it together)."""
    import torch

    from uniform_herding.method.train import Watch, fit_task
    from uniform_herding.runs.selftest import task_one

    one_epoch = dataclasses.replace(cfg, epochs=1, train_per_class=None)
    stream, learner, teacher = task_one(one_epoch, max(steps, MAX_TIMING_STEPS) + 1, device)
    gen = torch.Generator(device=device).manual_seed(0)
    # A watched step runs eagerly (graph.why_eager): on CUDA, time the step a run replays and count whole fits.
    per_step = progress is not None and torch.device(device).type != "cuda"
    watch = Watch(after_step=lambda scaler: progress.advance()) if per_step else None

    def fit(n: int) -> float:
        tic = time.perf_counter()
        items = stream.train_items(1)[: n * cfg.batch_size]
        fit_task(one_epoch, learner, teacher, stream, stream.train_items(0), items, gen, precision, watch=watch)
        seconds = time.perf_counter() - tic  # fit_task read its stats: the device is synchronised
        if progress is not None and not per_step:
            progress.advance(n)
        return seconds

    warm = fit(1)  # warm-up: kernels, allocator
    steps = max(steps, min(MAX_TIMING_STEPS, math.ceil(MIN_TIMED_S / warm)))
    if progress is not None:
        progress.total = 3 + steps
    if ready is not None:
        ready()
    one = fit(1)
    step = max(fit(1 + steps) - one, 1e-9) / steps
    return step, max(one - step, 0.0)


def overhead_seconds(device, cfg: Config) -> dict[str, float]:
    """What a task does besides training steps, measured at cfg's size: the features of one image in
    evaluation batches (evaluation, prototypes, imprinting and refresh all embed images this way), one step of
    herding's selection loop (herding a new class's features down to task 0's quota, per exemplar chosen) and the
    writing of one checkpoint (the learner and as much again for the optimizer's momentum)."""
    import torch

    from uniform_herding.catalogue import images_per_class
    from uniform_herding.method.evaluate import features
    from uniform_herding.method.memory import herd, quotas
    from uniform_herding.runs.selftest import task_one

    stream, learner, _ = task_one(dataclasses.replace(cfg, epochs=1, train_per_class=None), 1, device)
    images = stream.train_x[: 2 * cfg.eval_batch_size]
    features(learner, stream, images, cfg.eval_batch_size)  # warm-up
    tic = time.perf_counter()
    feats = features(learner, stream, images, cfg.eval_batch_size)
    feats.sum().item()  # .item(): the device has finished
    feature_s = (time.perf_counter() - tic) / len(images)
    per_class = images_per_class(cfg)[0]
    pool = torch.randn(per_class, feats.shape[1], device=device, generator=torch.Generator(device).manual_seed(0))
    k = min(quotas(cfg.budget, cfg.classes_per_task)[0], per_class)
    herd(pool, 2).cpu()  # warm-up
    tic = time.perf_counter()
    herd(pool, k).cpu()  # .cpu(): the device has finished
    herd_step_s = (time.perf_counter() - tic) / k
    state = {"learner": learner.state_dict(), "momentum": [p.detach().clone() for p in learner.parameters()]}
    with tempfile.TemporaryDirectory() as tmp:
        tic = time.perf_counter()
        torch.save(state, Path(tmp) / "checkpoint.pt")
        checkpoint_s = time.perf_counter() - tic
    return {"feature_image_s": feature_s, "herd_step_s": herd_step_s, "checkpoint_s": checkpoint_s}


def run_startup_seconds(device, cfg: Config, data_dir: Path) -> float | None:
    """What a run does once before its first task: read and verify its archive in `data_dir` and put its tensors on
    the device (run_seed's load_data and TaskStream; the smoke profile's synthetic archive is written first, as by
    its first run). None where the archive is not there to read (`uh run` would download it)."""
    from uniform_herding.data.archive import DataError
    from uniform_herding.method.stream import TaskStream
    from uniform_herding.runs.run import load_data, prepare_archive

    try:
        prepare_archive(cfg, data_dir, None, download=False)
        tic = time.perf_counter()
        stream = TaskStream(load_data(cfg, data_dir, None, download=False), cfg, device)
        stream.train_x[:1].sum().item()  # .item(): the copy to the device has finished
    except DataError:
        return None
    return time.perf_counter() - tic


def launch_seconds() -> float:
    """Seconds a fresh process takes to import what a job of `uh run --jobs` imports (the run, Lightning,
    submitit): what each job pays before its run, which the runs' wall_s leave out."""
    import subprocess

    tic = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import submitit, uniform_herding.runs.run"], check=True)
    return time.perf_counter() - tic


def jobs_speedup(device, precision: str, cfg: Config, jobs: int, alone_s: float) -> tuple[float | None, str]:
    """The measured speed-up of `jobs` runs at once, and what it is: each of `jobs` processes (uh doctor
    --step-only) sets up and warms up, says so, and times a training step once all have (a GPU step lasts
    milliseconds, a process's start seconds: unsynchronised, the timings would not overlap and each would time a
    step alone). The speed-up is jobs x (step alone / mean step together); None, with the reason, where the
    processes fail or their timings did not overlap (said, never assumed)."""
    import subprocess
    import threading

    argv = [
        sys.executable,
        "-m",
        "uniform_herding",
        "doctor",
        "--step-only",
        "--profile",
        cfg_profile(cfg),
        "--precision",
        precision,
        "--device",
        device.type,
    ]
    procs = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(jobs)
    ]
    timer = threading.Timer(STEP_ONLY_TIMEOUT_S, lambda: [p.kill() for p in procs])  # a hung one ends its readline
    timer.start()
    try:
        for p in procs:  # each says "ready" after its warm-up (a line of its own; other output is skipped)
            while (line := p.stdout.readline()) != "ready\n":  # type: ignore[union-attr]
                if not line:
                    raise ValueError(f"one ended or hung before its warm-up, exit {p.wait()}")
        go = time.monotonic()
        for p in procs:  # then all start at once
            p.stdin.write("go\n")  # type: ignore[union-attr]
            p.stdin.flush()  # type: ignore[union-attr]
        windows = [tuple(map(float, p.communicate()[0].splitlines()[-1].split())) for p in procs]
        return together_speedup(windows, jobs, alone_s, go)
    except (ValueError, IndexError, BrokenPipeError) as e:
        for p in procs:
            p.kill()
        return None, f"the timing processes failed ({e})"
    finally:
        timer.cancel()


def together_speedup(
    windows: list[tuple[float, ...]], jobs: int, alone_s: float, go: float
) -> tuple[float | None, str]:
    """From each timing process's (start, end, seconds per step), on the system's monotonic clock: the speed-up,
    if every process started timing after the `go` and overlapped every other's timing (the latest start before
    the earliest end), and no step was faster in company than alone (on an H200, unsynchronised timings gave
    4.26x for 3 jobs)."""
    if len(windows) != jobs or any(len(w) != 3 for w in windows):
        return None, "the timing processes failed (no timing read)"
    if min(w[0] for w in windows) < go:
        return None, "a timing process started before the others were ready"
    if max(w[0] for w in windows) >= min(w[1] for w in windows):
        return None, f"the {jobs} processes' timings did not overlap"
    together = sum(w[2] for w in windows) / jobs
    if together < alone_s:  # sharing a device never speeds a step up: one of the timings is off
        return None, (
            f"a step took {1000 * together:.1f} ms with {jobs} at once, {1000 * alone_s:.1f} ms alone; "
            "run uh doctor again"
        )
    speedup = jobs * alone_s / together
    return speedup, f"measured speed-up {speedup:.2f}x"


def _procedure_runs_csv() -> Path | None:
    """expected_results/procedure_runs.csv (uh oc --runs-out), found as uh check finds the expected set."""
    from uniform_herding.verdict.expected import ExpectedError, find_expected_root

    try:
        path = find_expected_root([Path.cwd(), Path(__file__).resolve().parent]) / "procedure_runs.csv"
    except ExpectedError:
        return None
    return path if path.is_file() else None


def trains_on(device) -> tuple[str, str, str]:
    """The device the runs will train on (None: a Slurm node's), as the price names it, short and possessive: "this
    machine's CPU (AMD EPYC, AVX512)", "this CPU", "this CPU's"."""
    if device is None:
        return "the Slurm nodes' devices", "the nodes", "the nodes'"
    from uniform_herding.runs.run import device_name

    kind, _, name = device_name(device).partition(": ")
    model, _, detail = name.removesuffix(")").rpartition(" (")  # a CPU's model (its instruction set)
    kind = "GPU" if kind == "cuda" else "CPU"
    return f"this machine's {kind} ({f'{model}, {detail}' if model else name})", f"this {kind}", f"this {kind}'s"


def measure(device, precision: str, cfg: Config, data_dir: Path) -> dict[str, float | None]:
    """Every timing estimate.py's model reads, at cfg's size, each said as it starts (run_startup_s None: no archive
    to read)."""
    size = f"{cfg.batch_size}+{cfg.retrieval} images, width {cfg.width}, {precision}"
    timed = TIMING_STEPS[device.type]
    what = f"timing: a B3 training step ({size}), fits of 1, 1 and {1 + timed} or more steps"
    with Progress(what, total=3 + timed, every=HEARTBEAT_S) as progress:
        step_s, startup_s = step_seconds(device, precision, cfg, timed, progress)
    what = f"timing: the features of {2 * cfg.eval_batch_size} images, herding's selection, writing a checkpoint"
    with Progress(what, every=HEARTBEAT_S):
        timing = {"step_s": step_s, "startup_s": startup_s, **overhead_seconds(device, cfg)}
    with Progress("timing: a run's start-up (its archive read and put on the device)", every=HEARTBEAT_S):
        timing["run_startup_s"] = run_startup_seconds(device, cfg, data_dir)
    with Progress("timing: the start of a process (a fresh one importing a run)", every=HEARTBEAT_S):
        timing["launch_s"] = launch_seconds()
    return timing


def timing_detail(timing: dict[str, float | None], cfg: Config, precision: str) -> str:
    """The timing line: what was measured, per step, per task, per run and per process."""
    size = f"{cfg.batch_size}+{cfg.retrieval} images, width {cfg.width}, {precision}"
    run = timing["run_startup_s"]
    startup = "not timed (no archive to read)" if run is None else f"{run:.1f} s (its archive read onto the device)"
    return (
        f"{1000 * timing['step_s']:.1f} ms per B3 step ({size}); per task {timing['startup_s']:.2f} s of fit "
        f"start-up, {1e6 * timing['feature_image_s']:.0f} us per image's features, "
        f"{1e6 * timing['herd_step_s']:.0f} us per herding step, {timing['checkpoint_s']:.2f} s per checkpoint; "
        f"a run's start-up {startup}; {timing['launch_s']:.1f} s to start a process"
    )


def print_estimates(est: dict, profile: str, launch_s: float, n_jobs: int, measured: str) -> None:
    """Each run ID's estimate of one seed, then `all`'s, one at a time and with --jobs."""
    click.echo(
        f"      estimate, one seed ({profile} profile): training, and the rest (the run's start-up; per task the "
        "fit's start-up, the features for evaluation, prototypes, imprinting and refresh, herding, the checkpoint); "
        f"a lone `uh run` starts its process first ({duration(launch_s)}):"
    )
    for run_id, parts in est["per_run_s"].items():
        click.echo(
            f"      {run_id:3} {duration(parts['total_s']):>9} (training {duration(parts['train_s'])}, "
            f"the rest {duration(parts['other_s'])})"
        )
    if est["all_s_with_jobs"] is None:
        with_jobs = f"no speed-up measured: {measured}"
    else:
        with_jobs = f"{duration(est['all_s_with_jobs'])} with --jobs {n_jobs} ({measured})"
    click.echo(
        f"      all {duration(est['all_s'])} for {len(PAPER_RUNS)} run IDs x {len(SEEDS)} seeds one at a time; "
        f"{with_jobs}"
    )


def cfg_profile(cfg: Config) -> str:
    return next(name for name in PROFILES if resolve("B3", name) == cfg)


def print_line(line: Line) -> None:
    click.echo(f"{line.status:4}  {line.what:12} {line.detail}")


@click.command("doctor", epilog="Environment: UH_JOBS (as --jobs); " + TRAINING_ENVIRONMENT)
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    default="paper",
    show_default=True,
    help="The profile whose archive to check and whose runs to time.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    envvar="UH_DATA_DIR",
    default="data",
    show_default=True,
    help="Env: UH_DATA_DIR.",
)
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path),
    envvar="UH_RESULTS_DIR",
    default="results",
    show_default=True,
    help="Env: UH_RESULTS_DIR.",
)
@click.option(
    "--precision",
    type=click.Choice(["16-mixed", "32-true"]),
    envvar="UH_PRECISION",
    help="The runs' precision to time (default: 16-mixed on a GPU, 32-true on a CPU). Env: UH_PRECISION.",
)
@click.option(
    "--device",
    type=click.Choice(DEVICES),
    envvar="UH_DEVICE",
    help="As `uh run --device` [default: auto]. Env: UH_DEVICE.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    envvar="UH_JOBS",
    help="The runs at once you plan (`uh run --jobs`: per GPU; on a CPU, N at once): N processes time a "
    "step together for the estimate of `all` at that speed-up; a GPU in Exclusive_Process compute "
    "mode FAILs.",
)
@click.option("--steps", type=click.IntRange(min=4), default=8, show_default=True, help="Self-test steps.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where the JSON report goes (default: RESULTS_DIR/doctor.json).",
)
@click.option("--step-only", is_flag=True, hidden=True, help="Print the seconds of one B3 step, nothing else.")
def doctor_command(
    profile: str,
    data_dir: Path,
    results_dir: Path,
    precision: str | None,
    device: str | None,
    jobs: int | None,
    steps: int,
    json_path: Path | None,
    step_only: bool,
) -> None:
    """Check this machine before the runs: environment, a self-test of the GPU path, and timings."""
    cfg = resolve("B3", profile)
    if step_only:  # one of jobs_speedup's processes
        from uniform_herding.method.engine import precision as run_precision
        from uniform_herding.runs.devices import select

        chosen, start = select(device, profile), []

        def together() -> None:  # jobs_speedup's barrier: "ready", then wait for its "go"
            click.echo("ready")
            sys.stdin.readline()
            start.append(time.monotonic())

        steps = TIMING_STEPS[chosen.type]
        step = step_seconds(chosen, run_precision(chosen, precision), cfg, steps=steps, ready=together)[0]
        click.echo(f"{start[0]} {time.monotonic()} {step}")
        return
    with Progress("environment: Python, torch, Lightning, the GPU, the archive, the disk", every=HEARTBEAT_S):
        import torch  # seconds, more on a busy machine: hence inside the progress

        from uniform_herding.method.engine import compile_mode
        from uniform_herding.method.engine import precision as run_precision
        from uniform_herding.runs.devices import DeviceError, cpu_threads, peak_gpu_memory_gb, select
        from uniform_herding.runs.results import write_json_atomic

        try:
            compile_mode(), cpu_threads()  # a bad UH_COMPILE or UH_CPU_THREADS: one line, before any check runs
        except ValueError as e:
            raise click.ClickException(str(e)) from None
        lines = check_environment(data_dir, results_dir, cfg, jobs)
        try:
            device, unusable = select(device, profile), None
        except DeviceError as e:
            unusable = Line("FAIL", "device", str(e))
    if unusable is not None:
        for line in [*lines, unusable]:
            print_line(line)
        click.echo("uh doctor: FAIL: device")
        click.get_current_context().exit(1)
    precision = run_precision(device, precision)
    if device.type == "cpu":
        click.echo(
            f"uh doctor on a CPU ({torch.get_num_threads()} thread(s), UH_CPU_THREADS): the self-test runs "
            f"at width {CPU_SELFTEST_WIDTH}, not the paper's 64; a CPU cannot run the paper's fp16 path fast"
        )
    for line in lines:
        print_line(line)
    selftest_line, selftest_report = check_selftest(device, steps)
    print_line(selftest_line)
    lines.append(selftest_line)

    timing = measure(device, precision, cfg, data_dir)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    n_jobs = jobs or (min(cores, 3) if device.type == "cpu" else 3)
    speedup: float | None = 1.0
    measured = "one at a time"
    if n_jobs > 1:
        with Progress(
            f"timing: {n_jobs} processes each timing a step at once (the speed-up of --jobs {n_jobs})",
            every=HEARTBEAT_S,
        ):
            speedup, measured = jobs_speedup(device, precision, cfg, n_jobs, timing["step_s"])
    est = estimates(timing, profile, n_jobs, speedup)
    peak = peak_gpu_memory_gb(device)
    memory = "" if peak is None else f"; peak GPU memory {peak:.2f} GB"
    lines.append(Line("PASS", "timing", timing_detail(timing, cfg, precision) + memory))
    print_line(lines[-1])
    print_estimates(est, profile, timing["launch_s"], n_jobs, measured)
    runs_csv = _procedure_runs_csv() if profile == "paper" else None
    if runs_csv is not None:
        est["procedure_s"] = procedure_seconds(est["per_run_s"], pd.read_csv(runs_csv))
        click.echo(
            f"      the whole procedure (all's 36 runs, then the claims' looks until decided; {runs_csv.name}, "
            f"uh oc's faithful re-runs): mean {duration(est['procedure_s']['mean_s'])}, 90th percentile "
            f"{duration(est['procedure_s']['p90_s'])}, one at a time"
        )

    failed = [line for line in lines if line.status == "FAIL"]
    report = {
        "passed": not failed,
        "device": str(device),
        "precision": precision,
        "profile": profile,
        "lines": [asdict(line) for line in lines],
        "selftest": selftest_report,
        "step_seconds": timing["step_s"],
        "timing": timing,
        "estimates": est,
        "peak_gpu_memory_gb": peak,
        "command": " ".join(sys.argv),
    }
    json_path = json_path or results_dir / "doctor.json"
    try:
        write_json_atomic(json_path, report)
    except OSError as e:
        failed.append(Line("FAIL", "report", f"cannot write {json_path} ({e.strerror or e})"))
    verdict = "FAIL: " + "; ".join(line.what for line in failed) if failed else "PASS"
    click.echo(f"uh doctor: {verdict} (report: {json_path})")
    if failed:
        click.get_current_context().exit(1)


@click.command("price")
@click.option("--profile", type=click.Choice(list(PROFILES)), default="paper", show_default=True)
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path),
    envvar="UH_RESULTS_DIR",
    default="results",
    show_default=True,
    help="Where `uh doctor` wrote its timing, doctor.json. Env: UH_RESULTS_DIR.",
)
@click.option(
    "--seed",
    "seeds",
    type=click.IntRange(0, 2**32 - 1),
    multiple=True,
    help="Seeds of your own (repeatable): `all` runs the paper's run IDs on them, without the procedure. "
    "Default: 1993 2023 42.",
)
@click.option("--device", type=click.Choice(DEVICES), envvar="UH_DEVICE", help="As `uh run --device`. Env: UH_DEVICE.")
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm"]),
    envvar="UH_EXECUTOR",
    help="slurm: the nodes' device counts, not this machine's. Env: UH_EXECUTOR.",
)
def price_command(
    profile: str, results_dir: Path, seeds: tuple[int, ...], device: str | None, executor: str | None
) -> None:
    """What `./reproduce.sh all` costs, before it runs: the paper's runs and the whole procedure (mean, 90th
    percentile, most), in runs and hours, on this machine where `uh doctor` timed it, else on the paper's
    Tesla T4 for a GPU; for a CPU without its timing, in runs and a line saying it has no price in hours.
    Refused in one line where this machine cannot train the profile, as each `uh run` would be."""
    from uniform_herding.design.simulation import paper_seconds
    from uniform_herding.report.load import doctor_estimates
    from uniform_herding.runs.devices import DeviceError, select
    from uniform_herding.verdict.expected import ExpectedError, expected_dir_for, find_expected_root, load_expected

    chosen = None  # on Slurm, the nodes' device: not this machine's
    if executor != "slurm":
        try:
            chosen = select(device, profile)
        except DeviceError as e:
            raise click.ClickException(
                f"{e}; to try the whole pipeline at a tiny size on this machine: ./reproduce.sh smoke"
            ) from None
    try:
        directory = expected_dir_for(profile, find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
        expected = load_expected(directory) if (directory / "tolerances.toml").is_file() else None
    except ExpectedError as e:
        raise click.ClickException(str(e)) from None
    procedure = None if seeds or expected is None else expected.procedure
    runs_csv = _procedure_runs_csv() if profile == "paper" and procedure else None
    extra_runs = None if runs_csv is None else pd.read_csv(runs_csv)

    timed = results_dir / "doctor.json"
    seconds = doctor_estimates(timed, profile, None if chosen is None else chosen.type)
    on, this, its = trains_on(chosen)
    timer = f"`uh doctor --profile {profile}" + ("`" if chosen is None else f" --device {chosen.type}`")
    hours = (
        f"{its} own, as uh doctor timed them ({timed})"
        if chosen is not None
        else f"this machine's, as uh doctor timed them ({timed}), not necessarily {its}"
    )
    on_cpu = chosen is not None and chosen.type == "cpu"  # the T4's hours, a GPU's, say nothing of a CPU's
    if not seconds and profile == "paper" and expected is not None and not on_cpu:
        seconds = paper_seconds(expected)
        hours = f"the paper's Tesla T4's (expected_results/paper_compute.csv), not {its}: {timer} times them"
    runs = price(dict.fromkeys(PAPER_RUNS, 1.0), len(seeds or SEEDS), procedure, extra_runs)
    cost = price(seconds, len(seeds or SEEDS), procedure, extra_runs) if seconds else {}
    width = columns()

    def echo(text: str) -> None:
        click.echo(fit_line(text, width))

    def both(key: str) -> str:
        n = f"{runs[key]:.0f}" if runs[key] == round(runs[key]) else f"{runs[key]:.1f}"
        return f"{n} runs" + (f", {duration(cost[key])}" if cost else "")

    echo(f"the price of ./reproduce.sh all (profile {profile}), one run at a time on {on}:")
    if cost:
        echo(f"  hours: {hours}")
    echo(f"  the paper's {len(PAPER_RUNS)} run IDs on seeds {' '.join(map(str, seeds or SEEDS))}: {both('paper')}")
    if seeds:
        echo("  then no procedure: it takes the registered seeds only (./reproduce.sh next)")
    elif procedure is None:
        echo(f"  then nothing more: {directory} registers no [procedure]")
    else:
        if extra_runs is not None:
            echo(f"  the whole procedure, to a decided verdict (as in uh oc's faithful re-runs, {runs_csv.name}):")
            echo(f"    mean {both('mean')}; 90th percentile {both('p90')}")
        echo(
            f"  at most, every look run (claims C1-C5's run IDs on {procedure.looks[-1]} seeds, the others' on "
            f"{len(SEEDS)}): {both('most')}"
        )
    if not cost:
        echo(
            f"no price in hours for {this} until {timer} times it"
            + (" (the paper's hours are a GPU's)" if on_cpu and profile == "paper" else "")
        )
