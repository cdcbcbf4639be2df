"""`uh run --executor local|slurm`: every (run ID, seed) pair as one submitit job, here or on Slurm.

Why submitit: it is what research code uses to fan out to Slurm job arrays, and its local executor
runs the same pickled job on this machine, so both go through one mechanism. A job is `Job`:
`run.run_seed` for one `RunPair` (runs/pair.py) in the job's own process, with its own random state, lock and
checkpoint (and on the CPU a fixed thread count), so pairs at once give the same result.json files
as one at a time.

- local: this process schedules. It keeps N jobs per visible GPU running (one per CPU core on a
  CPU-only machine), echoes their output, starts nothing new after a failure, and passes SIGTERM or
  SIGINT on (each job keeps its checkpoint); exit status 0, 1 after a failure or 128 + the signal.
  A job whose `uh run` parent dies (even by SIGKILL) stops by itself within a second, keeping its
  checkpoint: no orphan runs.
- slurm: one job array, one task per pair; returns after submitting (or waits with --wait). A task
  that gets Slurm's pre-emption/time-limit signal is requeued by submitit (Job.checkpoint) and a
  task requeued by Slurm itself (`scontrol requeue`, pre-emption with requeue) simply starts again;
  either way run_seed resumes after the last finished task (docs/cluster.md).

submitit's pickles and logs go under RESULTS_DIR/submitit/; `record_submission` notes which job runs
which pair, for `uh status` (status.py).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import shutil
import signal
import sys
import threading
import time
import tomllib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from uniform_herding.errors import UhError
from uniform_herding.runs.pair import RunPair

POLL_S = 0.5
LOCAL_TIMEOUT_MIN = 60 * 24 * 30  # submitit's local timeout; a run on this machine is never timed out


class ExecutorError(UhError):
    """Settings the executors cannot use (--slurm-*, CUDA_VISIBLE_DEVICES): one line, exit 2, nothing submitted."""


class SlurmRefused(UhError):
    """Slurm cannot take the jobs (no sbatch here, or sbatch refused them): one line, exit 1, as a failed run."""

    exit_code = 1


def submitit_folder(results_dir: Path) -> Path:
    """Where submitit's pickles and logs go: under the results dir, so on the same (shared) filesystem."""
    return results_dir / "submitit"


# --- the job --------------------------------------------------------------------------------------------


def _parent_pid(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def process_alive(pid: int) -> bool:
    """Whether process `pid` exists on this machine (one that is not ours to signal counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextmanager
def stop_with_parent(uh_pid: int | None) -> Iterator[None]:
    """SIGTERM to this job once the `uh run` that scheduled it has gone (local executor only).

    The job's parent is submitit's controller, whose parent is `uh run`; when `uh run` dies, the
    controller is re-parented, so "the controller's parent is no longer uh_pid" is the test (with
    /proc; else whether uh_pid is still alive). SIGTERM ends the run as any stop does: at once,
    keeping the checkpoint of the last finished task.
    """
    if uh_pid is None:
        yield
        return
    done = threading.Event()
    controller = os.getppid()

    def watch() -> None:
        while not done.wait(1.0):
            parent = _parent_pid(controller)
            if (parent != uh_pid) if parent is not None else not process_alive(uh_pid):
                os.kill(os.getpid(), signal.SIGTERM)
                return

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()


def restarted() -> bool:
    """Whether Slurm has started this job before (a requeue): --force then must not discard the checkpoint."""
    return int(os.environ.get("SLURM_RESTART_COUNT", "0") or 0) > 0


@dataclasses.dataclass(frozen=True)
class Job:
    """A `RunPair` as a submitit job: what `uh run RUN --seed S ...` does (run.run_seed), in the job's process.

    `checkpoint` is submitit's hook on pre-emption or time-out: the same pair, never with --force (it would discard
    the per-task checkpoint that the restarted job resumes from).
    """

    pair: RunPair
    uh_pid: int | None = None  # the local `uh run` that schedules this job; None on Slurm

    def __call__(self) -> str:
        from uniform_herding.catalogue import resolve
        from uniform_herding.runs.durability import stop_on_signals
        from uniform_herding.runs.run import run_seed

        pair = self.pair.without_force() if restarted() else self.pair
        sys.argv = pair.command()  # result.json's "command": the `uh run` this job stands for, not submitit's
        # stop_on_signals replaces submitit's "bypass" of SIGTERM: scancel, pre-emption and the local parent's
        # forwarded signal stop the run at once, keeping the checkpoint.
        with said_in_the_log(pair), stop_on_signals(), stop_with_parent(self.uh_pid):
            cfg = resolve(pair.run_id, pair.options.profile)  # this job's process resolves its run once
            return str(run_seed(pair, cfg, say))

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        return submitit.helpers.DelayedSubmission(dataclasses.replace(self, pair=self.pair.without_force()))


def say(line: str) -> None:
    """A line of the job's log, at once (the local executor echoes it as it comes)."""
    print(line, flush=True)


