"""`uh run`: parses its options, hands them to launch.run as one plan, and exits with its status; a stop is its one
line (where the run stopped, what it kept) and 128 + the signal. `uh sweep` (commands/sweep.py) takes every option of
this command but its run IDs and --set.

Only what the options need loads with it (the catalogue's names, no torch): `uh run` decides "done already" fast.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from uniform_herding import launch
from uniform_herding.catalogue import PROFILES
from uniform_herding.commands.options import data_dir_option, results_dir_option
from uniform_herding.method.components import CHOICES
from uniform_herding.method.config import DEVICES, SEEDS, TRAINING_ENVIRONMENT
from uniform_herding.runs.pair import RunOptions

# `uh run`'s Slurm settings: options, else UH_SLURM_* variables, else --slurm-config's TOML, else defaults
# (runs/executor.py's slurm_settings).
SLURM_OPTIONS = [
    click.option(
        "--slurm-config",
        type=click.Path(path_type=Path, dir_okay=False, exists=True),
        envvar="UH_SLURM_CONFIG",
        help="TOML file with any of: partition, account, time, gpus, cpus, mem_gb, "
        "array_parallelism, [sbatch]. Options and UH_SLURM_* variables override it.",
    ),
    click.option("--slurm-partition", envvar="UH_SLURM_PARTITION", help="Partition (-p)."),
    click.option("--slurm-account", envvar="UH_SLURM_ACCOUNT", help="Account (-A)."),
    click.option(
        "--slurm-time",
        type=click.IntRange(min=1),
        envvar="UH_SLURM_TIME",
        help="Time limit per run in minutes [default: 240]; a run that reaches it requeues and resumes.",
    ),
    click.option(
        "--slurm-gpus",
        type=click.IntRange(min=0),
        envvar="UH_SLURM_GPUS",
        help="GPUs per run [default: 1 for the paper-size profiles, 0 for the CPU ones, smoke too].",
    ),
    click.option("--slurm-cpus", type=click.IntRange(min=1), envvar="UH_SLURM_CPUS", help="CPUs per run [default: 2]."),
    click.option(
        "--slurm-mem-gb",
        type=click.IntRange(min=1),
        envvar="UH_SLURM_MEM_GB",
        help="Memory per run in GB [default: the partition's].",
    ),
    click.option(
        "--slurm-array-parallelism",
        type=click.IntRange(min=1),
        envvar="UH_SLURM_ARRAY_PARALLELISM",
        help="At most this many runs of the array at once [default: 256].",
    ),
    click.option(
        "--slurm-sbatch",
        multiple=True,
        metavar="KEY=VALUE",
        envvar="UH_SLURM_SBATCH",
        help="Extra sbatch option, e.g. qos=normal or constraint=t4 (repeatable).",
    ),
]


def slurm_options(f: Callable) -> Callable:
    """The command `f` with SLURM_OPTIONS."""
    for option in reversed(SLURM_OPTIONS):
        f = option(f)
    return f


@click.command(
    "run",
    short_help="Train run IDs for each seed; skip finished runs, resume others.",
    epilog="Environment: UH_RESULTS_DIR, UH_DATA_DIR, UH_JOBS (as the options above); " + TRAINING_ENVIRONMENT,
)
@click.argument("run_ids", nargs=-1, required=True)
@click.option(
    "--seed",
    "seeds",
    type=click.IntRange(0, 2**32 - 1),
    multiple=True,
    default=SEEDS,
    help="Seed, 0..2^32-1 (repeatable). Default: 1993 2023 42.",
)
@click.option("--profile", type=click.Choice(list(PROFILES)), default="paper", show_default=True)
@data_dir_option("Where the archive is (or is downloaded to).")
@results_dir_option("Where results/<RUN>/seed-<S>/ go.")
@click.option(
    "--archive",
    type=click.Path(path_type=Path, dir_okay=False),
    help="Use this archive (official md5, or the md5 in its .md5 sidecar) instead of the data dir.",
)
@click.option("--force", is_flag=True, help="Rerun finished runs and discard checkpoints.")
@click.option(
    "--precision",
    type=click.Choice(["16-mixed", "32-true"]),
    envvar="UH_PRECISION",
    help="16-mixed: the paper's fp16 GPU path (fp16 autocast, loss scaling, fused SGD, channels_last); "
    "32-true: fp32. Default: 16-mixed on a GPU, 32-true on a CPU. Env: UH_PRECISION.",
)
@click.option(
    "--device",
    type=click.Choice(DEVICES),
    envvar="UH_DEVICE",
    help="auto: the GPU for the paper-size profiles (paper, cifar10; refused at once where no GPU is "
    "usable), the CPU for smoke and the CPU profiles, where their expectations were made; cuda or cpu "
    "insists. [default: auto] Env: UH_DEVICE.",
)
@click.option(
    "--deterministic",
    is_flag=True,
    envvar="UH_DETERMINISTIC",
    help="torch's deterministic algorithms: two GPU runs of a seed agree bitwise (slower). CPU runs "
    "are deterministic without it. Env: UH_DETERMINISTIC=1.",
)
@click.option(
    "--executor",
    type=click.Choice(["local", "slurm"]),
    envvar="UH_EXECUTOR",
    help="Run each (run ID, seed) pair as a submitit job: `local` on this machine (N per visible GPU, "
    "else one per CPU core), `slurm` as one job array (docs/cluster.md). Default: one after another "
    "in this process. Results do not depend on it. Env: UH_EXECUTOR.",
)
@click.option(
    "--jobs",
    "-j",
    type=click.IntRange(min=1),
    envvar="UH_JOBS",
    help="Short for --executor local with N runs per GPU (on a CPU: N at once). Env: UH_JOBS.",
)
@click.option("--wait", is_flag=True, help="With --executor slurm: follow the array until every run has ended.")
@click.option(
    "--procedure",
    is_flag=True,
    help="With --executor slurm: then the procedure as Slurm jobs, to a decided verdict and its report: a "
    "controller job behind the array checks, submits the runs the check names with the next controller "
    "behind them, and once the verdict is decided runs uh check and uh report (docs/cluster.md). "
    "Refused while the results dir's chain is active.",
)
@click.option(
    "--cancel",
    is_flag=True,
    help="With --procedure: cancel the results dir's chain instead (its runs keep their checkpoints); the "
    "same command without --cancel resumes from the results.",
)
@slurm_options
@click.option(
    "--set",
    "sets",
    multiple=True,
    metavar="KEY=VALUE",
    help="Change a method setting of every RUN_ID (repeatable), e.g. --set rho=5: a variant, with its "
    "own ID (B3+rho=5) and results folder (docs/extending.md). A setting nothing in the run reads is "
    "refused. " + "; ".join(f"{key}: {', '.join(names)}" for key, names in CHOICES.items()) + ".",
)
@click.option(
    "--base",
    metavar="RUN_ID",
    help="The run ID each variant is compared with (uh check, uh aggregate, uh report), written at the end "
    "of its ID: B3 --set memory=closest_to_mean --base B3 runs as r1+memory=closest_to_mean+vs=B3. "
    "Default: the run ID its ID starts from, the one it differs from in the fewest settings.",
)
def run_cmd(
    run_ids: tuple[str, ...],
    sets: tuple[str, ...],
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
    """Run RUN_IDS for each seed; write results/<RUN>/seed-<S>/result.json. `all`: the paper's twelve run
    IDs; `refresh`: r1-r3, beyond the paper, with B1 and B3 (`uh list`). A RUN_ID may be a variant ID
    (B3+rho=5); --set makes variants.

    A finished run is skipped; an interrupted one resumes after its last finished task. SIGTERM or
    SIGINT stops at once, keeps the checkpoint and exits with 128 + the signal number
    (docs/reliability.md), from the first moment on.
    """
    options = RunOptions(profile, data_dir, results_dir, archive, force, precision, device, deterministic)
    exit_with(lambda: launch.run(run_ids, sets, base, plan(seeds, options, scheduling), click.echo))


def plan(seeds: tuple[int, ...], options: RunOptions, scheduling: dict[str, Any]) -> launch.Plan:
    """launch.py's plan: the seeds, the options every pair shares, and the scheduling options (--executor, --jobs,
    --wait, --procedure, --cancel and the --slurm-* ones) as launch.Scheduling."""
    given = dict(scheduling)
    slurm = {key.removeprefix("slurm_"): given.pop(key) for key in list(given) if key.startswith("slurm_")}
    return launch.Plan(seeds, options, launch.Scheduling(**given, slurm_config=slurm.pop("config"), slurm=slurm))


def exit_with(status: Callable[[], int]) -> None:
    """Exit with what `status` returns; a stop (SIGTERM, SIGINT) says where it stopped, and exits 128 + the signal."""
    from uniform_herding.runs.durability import Interrupted

    try:
        code = status()
    except Interrupted as e:
        click.echo(f"Error: {e}", err=True)
        code = 128 + e.signum
    click.get_current_context().exit(code)
