"""`uh run`'s work: the run IDs named (with --set and --base) and checked, then each pair not done trained here, as
submitit jobs (runs/executor.py), or as the procedure's Slurm chain (chain.py).

A module of its own so that `uh run` (commands/run.py) and `uh sweep` (sweep.py, which runs its grid through it, with
every option of uh run) both use it, and neither imports the other. Pairs found done are skipped before torch is
imported; the device is chosen (or refused) before any run starts, on the machine that runs them (Slurm: the nodes).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from uniform_herding.catalogue import ConfigError, expand_run_ids, name_runs, resolve
from uniform_herding.errors import UhError
from uniform_herding.method.config import Config
from uniform_herding.runs.pair import RunOptions, RunPair

Echo = Callable[[str], None]


class BadName(UhError):
    """A run ID, variant, --set or setting (UH_COMPILE, UH_STEP) that cannot be run: one line, exit 2, nothing
    written."""


class BadOptions(UhError):
    """Options of `uh run` that do not go together: one line, exit 2, nothing written."""


class RunFailed(UhError):
    """A pair that cannot run here (its results dir, device or data) or that failed: one line, exit 1."""

    exit_code = 1


@dataclasses.dataclass(frozen=True)
class Scheduling:
    """Where the pairs run: one after another in this process, as local jobs (--executor local, --jobs N), as one
    Slurm array (--executor slurm, --wait) or as the procedure's chain (--procedure; --cancel ends it), with the Slurm
    settings of --slurm-config and the --slurm-* options given."""

    executor: str | None = None
    jobs: int | None = None
    wait: bool = False
    procedure: bool = False
    cancel: bool = False
    slurm_config: Path | None = None
    slurm: dict[str, Any] = dataclasses.field(default_factory=dict)  # --slurm-KEY's value by KEY; None: not given

    @property
    def kind(self) -> str | None:
        """The executor the pairs go to: --executor, else `local` for --jobs over 1; None: this process."""
        return self.executor or ("local" if self.jobs is not None and self.jobs > 1 else None)

    def check(self, force: bool) -> None:
        """--procedure and --cancel: with what they go, each refusal one line."""
        if self.cancel and not self.procedure:
            raise BadOptions("--cancel goes with --procedure: uh run RUN_IDS --executor slurm --procedure --cancel")
        if self.procedure and self.executor != "slurm":
            raise BadOptions(
                "--procedure needs --executor slurm; on one machine ./reproduce.sh next follows the procedure"
            )
        if self.procedure and (self.wait or force):
            raise BadOptions(
                f"--procedure does not take {'--wait' if self.wait else '--force'}: the chain runs without "
                "this terminal (follow it with uh status) and resumes from the results it finds"
            )


@dataclasses.dataclass(frozen=True)
class Plan:
    """How one command runs the runs it names: each of its seeds, under the options every pair shares, scheduled as
    asked."""

    seeds: tuple[int, ...]
    options: RunOptions
    scheduling: Scheduling


def run(run_ids: tuple[str, ...], sets: tuple[str, ...], base: str | None, plan: Plan, echo: Echo) -> int:
    """`uh run`: the runs RUN_IDS with --set (and --base) name, each seed of each as `plan` asks; the exit status."""
    if (code := cancelled(plan, echo)) is not None:
        return code
    return run_pairs(run_names(run_ids, sets, plan.options.profile, base, echo), plan, echo)


def run_named(runs: dict[str, Config], plan: Plan, echo: Echo) -> int:
    """`uh run`'s work on runs named and resolved already (run_names): uh sweep's grid, resolved once, before the
    grid was printed; the exit status."""
    if (code := cancelled(plan, echo)) is not None:
        return code
    return run_pairs(runs, plan, echo)


def cancelled(plan: Plan, echo: Echo) -> int | None:
    """The scheduling options checked; with --cancel the results dir's chain ended, and its exit status."""
    plan.scheduling.check(plan.options.force)
    if not plan.scheduling.cancel:
        return None
    from uniform_herding.chain import cancel

    return cancel(plan.options.results_dir, echo)


def run_names(
    run_ids: tuple[str, ...], sets: tuple[str, ...], profile: str, base: str | None = None, echo: Echo = print
) -> dict[str, Config]:
    """The canonical run and variant IDs that RUN_IDS with --set (and --base) name, in order, each with its config
    under `profile`: resolved (and so checked) here, once for the whole command."""
    try:
        ids = name_runs(expand_run_ids(run_ids), sets, echo, base)
        return {run_id: resolve(run_id, profile) for run_id in ids}
    except ConfigError as e:
        raise BadName(str(e)) from None


