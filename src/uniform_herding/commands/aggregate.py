"""`uh aggregate`: mean +/- std over seeds per run ID and the paired deltas (verdict/aggregate.py computes them)."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.commands.options import chosen_input, input_options
from uniform_herding.runs.terminal import columns
from uniform_herding.verdict.aggregate import aggregate, format_table


@click.command("aggregate")
@input_options
@click.option(
    "--per-seed-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the per-seed table here (atomically), e.g. expected_results/smoke/per_seed.csv.",
)
@click.option(
    "--wide",
    is_flag=True,
    help="Every column, however wide (else the table fits COLUMNS, 120 where unset: "
    "AIA and LA left out first, then the deltas under their rows).",
)
def aggregate_command(results_dir: Path | None, per_seed: Path | None, per_seed_out: Path | None, wide: bool) -> None:
    """Mean +/- population std over seeds per run ID, and paired deltas vs B3 for a* and s* runs."""
    table, profile = aggregate(*chosen_input(results_dir, per_seed), per_seed_out)
    click.echo(f"profile: {profile or 'not recorded (per-seed CSV)'}")
    click.echo(format_table(table, profile or "paper", columns(wide)))
    if per_seed_out is not None:
        click.echo(f"wrote {per_seed_out}")
