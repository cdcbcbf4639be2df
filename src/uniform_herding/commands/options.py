"""Options shared by commands: `--results-dir R | --per-seed CSV`, the input of `uh aggregate` and `uh check`."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource


def input_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--results-dir R | --per-seed CSV`, shared by `uh aggregate` and `uh check` (read with `chosen_input`)."""
    command = click.option(
        "--per-seed",
        type=click.Path(dir_okay=False, path_type=Path),
        help="A per-seed CSV (run_id,seed,acc,forgetting,bwt) instead of a results dir.",
    )(command)
    return click.option(
        "--results-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="UH_RESULTS_DIR",
        help="Directory holding <RUN>/seed-<SEED>/result.json [default: results]. Env: UH_RESULTS_DIR.",
    )(command)


def chosen_input(results_dir: Path | None, per_seed: Path | None) -> tuple[Path | None, Path | None]:
    """The input `input_options` gave: an explicit --per-seed wins over UH_RESULTS_DIR; both given is a usage error."""
    ctx = click.get_current_context()
    if ctx.get_parameter_source("results_dir") == ParameterSource.ENVIRONMENT and per_seed:
        results_dir = None
    if results_dir is not None and per_seed is not None:
        raise click.UsageError("give --results-dir or --per-seed, not both")
    return results_dir, per_seed


def results_dir_option(help: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--results-dir`, ./results unless UH_RESULTS_DIR says otherwise, never a file, as every command that reads or
    writes one takes it; `help` says what this command does with it."""
    return click.option(
        "--results-dir",
        type=click.Path(file_okay=False, path_type=Path),
        envvar="UH_RESULTS_DIR",
        default="results",
        show_default=True,
        help=f"{help} Env: UH_RESULTS_DIR.".lstrip(),
    )


def data_dir_option(help: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """`--data-dir`, ./data unless UH_DATA_DIR says otherwise: where the archive is, as for uh run."""
    return click.option(
        "--data-dir",
        type=click.Path(path_type=Path),
        envvar="UH_DATA_DIR",
        default="data",
        show_default=True,
        help=f"{help} Env: UH_DATA_DIR.".lstrip(),
    )