def run_pairs(runs: dict[str, Config], plan: Plan, echo: Echo) -> int:
    """Each pair of `runs` and the seeds not done already, here or as `plan` schedules them; the exit status.
    Every setting is checked before any run starts."""
    todo = pairs_to_run(runs, plan, echo)
    if not todo and not plan.scheduling.procedure:  # a chain with every run done starts at its controller: it checks
        return 0
    from uniform_herding.runs.provenance import modified_notice

    if notice := modified_notice():  # once, before any run starts (a job's result records it too)
        echo(notice)
    check_environment()
    cuda = uses_gpu(plan.options, plan.scheduling.kind)
    if plan.scheduling.kind is None:
        return run_here(todo, runs, echo)
    return submit(todo, runs, plan, cuda, echo)


def pairs_to_run(runs: dict[str, Config], plan: Plan, echo: Echo) -> list[RunPair]:
    """Each pair of the runs and seeds, in order, but those done already (saying so); the results dir's profile
    checked first: a results dir holds one profile."""
    from uniform_herding.runs.results import ResultError, check_dir_profile, done_already, result_path

    options = plan.options
    try:
        check_dir_profile(options.results_dir, options.profile)
        return [
            options.pair(run_id, seed)
            for run_id in runs
            for seed in plan.seeds
            if not done_already(
                result_path(options.results_dir, run_id, seed), run_id, seed, options.profile, options.force, echo
            )
        ]
    except ResultError as e:
        raise RunFailed(str(e)) from None


def check_environment() -> None:
    """The settings read from the environment (UH_COMPILE, UH_STEP), checked before any run starts: bad input, as a
    bad run ID."""
    from uniform_herding.method import engine, graph

    try:
        engine.compile_mode(), graph.setting()
    except ValueError as e:
        raise BadName(str(e)) from None


def uses_gpu(options: RunOptions, executor: str | None) -> bool:
    """Whether the runs train on a GPU: on Slurm as the profile and --device ask (the nodes' GPUs, not this host's);
    else the device chosen here, or refused, before any run starts (DeviceError, a bad UH_CPU_THREADS)."""
    from uniform_herding.runs.devices import select, wanted

    try:
        if executor == "slurm":
            return wanted(options.device, options.profile) == "cuda"
        return select(options.device, options.profile).type == "cuda"
    except ValueError as e:
        raise RunFailed(str(e)) from None


def run_here(todo: list[RunPair], runs: dict[str, Config], echo: Echo) -> int:
    """Each pair in this process, one after another, with the config its run ID was resolved to; a stop names the
    pair it stopped."""
    from uniform_herding.data.archive import DataError
    from uniform_herding.runs.durability import Interrupted, RunError
    from uniform_herding.runs.run import run_seed

    for pair in todo:
        progress = pair.options.profile == "paper" and sys.stderr.isatty()  # a bar per task, on a terminal
        try:
            run_seed(pair, runs[pair.run_id], echo, progress)
        except (DataError, RunError, ValueError) as e:
            raise RunFailed(f"{pair}: {e}") from None
        except Interrupted as e:
            raise Interrupted(e.signum, e.detail, where=str(pair)) from None
    return 0


def submit(todo: list[RunPair], runs: dict[str, Config], plan: Plan, cuda: bool, echo: Echo) -> int:
    """The pairs as submitit jobs (each resolves its run in its own process), on this machine or on Slurm, or as the
    procedure's chain; the archive made ready once, not per job."""
    from uniform_herding.data.archive import DataError
    from uniform_herding.runs import executor
    from uniform_herding.runs.run import prepare_archive

    options, scheduling = plan.options, plan.scheduling
    try:
        prepare_archive(next(iter(runs.values())), options.data_dir, options.archive)
    except DataError as e:
        raise RunFailed(str(e)) from None
    anywhere = options.resolved()  # a job starts elsewhere, or later: its paths are absolute
    jobs = [anywhere.pair(pair.run_id, pair.seed) for pair in todo]
    if scheduling.kind == "local":
        return executor.run_local(jobs, executor.local_slots(scheduling.jobs, cuda), options.results_dir, echo)
    settings = executor.slurm_settings(scheduling.slurm_config, scheduling.slurm, cuda)
    if scheduling.procedure:
        from uniform_herding.chain import start

        return start(list(runs), list(plan.seeds), anywhere, settings, anywhere.results_dir, echo)
    return executor.submit_slurm(jobs, settings, options.results_dir, scheduling.wait, echo)
