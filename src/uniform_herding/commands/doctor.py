"""`uh doctor`: the preflight (doctor/preflight.py), its lines said as they are decided, then its verdict."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.catalogue import PROFILES
from uniform_herding.commands.options import data_dir_option, results_dir_option
from uniform_herding.doctor import timing
from uniform_herding.doctor.preflight import preflight
from uniform_herding.method.config import DEVICES, TRAINING_ENVIRONMENT


@click.command("doctor", epilog="Environment: UH_JOBS (as --jobs); " + TRAINING_ENVIRONMENT)
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    default="paper",
    show_default=True,
    help="The profile whose archive to check and whose runs to time.",
)
@data_dir_option()
@results_dir_option()
@click.option(
    "--precision",
    type=click.Choice(["16-mixed", "32-true"]),
    envvar="UH_PRECISION",
    help="The runs' precision to time (default: 16-mixed on a GPU, 32-true on a CPU). Env: UH_PRECISION.",
)
@click.option(
    "--device",
    type=click.Choice(DEVICES),
    envvar="UH_DEVICE",
    help="As `uh run --device` [default: auto]. Env: UH_DEVICE.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    envvar="UH_JOBS",
    help="The runs at once you plan (`uh run --jobs`: per GPU; on a CPU, N at once): N processes time a "
    "step together for the estimate of `all` at that speed-up; a GPU in Exclusive_Process compute "
    "mode FAILs.",
)
@click.option("--steps", type=click.IntRange(min=4), default=8, show_default=True, help="Self-test steps.")
@click.option(
    "--json",
    "json_path",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Where the JSON report goes (default: RESULTS_DIR/doctor.json).",
)
@click.option("--step-only", is_flag=True, hidden=True, help="Print the seconds of one B3 step, nothing else.")
def doctor_command(
    profile: str,
    data_dir: Path,
    results_dir: Path,
    precision: str | None,
    device: str | None,
    jobs: int | None,
    steps: int,
    json_path: Path | None,
    step_only: bool,
) -> None:
    """Check this machine before the runs: environment, a self-test of the GPU path, and timings."""
    if step_only:  # not the preflight: one of its timing processes (doctor/timing.jobs_speedup starts them)
        click.echo(timing.step_only(profile, device, precision))
        return
    outcome = preflight(profile, data_dir, results_dir, precision, device, jobs, steps, json_path, say=click.echo)
    verdict = "FAIL: " + "; ".join(line.what for line in outcome.failed) if outcome.failed else "PASS"
    click.echo(f"uh doctor: {verdict}" + ("" if outcome.report is None else f" (report: {outcome.report})"))
    if outcome.failed:
        click.get_current_context().exit(1)
