"""Aggregation over seeds as the paper reports it (Sec. 3.5): mean +/- population std per run ID, and the deltas
against the run each is compared with (variants.base_of: B3 for the ablations and sweeps, a variant's base) paired
by seed, then averaged. A mean of one seed has no spread: it prints "(n = 1)", never "+/- 0.00" (`with_spread`,
which uh report prints its means with too).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
import pandas as pd
from click.core import ParameterSource

from uniform_herding.method.config import RUNS, SEEDS
from uniform_herding.method.metrics import REPORTED
from uniform_herding.runs.provenance import Made, code_hash, made_by
from uniform_herding.runs.results import (
    METRICS,
    ResultError,
    load_results,
    per_seed_table,
    read_per_seed_csv,
    results_profile,
    write_per_seed_csv,
)
from uniform_herding.variants import base_of, run_name, sort_key


def summarize(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per run ID (RUNS order, then variants): n seeds, mean and population std (ddof=0) of each metric."""
    grouped = per_seed.groupby("run_id")
    shown = [*METRICS, *(m for m in REPORTED if m in per_seed)]  # a per-seed CSV holds the checked three only
    table = pd.concat(
        {"n": grouped.size()}
        | {f"{m}_mean": grouped[m].mean() for m in shown}
        | {f"{m}_std": grouped[m].std(ddof=0) for m in shown},
        axis=1,
    )
    return table.reindex(sorted(table.index, key=sort_key)).rename_axis("run_id")


def wide(per_seed: pd.DataFrame) -> pd.DataFrame:
    """The per-seed table as seed x (metric, run ID), what paired deltas read; seeds in the paper's order (SEEDS),
    then the others rising, whatever the order of the rows."""
    seeds = sorted(set(per_seed["seed"]), key=lambda s: (SEEDS.index(s) if s in SEEDS else len(SEEDS), s))
    return per_seed.pivot(index="seed", columns="run_id", values=list(METRICS)).reindex(seeds)


def contrast(table: Any, weights: tuple[tuple[str, int], ...], metric: str) -> Any:
    """Per seed, the sum of weight x `metric` over run IDs (a paired delta: ((run, 1), (other, -1))), from anything
    indexed by (metric, run ID): a `wide` table (a Series by seed) or procedure.replay's arrays over the registered
    seeds; NaN on a seed some run lacks. The one place per-seed deltas are taken: claims, variants, the report."""
    return sum(w * table[metric, r] for r, w in weights)


def paired(per_seed: pd.DataFrame, run_id: str, reference: str, metric: str) -> pd.Series:
    """Per-seed `run_id - reference` of `metric`, over the seeds both have (indexed by seed)."""
    table = wide(per_seed[per_seed["run_id"].isin([run_id, reference])])
    if {run_id, reference} - set(table.columns.get_level_values("run_id")):
        return pd.Series(dtype=float, name=metric).rename_axis("seed")
    return contrast(table, ((run_id, 1), (reference, -1)), metric).dropna().rename(metric)


def paired_deltas(per_seed: pd.DataFrame) -> pd.DataFrame:
    """Per run ID compared with another (base_of): n paired seeds and the mean paired delta of each metric.

    Runs sharing no seed with their base are left out (there is nothing to pair).
    """
    rows = {}
    for run_id in (r for r in RUNS if base_of(r) is not None):
        deltas = {m: paired(per_seed, run_id, base_of(run_id), m) for m in METRICS}
        n = len(deltas["acc"])
        if n:
            rows[run_id] = {"n_paired": n} | {m: d.mean() for m, d in deltas.items()}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["n_paired", *METRICS]).rename_axis("run_id")


def with_spread(mean: str, std: str, n: int | None, pm: str = " +/- ") -> str:
    """A mean over `n` seeds (None: not counted) and its population std, both formatted: `47.00 +/- 1.25`; a mean of
    one seed has no spread to print, so `47.00 (n = 1)`, never `+/- 0.00`."""
    return f"{mean} (n = {n})" if n is not None and n < 2 else f"{mean}{pm}{std}"


