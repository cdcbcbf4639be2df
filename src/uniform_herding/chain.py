"""`uh run --executor slurm --procedure`: the procedure as a chain of Slurm jobs, so that one command reaches a
decided verdict and its report with no one at the terminal.

The command submits its runs as one array and, behind it (afterany), a controller job. The controller checks the
results as uh check does (`judge.checked_now`): while the verdict is not decided and names runs (its next_step; where a
profile's pipeline check names none, the procedure's own), it submits them as an array with the next controller
behind them; once the verdict is decided it runs uh check and uh report, and the chain ends. Slurm's dependencies and
submitit's jobs do the scheduling: nothing of ours waits anywhere.

Why it survives a cluster:
- chain.json in the results dir holds every step (what it runs, the IDs of its jobs), replaced atomically under a
  lock; a controller reads it first, so one started again never submits a step twice. Each job's name is unique in
  its chain (uh-<chain>-<step>-runs); a controller adopts the job of that name Slurm already has before it submits,
  so one killed between sbatch and the write submits nothing again.
- submitit requeues a controller that is pre-empted, and one that times out because it has a checkpoint
  (`Controller.checkpoint`; tests/test_slurm.py times one out mid-report); each controller has a rescue, the same
  job behind the step's runs and the controller's failure (afternotok), which takes over from a controller killed
  or failed; a controller that ends well cancels its rescue.
- a run of the step that did not finish ends the chain with its uh status line; a step asked for twice, or more steps
  than the procedure's looks + 1, end it too: no loop. `--cancel` marks the chain ended, then cancels its jobs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import json
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from uniform_herding.errors import UhError
from uniform_herding.runs import executor
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.results import result_path, write_json_atomic
from uniform_herding.runs.status import pair_status, slurm, slurm_states, submissions

# A controller checks, submits, or reports: minutes at most, even on the paper's results; never more than the runs'
# --slurm-time, which a partition with a shorter limit grants where it would leave a longer job pending.
CONTROLLER_TIME_MIN = 30
CLIENT_WAIT_S = 60.0  # a controller, inside the cluster, waits this long for squeue or sacct (uh status: seconds)


class ChainActive(UhError):
    """A chain of the results dir still has jobs in Slurm's queue: one line, exit 1; nothing submitted."""

    exit_code = 1


def chain_path(results_dir: Path) -> Path:
    return results_dir / "chain.json"


