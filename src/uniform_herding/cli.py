"""The `uh` command: run IDs, data, quotas, aggregation, checking and reporting."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from uniform_herding.aggregate import aggregate_command
from uniform_herding.archive import data_cmd
from uniform_herding.check import check_command
from uniform_herding.config import PROFILES, RUNS, SEEDS, ConfigError, resolve
from uniform_herding.executor import slurm_options
from uniform_herding.report import report_command
from uniform_herding.status import status_command


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Reproduce 'Uniform Herding: Exemplar Replay with Representation Refresh'."""


@main.command("list")
def list_runs() -> None:
    """Print every run ID with what it changes."""
    for spec in RUNS.values():
        changes = ", ".join(f"{k}={v}" for k, v in spec.changes.items()) or "(the method itself)"
        click.echo(f"{spec.run_id:3} {spec.name:20} {spec.description}  [{changes}]")


@main.command("quotas")
@click.option("--budget", "-M", type=click.IntRange(min=1), required=True, help="Active budget M.")
@click.option("--tasks", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--classes-per-task", type=click.IntRange(min=1), default=10, show_default=True)
def quotas_cmd(budget: int, tasks: int, classes_per_task: int) -> None:
    """Per-class quota q after each task (min-max where they differ), as in the paper's appendix."""
    from uniform_herding.memory import quotas

    cells = []
    for t in range(tasks):
        q = quotas(budget, classes_per_task * (t + 1))
        cells.append(f"{min(q)}" if min(q) == max(q) else f"{min(q)}-{max(q)}")
    click.echo("M      " + " ".join(f"T{t:<7}" for t in range(tasks)))
    click.echo(f"{budget:<6} " + " ".join(f"{c:<8}" for c in cells))


@main.command("run")
@click.argument("run_ids", nargs=-1, required=True)
@click.option("--seed", "seeds", type=click.IntRange(0, 2**32 - 1), multiple=True,
              help="Seed, 0..2^32-1 (repeatable). Default: 1993 2023 42.")
@click.option("--profile", type=click.Choice(list(PROFILES)), default="paper", show_default=True)
@click.option("--data-dir", type=click.Path(path_type=Path), envvar="UH_DATA_DIR", default="data",
              show_default=True, help="Where the archive is (or is downloaded to). Env: UH_DATA_DIR.")
@click.option("--results-dir", type=click.Path(path_type=Path), envvar="UH_RESULTS_DIR", default="results",
              show_default=True, help="Where results/<RUN>/seed-<S>/ go. Env: UH_RESULTS_DIR.")
@click.option("--archive", type=click.Path(path_type=Path, dir_okay=False),
              help="Use this archive (official md5, or the md5 in its .md5 sidecar) instead of the data dir.")
@click.option("--force", is_flag=True, help="Rerun finished runs and discard checkpoints.")
@click.option("--executor", type=click.Choice(["local", "slurm"]), envvar="UH_EXECUTOR",
              help="Run each (run ID, seed) pair as a submitit job: `local` on this machine (N per visible GPU, "
              "else one per CPU core), `slurm` as one job array (docs/cluster.md). Default: one after another "
              "in this process. Results do not depend on it. Env: UH_EXECUTOR.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), envvar="UH_JOBS",
              help="Short for --executor local with N runs per GPU (on a CPU: N at once). Env: UH_JOBS.")
@click.option("--wait", is_flag=True, help="With --executor slurm: follow the array until every run has ended.")
@slurm_options
def run_cmd(run_ids: tuple[str, ...], seeds: tuple[int, ...], profile: str, data_dir: Path,
            results_dir: Path, archive: Path | None, force: bool, executor: str | None, jobs: int | None,
            wait: bool, slurm_config: Path | None, **slurm: object) -> None:
    """Run RUN_IDS (or `all`) for each seed; write results/<RUN>/seed-<S>/result.json.

    A finished run is skipped; an interrupted one resumes after its last finished task. SIGTERM or
    SIGINT stops at once, keeps the checkpoint and exits with 128 + the signal number
    (docs/reliability.md).
    """
    from uniform_herding.archive import DataError
    from uniform_herding.run import Interrupted, RunError, prepare_archive, run_seed, stop_on_signals

    ids = list(RUNS) if run_ids == ("all",) else list(run_ids)
    try:
        configs = [resolve(run_id, profile) for run_id in ids]
    except ConfigError as e:
        raise click.UsageError(str(e)) from None
    pairs = [(run_id, seed) for run_id in ids for seed in seeds or SEEDS]
    if executor is None and jobs is not None and jobs > 1:
        executor = "local"
    if executor:
        from uniform_herding import executor as submit

        try:
            prepare_archive(configs[0], data_dir, archive)  # download or synthesise once, not per job
        except DataError as e:
            raise click.ClickException(str(e)) from None
        tasks = [submit.RunPair(run_id, seed, profile, data_dir.resolve(), results_dir.resolve(),
                                archive.resolve() if archive else None, force) for run_id, seed in pairs]  # fmt: skip
        if executor == "local":
            code = submit.run_local(tasks, submit.local_slots(jobs), results_dir, click.echo)
        else:
            settings = submit.slurm_settings(slurm_config, {k.removeprefix("slurm_"): v for k, v in slurm.items()})
            code = submit.submit_slurm(tasks, settings, results_dir, wait, click.echo)
        click.get_current_context().exit(code)
    progress = profile == "paper" and sys.stderr.isatty()
    with stop_on_signals():
        for run_id, seed in pairs:
            try:
                run_seed(run_id, seed, profile, data_dir, results_dir, archive, force, progress, click.echo)
            except (DataError, RunError, ValueError) as e:
                raise click.ClickException(f"{run_id} seed {seed}: {e}") from None
            except Interrupted as e:
                click.echo(f"Error: {run_id} seed {seed} {e}", err=True)
                click.get_current_context().exit(128 + e.signum)


# --- commands contributed by other modules (one line each) ---------------------------------------
main.add_command(aggregate_command)
main.add_command(check_command)
main.add_command(data_cmd)
main.add_command(report_command)
main.add_command(status_command)
