"""Aggregation over seeds as the paper reports it (Sec. 3.5): mean +/- population std per run ID,
and for ablations and sweeps the deltas against Uniform Herding (B3) paired by seed, then averaged;
for a variant (`uh run --set`, `uh sweep`) the deltas against its base run ID.
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
from uniform_herding.method.variants import base_of, is_variant, run_name, sort_key
from uniform_herding.runs.results import (
    METRICS,
    ResultError,
    load_results,
    per_seed_table,
    read_per_seed_csv,
    results_profile,
    write_per_seed_csv,
)

REFERENCE = "B3"


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


def paired_deltas(per_seed: pd.DataFrame, reference: str = REFERENCE) -> pd.DataFrame:
    """Per run ID other than `reference`: n paired seeds and the mean paired delta of each metric.

    Runs sharing no seed with the reference are left out (there is nothing to pair).
    """
    rows = {}
    for run_id in RUNS:
        if run_id == reference:
            continue
        deltas = {m: paired(per_seed, run_id, reference, m) for m in METRICS}
        n = len(deltas["acc"])
        if n:
            rows[run_id] = {"n_paired": n} | {m: d.mean() for m, d in deltas.items()}
    return pd.DataFrame.from_dict(rows, orient="index", columns=["n_paired", *METRICS]).rename_axis("run_id")


def format_table(per_seed: pd.DataFrame, profile: str = "paper") -> str:
    """The printed table: mean +/- std per metric; paired deltas vs B3 for ablations and sweeps, and
    for each variant against its base."""
    summary = summarize(per_seed)
    reported = [m for m in REPORTED if f"{m}_mean" in summary]  # reported, never checked (metrics.REPORTED)
    ids = max(3, *(len(r) for r in summary.index))
    width = max([20, *(len(run_name(r, profile)) for r in summary.index)])  # r2's name is longer
    lines = [
        f"{'run':{ids}} {'name':{width}} {'n':>2}  {'ACC':>15} {'F':>15} {'BWT':>16}"
        + "".join(f" {name.upper():>15}" for name in reported)
        + f"   deltas vs {REFERENCE} (paired)"
    ]
    for run_id, row in summary.iterrows():
        cells = [f"{row[f'{m}_mean']:.2f} +/- {row[f'{m}_std']:.2f}" for m in METRICS]
        line = f"{run_id:{ids}} {run_name(run_id, profile):{width}} {int(row['n']):>2}  "
        line += f"{cells[0]:>15} {cells[1]:>15} {cells[2]:>16}"
        cells = [f"{row[m + '_mean']:.2f} +/- {row[m + '_std']:.2f}" for m in reported]
        line += "".join(f" {cell:>15}" for cell in cells)
        other = base_of(run_id) if is_variant(run_id) else REFERENCE if run_id[0] in "as" else None
        if other is not None:
            d = {m: paired(per_seed, run_id, other, m).mean() for m in METRICS}
            n = len(paired(per_seed, run_id, other, "acc"))
            if n:
                line += (f"   dACC {d['acc']:+6.2f}  dF {d['forgetting']:+6.2f}  dBWT {d['bwt']:+6.2f}  (n={n})"
                         + (f" vs {other}" if other != REFERENCE else ""))  # fmt: skip
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


def load_input(results_dir: Path | None, per_seed: Path | None) -> tuple[pd.DataFrame, str | None]:
    """The per-seed table and its profile (None for a CSV, which does not record one)."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.get_parameter_source("results_dir") == ParameterSource.ENVIRONMENT and per_seed:
        results_dir = None  # an explicit --per-seed wins over UH_RESULTS_DIR
    if results_dir is not None and per_seed is not None:
        raise click.UsageError("give --results-dir or --per-seed, not both")
    try:
        if per_seed is not None:
            return read_per_seed_csv(per_seed), None
        results = load_results(results_dir or Path("results"))
        return per_seed_table(results), results_profile(results)
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
    table, profile = load_input(results_dir, per_seed)
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