def read(results_dir: Path) -> dict[str, Any] | None:
    """The chain's state, or None where no chain was started (or its file is unreadable: status is a reader)."""
    try:
        return json.loads(chain_path(results_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


@contextlib.contextmanager
def locked(results_dir: Path) -> Iterator[dict[str, Any] | None]:
    """The chain's state under an exclusive lock: a controller's submission and --cancel never interleave."""
    results_dir.mkdir(parents=True, exist_ok=True)
    with open(results_dir / ".chain.lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # released by the OS when the holder dies, even by SIGKILL
        yield read(results_dir)


def write(results_dir: Path, chain: dict[str, Any]) -> None:
    write_json_atomic(chain_path(results_dir), chain)


def job_ids(chain: dict[str, Any]) -> list[str]:
    """Every job the chain recorded: per step its runs' array, its controller and the controller's rescue."""
    return [step[k] for step in chain["steps"] for k in ("array", "controller", "rescue") if step.get(k)]


def queue(timeout: float = CLIENT_WAIT_S) -> dict[str, str] | None:
    """This user's jobs in Slurm's queue: base job ID (an array's, for its tasks) -> state (RUNNING first); None where
    squeue could not be read within `timeout` seconds."""
    out = slurm("squeue", "-h", "--me", "-o", "%F %T", timeout=timeout)
    if out is None:
        return None
    states: dict[str, str] = {}
    for line in out.splitlines():
        job, _, state = line.partition(" ")
        if states.get(job) != "RUNNING":
            states[job] = state
    return states


def active(chain: dict[str, Any] | None, queued: dict[str, str] | None = None) -> list[str]:
    """The chain's jobs in Slurm's queue (`queued`, else read now; one that cannot be read holds none); none for a
    chain that ended (or was never started)."""
    if chain is None or chain.get("ended"):
        return []
    queued = (queue() or {}) if queued is None else queued
    return [job for job in job_ids(chain) if job in queued]


def find_job(name: str, since: float) -> str | None:
    """The job named `name` that Slurm has, queued or (accounting) ended since `since`; None where it has none."""
    for line in (slurm("squeue", "-h", "--me", "--name", name, "-o", "%F", timeout=CLIENT_WAIT_S) or "").split():
        return line
    start = time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(since - 60))
    sacct = slurm("sacct", "-n", "-X", "-P", "--name", name, "-S", start, "-o", "JobID", timeout=CLIENT_WAIT_S)
    for line in (sacct or "").split():
        return line.split("_")[0]
    return None


def step_text(step: dict[str, list[Any]]) -> str:
    return f"{', '.join(step['run_ids'])} on seeds {', '.join(map(str, step['seeds']))}"


def pairs_of(step: dict[str, list[Any]]) -> list[tuple[str, int]]:
    return [(run_id, int(seed)) for run_id in step["run_ids"] for seed in step["seeds"]]


@dataclasses.dataclass(frozen=True)
class Chain:
    """What every job of a chain is submitted with: its ID, results dir, the options of every pair it runs and the
    Slurm settings of `uh run`'s --slurm-* options."""

    chain_id: str
    results_dir: Path
    options: RunOptions
    settings: dict[str, Any]

    def name(self, index: int, job: str) -> str:
        return f"uh-{self.chain_id}-{index + 1}-{job}"

    def submit_step(self, index: int, started: float) -> dict[str, Any]:
        """Step `index`'s jobs that are not recorded yet, each adopted from Slurm where it has one of its name, else
        submitted; chain.json after each. Call it holding the lock, the step recorded."""
        chain = read(self.results_dir)
        assert chain is not None
        record = chain["steps"][index]
        if "array" not in record:
            tasks = [
                self.options.pair(r, s)
                for r, s in pairs_of(record["step"])
                if not result_path(self.results_dir, r, s).exists()
            ]
            array = find_job(self.name(index, "runs"), started) if tasks else None
            if tasks and array is None:
                jobs = executor.submit_array(tasks, self.settings, self.results_dir, self.name(index, "runs"))
                array = jobs[0].job_id.split("_")[0]
            record["array"] = array
            write(self.results_dir, chain)
        after = f"afterany:{record['array']}" if record["array"] else None
        for job in ("controller", "rescue"):
            if job not in record:
                dependency = after
                if job == "rescue":
                    dependency = ",".join(filter(None, (after, f"afternotok:{record['controller']}")))
                record[job] = find_job(self.name(index, job), started) or self._submit_controller(
                    index, job, dependency
                )
                write(self.results_dir, chain)
        return record

    def _submit_controller(self, index: int, job: str, dependency: str | None) -> str:
        time_min = min(CONTROLLER_TIME_MIN, int(self.settings["time"]))
        settings = {**self.settings, "gpus": 0, "cpus": 1, "time": time_min}
        slurm = executor.slurm_executor(self.results_dir, settings, self.name(index, job))
        if dependency:
            slurm.update_parameters(dependency=dependency)
        with executor.sbatch_errors(f"the chain's {job}"):
            return slurm.submit(Controller(self, index, rescue=job == "rescue")).job_id


def start(
    run_ids: list[str],
    seeds: list[int],
    options: RunOptions,
    settings: dict[str, Any],
    results_dir: Path,
    echo: Callable[[str], None],
) -> int:
    """Submit the chain's first step: RUN_IDS x SEEDS, those without a result (none: the controller alone, which
    checks the results there are). Refused while a chain in `results_dir` still has jobs in Slurm's queue."""
    executor.need_sbatch()
    started = time.time()
    chain = Chain(time.strftime("%Y%m%d-%H%M%S", time.localtime(started)), results_dir, options, settings)
    with locked(results_dir) as before:
        running = active(before)
        if before is not None and running:
            raise ChainActive(
                f"the chain {before['id']} in {results_dir} is active (Slurm jobs {' '.join(running)}): follow it "
                f"with uh status --results-dir {results_dir}; stop it with the same command and --cancel"
            )
        write(
            results_dir,
            {
                "id": chain.chain_id,
                "started": started,
                "profile": options.profile,
                "ended": None,
                "steps": [{"step": {"run_ids": run_ids, "seeds": seeds}, "by": "the command"}],
            },
        )
        step = chain.submit_step(0, started)
    runs = f"its runs as Slurm job {step['array']}, then " if step["array"] else ""
    echo(
        f"Submitted chain {chain.chain_id}: {runs}the controller, Slurm job {step['controller']} (its rescue: "
        f"{step['rescue']}), which checks and submits each next step until the verdict is decided, then reports."
    )
    echo(f"Follow it with: uh status --results-dir {results_dir}; this terminal may close.")
    return 0


def cancel(results_dir: Path, echo: Callable[[str], None]) -> int:
    """End the chain in `results_dir` (its runs keep their checkpoints); the next command resumes from the results."""
    with locked(results_dir) as chain:
        if chain is None or chain.get("ended"):
            echo(f"No active chain in {results_dir}; nothing to cancel.")
            return 0
        chain["ended"] = {"at": time.time(), "reason": "cancelled (uh run --cancel)"}
        write(results_dir, chain)
        jobs = job_ids(chain)
        if jobs:
            subprocess.run(["scancel", *jobs], check=False)
    echo(
        f"Cancelled chain {chain['id']} (Slurm jobs {' '.join(jobs)}); finished runs and checkpoints are kept: the "
        "same command without --cancel resumes from the results."
    )
    return 0


@dataclasses.dataclass(frozen=True)
class Controller:
    """The job behind step `index`'s runs: check, then the next step, or uh check and uh report and the end."""

    chain: Chain
    index: int
    rescue: bool = False

    def __call__(self) -> str:
        results_dir = self.chain.results_dir
        state = read(results_dir)
        if state is None or state["id"] != self.chain.chain_id:
            return self.say(f"chain {self.chain.chain_id} is no longer the one in {results_dir}; nothing to do")
        if state.get("ended"):
            return self.done(f"chain {state['id']} ended before: {ended_text(state['ended'])}")
        if len(state["steps"]) > self.index + 1:  # an earlier start of this controller recorded the next step
            with locked(results_dir):
                self.chain.submit_step(self.index + 1, state["started"])
            return self.done(f"step {self.index + 2} was submitted before; its jobs are all there")
        unfinished = self.unfinished(state["steps"][self.index]["step"])
        if unfinished:
            return self.end({"reason": f"a run of step {self.index + 1} did not finish: {unfinished}"})
        return self.decide(state)

    def say(self, line: str) -> str:
        print(line, flush=True)
        return line

    def unfinished(self, step: dict[str, list[Any]]) -> str:
        """The uh status line of the step's first pair without a result (failed, cancelled, ...), else ''."""
        missing = [p for p in pairs_of(step) if not result_path(self.chain.results_dir, *p).exists()]
        if not missing:
            return ""
        entry = submissions(self.chain.results_dir).get(missing[0])
        states = slurm_states([entry] if entry else [], timeout=CLIENT_WAIT_S)
        line = str(pair_status(self.chain.results_dir, *missing[0], entry, states))
        return line + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else "")

    def decide(self, state: dict[str, Any]) -> str:
        from uniform_herding.errors import UhError
        from uniform_herding.verdict.judge import checked_now

        try:
            expected, checked = checked_now(self.chain.results_dir)
        except UhError as e:  # where uh check exits 2: its one line ends the chain
            return self.end({"reason": str(e)})
        verdict = checked.verdict
        self.say(f"step {self.index + 1}: verdict now {verdict.line}")
        if verdict.kind.final:
            return self.report(verdict.kind.value, verdict.code)
        step = verdict.next_step or checked.state.next_step
        looks = len(expected.procedure.looks) if expected.procedure else 1
        earlier = [s["step"] for s in state["steps"]]
        if not step:
            return self.end({"reason": f"{verdict.line}: it names no runs that would decide it"})
        if step in earlier:
            return self.end(
                {
                    "reason": f"the check asks again for {step_text(step)}, which step "
                    f"{earlier.index(step) + 1} ran; the verdict did not move: {verdict.line}"
                }
            )
        if len(earlier) > looks:
            return self.end(
                {
                    "reason": f"the check asks for {step_text(step)} after {len(earlier)} steps, the most "
                    f"its procedure needs ({looks} looks + 1)"
                }
            )
        return self.next_step(step, verdict.kind.value)

    def next_step(self, step: dict[str, list[Any]], verdict: str) -> str:
        with locked(self.chain.results_dir) as state:
            if state is None or state.get("ended") or len(state["steps"]) > self.index + 1:
                return self.say("the chain moved on while this controller checked; nothing to do")
            state["steps"].append({"step": step, "by": f"step {self.index + 1}'s check: {verdict}"})
            write(self.chain.results_dir, state)
            try:
                new = self.chain.submit_step(self.index + 1, state["started"])
            except UhError as e:  # sbatch refused
                return self.end({"reason": str(e)}, locked_state=False)
        return self.done(
            f"step {self.index + 2}: {step_text(step)}: Slurm job array {new['array']}, controller {new['controller']}"
        )

    def report(self, verdict: str, code: int) -> str:
        """uh check (its full output and check_report.json) and uh report, here in this job, then the end."""
        out = str(self.chain.results_dir)
        uh = [sys.executable, "-m", "uniform_herding"]
        subprocess.run([*uh, "check", "--results-dir", out], check=False)
        reported = subprocess.run([*uh, "report", "--results-dir", out], check=False).returncode
        what = "report written" if reported == 0 else f"uh report failed (exit {reported}; its error is above)"
        return self.end({"verdict": verdict, "code": code, "reason": f"verdict {verdict}; {what}"})

    def end(self, ended: dict[str, Any], locked_state: bool = True) -> str:
        """Record the chain's end (unless --cancel or another start of this job recorded it first)."""
        lock = locked(self.chain.results_dir) if locked_state else contextlib.nullcontext(read(self.chain.results_dir))
        with lock as state:
            if state is not None and state["id"] == self.chain.chain_id and not state.get("ended"):
                state["ended"] = {"at": time.time(), **ended}
                write(self.chain.results_dir, state)
        return self.done(
            ("" if "verdict" in ended else "Error: ") + f"chain {self.chain.chain_id} ended: " + ended["reason"]
        )

    def done(self, line: str) -> str:
        """Say `line`; a controller that ended well cancels its rescue, which would wait forever."""
        state = read(self.chain.results_dir)
        if not self.rescue and state is not None and state["id"] == self.chain.chain_id:
            rescue = state["steps"][self.index].get("rescue")
            if rescue:
                subprocess.run(["scancel", rescue], check=False)
        return self.say(line)

    def checkpoint(self, *args: Any, **kwargs: Any) -> Any:
        """Pre-empted or timed out: submitit requeues the same job, which finds its work in chain.json."""
        import submitit

        return submitit.helpers.DelayedSubmission(self)


def ended_text(ended: dict[str, Any]) -> str:
    return ended.get("reason", "?")
