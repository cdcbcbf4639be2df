"""`uh sweep RUN_ID KEY=V1,V2,...`: parses its grid and every option of `uh run`, hands them to sweep.py, and exits
with its status."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from uniform_herding import sweep
from uniform_herding.commands.run import exit_with, plan, run_cmd
from uniform_herding.method.config import TRAINING_ENVIRONMENT
from uniform_herding.runs.pair import RunOptions


@click.command(
    "sweep",
    epilog="Every option of `uh run` applies to each point of the grid (uh run --help). "
    "Environment: as uh run's; " + TRAINING_ENVIRONMENT,
)
@click.argument("run_id")
@click.argument("grid", nargs=-1, required=True, metavar="KEY=V1,V2,...")
@click.option("--dry-run", is_flag=True, help="Print the grid and what is done already; start nothing.")
def sweep_command(
    run_id: str,
    grid: tuple[str, ...],
    dry_run: bool,
    base: str | None,
    seeds: tuple[int, ...],
    profile: str,
    data_dir: Path,
    results_dir: Path,
    archive: Path | None,
    force: bool,
    precision: str | None,
    device: str | None,
    deterministic: bool,
    **scheduling: Any,
) -> None:
    """Run every combination of the values as a variant of RUN_ID, for every seed, e.g.
    `uh sweep B3 rho=1,3,5`; finished runs are skipped (docs/extending.md)."""
    options = RunOptions(profile, data_dir, results_dir, archive, force, precision, device, deterministic)
    exit_with(lambda: sweep.sweep(run_id, grid, base, dry_run, plan(seeds, options, scheduling), click.echo))


# The options of `uh run` (all but its run IDs and --set), so that a sweep takes each of them as uh run does.
sweep_command.params.extend(p for p in run_cmd.params if p.name not in ("run_ids", "sets"))
