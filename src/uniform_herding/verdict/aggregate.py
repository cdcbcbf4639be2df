"""Aggregation over seeds as the paper reports it (Sec. 3.5): mean +/- population std per run ID, and the deltas
against the run each is compared with (catalogue.base_of: B3 for the ablations and sweeps, a variant's base) paired
by seed, then averaged. A mean of one seed has no spread: it prints "(n = 1)", never "+/- 0.00" (`with_spread`,
which uh report prints its means with too).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pandas as pd

from uniform_herding.catalogue import RUNS, base_of, run_name, sort_key
from uniform_herding.errors import UhError
from uniform_herding.method.config import SEEDS
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
from uniform_herding.runs.terminal import Column, fit_table


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


def delta_text(per_seed: pd.DataFrame, run_id: str) -> str:
    """The mean paired deltas of `run_id` against the run it is compared with (base_of), '' for a run compared with
    none: `dACC -1.48  dF +11.66  dBWT -11.97  (n=3)`, and ` vs BASE` where the base is not B3."""
    other = base_of(run_id)
    if other is None:
        return ""
    d = {m: paired(per_seed, run_id, other, m) for m in METRICS}
    if not len(d["acc"]):
        return f"(no seed shared with {other})"
    return (
        f"dACC {d['acc'].mean():+6.2f}  dF {d['forgetting'].mean():+6.2f}  dBWT {d['bwt'].mean():+6.2f}  "
        f"(n={len(d['acc'])})" + (f" vs {other}" if other != "B3" else "")
    )


def format_table(per_seed: pd.DataFrame, profile: str = "paper", width: int | None = None) -> str:
    """The printed table: mean +/- std per metric; paired deltas against the run each is compared with (base_of):
    B3 for ablations and sweeps, a variant's base. No wider than `width` (None: every column; terminal.fit_table):
    AIA and LA, reported and never checked, go first, then the deltas move under their rows."""
    summary = summarize(per_seed)
    reported = [m for m in REPORTED if f"{m}_mean" in summary]  # reported, never checked (metrics.REPORTED)

    def spread(metric: str) -> list[str]:
        return [
            with_spread(f"{row[f'{metric}_mean']:.2f}", f"{row[f'{metric}_std']:.2f}", int(row["n"]))
            for _, row in summary.iterrows()
        ]

    runs = list(summary.index)
    table = [
        Column("run", runs, "<", width=3),
        Column("name", [run_name(r, profile) for r in runs], "<"),
        Column("n", [str(int(n)) for n in summary["n"]], width=2),
        Column("ACC", spread("acc"), gap=2, width=15),
        Column("F", spread("forgetting"), width=15),
        Column("BWT", spread("bwt"), width=16),
        *(Column(m.upper(), spread(m), fit="drop", width=15) for m in reported),
        Column("deltas vs B3 (paired)", [delta_text(per_seed, r) for r in runs], "<", fit="wrap", gap=3),
    ]
    return "\n".join(fit_table(table, width))


class InputError(UhError):
    """Inputs that cannot be used (malformed, mismatched): exit code 2, like a usage error."""


def load_input(results_dir: Path | None, per_seed: Path | None) -> tuple[pd.DataFrame, str | None, Made]:
    """The per-seed table of a per-seed CSV, else of a results dir (default ./results), its profile (None for a CSV,
    which does not record one) and the results this checkout's code did not make (a CSV records no code)."""
    try:
        if per_seed is not None:
            return read_per_seed_csv(per_seed), None, Made(code_hash(), recorded=False)
        results_dir = results_dir or Path("results")
        results = load_results(results_dir)
        return per_seed_table(results), results_profile(results), made_by(results, results_dir=results_dir)
    except ResultError as e:
        raise InputError(str(e)) from None


def aggregate(
    results_dir: Path | None, per_seed: Path | None, per_seed_out: Path | None = None
) -> tuple[pd.DataFrame, str | None]:
    """`uh aggregate`: the per-seed table and its profile (load_input); with `per_seed_out`, the table written there
    atomically in the order the paper lists run IDs and seeds (what an expected set's per_seed.csv holds)."""
    table, profile, _ = load_input(results_dir, per_seed)
    if per_seed_out is not None:
        write_per_seed_csv(per_seed_out, table.sort_values(["run_id", "seed"], key=_paper_order))
    return table, profile


def _paper_order(column: pd.Series) -> pd.Series:
    """Sort key: run IDs in RUNS order (variants after them), seeds in SEEDS order (others last), as the
    paper lists them."""
    if column.name == "run_id":
        rank = {r: i for i, r in enumerate(sorted(set(column), key=sort_key))}
        return column.map(rank)
    return column.map(lambda s: SEEDS.index(s) if s in SEEDS else len(SEEDS))
