"""Figures beyond the paper: one per key `uh sweep` swept over two values or more (final ACC and F against the
value), and each variant (`uh run --set`) beside its base, paired by seed.

In the paper's figures' style (style.py: RC, the helpers); each is a FigureSpec like theirs.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from uniform_herding.catalogue import (
    KEYS,
    PAPER_RUNS,
    Variant,
    base_of,
    choices,
    format_value,
    is_variant,
    parse,
    resolve,
    sort_key,
)
from uniform_herding.method.components import settings_read
from uniform_herding.method.config import SEEDS
from uniform_herding.method.metrics import PAPER
from uniform_herding.report.figure_spec import FigureSpec
from uniform_herding.report.load import Runs
from uniform_herding.report.style import RC, panel_title, seed_band, seed_marker
from uniform_herding.verdict.aggregate import paired
from uniform_herding.verdict.decide import t_interval

SWEEP_COLOURS = ("#000000", "#E69F00", "#0072B2", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442")
SWEEP_STYLES = ("-", "--", "-.", ":")


def _sweep_axis(ax: Axes, key: str, values: list, profile: str) -> Callable[[object], float]:
    """Ticks for the swept values; returns value -> x. Numbers on their scale (log 2 when they span a
    factor of 8 or more), other values (memory, head, imprint, ...) as categories in declared order."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        if min(values) > 0 and max(values) / min(values) >= 8:
            ax.set_xscale("log", base=2)
            ax.minorticks_off()
        ax.set_xticks(values, [format_value(v) for v in values])
        scale = {"M": "memory_scale", "b": "retrieval_scale"}.get(key)
        factor = getattr(resolve("B3", profile), scale) if scale else 1.0
        ax.set_xlabel(key + (f" (paper's units; profile {profile} uses x{factor:g})" if factor != 1.0 else ""))
        return float
    ax.set_xticks(range(len(values)), [format_value(v) for v in values])
    ax.set_xlim(-0.5, len(values) - 0.5)
    ax.set_xlabel(key)
    return values.index


def paired_bar(ax: Axes, runs: Runs, x: float, run_id: str, reference: str, metric: str, colour: str) -> bool:
    """At x, the paired 95% t-interval (n - 1 df) of `run_id - reference` over their shared seeds, drawn from the
    reference's mean over those seeds (a bar that crosses that mean is a difference the seeds cannot tell from 0);
    False, drawing nothing, below two shared seeds."""
    deltas = paired(runs.per_seed, run_id, reference, metric)
    ci = t_interval(tuple(deltas))
    if ci is None:
        return False
    rows = runs.per_seed[(runs.per_seed["run_id"] == reference) & runs.per_seed["seed"].isin(deltas.index)]
    start = rows[metric].mean()
    ax.plot(
        [x, x],
        [start + ci[0], start + ci[1]],
        color=colour,
        linewidth=4,
        alpha=0.35,
        solid_capstyle="butt",
        label=f"paired 95% t-interval vs {reference} ({len(deltas)} seeds)",
    )
    ax.plot(
        [x - 0.06, x + 0.06] if ax.get_xscale() == "linear" else [x / 1.04, x * 1.04],
        [start, start],
        color=colour,
        linewidth=1,
    )  # where the reference is, over the shared seeds: the bar's zero
    return True


def _seed_handles(ax: Axes, seeds: set[int]) -> tuple[list, list[str]]:
    """Legend entries for the hollow single-seed marks, in seed order."""
    handles, labels = [], []
    for seed in sorted(seeds, key=lambda s: (s not in SEEDS, SEEDS.index(s) if s in SEEDS else s)):
        handles += ax.plot([], [], marker=seed_marker(seed), color="0.35", markerfacecolor="none", linestyle="none")
        labels.append(f"seed {seed}")
    return handles, labels


