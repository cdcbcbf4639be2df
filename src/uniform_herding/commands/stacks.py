"""`uh stacks`: tau, the stack offset uh check's rule allows, measured from re-runs on several stacks
(design/stacks.py)."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.catalogue import PROFILES
from uniform_herding.design.stacks import AMENDMENT, format_report, measure, write_report


@click.command("stacks")
@click.argument("sources", nargs=-1, type=click.Path(exists=True, path_type=Path))
@click.option(
    "--json-out", type=click.Path(dir_okay=False, path_type=Path), help="Also write every figure here (JSON)."
)
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    help="Profile of the per-seed CSV SOURCEs, which record none [default: the results folders', else paper].",
)
def stacks_command(sources: tuple[Path, ...], json_out: Path | None, profile: str | None) -> None:
    """tau, the stack offset uh check's rule allows, from re-runs of the same run IDs on different stacks.

    Each SOURCE is one stack's results: a results folder, a bundle zip (uh bundle) or a per-seed CSV (the
    paper's own, expected_results/paper_per_seed.csv, is the paper's stack). It only reports."""
    measured = measure(sources, profile)
    click.echo(format_report(measured))
    if json_out is not None:
        write_report(json_out, measured)
        click.echo(f"wrote {json_out}")
    click.echo(AMENDMENT)
