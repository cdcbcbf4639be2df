"""`uh doctor`'s timing: the measured time of a training step at the profile's size and the run's precision, and of
what a run does besides (start-ups, feature passes, herding, checkpoints); the speed-up of `--jobs N`, measured by
N processes timing a step at once; from them the model of estimate.py gives every run ID's time and `all`'s, with and
without --jobs, and on the paper profile the whole procedure's (the 36 runs, then the claims' looks next_step asks
for), mean and 90th percentile over uh oc's simulated faithful re-runs.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pandas as pd

from uniform_herding.catalogue import PAPER_RUNS, PROFILES, resolve
from uniform_herding.estimate import PROCEDURE_RUNS, estimates, procedure_runs_csv, procedure_seconds
from uniform_herding.method.config import SEEDS, Config
from uniform_herding.runs.terminal import HEARTBEAT_S, Progress, duration

TIMING_STEPS = {"cpu": 3, "cuda": 30}  # the timed fit's fewest steps beyond the one-step fit it is compared with:
# on a GPU a step lasts ~20 ms, and 3 of them read 26.9 ms on an H200 where bench's 108 read 18.41 ms
MIN_TIMED_S, MAX_TIMING_STEPS = 2.0, 30  # more steps where the fewest take under 2 s: a smoke step on a shared CPU
# read 66 ms, then 156 ms minutes later (benchmarks/RESULTS.md, "The rest of a run"); 3 steps sampled one moment
STEP_ONLY_TIMEOUT_S = 900  # a timing process's start, warm-up or timing, at most


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
    fit = fit_timer(device, precision, cfg, max(steps, MAX_TIMING_STEPS) + 1, progress)
    warm = fit(1)  # warm-up: kernels, allocator
    steps = max(steps, min(MAX_TIMING_STEPS, math.ceil(MIN_TIMED_S / warm)))
    if progress is not None:
        progress.total = 3 + steps
    if ready is not None:
        ready()
    one = fit(1)
    step = max(fit(1 + steps) - one, 1e-9) / steps
    return step, max(one - step, 0.0)


def fit_timer(device, precision: str, cfg: Config, most: int, progress: Progress | None) -> Callable[[int], float]:
    """A timer of fits of n steps of B3's task 1 at cfg's size, one epoch each, on random images enough for `most`
    steps, each step counted in `progress` where given. A watched step runs eagerly (graph.why_eager): on CUDA it
    times the step a run replays and counts whole fits; elsewhere a watch counts each step."""
    import torch

    from uniform_herding.method.train import Watch, fit_task
    from uniform_herding.runs.selftest import task_one

    one_epoch = dataclasses.replace(cfg, epochs=1, train_per_class=None)
    stream, learner, teacher = task_one(one_epoch, most, device)
    gen = torch.Generator(device=device).manual_seed(0)
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

    return fit


def overhead_seconds(device, cfg: Config) -> dict[str, float]:
    """What a task does besides training steps, measured at cfg's size: the features of one image in
    evaluation batches (evaluation, prototypes, imprinting and refresh all embed images this way), a step of
    herding's selection loop (herding_seconds) and the writing of one checkpoint (the learner and as much again for
    the optimizer's momentum)."""
    import torch

    from uniform_herding.method.evaluate import features
    from uniform_herding.runs.selftest import task_one

    stream, learner, _ = task_one(dataclasses.replace(cfg, epochs=1, train_per_class=None), 1, device)
    images = stream.train_x[: 2 * cfg.eval_batch_size]
    features(learner, stream, images, cfg.eval_batch_size)  # warm-up
    tic = time.perf_counter()
    feats = features(learner, stream, images, cfg.eval_batch_size)
    feats.sum().item()  # .item(): the device has finished
    feature_s = (time.perf_counter() - tic) / len(images)
    herd_step_s, herd_row_s = herding_seconds(device, cfg, feats.shape[1])
    state = {"learner": learner.state_dict(), "momentum": [p.detach().clone() for p in learner.parameters()]}
    with tempfile.TemporaryDirectory() as tmp:
        tic = time.perf_counter()
        torch.save(state, Path(tmp) / "checkpoint.pt")
        checkpoint_s = time.perf_counter() - tic
    return {
        "feature_image_s": feature_s,
        "herd_step_s": herd_step_s,
        "herd_row_s": herd_row_s,
        "herd_together": device.type == "cuda",  # memory.herd_groups: a GPU herds classes at once
        "checkpoint_s": checkpoint_s,
    }


