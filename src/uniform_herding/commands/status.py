"""`uh status`: where a re-run stands (progress.py), each line fitted to the terminal."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.commands.options import results_dir_option
from uniform_herding.progress import where_it_stands
from uniform_herding.runs.terminal import columns, fit_line


@click.command("status")
@results_dir_option("The results dir of the runs.")
@click.option("--runs", "-v", "each_run", is_flag=True, help="Then one line per run ID and seed.")
@click.option("--wide", is_flag=True, help="Lines as long as they are (else wrapped to COLUMNS, 120 where unset).")
def status_command(results_dir: Path, each_run: bool, wide: bool) -> None:
    """Where the re-run stands: its runs done, running, queued and failed; the procedure's look and the claims it
    decided; the verdict uh check would decide now; the Slurm chain's step (uh run --procedure); the run time left.
    With --runs, one line per run ID and seed: done, running (task k of T), queued, failed (log, last error), ...

    Works while runs go on, started by `uh run` with or without --executor; Slurm job IDs where there are. Slurm's
    clients get a few seconds in all: where they do not answer, the lines say so.
    """
    status = where_it_stands(results_dir)
    width = columns(wide)

    def echo(text: str) -> None:
        click.echo(fit_line(text, width))

    echo(status.summary + ("" if each_run or not status.runs else " (uh status --runs lists each)"))
    if status.cannot_check is not None:  # uh check's own line, whole
        click.echo(f"verdict now: cannot check: {status.cannot_check}")
    for line in [*status.procedure, *filter(None, (status.chain, status.eta))]:
        echo(line)
    for line in status.runs if each_run else []:
        echo(str(line))
