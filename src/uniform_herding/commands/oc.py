"""`uh oc`: the operating characteristic of `uh check` (design/oc.py), printed as it comes."""

from __future__ import annotations

import os
from pathlib import Path

import click

from uniform_herding.design.oc import RHOS, RUNS_CSV, TAUS, Options, operating_characteristic


@click.command("oc")
@click.option(
    "--expected",
    "expected_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Expected set [default: the paper's, expected_results/].",
)
@click.option(
    "-n",
    "--draws",
    type=click.IntRange(min=10),
    default=10000,
    show_default=True,
    help="Simulated re-runs per faithful model at rho 0.5, tau 0.5.",
)
@click.option(
    "--grid-draws",
    type=click.IntRange(min=10),
    default=2000,
    show_default=True,
    help="Simulated re-runs per model elsewhere: the grid, the misses and the nulls.",
)
@click.option(
    "--gating-draws",
    "gating_draws_",
    type=click.IntRange(min=10),
    default=2_000_000,
    show_default=True,
    help="Simulated re-runs per tau for the per-metric gating table: enough to order its worst metrics.",
)
@click.option(
    "--close-draws",
    type=click.IntRange(min=10),
    default=20000,
    show_default=True,
    help="Fresh draws for a cell whose interval holds its target; in all, no more than the run asked of "
    "the cells its targets read.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The simulation's random seed.")
@click.option(
    "--rho",
    "rhos",
    type=click.FloatRange(0.0, 1.0),
    multiple=True,
    help=f"Seed correlation across run IDs, repeatable [default: {', '.join(map(str, RHOS))}].",
)
@click.option(
    "--tau",
    "taus",
    type=click.FloatRange(min=0.0),
    multiple=True,
    help=f"The stack's offset SD (pp), repeatable [default: {', '.join(map(str, TAUS))}].",
)
@click.option(
    "--only",
    type=click.Choice(["faithful", "misses", "laws", "gating", "claims"]),
    help="Print one part only (misses: with the contradicts side and the gating table; laws: the nulls "
    "under seed noise laws the rule does not assume; gating: that table; claims: what one claim "
    "alone costs).",
)
@click.option(
    "--derive",
    "derive_csv",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Print the tolerances the set's rule derives from this per-seed CSV, and stop.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=len(os.sched_getaffinity(0)),
    show_default="this machine's CPUs",
    help="Processes to simulate in; the figures do not depend on it.",
)
@click.option(
    "--runs-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Write the extra runs of (a) at rho 0.5, tau 0.5 as a CSV (uh doctor reads the set's {RUNS_CSV}).",
)
def oc_command(
    expected_dir: Path | None,
    draws: int,
    grid_draws: int,
    gating_draws_: int,
    close_draws: int,
    seed: int,
    rhos: tuple[float, ...],
    taus: tuple[float, ...],
    only: str | None,
    derive_csv: Path | None,
    jobs: int,
    runs_out: Path | None,
) -> None:
    """Operating characteristic of uh check: simulated re-runs under stated models, judged by its own code."""
    options = Options(
        expected_dir,
        draws,
        grid_draws,
        gating_draws_,
        close_draws,
        seed,
        rhos or RHOS,
        taus or TAUS,
        only,
        derive_csv,
        jobs,
        runs_out,
    )
    for line in operating_characteristic(options):
        click.echo(line)
