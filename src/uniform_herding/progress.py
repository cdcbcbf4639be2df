"""`uh status`: where each run stands (runs/status.py) and, for a procedure, where it stands: its state replayed
from the results done so far (verdict/procedure.py), as `uh check` would decide it now."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.runs.results import ResultError, load_results, per_seed_table, results_profile
from uniform_herding.runs.status import status_lines, summary
from uniform_herding.verdict.expected import ExpectedError, expected_dir_for, find_expected_root, load_expected
from uniform_herding.verdict.judge import check
from uniform_herding.verdict.words import seeds_text


def procedure_lines(results_dir: Path) -> list[str]:
    """The procedure's state on the results done so far: the look it stands at, the claims each look decided, those
    that wait, and the verdict uh check would print now with its next step. Nothing where the results cannot be
    read yet or their expected set registers no procedure."""
    try:
        results = load_results(results_dir)
        expected = load_expected(expected_dir_for(results_profile(results), find_expected_root(
            [Path.cwd(), Path(__file__).resolve().parent])))  # fmt: skip
    except (ResultError, ExpectedError):
        return []
    if expected.procedure is None:
        return []
    checked = check(expected, per_seed_table(results), explain=False)
    state, verdict = checked.state, checked.verdict
    looks = len(expected.procedure.looks)
    decided = [f"{c} ({s.decision}, look {s.reached})" for c, s in state.claims.items() if s.settled]
    waiting = [f"{c} (look {s.reached + 1})" for c, s in state.claims.items() if not s.settled]
    step = verdict.next_step
    return [f"procedure: {looks} looks; claims decided: {', '.join(decided) or 'none'}; waiting: "
            f"{', '.join(waiting) or 'none'}",
            f"verdict now: {verdict.kind.value} (exit {verdict.code})"
            + (f"; next: seeds {seeds_text(step['seeds'])} of {', '.join(step['run_ids'])}" if step else "")]


@click.command("status")
@click.option("--results-dir", type=click.Path(path_type=Path, file_okay=False), envvar="UH_RESULTS_DIR",
              default="results", show_default=True, help="The results dir of the runs. Env: UH_RESULTS_DIR.")
def status_command(results_dir: Path) -> None:
    """One line per run ID and seed: done, running (task k of T), queued, failed (log, last error), ...; then, where
    the results' expected set registers a procedure, where it stands (as uh check would decide it now).

    Works while runs go on, started by `uh run` with or without --executor; Slurm job IDs where there are.
    """
    if not results_dir.is_dir():
        raise click.ClickException(f"{results_dir} is not a directory; pass the --results-dir that uh run used")
    lines = status_lines(results_dir)
    for line in lines:
        click.echo(str(line))
    click.echo(summary(lines))
    for line in procedure_lines(results_dir):
        click.echo(line)
