"""`uh status`: where every (run ID, seed) under a results dir stands, while runs go on, with or without Slurm.

One line per pair, and their summary (uh status prints it first). The sources, most certain first: result.json
(done); the run's lock, held by a live `uh run` on this machine (running); the job that `uh run --executor` recorded
for the pair (executor.record_submission) and what Slurm's accounting or the local process says
about it (queued, running, failed, cancelled); else the checkpoint (stopped, resumable).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from uniform_herding.runs import schemas
from uniform_herding.runs.executor import process_alive, submitit_folder
from uniform_herding.runs.jsonfiles import read_json

SLURM_QUEUED = {"PENDING", "REQUEUED", "REQUEUE_FED", "REQUEUE_HOLD", "CONFIGURING", "RESIZING", "SUSPENDED"}
SLURM_RUNNING = {"RUNNING", "COMPLETING", "STAGE_OUT", "SIGNALING"}
SLURM_WAIT_S = 4.0  # uh status waits this long for Slurm's clients, all together, then says what it could not read


def slurm(*args: str, timeout: float = SLURM_WAIT_S) -> str | None:
    """A Slurm client's output; None where it is missing, fails, or gives no answer within `timeout` seconds (a
    controller that does not answer, or SLURM_CONF naming no file: squeue then retries for a minute)."""
    try:
        out = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


def slurm_states(entries: Iterable[dict], timeout: float = SLURM_WAIT_S) -> dict[str, str] | None:
    """The state in Slurm's accounting of each Slurm job among the recorded `entries` (record_submission's; an
    array's task as BASE_INDEX), from one sacct within `timeout` seconds: submitit's own query, read by submitit's
    own parser, but bounded (submitit waits on sacct for as long as it takes); None where sacct could not be read."""
    from submitit.slurm.slurm import SlurmInfoWatcher

    bases = sorted({str(e["job_id"]).split("_")[0] for e in entries if e["executor"] == "slurm" and e.get("job_id")})
    if not bases:
        return {}
    out = slurm(
        "sacct", "-o", "JobID,State,NodeList", "--parsable2", *(a for b in bases for a in ("-j", b)), timeout=timeout
    )
    if out is None:
        return None
    return {job: info.get("State") or "UNKNOWN" for job, info in SlurmInfoWatcher().read_info(out).items()}


def checkpoint_progress(seed_dir: Path) -> tuple[int, int] | None:
    """(tasks finished, T) from seed_dir's checkpoint, or None without a readable one.

    The one place that reads checkpoint.pt for status (keys "task", "config"), through its sealed header.
    """
    path = seed_dir / "checkpoint.pt"
    if not path.exists():
        return None
    import io

    import torch

    from uniform_herding.runs.durability import unseal

    try:
        state = torch.load(io.BytesIO(unseal(path.read_bytes())), map_location="cpu", weights_only=True)
        return state["task"] + 1, state["config"]["n_tasks"]
    except Exception:  # being replaced, truncated or foreign: status is a reader, it says so and goes on
        return None


def lock_held(lock: Path) -> bool:
    """Whether a process on this machine holds the run's flock (/proc/locks; False where there is none)."""
    try:
        st = lock.stat()
        table = Path("/proc/locks").read_text()
    except OSError:
        return False
    key = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    return any(f[1] == "FLOCK" and f[5] == key for f in (line.split() for line in table.splitlines()) if len(f) > 5)


def submissions(results_dir: Path) -> dict[tuple[str, int], dict]:
    """The latest recorded job of every pair (executor.record_submission's files, oldest first), each file read as
    every JSON file uh wrote is read (bounded, checked against its schema: jsonfiles.read_json); ResultError, one
    line naming the file, for one that is not what uh run writes."""
    remedy = "remove it: it only tells uh status which job runs each pair; the next `uh run` records its own"
    latest: dict[tuple[str, int], dict] = {}
    paths = (submitit_folder(results_dir) / "submissions").glob("*.json")
    records = [read_json(path, schemas.SUBMISSION, remedy) for path in sorted(paths)]
    for record in sorted(records, key=lambda r: r.get("written", 0)):
        for entry in record.get("pairs", []):
            latest[(entry["run_id"], int(entry["seed"]))] = entry
    return latest


def last_error(*logs: Path) -> str:
    """The last `Error: ...` line of the logs, else the last line of the last log that has one."""
    last = ""
    for log in logs:
        try:
            lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
        except OSError:
            continue
        errors = [line for line in lines if line.startswith("Error: ")]
        if errors:
            return errors[-1]
        last = lines[-1] if lines else last
    return last or "(the log is empty)"


def _job(entry: dict):
    import submitit

    kind = submitit.SlurmJob if entry["executor"] == "slurm" else submitit.LocalJob
    return kind(folder=entry["folder"], job_id=entry["job_id"])


def _local_alive(entry: dict, pid: int) -> bool:
    return entry.get("host") == os.uname().nodename and process_alive(pid)


@dataclass
class Line:
    run_id: str
    seed: int
    state: str  # done, running, queued, failed, cancelled, stopped, not started
    detail: str = ""

    def __str__(self) -> str:
        return f"{self.run_id} seed {self.seed}: {self.state}{f' {self.detail}' if self.detail else ''}"


