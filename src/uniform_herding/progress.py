"""`uh status`: one summary of where a re-run stands (its runs by state, the procedure's look and claims, the verdict
as uh check would decide it now, the Slurm chain's step, the run time left), then, with --runs, each run's line
(runs/status.py). The procedure's state is replayed from the results done so far (verdict/procedure.py)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from uniform_herding import chain
from uniform_herding.errors import UhError
from uniform_herding.report.load import doctor_estimates
from uniform_herding.runs import schemas
from uniform_herding.runs.jsonfiles import ResultError, read_json
from uniform_herding.runs.results import RERUN, dir_profile
from uniform_herding.runs.status import SLURM_WAIT_S, Line, status_lines, summary
from uniform_herding.verdict.aggregate import InputError
from uniform_herding.verdict.expected import Expected
from uniform_herding.verdict.judge import Checked, checked_now
from uniform_herding.verdict.words import run_ids_text, seeds_text


def procedure_lines(expected: Expected, checked: Checked) -> list[str]:
    """The look the procedure stands at, the claims each look decided, those that wait, and the verdict uh check would
    print now with its next step."""
    state, verdict = checked.state, checked.verdict
    looks = len(expected.procedure.looks) if expected.procedure else 1
    pending = state.pending_look
    look = pending + 1 if pending is not None else max((s.reached for s in state.claims.values()), default=1)
    decided = [f"{c} ({s.decision}, look {s.reached})" for c, s in state.claims.items() if s.settled]
    waiting = [f"{c} (look {s.look + 1})" for c, s in state.claims.items() if not s.settled]
    step = verdict.next_step
    return [
        f"procedure: look {max(look, 1)} of {looks}; claims decided: {', '.join(decided) or 'none'}; waiting: "
        f"{', '.join(waiting) or 'none'}",
        f"verdict now: {verdict.kind.value} (exit {verdict.code})"
        + (f"; next: seeds {seeds_text(step['seeds'])} of {run_ids_text(step['run_ids'])}" if step else ""),
    ]


def read_results(results_dir: Path) -> dict[Path, dict]:
    """Every result.json under `results_dir`, read as every command reads it (bounded, checked against its schema:
    jsonfiles.read_json), and its profile.json where it has one; ResultError, one line naming the file and the field,
    for one that is not what uh run writes."""
    dir_profile(results_dir)  # read for its refusal: the profile is the results' own (uh check's)
    return {path: read_json(path, schemas.RESULT, RERUN) for path in sorted(results_dir.glob("*/seed-*/result.json"))}


def run_seconds(results_dir: Path, results: dict[Path, dict], profile: str | None) -> tuple[dict[str, float], str]:
    """Seconds a run takes, per run ID: the mean of its done seeds' own wall time (`results`, those that record
    it), else uh doctor's estimate for this machine (doctor.json of the same profile); and where they come from."""
    own: dict[str, list[float]] = {}
    for path, result in results.items():
        if "wall_s" in result:  # not in a result written before it recorded its time
            own.setdefault(path.parent.parent.name, []).append(result["wall_s"])
    seconds = {run_id: sum(s) / len(s) for run_id, s in own.items()}
    timed = doctor_estimates(results_dir / "doctor.json", profile) if profile else {}
    source = "the done runs' own times" if seconds else "uh doctor's estimate"
    return {**timed, **seconds}, source if seconds or timed else ""