@contextmanager
def said_in_the_log(pair: RunPair) -> Iterator[None]:
    """A job's failure as its one `Error:` line in its log; a stop ends the job with 128 + the signal."""
    from uniform_herding.data.archive import DataError
    from uniform_herding.runs.durability import Interrupted, RunError

    try:
        yield
    except (DataError, RunError, ValueError) as e:
        say(f"Error: {pair}: {e}")
        raise
    except Interrupted as e:
        say(f"Error: {Interrupted(e.signum, e.detail, where=str(pair))}")
        sys.exit(128 + e.signum)


# --- which job runs which pair (read by `uh status`) ---------------------------------------------------


def record_submission(results_dir: Path, name: str, entries: list[dict]) -> Path:
    """Write (replace) one submission's record: per pair its executor, job ID, submitit folder, uh's PID."""
    from uniform_herding.runs.results import write_json_atomic  # pandas: not at the CLI's start

    path = submitit_folder(results_dir) / "submissions" / f"{name}.json"
    write_json_atomic(path, {"written": time.time(), "pairs": entries})
    return path


def _entry(task: RunPair, executor: str, folder: Path, job_id: str | None) -> dict:
    return {
        "run_id": task.run_id,
        "seed": task.seed,
        "profile": task.options.profile,
        "executor": executor,
        "job_id": job_id,
        "folder": str(folder),
        "uh_pid": os.getpid(),
        "host": os.uname().nodename,
    }


# --- following a job's log ------------------------------------------------------------------------------


class Tail:
    """New complete lines of a growing job log, without submitit's own INFO lines (they stay in the log)."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.partial = path, 0, b""

    def lines(self) -> list[str]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *complete, self.partial = (self.partial + data).split(b"\n")
        lines = (line.decode(errors="replace") for line in complete)
        return [line for line in lines if not line.startswith("submitit INFO")]


def _job_result(job: Any) -> str:
    """'done', 'failed' or 'stopped' for an ended job, from submitit's result pickle (none: stopped)."""
    if not job.paths.result_pickle.exists():
        return "stopped"
    try:
        job.result()
    except Exception:  # submitit re-raises the job's error as FailedJobError
        return "failed"
    return "done"


# --- local ----------------------------------------------------------------------------------------------


def local_slots(per_gpu: int | None, cuda: bool) -> list[int | None]:
    """One slot per job at once: for runs on the GPU (`cuda`), `per_gpu` per visible GPU (default 1);
    else one per CPU core, or `per_gpu` at once where given."""
    gpus = visible_gpus() if cuda else []
    if gpus:
        return [g for g in gpus for _ in range(per_gpu or 1)]
    return [None] * (per_gpu or len(os.sched_getaffinity(0)))


def visible_gpus() -> list[int]:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        import torch

        return list(range(torch.cuda.device_count()))
    try:
        return [int(g) for g in visible.split(",") if g.strip()]
    except ValueError:
        raise ExecutorError(
            f"CUDA_VISIBLE_DEVICES={visible!r}: the local executor needs GPU indices (e.g. 0,1)"
        ) from None


def run_local(tasks: list[RunPair], slots: list[int | None], results_dir: Path, echo: Callable[[str], None]) -> int:
    """Run `tasks` as submitit local jobs, len(slots) at once; 0, 1 after a failure, or 128 + a signal."""
    jobs = LocalJobs(tasks, slots, results_dir, echo)
    with jobs.passing_signals_on():
        while jobs.running or (jobs.pending and not jobs.ended):
            jobs.start_next()
            time.sleep(POLL_S)
            jobs.follow()
    return 128 + jobs.stopped if jobs.stopped else int(jobs.failed)