def _unique_legend(fig: Figure, ax: Axes, seeds: set[int], ncols: int = 3) -> None:
    """One legend under the figure: `ax`'s entries once each, then the seeds' marks."""
    unique = dict(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    handles, labels = _seed_handles(ax, seeds)
    fig.legend([*unique.values(), *handles], [*unique, *labels], loc="outside lower center", ncols=ncols)


@dataclass(frozen=True)
class SweepLine:
    """Results that differ in `key` alone: one line of a sweep figure."""

    key: str
    context: str  # the ID of the line's other settings (B3, B3+M=1000)
    points: dict[Any, str]  # value of `key` -> the run or variant ID that has it, in value order
    base: str  # the run ID the line's variants are compared with (catalogue.base_of, as the variants table)
    base_value: Any  # the base's own value of `key`, the paper's setting for a paper run; None: the base reads no `key`
    reference: str | None  # what every point is compared with: the base chosen (--base, `vs=`), else the line's run
    # at the base's own value, on the line; None where the line has no such run


def value_order(key: str, value: Any) -> Any:
    """Sort key of a value of `key`: a Literal's values in their declared order, others as they compare."""
    names = choices(key)
    return names.index(value) if names else value


def sweep_lines(run_ids: Iterable[str], profile: str, least: int = 3) -> dict[str, list[SweepLine]]:
    """Per key, the groups of `run_ids` that differ in that key alone: at least `least` values, a variant among them.

    Grouped by config, not by name: a sweep of M over 500, 1000, 2000, 4000 is s1, B3+M=1000, B3 and s2.
    """
    ids = sorted(set(run_ids), key=sort_key)
    configs = {r: dataclasses.asdict(resolve(r, profile)) for r in ids}
    out: dict[str, list[SweepLine]] = {}
    for key in KEYS:
        groups: dict[tuple, dict[Any, str]] = {}
        for r in ids:
            rest = tuple((k, v) for k, v in configs[r].items() if k != key)
            groups.setdefault(rest, {}).setdefault(configs[r][key], r)
        for members in groups.values():
            variant = next((r for r in members.values() if is_variant(r)), None)
            if len(members) < least or variant is None:
                continue
            v, base = parse(variant), base_of(variant)
            context = Variant(v.base, {k: x for k, x in v.changes.items() if k != key}).canonical().spelling
            points = {x: members[x] for x in sorted(members, key=lambda x: value_order(key, x))}
            cfg = resolve(base)
            value = getattr(cfg, key) if key in settings_read(cfg) else None
            reference = v.vs or (members.get(value) if value is not None else None)
            out.setdefault(key, []).append(SweepLine(key, context, points, base, value, reference))
    return out


def sweep_figure(key: str, lines: list[SweepLine]) -> Callable[[Runs], Figure]:
    """Final ACC and F against the swept value: one line per setting of the other keys through the means over
    seeds, each seed a hollow mark, the base's own value (the paper's setting) a grey band where the base reads the
    key. The seed noise is that of the runs compared: each line's reference (SweepLine.reference: its run at the
    base's own value, on the plot, or the base --base chose, as the variants table) with its seed band, and every
    other point's paired 95% t-interval against it."""

    def draw(runs: Runs) -> Figure:
        fig = Figure(figsize=(7.5, 4.0), layout="constrained")
        panels = fig.subplots(1, 2)
        values = sorted({v for line in lines for v in line.points}, key=lambda v: value_order(key, v))
        table = runs.per_seed.set_index("run_id")
        seeds_shown: set[int] = set()
        unpaired: list[str] = []
        for ax, (metric, name) in zip(panels, (("acc", "final ACC (%)"), ("forgetting", "F (pp)")), strict=True):
            x_of = _sweep_axis(ax, key, values, runs.profile)
            _base_settings(ax, key, lines, values, x_of)
            for k, line in enumerate(lines):
                colour, dashes = SWEEP_COLOURS[k % len(SWEEP_COLOURS)], SWEEP_STYLES[k % len(SWEEP_STYLES)]
                seeds_shown |= _sweep_line(ax, table, line, metric, x_of, colour, dashes)
                unpaired += _sweep_intervals(ax, runs, line, metric, x_of, colour)
            low, high = ax.get_ylim()  # an interval of few seeds may reach past what the metric can be: cut there
            ax.set_ylim(max(low, PAPER[metric].low - 2), min(high, PAPER[metric].high + 2))
            ax.set_ylabel(name)
        panel_title(panels[0], "(a) final average accuracy", [])
        panel_title(panels[1], "(b) forgetting", [])
        n = f"{len(seeds_shown)} seed{'s' * (len(seeds_shown) > 1)}"
        note = "".join(f"\n{x}" for x in dict.fromkeys(unpaired))
        fig.suptitle(
            f"Sweep over {key}, profile {runs.profile}: mean over {n}; hollow marks: single seeds{note}",
            fontsize=RC["axes.titlesize"],
        )
        _unique_legend(fig, panels[0], seeds_shown, ncols=2)
        return fig

    return draw


def _base_settings(ax: Axes, key: str, lines: list[SweepLine], values: list, x_of: Callable[[Any], float]) -> None:
    """A grey band behind the data at each base's own value of `key` (the paper's setting for a paper run), where the
    base reads `key` and the value is on the axis."""
    for base, value in dict.fromkeys((line.base, line.base_value) for line in lines):
        if value is not None and value in values:
            setting = f"paper's setting of {base}" if base in PAPER_RUNS else f"{base}'s setting"
            ax.axvline(
                x_of(value),
                color="0.82",
                linewidth=9,
                zorder=0.5,  # a band behind the data
                label=f"{setting}: {key}={format_value(value)}",
            )


def _sweep_line(
    ax: Axes,
    table: pd.DataFrame,
    line: SweepLine,
    metric: str,
    x_of: Callable[[Any], float],
    colour: str,
    dashes: str,
) -> set[int]:
    """One line through the means over seeds of `line`'s points, each seed a hollow mark; the seeds drawn."""
    xs = [x_of(v) for v in line.points]
    seeds = [table.loc[[r]] for r in line.points.values()]
    ax.plot(
        xs,
        [s[metric].mean() for s in seeds],
        color=colour,
        linestyle=dashes,
        marker="o",
        label=f"{line.context}, {line.key} varied: mean",
    )
    for x, rows in zip(xs, seeds, strict=True):
        for seed, value in zip(rows["seed"], rows[metric], strict=True):
            ax.plot(
                x, value, marker=seed_marker(seed), color=colour, markerfacecolor="none", linestyle="none", alpha=0.6
            )
    return {seed for rows in seeds for seed in rows["seed"]}


def _sweep_intervals(
    ax: Axes, runs: Runs, line: SweepLine, metric: str, x_of: Callable[[Any], float], colour: str
) -> list[str]:
    """The seed noise of `line`: its reference's seed band and every other point's paired interval against it; the
    notes for the title where a point has no interval (no reference, or fewer than two shared seeds)."""
    reference = line.reference
    if reference is None:
        at = "" if line.base_value is None else f" at {line.key}={format_value(line.base_value)}"
        return [f"{line.context}: no run{at} to pair with"]
    seed_band(ax, runs, reference, metric, colour)
    return [
        f"{run_id}: fewer than 2 seeds shared with {reference}, no interval"
        for value, run_id in line.points.items()
        if run_id != reference and not paired_bar(ax, runs, x_of(value), run_id, reference, metric, colour)
    ]


def sweep_specs(runs: Runs) -> tuple[FigureSpec, ...]:
    """One figure per key swept over at least two values in these results (sweep_lines)."""
    return tuple(
        FigureSpec(
            f"fig_sweep_{key}",
            f"fig:sweep-{key.replace('_', '-')}",
            f"Beyond the paper: final ACC and F against {key} (uh sweep)",
            tuple(r for line in lines for r in line.points.values()),
            (),
            sweep_figure(key, lines),
            False,
        )
        for key, lines in sweep_lines(runs.per_seed["run_id"], runs.profile, least=2).items()
    )


def variants_figure(variants: tuple[str, ...]) -> Callable[[Runs], Figure]:
    """Each variant beside its base (catalogue.base_of) on the same axes, final ACC and F: every seed a hollow mark, a
    seed's two runs joined by a line (the pairing), the mean a bar; under each pair the mean paired delta and its
    95% t-interval (n - 1 df), the seed noise of the comparison."""

    def draw(runs: Runs) -> Figure:
        fig = Figure(figsize=(max(5.0, 1.0 + 1.9 * len(variants)) * 1.6, 4.2), layout="constrained")
        panels = fig.subplots(1, 2)
        seeds_shown: set[int] = set()
        for ax, (metric, name) in zip(panels, (("acc", "final ACC (%)"), ("forgetting", "F (pp)")), strict=True):
            ticks = []
            for i, variant in enumerate(variants):
                seeds_shown |= _variant_pair(ax, runs.per_seed, i, variant, metric)
                delta = _paired_delta(runs.per_seed, variant, metric)
                ticks.append(f"{variant.replace('+', chr(10) + '+')}\nvs {base_of(variant)}: {delta}")
            ax.set_xticks(range(len(variants)), ticks)
            ax.set_xlim(-0.6, len(variants) - 0.4)
            ax.set_ylabel(name)
        panel_title(panels[0], "(a) final average accuracy", [])
        panel_title(panels[1], "(b) forgetting", [])
        fig.suptitle(
            f"Each variant against its base, profile {runs.profile}: bars the means, hollow marks single seeds"
            "\n(a line joins a seed's two runs); Δ: mean paired delta [95% t-interval]",
            fontsize=RC["axes.titlesize"],
        )
        _unique_legend(fig, panels[0], seeds_shown, ncols=4)
        return fig

    return draw


def _variant_pair(ax: Axes, table: pd.DataFrame, i: int, variant: str, metric: str) -> set[int]:
    """At i, `variant` beside its base: each a bar at its mean and a hollow mark per seed, a seed's two runs joined by
    a line (the pairing); the seeds drawn."""
    base = base_of(variant)
    sides = {base: i - 0.18, variant: i + 0.18}
    seeds: set[int] = set()
    for run_id, x in sides.items():
        rows = table[table["run_id"] == run_id].set_index("seed")[metric]
        if rows.empty:
            continue
        is_base = run_id == base
        ax.bar(
            x,
            rows.mean(),
            width=0.3,
            facecolor="0.88" if is_base else "#cfe3f3",
            edgecolor="0.4" if is_base else "#0072B2",
            zorder=0.5,
            label="base: mean" if is_base else "variant: mean",
        )
        for seed, value in rows.items():
            ax.plot(x, value, marker=seed_marker(seed), color="0.25", markerfacecolor="none", linestyle="none")
            seeds.add(seed)
    for seed in paired(table, variant, base, metric).index:  # the pairing: a seed's base and variant
        ends = [table[(table["run_id"] == r) & (table["seed"] == seed)][metric].iloc[0] for r in sides]
        ax.plot(list(sides.values()), ends, color="0.6", linewidth=0.7, zorder=0.8)
    return seeds


def _paired_delta(table: pd.DataFrame, variant: str, metric: str) -> str:
    """The mean paired delta of `variant` against its base and its 95% t-interval (n - 1 df), or why there is none."""
    base = base_of(variant)
    deltas = paired(table, variant, base, metric)
    ci = t_interval(tuple(deltas))
    if base not in set(table["run_id"]):
        return f"base {base} missing"
    if deltas.empty:
        return "no seed shared"
    interval = "no interval (1 seed)" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return f"Δ {deltas.mean():+.2f} {interval}"


def variant_specs(runs: Runs) -> tuple[FigureSpec, ...]:
    """One figure of every variant in the results beside its base; none without a variant."""
    shown = tuple(sorted((r for r in set(runs.per_seed["run_id"]) if is_variant(r)), key=sort_key))
    if not shown:
        return ()
    bases = tuple(dict.fromkeys(base_of(v) for v in shown))
    return (
        FigureSpec(
            "fig_variants",
            "fig:variants",
            "Beyond the paper: each variant against its base (uh run --set)",
            (*shown, *bases),
            (),
            variants_figure(shown),
            False,
        ),
    )