def eta_line(lines: list[Line], step: dict | None, seconds: dict[str, float], source: str) -> str:
    """The run time left: the runs running or queued, and those the next step would add, at their run ID's time
    (run_seconds' `seconds`, from `source`)."""
    left = {(line.run_id, line.seed) for line in lines if line.state in ("running", "queued")}
    if step:
        left |= {(r, s) for r in step["run_ids"] for s in step["seeds"]} - {
            (x.run_id, x.seed) for x in lines if x.state == "done"
        }
    if not left:
        return "ETA: no runs left to wait for"
    fallback = sum(seconds.values()) / len(seconds) if seconds else None
    times = [seconds.get(r, fallback) for r, _ in left]
    runs = f"{len(left)} run{'s' * (len(left) > 1)} left"
    if fallback is None:
        return f"ETA: {runs}; their time is unknown until one is done or uh doctor has timed them"
    total = sum(t for t in times if t is not None)
    return (
        f"ETA: {runs}, about {total / 60:.1f} min of run time one at a time, less where they run "
        f"at once (from {source})"
    )


def chain_line(results_dir: Path, wait: float = SLURM_WAIT_S) -> str | None:
    """Where the Slurm chain stands (uh run --procedure): its step and jobs, its end, that it stalled, or that Slurm's
    queue could not be read within `wait` seconds."""
    state = chain.read(results_dir)
    if state is None:
        return None
    head = f"chain {state['id']}"
    if state.get("ended"):
        return f"{head}: ended: {chain.ended_text(state['ended'])}"
    last = len(state["steps"])
    step = state["steps"][-1]
    where = f"step {last} ({chain.step_text(step['step'])}, asked by {step['by']})"
    queued = chain.queue(wait)
    if queued is None:
        return (
            f"{head}: {where}: Slurm's queue could not be read (squeue failed or gave no answer in time), so "
            "whether its jobs are queued is unknown"
        )
    jobs = [
        f"{what} Slurm job {step[key]} {queued.get(step[key], 'ended')}"
        for what, key in (("runs", "array"), ("controller", "controller"))
        if step.get(key)
    ]
    if not chain.active(state, queued):
        log = results_dir / "submitit" / "slurm" / f"{step.get('rescue') or step.get('controller')}_0_log.out"
        return (
            f"{head}: stalled at step {last}: its jobs ended without a verdict (log: {log}); the same command "
            "resumes from the results"
        )
    return f"{head}: {where}: {', '.join(jobs)}"


class NoResults(UhError):
    """A results dir that is not a directory: exit 2, bad input."""


class Unreadable(UhError):
    """A result.json or a job record (runs/status.submissions) that is not what uh writes: jsonfiles' one line,
    exit 2."""


@dataclass(frozen=True)
class Status:
    """Where a re-run stands: the runs by state (`summary`) and each run's line; the procedure's look and the verdict
    now, or why uh check cannot check (`cannot_check`, its one line); the Slurm chain's step (None: no chain); the
    run time left."""

    summary: str
    runs: list[Line]
    procedure: list[str]
    cannot_check: str | None
    chain: str | None
    eta: str


def where_it_stands(results_dir: Path) -> Status:
    """uh status's summary of `results_dir`, Slurm's clients given SLURM_WAIT_S in all (a dead controller costs no
    more); the verdict now as uh check would decide it (judge.checked_now), or its one-line refusal. A result.json
    or a job record that is not what uh writes is refused in one line, exit 2, as every command that reads it."""
    if not results_dir.is_dir():
        raise NoResults(f"{results_dir} is not a directory; pass the --results-dir that uh run used")
    slurm_by = time.monotonic() + SLURM_WAIT_S
    try:
        results = read_results(results_dir)
        lines = status_lines(results_dir, SLURM_WAIT_S)
    except ResultError as e:
        raise Unreadable(str(e)) from None
    chain_now = chain_line(results_dir, max(slurm_by - time.monotonic(), 0.1))
    try:
        expected, checked = checked_now(results_dir)
    except InputError as e:  # where uh check exits 2: its one line, never nothing
        eta = eta_line(lines, None, *run_seconds(results_dir, results, None))
        return Status(summary(lines), lines, [], str(e), chain_now, eta)
    step = checked.verdict.next_step
    eta = eta_line(lines, step, *run_seconds(results_dir, results, expected.profile))
    return Status(summary(lines), lines, procedure_lines(expected, checked), None, chain_now, eta)