class LocalJobs:
    """The local executor's jobs as `run_local` schedules them: pending, running (each on its slot, its log followed),
    and whether one failed or a signal stopped them all; the submission record kept current for `uh status`."""

    def __init__(
        self, tasks: list[RunPair], slots: list[int | None], results_dir: Path, echo: Callable[[str], None]
    ) -> None:
        import submitit

        self.name = f"local-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"
        folder = submitit_folder(results_dir) / self.name
        self.executor = submitit.LocalExecutor(folder=folder)
        self.free, self.results_dir, self.echo = list(slots), results_dir, echo
        self.entries = [_entry(t, "local", folder, None) for t in tasks]
        record_submission(results_dir, self.name, self.entries)
        self.pending = list(enumerate(tasks))
        self.running: dict[Any, tuple[int | None, Tail]] = {}
        self.failed, self.stopped = False, 0

    @property
    def ended(self) -> bool:
        """Whether nothing new starts: after a failure or a signal."""
        return self.failed or bool(self.stopped)

    def start_next(self) -> None:
        """A job for each pending pair while a slot is free (on its GPU, if the slot has one)."""
        while self.pending and self.free and not self.ended:
            i, task = self.pending.pop(0)
            gpu = self.free.pop(0)
            self.executor.update_parameters(
                timeout_min=LOCAL_TIMEOUT_MIN,
                gpus_per_node=0 if gpu is None else 1,
                visible_gpus=() if gpu is None else (gpu,),
            )
            job = self.executor.submit(Job(task, uh_pid=os.getpid()))
            self.running[job] = (gpu, Tail(job.paths.stdout))
            self.entries[i]["job_id"] = job.job_id
            record_submission(self.results_dir, self.name, self.entries)

    def follow(self) -> None:
        """Echo each running job's new lines; free the slot of a job that ended, and note a failure."""
        for job, (gpu, tail) in list(self.running.items()):
            ended = job._process.poll() is not None
            for line in tail.lines():
                self.echo(line)
            if ended:
                del self.running[job]
                self.free.append(gpu)
                if not self.stopped and _job_result(job) != "done":
                    self.failed = True
                    self.echo(f"Error: {job_pair(job)} failed; log: {job.paths.stderr}")

    @contextmanager
    def passing_signals_on(self) -> Iterator[None]:
        """SIGTERM and SIGINT passed on to every running job (each keeps its checkpoint), and noted: nothing new
        starts."""

        def forward(signum: int, frame: object) -> None:
            self.stopped = signum
            for job in list(self.running):  # the controller passes SIGTERM on to its job
                job._process.send_signal(signal.SIGTERM)

        previous = {s: signal.signal(s, forward) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            yield
        finally:
            for s, handler in previous.items():
                signal.signal(s, handler)


def job_pair(job: Any) -> str:
    """'RUN seed S' of a submitted job, from its pickled Job."""
    return str(job.submission().function.pair)


# --- slurm ----------------------------------------------------------------------------------------------

SLURM_DEFAULTS: dict[str, Any] = {
    "partition": None,
    "account": None,
    "time": 240,  # minutes per run; a run that reaches it is requeued by submitit and resumes (docs/cluster.md)
    "gpus": None,  # None: 1 for runs on a GPU (the paper-size profiles), 0 for the CPU profiles (smoke)
    "cpus": 2,
    "mem_gb": None,
    "array_parallelism": 256,
    "sbatch": {},
}


def slurm_settings(config: Path | None, given: dict[str, Any], cuda: bool = True) -> dict[str, Any]:
    """Defaults, overridden by the TOML file, overridden by options given (None: not given); GPUs, where
    none are set, as the runs' device asks (`cuda`)."""
    settings = dict(SLURM_DEFAULTS)
    if config is not None:
        try:
            data = tomllib.loads(config.read_text(encoding="utf-8"))
        except (OSError, tomllib.TOMLDecodeError) as e:
            raise ExecutorError(f"--slurm-config {config}: {e}") from None
        unknown = sorted(set(data) - set(SLURM_DEFAULTS))
        if unknown:
            raise ExecutorError(
                f"--slurm-config {config}: unknown keys {', '.join(unknown)}; known: {', '.join(SLURM_DEFAULTS)}"
            )
        settings.update(data)
    for key, value in given.items():
        if key == "sbatch" and value:
            pairs = [v.split("=", 1) for v in value]
            if any(len(p) != 2 or not p[0] for p in pairs):
                raise ExecutorError("--slurm-sbatch takes KEY=VALUE, e.g. --slurm-sbatch qos=normal")
            settings["sbatch"] = {**settings["sbatch"], **dict(pairs)}
        elif key != "sbatch" and value is not None:
            settings[key] = value
    if settings["gpus"] is None:
        settings["gpus"] = 1 if cuda else 0
    return settings


def slurm_executor(results_dir: Path, settings: dict[str, Any], job_name: str = "uh") -> Any:
    import submitit

    executor = submitit.SlurmExecutor(folder=submitit_folder(results_dir) / "slurm")
    params = {
        "job_name": job_name,
        "time": int(settings["time"]),
        "cpus_per_task": int(settings["cpus"]),
        "array_parallelism": int(settings["array_parallelism"]),
        "additional_parameters": dict(settings["sbatch"]),
    }
    if settings["gpus"]:
        params["gpus_per_node"] = int(settings["gpus"])
    for key in ("partition", "account"):
        if settings[key]:
            params[key] = settings[key]
    if settings["mem_gb"]:
        params["mem"] = f"{int(settings['mem_gb'])}G"
    executor.update_parameters(**params)
    return executor


def need_sbatch() -> None:
    if shutil.which("sbatch") is None:
        raise SlurmRefused(
            "--executor slurm needs Slurm's sbatch on the PATH: submit from a login node "
            "of the cluster, or use --executor local"
        )


@contextmanager
def sbatch_errors(what: str) -> Iterator[None]:
    """A refusing sbatch as one line (submitit also prints its stderr; the line carries it)."""
    import submitit

    try:
        with contextlib.redirect_stderr(io.StringIO()):
            yield
    except submitit.core.utils.FailedJobError as e:  # sbatch refused: a bad partition, account, time, ...
        reason = " ".join(str(e).split())
        raise SlurmRefused(f"sbatch refused {what}: {reason}; fix the --slurm-* settings") from None


def submit_array(tasks: list[RunPair], settings: dict[str, Any], results_dir: Path, job_name: str = "uh") -> list[Any]:
    """Submit one job array (one task per pair; one pair: one job) and record which job runs which pair."""
    executor = slurm_executor(results_dir, settings, job_name)
    with sbatch_errors("the job array"), executor.batch():
        jobs = [executor.submit(Job(task)) for task in tasks]
    array = jobs[0].job_id.split("_")[0]
    record_submission(
        results_dir,
        f"slurm-{array}",
        [_entry(t, "slurm", executor.folder, j.job_id) for t, j in zip(tasks, jobs, strict=True)],
    )
    return jobs


def submit_slurm(
    tasks: list[RunPair], settings: dict[str, Any], results_dir: Path, wait: bool, echo: Callable[[str], None]
) -> int:
    """Submit one job array (one task per pair); print the job IDs; with `wait`, follow it to the end."""
    need_sbatch()
    jobs = submit_array(tasks, settings, results_dir)
    array = jobs[0].job_id.split("_")[0]
    for task, job in zip(tasks, jobs, strict=True):
        echo(f"{task.run_id} seed {task.seed}: Slurm job {job.job_id}")
    what = f"job array {array} ({len(jobs)} runs)" if len(jobs) > 1 else f"job {array}"  # one run: no array
    echo(f"Submitted Slurm {what}; follow it with: uh status --results-dir {results_dir}")
    if not wait:
        return 0
    tails = {job: Tail(job.paths.stdout) for job in jobs}
    try:
        while tails:
            time.sleep(POLL_S * 4)
            for job in list(tails):
                for line in tails[job].lines():
                    echo(line)
                if job.done():
                    del tails[job]
    except KeyboardInterrupt:
        echo(f"Stopped following Slurm {what}; its runs go on (scancel {array} cancels them).")
        return 128 + signal.SIGINT
    results = {job: _job_result(job) for job in jobs}
    for job, result in results.items():
        if result != "done":
            echo(f"Error: {job_pair(job)} {result} (Slurm job {job.job_id} {job.state}); log: {job.paths.stderr}")
    return int(any(r != "done" for r in results.values()))
