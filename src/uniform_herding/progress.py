"""`uh status`: one summary of where a re-run stands (its runs by state, the procedure's look and claims, the verdict
as uh check would decide it now, the Slurm chain's step, the run time left), then, with --runs, each run's line
(runs/status.py). The procedure's state is replayed from the results done so far (verdict/procedure.py)."""

from __future__ import annotations

import time
from pathlib import Path

import click

from uniform_herding import chain
from uniform_herding.report.load import doctor_estimates
from uniform_herding.runs import schemas
from uniform_herding.runs.jsonfiles import ResultError, read_json
from uniform_herding.runs.results import RERUN
from uniform_herding.runs.status import SLURM_WAIT_S, Line, status_lines, summary
from uniform_herding.runs.terminal import columns, fit_line
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


def run_seconds(results_dir: Path, profile: str | None) -> tuple[dict[str, float], str]:
    """Seconds a run takes, per run ID: the mean of its done seeds' own wall time (result.json), else uh doctor's
    estimate for this machine (doctor.json of the same profile); and where they come from."""
    own: dict[str, list[float]] = {}
    for path in results_dir.glob("*/seed-*/result.json"):
        try:
            wall_s = read_json(path, schemas.RESULT, RERUN)["wall_s"]
        except (ResultError, KeyError):  # unreadable, or written before it recorded its time
            continue
        own.setdefault(path.parent.parent.name, []).append(wall_s)
    seconds = {run_id: sum(s) / len(s) for run_id, s in own.items()}
    timed = doctor_estimates(results_dir / "doctor.json", profile) if profile else {}
    source = "the done runs' own times" if seconds else "uh doctor's estimate"
    return {**timed, **seconds}, source if seconds or timed else ""


def eta_line(results_dir: Path, lines: list[Line], profile: str | None, step: dict | None) -> str:
    """The run time left: the runs running or queued, and those the next step would add, at their run ID's time."""
    left = {(line.run_id, line.seed) for line in lines if line.state in ("running", "queued")}
    if step:
        left |= {(r, s) for r in step["run_ids"] for s in step["seeds"]} - {
            (x.run_id, x.seed) for x in lines if x.state == "done"
        }
    if not left:
        return "ETA: no runs left to wait for"
    seconds, source = run_seconds(results_dir, profile)
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


@click.command("status")
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path, file_okay=False),
    envvar="UH_RESULTS_DIR",
    default="results",
    show_default=True,
    help="The results dir of the runs. Env: UH_RESULTS_DIR.",
)
@click.option("--runs", "-v", "each_run", is_flag=True, help="Then one line per run ID and seed.")
@click.option("--wide", is_flag=True, help="Lines as long as they are (else wrapped to COLUMNS, 120 where unset).")
def status_command(results_dir: Path, each_run: bool, wide: bool) -> None:
    """Where the re-run stands: its runs done, running, queued and failed; the procedure's look and the claims it
    decided; the verdict uh check would decide now; the Slurm chain's step (uh run --procedure); the run time left.
    With --runs, one line per run ID and seed: done, running (task k of T), queued, failed (log, last error), ...

    Works while runs go on, started by `uh run` with or without --executor; Slurm job IDs where there are. Slurm's
    clients get a few seconds in all: where they do not answer, the lines say so.
    """
    if not results_dir.is_dir():
        raise click.ClickException(f"{results_dir} is not a directory; pass the --results-dir that uh run used")
    slurm_by = time.monotonic() + SLURM_WAIT_S  # Slurm's clients share these seconds: a dead controller costs no more
    lines = status_lines(results_dir, SLURM_WAIT_S)
    chain_now = chain_line(results_dir, max(slurm_by - time.monotonic(), 0.1))
    width = columns(wide)

    def echo(text: str) -> None:
        click.echo(fit_line(text, width))

    echo(summary(lines) + ("" if each_run or not lines else " (uh status --runs lists each)"))
    try:
        expected, checked = checked_now(results_dir)
    except click.ClickException as e:  # where uh check exits 2: its one line, never nothing
        click.echo(f"verdict now: cannot check: {e.format_message()}")
        expected = checked = None
    if expected is not None and checked is not None:
        for line in procedure_lines(expected, checked):
            echo(line)
    step = checked.verdict.next_step if checked is not None else None
    for line in filter(None, (chain_now, eta_line(results_dir, lines, expected and expected.profile, step))):
        echo(line)
    if each_run:
        for line in lines:
            echo(str(line))