def format_table(per_seed: pd.DataFrame, profile: str = "paper") -> str:
    """The printed table: mean +/- std per metric; paired deltas against the run each is compared with (base_of):
    B3 for ablations and sweeps, a variant's base."""
    summary = summarize(per_seed)
    reported = [m for m in REPORTED if f"{m}_mean" in summary]  # reported, never checked (metrics.REPORTED)
    ids = max(3, *(len(r) for r in summary.index))
    width = max([20, *(len(run_name(r, profile)) for r in summary.index)])  # r2's name is longer
    lines = [
        f"{'run':{ids}} {'name':{width}} {'n':>2}  {'ACC':>15} {'F':>15} {'BWT':>16}"
        + "".join(f" {name.upper():>15}" for name in reported)
        + "   deltas vs B3 (paired)"
    ]
    for run_id, row in summary.iterrows():
        n_seeds = int(row["n"])
        cells = [with_spread(f"{row[f'{m}_mean']:.2f}", f"{row[f'{m}_std']:.2f}", n_seeds) for m in METRICS]
        line = f"{run_id:{ids}} {run_name(run_id, profile):{width}} {n_seeds:>2}  "
        line += f"{cells[0]:>15} {cells[1]:>15} {cells[2]:>16}"
        cells = [with_spread(f"{row[m + '_mean']:.2f}", f"{row[m + '_std']:.2f}", n_seeds) for m in reported]
        line += "".join(f" {cell:>15}" for cell in cells)
        other = base_of(run_id)
        if other is not None:
            d = {m: paired(per_seed, run_id, other, m).mean() for m in METRICS}
            n = len(paired(per_seed, run_id, other, "acc"))
            if n:
                line += (f"   dACC {d['acc']:+6.2f}  dF {d['forgetting']:+6.2f}  dBWT {d['bwt']:+6.2f}  (n={n})"
                         + (f" vs {other}" if other != "B3" else ""))  # fmt: skip
            else:
                line += f"   (no seed shared with {other})"
        lines.append(line)
    return "\n".join(lines)


class InputError(click.ClickException):
    """Inputs that cannot be used (malformed, mismatched): exit code 2, like a usage error."""

    exit_code = 2


def input_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """`--results-dir R | --per-seed CSV`, shared by `uh aggregate` and `uh check`."""
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


def load_input(results_dir: Path | None, per_seed: Path | None) -> tuple[pd.DataFrame, str | None, Made]:
    """The per-seed table, its profile (None for a CSV, which does not record one) and the results this checkout's
    code did not make (a CSV records no code)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source("results_dir") == ParameterSource.ENVIRONMENT and per_seed:
        results_dir = None  # an explicit --per-seed wins over UH_RESULTS_DIR
    if results_dir is not None and per_seed is not None:
        raise click.UsageError("give --results-dir or --per-seed, not both")
    try:
        if per_seed is not None:
            return read_per_seed_csv(per_seed), None, Made(code_hash("run"), recorded=False)
        results = load_results(results_dir or Path("results"))
        return per_seed_table(results), results_profile(results), made_by(results)
    except ResultError as e:
        raise InputError(str(e)) from None


@click.command("aggregate")
@input_options
@click.option(
    "--per-seed-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="Also write the per-seed table here (atomically), e.g. expected_results/smoke/per_seed.csv.",
)
def aggregate_command(results_dir: Path | None, per_seed: Path | None, per_seed_out: Path | None) -> None:
    """Mean +/- population std over seeds per run ID, and paired deltas vs B3 for a* and s* runs."""
    table, profile, _ = load_input(results_dir, per_seed)
    click.echo(f"profile: {profile or 'not recorded (per-seed CSV)'}")
    click.echo(format_table(table, profile or "paper"))
    if per_seed_out is not None:
        write_per_seed_csv(per_seed_out, table.sort_values(["run_id", "seed"], key=_paper_order))
        click.echo(f"wrote {per_seed_out}")


def _paper_order(column: pd.Series) -> pd.Series:
    """Sort key: run IDs in RUNS order (variants after them), seeds in SEEDS order (others last), as the
    paper lists them."""
    if column.name == "run_id":
        rank = {r: i for i, r in enumerate(sorted(set(column), key=sort_key))}
        return column.map(rank)
    return column.map(lambda s: SEEDS.index(s) if s in SEEDS else len(SEEDS))
