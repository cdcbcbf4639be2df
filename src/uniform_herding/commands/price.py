"""`uh price`: the price of `./reproduce.sh all` (doctor/price.py), each line fitted to the terminal."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.catalogue import PROFILES
from uniform_herding.commands.options import results_dir_option
from uniform_herding.doctor.price import price_lines
from uniform_herding.method.config import DEVICES
from uniform_herding.runs.terminal import columns, fit_line


@click.command("price")
@click.option("--profile", type=click.Choice(list(PROFILES)), default="paper", show_default=True)
@results_dir_option("Where `uh doctor` wrote its timing, doctor.json.")
@click.option(
    "--seed",
    "seeds",
    type=click.IntRange(0, 2**32 - 1),
    multiple=True,
    help="Seeds of your own (repeatable): `all` runs the paper's run IDs on them, without the procedure. "
    "Default: 1993 2023 42.",
)
@click.option("--device", type=click.Choice(DEVICES), envvar="UH_DEVICE", help="As `uh run --device`. Env: UH_DEVICE.")
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm"]),
    envvar="UH_EXECUTOR",
    help="slurm: the nodes' device counts, not this machine's. Env: UH_EXECUTOR.",
)
def price_command(
    profile: str, results_dir: Path, seeds: tuple[int, ...], device: str | None, executor: str | None
) -> None:
    """What `./reproduce.sh all` costs, before it runs: the paper's runs and the whole procedure (mean, 90th
    percentile, most), in runs and hours, on this machine where `uh doctor` timed it, else on the paper's
    Tesla T4 for a GPU; for a CPU without its timing, in runs and a line saying it has no price in hours.
    Refused in one line where this machine cannot train the profile, as each `uh run` would be."""
    lines = price_lines(profile, results_dir, seeds, device, executor)
    width = columns()
    for line in lines:
        click.echo(fit_line(line, width))