def herding_seconds(device, cfg: Config, d: int) -> tuple[float, float]:
    """A step of herding's loop (memory.herd_batch) as a fixed part and a part per candidate row, from two batches at
    cfg's size as memory.herd_classes makes them on this device: on a GPU one class of a task's images and a whole
    task's new classes at once; on a CPU, which herds each class alone, a class of a quarter and of all of them."""
    import torch

    from uniform_herding.catalogue import images_per_class
    from uniform_herding.method.memory import herd_batch, quotas

    per_class, classes = images_per_class(cfg)[0], cfg.classes_per_task
    k = min(quotas(cfg.budget, classes)[0], per_class)
    together = [(1, per_class), (classes, per_class)]
    shapes = together if device.type == "cuda" else [(1, -(-per_class // 4)), (1, per_class)]
    seconds = []
    for c, n in shapes:
        f = torch.randn(c, n, d, device=device, generator=torch.Generator(device).manual_seed(0))
        herd_batch(f, 2).cpu()  # warm-up
        tic = time.perf_counter()
        herd_batch(f, k).cpu()  # .cpu(): the device has finished
        seconds.append((time.perf_counter() - tic) / min(k, n))
    (c1, n1), (c2, n2) = shapes
    per_row = max(seconds[1] - seconds[0], 0.0) / (c2 * n2 - c1 * n1) if c2 * n2 > c1 * n1 else 0.0
    return max(seconds[0] - c1 * n1 * per_row, 0.0), per_row


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
    tic = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import submitit, uniform_herding.runs.run"], check=True)
    return time.perf_counter() - tic


def cfg_profile(cfg: Config) -> str:
    return next(name for name in PROFILES if resolve("B3", name) == cfg)


def step_only_argv(device, precision: str, cfg: Config) -> list[str]:
    """The command of one of jobs_speedup's timing processes: `uh doctor --step-only` (step_only) at cfg's size."""
    doctor = [sys.executable, "-m", "uniform_herding", "doctor", "--step-only"]
    return [*doctor, "--profile", cfg_profile(cfg), "--precision", precision, "--device", device.type]


def jobs_speedup(device, precision: str, cfg: Config, jobs: int, alone_s: float) -> tuple[float | None, str]:
    """The measured speed-up of `jobs` runs at once, and what it is: each of `jobs` processes (uh doctor
    --step-only) sets up and warms up, says so, and times a training step once all have (a GPU step lasts
    milliseconds, a process's start seconds: unsynchronised, the timings would not overlap and each would time a
    step alone). The speed-up is jobs x (step alone / mean step together); None, with the reason, where the
    processes fail or their timings did not overlap (said, never assumed)."""
    import threading

    argv = step_only_argv(device, precision, cfg)
    procs = [
        subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        for _ in range(jobs)
    ]
    timer = threading.Timer(STEP_ONLY_TIMEOUT_S, lambda: [p.kill() for p in procs])  # a hung one ends its readline
    timer.start()
    try:
        go = start_together(procs)
        windows = [tuple(map(float, p.communicate()[0].splitlines()[-1].split())) for p in procs]
        return together_speedup(windows, jobs, alone_s, go)
    except (ValueError, IndexError, BrokenPipeError) as e:
        for p in procs:
            p.kill()
        return None, f"the timing processes failed ({e})"
    finally:
        timer.cancel()


def start_together(procs: list[subprocess.Popen[str]]) -> float:
    """Wait for each timing process's "ready" (a line of its own, after its warm-up; other output is skipped), then
    tell all to go at once; the monotonic time of the go. ValueError where one ended or hung before it was ready."""
    for p in procs:
        while (line := p.stdout.readline()) != "ready\n":  # type: ignore[union-attr]
            if not line:
                raise ValueError(f"one ended or hung before its warm-up, exit {p.wait()}")
    go = time.monotonic()
    for p in procs:
        p.stdin.write("go\n")  # type: ignore[union-attr]
        p.stdin.flush()  # type: ignore[union-attr]
    return go


def step_only(profile: str, device: str | None, precision: str | None) -> str:
    """One of jobs_speedup's timing processes (`uh doctor --step-only`): warm up, say "ready" on standard output,
    wait for the "go" on standard input (start_together), time a B3 step of `profile`; the timing's start and end on
    the monotonic clock and the seconds per step, as together_speedup reads them."""
    from uniform_herding.method.engine import precision as run_precision
    from uniform_herding.runs.devices import select

    chosen, start = select(device, profile), []

    def together() -> None:  # jobs_speedup's barrier: "ready", then wait for its "go"
        print("ready", flush=True)
        sys.stdin.readline()
        start.append(time.monotonic())

    steps = TIMING_STEPS[chosen.type]
    cfg = resolve("B3", profile)
    step = step_seconds(chosen, run_precision(chosen, precision), cfg, steps=steps, ready=together)[0]
    return f"{start[0]} {time.monotonic()} {step}"


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


def planned_jobs(device, jobs: int | None) -> int:
    """The runs at once to estimate `all` with: --jobs, else 3 on a GPU and up to 3 on a CPU (its cores)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return jobs or (min(cores, 3) if device.type == "cpu" else 3)


def time_runs(
    device, precision: str, profile: str, data_dir: Path, jobs: int | None
) -> tuple[dict[str, float | None], dict, list[str]]:
    """The timings of `profile`'s B3 (measure), the estimates of estimate.py's model from them (with the measured
    speed-up of --jobs, and on the paper profile the whole procedure's), and the lines that say the estimates."""
    cfg = resolve("B3", profile)
    timing = measure(device, precision, cfg, data_dir)
    n_jobs, speedup, measured = planned_jobs(device, jobs), 1.0, "one at a time"
    if n_jobs > 1:
        what = f"timing: {n_jobs} processes each timing a step at once (the speed-up of --jobs {n_jobs})"
        with Progress(what, every=HEARTBEAT_S):
            speedup, measured = jobs_speedup(device, precision, cfg, n_jobs, timing["step_s"])
    est = estimates(timing, profile, n_jobs, speedup)
    said = estimate_lines(est, profile, timing["launch_s"], n_jobs, measured)
    runs_csv = procedure_runs_csv() if profile == "paper" else None
    if runs_csv is not None:
        est["procedure_s"] = procedure_seconds(est["per_run_s"], pd.read_csv(runs_csv))
        said.append(
            f"      the whole procedure (all's 36 runs, then the claims' looks until decided; {PROCEDURE_RUNS}, "
            f"uh oc's faithful re-runs): mean {duration(est['procedure_s']['mean_s'])}, 90th percentile "
            f"{duration(est['procedure_s']['p90_s'])}, one at a time"
        )
    return timing, est, said


def timing_detail(timing: dict[str, float | None], cfg: Config, precision: str) -> str:
    """The timing line: what was measured, per step, per task, per run and per process."""
    size = f"{cfg.batch_size}+{cfg.retrieval} images, width {cfg.width}, {precision}"
    run = timing["run_startup_s"]
    startup = "not timed (no archive to read)" if run is None else f"{run:.1f} s (its archive read onto the device)"
    return (
        f"{1000 * timing['step_s']:.1f} ms per B3 step ({size}); per task {timing['startup_s']:.2f} s of fit "
        f"start-up, {1e6 * timing['feature_image_s']:.0f} us per image's features, "
        f"{1e6 * timing['herd_step_s']:.0f} us per herding step and {1e9 * timing['herd_row_s']:.0f} ns per "
        f"candidate in it, {timing['checkpoint_s']:.2f} s per checkpoint; "
        f"a run's start-up {startup}; {timing['launch_s']:.1f} s to start a process"
    )


def estimate_lines(est: dict, profile: str, launch_s: float, n_jobs: int, measured: str) -> list[str]:
    """Each run ID's estimate of one seed, then `all`'s, one at a time and with --jobs."""
    lines = [
        f"      estimate, one seed ({profile} profile): training, and the rest (the run's start-up; per task the "
        "fit's start-up, the features for evaluation, prototypes, imprinting and refresh, herding, the checkpoint); "
        f"a lone `uh run` starts its process first ({duration(launch_s)}):"
    ]
    for run_id, parts in est["per_run_s"].items():
        lines.append(
            f"      {run_id:3} {duration(parts['total_s']):>9} (training {duration(parts['train_s'])}, "
            f"the rest {duration(parts['other_s'])})"
        )
    if est["all_s_with_jobs"] is None:
        with_jobs = f"no speed-up measured: {measured}"
    else:
        with_jobs = f"{duration(est['all_s_with_jobs'])} with --jobs {n_jobs} ({measured})"
    lines.append(
        f"      all {duration(est['all_s'])} for {len(PAPER_RUNS)} run IDs x {len(SEEDS)} seeds one at a time; "
        f"{with_jobs}"
    )
    return lines
