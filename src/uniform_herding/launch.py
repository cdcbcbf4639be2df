"""`uh run`: the run IDs named (with --set and --base), checked, then trained for each seed, here or as submitit jobs
(runs/executor.py), or as the procedure's Slurm chain (chain.py).

A module of its own so that cli.py (which loads it when `run` is named) and sweep.py (which runs its grid through it,
with every one of its options) both import it, and neither imports the other.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
from collections.abc import Iterator
from pathlib import Path

import click

from uniform_herding.catalogue import PROFILES, ConfigError, expand_run_ids, name_runs, resolve
from uniform_herding.method.components import CHOICES
from uniform_herding.method.config import DEVICES, SEEDS, TRAINING_ENVIRONMENT, Config
from uniform_herding.runs.executor import slurm_options


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
    help="Seed, 0..2^32-1 (repeatable). Default: 1993 2023 42.",
)
@click.option("--profile", type=click.Choice(list(PROFILES)), default="paper", show_default=True)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    envvar="UH_DATA_DIR",
    default="data",
    show_default=True,
    help="Where the archive is (or is downloaded to). Env: UH_DATA_DIR.",
)
@click.option(
    "--results-dir",
    type=click.Path(path_type=Path),
    envvar="UH_RESULTS_DIR",
    default="results",
    show_default=True,
    help="Where results/<RUN>/seed-<S>/ go. Env: UH_RESULTS_DIR.",
)
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
    seeds: tuple[int, ...],
    profile: str,
    data_dir: Path,
    results_dir: Path,
    archive: Path | None,
    force: bool,
    precision: str | None,
    device: str | None,
    deterministic: bool,
    executor: str | None,
    jobs: int | None,
    wait: bool,
    procedure: bool,
    cancel: bool,
    slurm_config: Path | None,
    sets: tuple[str, ...] = (),
    base: str | None = None,
    **slurm: object,
) -> None:
    """Run RUN_IDS for each seed; write results/<RUN>/seed-<S>/result.json. `all`: the paper's twelve run
    IDs; `refresh`: r1-r3, beyond the paper, with B1 and B3 (`uh list`). A RUN_ID may be a variant ID
    (B3+rho=5); --set makes variants.

    A finished run is skipped; an interrupted one resumes after its last finished task. SIGTERM or
    SIGINT stops at once, keeps the checkpoint and exits with 128 + the signal number
    (docs/reliability.md), from the first moment on.
    """
    with starting(procedure, cancel, executor, wait, force, results_dir):
        runs = run_names(run_ids, sets, profile, base)
        run_pairs(
            runs,
            seeds,
            profile,
            data_dir,
            results_dir,
            archive,
            force,
            precision,
            executor,
            jobs,
            wait,
            slurm_config,
            slurm,
            device,
            deterministic,
            procedure,
        )


def run_named(
    runs: dict[str, Config],
    seeds: tuple[int, ...],
    profile: str,
    data_dir: Path,
    results_dir: Path,
    archive: Path | None,
    force: bool,
    precision: str | None,
    device: str | None,
    deterministic: bool,
    executor: str | None,
    jobs: int | None,
    wait: bool,
    procedure: bool,
    cancel: bool,
    slurm_config: Path | None,
    base: str | None = None,
    **slurm: object,
) -> None:
    """uh run's work on runs named and resolved already (run_names), with every option of uh run: uh sweep's grid,
    resolved once, before the grid was printed. `base` is in the runs' IDs already."""
    with starting(procedure, cancel, executor, wait, force, results_dir):
        run_pairs(
            runs,
            seeds,
            profile,
            data_dir,
            results_dir,
            archive,
            force,
            precision,
            executor,
            jobs,
            wait,
            slurm_config,
            slurm,
            device,
            deterministic,
            procedure,
        )


@contextlib.contextmanager
def starting(
    procedure: bool, cancel: bool, executor: str | None, wait: bool, force: bool, results_dir: Path
) -> Iterator[None]:
    """uh run's start: the procedure's options checked, --cancel done (and the command ended), then uh run's signal
    handlers from the first moment on; a signal ends the command with 128 + its number."""
    from uniform_herding.runs.durability import Interrupted, stop_on_signals

    check_procedure_options(procedure, cancel, executor, wait, force)
    if cancel:
        from uniform_herding.chain import cancel as cancel_chain

        click.get_current_context().exit(cancel_chain(results_dir, click.echo))
    with stop_on_signals():
        try:
            yield
        except Interrupted as e:
            click.echo(f"Error: {e}", err=True)
            click.get_current_context().exit(128 + e.signum)


def check_procedure_options(procedure: bool, cancel: bool, executor: str | None, wait: bool, force: bool) -> None:
    """--procedure and --cancel: with what they go, each refusal one line."""
    if cancel and not procedure:
        raise click.UsageError("--cancel goes with --procedure: uh run RUN_IDS --executor slurm --procedure --cancel")
    if procedure and executor != "slurm":
        raise click.UsageError(
            "--procedure needs --executor slurm; on one machine ./reproduce.sh next follows the procedure"
        )
    if procedure and (wait or force):
        raise click.UsageError(
            f"--procedure does not take {'--wait' if wait else '--force'}: the chain runs without "
            "this terminal (follow it with uh status) and resumes from the results it finds"
        )