@dataclass
class Pair:
    """One (run ID, seed) without its result, as uh status reads it: its folder, the tasks its checkpoint holds
    (checkpoint_progress), and the job recorded for it (record_submission's entry; `job` None: not started yet)."""

    run_id: str
    seed: int
    folder: Path
    entry: dict | None
    progress: tuple[int, int] | None
    job: Any

    def line(self, state: str, detail: str = "") -> Line:
        return Line(self.run_id, self.seed, state, detail)

    @property
    def tag(self) -> str:
        """The job as a line names it: [Slurm job 4_0], [local job 1234]; empty without a job."""
        if self.job is None:
            return ""
        return f"[{'Slurm' if self.entry['executor'] == 'slurm' else 'local'} job {self.entry['job_id']}]"

    def running(self) -> Line:
        task = f"task {self.progress[0] + 1} of {self.progress[1]}, from the checkpoint" if self.progress else "task 1"
        return self.line("running", f"({task}) {self.tag}".strip())

    def ended(self, state: str) -> Line:
        """Its job ended without a result: stopped by a signal (resumable) or failed, with the log's last error."""
        error = last_error(self.job.paths.stdout, self.job.paths.stderr)
        kind = "stopped" if " stopped by SIG" in error else "failed"
        return self.line(kind, f"{self.tag}{f' {state}' if state else ''}: {error}; log: {self.job.paths.stderr}")

    def unrecorded(self) -> Line:
        """No job recorded for it: stopped (its checkpoint resumes it) or not started."""
        if self.progress:
            return self.line(
                "stopped", f"(checkpoint after task {self.progress[0]} of {self.progress[1]}; run it again to resume)"
            )
        return self.line("not started")

    def slurm_line(self, state: str) -> Line:
        """The line of its Slurm job, from the state Slurm's accounting gives it (e.g. PENDING, CANCELLED)."""
        if state in SLURM_QUEUED:
            return self.line("queued", f"{self.tag} {state}")
        if state in SLURM_RUNNING:
            return self.running()
        log = f"log: {self.job.paths.stderr}"
        if state == "CANCELLED":
            kept = f" (checkpoint after task {self.progress[0]} of {self.progress[1]})" if self.progress else ""
            return self.line("cancelled", f"{self.tag}{kept}; {log}")
        if state in ("UNKNOWN", "READY"):
            return self.line("unknown", f"{self.tag} (Slurm does not know it here: no sacct?); {log}")
        return self.ended(state)


def pair_status(
    results_dir: Path, run_id: str, seed: int, entry: dict | None, slurm_state: dict[str, str] | None
) -> Line:
    """The state of one pair: done, running, queued, failed, cancelled, stopped, unknown or not started.
    `slurm_state`: Slurm's states of the jobs (slurm_states; None: it could not be read)."""
    folder = results_dir / run_id / f"seed-{seed}"
    done = Line(run_id, seed, "done")
    if (folder / "result.json").exists():
        return done
    job = _job(entry) if entry and entry.get("job_id") else None
    pair = Pair(run_id, seed, folder, entry, checkpoint_progress(folder), job)
    if lock_held(folder / ".lock"):
        return pair.running()
    if entry is None:
        return pair.unrecorded()
    if job is None:  # queued by a local `uh run` that has not started it yet
        alive = _local_alive(entry, int(entry["uh_pid"]))
        return pair.line("queued" if alive else "not started", "" if alive else "(its uh run has ended)")
    if entry["executor"] == "local":
        alive = _local_alive(entry, int(job.job_id))
        return done if (folder / "result.json").exists() else pair.running() if alive else pair.ended("")
    if slurm_state is None:
        unread = "(Slurm's accounting could not be read: sacct failed or gave no answer in time)"
        return pair.line("unknown", f"{pair.tag} {unread}; log: {job.paths.stderr}")
    state = slurm_state.get(str(job.job_id), "UNKNOWN").split()[0]  # e.g. "CANCELLED by 0"
    return done if (folder / "result.json").exists() else pair.slurm_line(state)  # done: finished while we asked


def status_lines(results_dir: Path, wait: float = SLURM_WAIT_S) -> list[Line]:
    """One Line per pair that has a folder under results_dir or a recorded job, sorted by run ID and seed; Slurm's
    accounting waited for `wait` seconds at most."""
    recorded = submissions(results_dir)
    found = {
        (p.parent.name, int(p.name.removeprefix("seed-")))
        for p in results_dir.glob("*/seed-*")
        if p.is_dir() and p.name.removeprefix("seed-").isdigit()
    }
    states = slurm_states(recorded.values(), wait)
    return [
        pair_status(results_dir, run_id, seed, recorded.get((run_id, seed)), states)
        for run_id, seed in sorted(found | set(recorded))
    ]


def summary(lines: list[Line]) -> str:
    """The runs by state: done, running, queued and failed always, the others where there are."""
    counts = dict.fromkeys(["done", "running", "queued", "failed"], 0)
    for line in lines:
        counts[line.state] = counts.get(line.state, 0) + 1
    order = ["done", "running", "queued", "failed", "cancelled", "stopped", "unknown", "not started"]
    parts = [f"{counts[s]} {s}" for s in order if s in counts]
    return f"{len(lines)} run{'s' * (len(lines) > 1)}: {', '.join(parts)}" if lines else "0 runs: none found"