class BadName(click.ClickException):
    """A run ID, variant, --set or setting (UH_COMPILE, UH_STEP) that cannot be run: one line, exit 2 (as
    click's usage errors), nothing written."""

    exit_code = 2


def run_names(
    run_ids: tuple[str, ...], sets: tuple[str, ...], profile: str, base: str | None = None
) -> dict[str, Config]:
    """The canonical run and variant IDs that RUN_IDS with --set (and --base) name, in order, each with its config
    under `profile`: resolved (and so checked) here, once for the whole command."""
    try:
        ids = name_runs(expand_run_ids(run_ids), sets, click.echo, base)
        return {run_id: resolve(run_id, profile) for run_id in ids}
    except ConfigError as e:
        raise BadName(str(e)) from None


def run_pairs(
    runs: dict[str, Config],
    seeds: tuple[int, ...],
    profile: str,
    data_dir: Path,
    results_dir: Path,
    archive: Path | None,
    force: bool,
    precision: str | None,
    executor: str | None,
    jobs: int | None,
    wait: bool,
    slurm_config: Path | None,
    slurm: dict,
    device: str | None = None,
    deterministic: bool = False,
    procedure: bool = False,
) -> None:
    """`uh run`'s work, under its signal handlers: pairs found done are skipped before torch is imported; the
    device is chosen (or refused) before any run starts, on the machine that runs them (Slurm: the nodes)."""
    from uniform_herding.runs.durability import Interrupted, RunError
    from uniform_herding.runs.results import ResultError, check_dir_profile, done_already, result_path

    ids = list(runs)  # canonical run and variant IDs, resolved and checked (run_names)
    try:
        check_dir_profile(results_dir, profile)  # a results dir holds one profile
        pairs = [
            (run_id, seed)
            for run_id in ids
            for seed in seeds or SEEDS
            if not done_already(result_path(results_dir, run_id, seed), run_id, seed, profile, force, click.echo)
        ]
    except ResultError as e:
        raise click.ClickException(str(e)) from None
    if not pairs and not procedure:  # a chain with every run done starts at its controller: it checks and reports
        return
    from uniform_herding.runs.provenance import modified_notice

    if notice := modified_notice():  # once, before any run starts (a job's result records it too)
        click.echo(notice)
    from uniform_herding.data.archive import DataError

    if executor is None and jobs is not None and jobs > 1:
        executor = "local"
    from uniform_herding.method import engine, graph
    from uniform_herding.runs.devices import select, wanted

    try:  # the settings read from the environment, checked before any run starts: bad input, as a bad run ID
        engine.compile_mode(), graph.setting()
    except ValueError as e:
        raise BadName(str(e)) from None
    try:
        cuda = wanted(device, profile) == "cuda" if executor == "slurm" else select(device, profile).type == "cuda"
    except ValueError as e:  # DeviceError, or a bad UH_CPU_THREADS
        raise click.ClickException(str(e)) from None
    if executor:
        from uniform_herding.runs import executor as submit
        from uniform_herding.runs.run import prepare_archive

        try:
            prepare_archive(runs[ids[0]], data_dir, archive)  # download or synthesise once, not per job
        except DataError as e:
            raise click.ClickException(str(e)) from None
        template = submit.RunPair(
            "",
            0,
            profile,
            data_dir.resolve(),
            results_dir.resolve(),
            archive.resolve() if archive else None,
            force,
            precision,
            device,
            deterministic,
        )
        tasks = [dataclasses.replace(template, run_id=run_id, seed=seed) for run_id, seed in pairs]
        if executor == "local":
            code = submit.run_local(tasks, submit.local_slots(jobs, cuda), results_dir, click.echo)
        else:
            given = {k.removeprefix("slurm_"): v for k, v in slurm.items()}
            settings = submit.slurm_settings(slurm_config, given, cuda)
            if procedure:
                from uniform_herding.chain import start

                code = start(ids, list(seeds or SEEDS), template, settings, results_dir.resolve(), click.echo)
            else:
                code = submit.submit_slurm(tasks, settings, results_dir, wait, click.echo)
        click.get_current_context().exit(code)
    from uniform_herding.runs.run import run_seed

    progress = profile == "paper" and sys.stderr.isatty()
    for run_id, seed in pairs:
        try:
            run_seed(
                run_id,
                runs[run_id],
                seed,
                profile,
                data_dir,
                results_dir,
                archive,
                force,
                progress,
                click.echo,
                precision,
                device,
                deterministic,
            )
        except (DataError, RunError, ValueError) as e:
            raise click.ClickException(f"{run_id} seed {seed}: {e}") from None
        except Interrupted as e:
            raise Interrupted(e.signum, e.detail, where=f"{run_id} seed {seed}") from None
