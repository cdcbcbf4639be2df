"""The paper's figures from the re-run's results, one function per figure, one style throughout.

Every figure reads the accuracy matrices R (per run ID and seed) or the per-seed metrics, averages
over seeds with the population std (Sec. 3.5), works for any number of tasks T, and names in its
panel titles the run IDs it needed but did not find. Readable in grey scale: each run ID has its own
marker and line style as well as its colour; heat maps use viridis (monotonic in lightness) and
print their values. With `Runs.paper` set (the paper's published per-seed values, paper profile
only), the figures whose quantities the paper prints overlay them as hollow grey marks.

FIGURES registers them (figure_spec.py: FigureSpec; `save` writes one as PDF and PNG); their style and shared
drawing are style.py's. The figures beyond the paper, one per swept key and the variants beside their bases, are
sweep_figures.py's.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from uniform_herding.catalogue import BEYOND_PAPER, PAPER_RUNS, base_of, resolve, run_name
from uniform_herding.method.config import SEEDS
from uniform_herding.method.metrics import task_forgetting
from uniform_herding.report.figure_spec import FigureSpec
from uniform_herding.report.load import Runs
from uniform_herding.report.style import (
    PAPER_LABEL,
    PAPER_STYLE,
    RC,
    STYLE,
    legend_below,
    panel_title,
    per_task,
    run_label,
    seed_band,
    seed_marker,
    task_axis,
)
from uniform_herding.verdict.aggregate import paired, summarize

# Sec. "Supporting Analyses": forgetting over tasks 0-8 (all but the last) lies in these ranges (pp).
PAPER_FORGETTING_RANGES = {"B3": (8.1, 30.1), "B2": (51.0, 59.0), "a2": (27.0, 55.0)}


# --- the figures ---------------------------------------------------------------------------------


PER_TASK_BARS = "error bars ± the population std over each run's seeds (n in the legend; none at n = 1)"


def per_task_accuracy(runs: Runs) -> Figure:
    """fig:per-task-accuracy: final accuracy R[T-1][j] per task, the mean over each run's seeds with PER_TASK_BARS;
    (a) baselines, (b) variants of B3."""
    fig = Figure(figsize=(8.0, 4.0), layout="constrained")
    panels = fig.subplots(1, 2, sharey=True)
    groups = {
        "(a) baselines vs Uniform Herding": ("B0", "B1", "B2", "B3"),
        "(b) within-method variants": ("B3", "a1", "a2", "a3", "a4"),
    }
    for ax, (title, run_ids) in zip(panels, groups.items(), strict=True):
        per_task(ax, runs, run_ids, lambda R: R[:, -1, :], counted=True)
        panel_title(ax, title, runs.missing(run_ids))
        legend_below(ax)
    panels[0].set_ylabel("final accuracy (%)")
    panels[0].set_ylim(0, 100)
    fig.suptitle(f"Final accuracy per task: mean over seeds, {PER_TASK_BARS}", fontsize=RC["axes.titlesize"])
    return fig


def forgetting_by_task(runs: Runs) -> Figure:
    """fig:forgetting-by-age: per-task forgetting of B3, the static bank (B2) and head-logit (a2)."""
    fig = Figure(figsize=(5.5, 4.0), layout="constrained")
    ax = fig.subplots()
    run_ids = ("B3", "B2", "a2")
    per_task(ax, runs, run_ids, task_forgetting)
    if runs.paper is not None:  # the paper states ranges over tasks 0..T-2, drawn right of the last task
        for k, (run_id, (low, high)) in enumerate(PAPER_FORGETTING_RANGES.items()):
            x = runs.n_tasks - 0.4 + 0.25 * k
            ax.plot(
                [x, x],
                [low, high],
                color=PAPER_STYLE["color"],
                linewidth=3,
                solid_capstyle="butt",
                label=PAPER_LABEL + f": range over T0-T{runs.n_tasks - 2}" if k == 0 else None,
            )
            ax.annotate(run_id, (x, high), xytext=(0, 2), textcoords="offset points", ha="center", fontsize=6.5)
    panel_title(ax, "Forgetting by task (0 for the last task by definition)", runs.missing(run_ids))
    ax.set_ylabel("forgetting (pp)")
    ax.set_xlim(-0.5, runs.n_tasks + (0.5 if runs.paper is not None else -0.5))
    legend_below(ax)
    return fig


def resource_sensitivity(runs: Runs) -> Figure:
    """fig:resource-sensitivity: ACC and F against the active budget M and the retrieval b, with the seed band of B3,
    the paper's setting of both. Each axis spans its sweep's three values, present or not."""
    fig = Figure(figsize=(7.0, 5.0), layout="constrained")
    panels = fig.subplots(2, 2, sharex="col")
    sweeps = {"active budget M": (("s1", "B3", "s2"), "budget"), "retrieval b": (("s3", "B3", "s4"), "retrieval")}
    # (summary, x factor, style): the paper's points slightly right, so that equal values stay visible
    sources = [(summarize(runs.per_seed), 1.0, {"color": "black", "marker": "o", "label": "re-run"})]
    if runs.paper is not None:
        sources.append((summarize(runs.paper), 1.05, {**PAPER_STYLE, "marker": "o", "label": PAPER_LABEL}))
    for col, (axis_name, (run_ids, size)) in enumerate(sweeps.items()):
        x_of = {r: getattr(resolve(r, runs.profile), size) for r in run_ids}
        for row, (metric, name) in enumerate((("acc", "ACC (%)"), ("forgetting", "F (pp)"))):
            ax = panels[row, col]
            for table, dodge, style in sources:
                present = [r for r in run_ids if r in table.index]
                ax.errorbar(
                    [x_of[r] * dodge for r in present],
                    table.loc[present, f"{metric}_mean"],
                    yerr=table.loc[present, f"{metric}_std"],
                    **style,
                )
            seed_band(ax, runs, "B3", metric)
            ax.set_xscale("log", base=2)
            ticks = sorted(set(x_of.values()))
            ax.set_xticks(ticks, [f"{v:,}" for v in ticks])
            ax.set_xlim(ticks[0] / 1.5, ticks[-1] * 1.5)  # the sweep's span, so that one point never squeezes the ticks
            ax.minorticks_off()
            ax.set_ylabel(name)
            if row == 0:
                panel_title(ax, f"{axis_name} ({', '.join(run_ids)})", runs.missing(run_ids))
            else:
                ax.set_xlabel(f"{axis_name} (items{', per step' if size == 'retrieval' else ''})")
    legend_below(panels[1, 0])
    return fig


def forgetting_heatmap(runs: Runs) -> Figure:
    """fig:app-forgetting: mean per-task forgetting of every configuration over tasks 0..T-2 (the last
    task's is 0 by definition); missing rows say so."""
    n, run_ids = runs.n_tasks - 1, runs.shown()
    grid = np.full((len(run_ids), n), np.nan)
    for i, run_id in enumerate(run_ids):
        if run_id in runs.R:
            grid[i] = task_forgetting(runs.stack(run_id))[:, :n].mean(axis=0)
    fig = Figure(figsize=(2.3 + 0.5 * n, 4.2), layout="constrained")
    ax = fig.subplots()
    image = ax.imshow(grid, cmap="viridis", vmin=0, vmax=max(np.nanmax(grid, initial=0), 1), aspect="auto")
    for (i, j), value in np.ndenumerate(grid):
        if not np.isnan(value):
            ax.text(
                j,
                i,
                f"{value:.1f}",
                ha="center",
                va="center",
                fontsize=6.5,
                color="white" if value < 0.6 * image.norm.vmax else "black",
            )
    for i in np.flatnonzero(np.isnan(grid).all(axis=1)):
        ax.text((n - 1) / 2, i, "missing (no result)", ha="center", va="center", fontsize=7, style="italic")
    ax.set_yticks(range(len(run_ids)), [run_label(r, runs.profile) for r in run_ids])
    task_axis(ax, n)
    ax.grid(False)
    panel_title(ax, "Per-task forgetting (pp), mean over seeds", runs.missing(run_ids))
    fig.colorbar(image, ax=ax, label="forgetting (pp)")
    return fig


def evolution(run_id: str) -> Callable[[Runs], Figure]:
    """fig:app-*-evolution: row i, column t = accuracy on task i after task t (R transposed)."""

    def draw(runs: Runs) -> Figure:
        T = runs.n_tasks
        fig = Figure(figsize=(1.6 + 0.42 * T, 0.9 + 0.36 * T), layout="constrained")
        ax = fig.subplots()
        stack = runs.stack(run_id)
        matrix = np.full((T, T), np.nan) if stack is None else stack.mean(axis=0).T
        image = ax.imshow(matrix, cmap="viridis", vmin=0, vmax=100)
        for (i, t), value in np.ndenumerate(matrix):
            if not np.isnan(value):
                ax.text(
                    t,
                    i,
                    f"{value:.0f}",
                    ha="center",
                    va="center",
                    fontsize=6.5,
                    color="white" if value < 60 else "black",
                )
        if stack is None:
            ax.text((T - 1) / 2, (T - 1) / 2, "missing (no result)", ha="center", va="center", style="italic")
        ax.set_xticks(range(T), [f"T{t}" for t in range(T)])
        ax.set_yticks(range(T), [f"T{t}" for t in range(T)])
        ax.set_xlabel("after learning task")
        ax.set_ylabel("accuracy on task")
        ax.grid(False)
        seeds = "" if stack is None else f", mean over {len(stack)} seed(s)"
        panel_title(ax, f"{run_label(run_id, runs.profile)}{seeds}", runs.missing((run_id,)))
        fig.colorbar(image, ax=ax, label="accuracy (%)", shrink=0.8)
        return fig

    return draw


def kd_slopes(runs: Runs) -> Figure:
    """fig:app-kd-slopes: per task j < T-1 and seed, accuracy at introduction R[j][j] -> final R[T-1][j]."""
    fig = Figure(figsize=(6.0, 3.4), layout="constrained")
    panels = fig.subplots(1, 2, sharey=True)
    T = runs.n_tasks
    for ax, run_id in zip(panels, ("B3", "a1"), strict=True):
        by_seed = runs.R.get(run_id, {})
        ends = []  # (introduction, final) per seed and task
        for seed in sorted(by_seed, key=lambda s: (s not in SEEDS, SEEDS.index(s) if s in SEEDS else s)):
            R = by_seed[seed]
            intro, final = np.diag(R)[: T - 1], R[-1, : T - 1]
            ends += zip(intro, final, strict=True)
            for j in range(T - 1):
                ax.plot(
                    [0, 1],
                    [intro[j], final[j]],
                    color=STYLE[run_id][0],
                    alpha=0.45,
                    marker=seed_marker(seed),
                    linestyle=STYLE[run_id][2],
                    linewidth=0.8,
                    label=f"seed {seed}" if j == 0 else None,
                )
        title = run_label(run_id, runs.profile)
        if ends:
            intro_mean, final_mean = np.mean(ends, axis=0)
            ax.plot([0, 1], [intro_mean, final_mean], color="black", linewidth=2.5, label="mean")
            title += f": mean drop {intro_mean - final_mean:.1f} pp"
        panel_title(ax, title, runs.missing((run_id,)))
        ax.set_xticks([0, 1], ["at introduction", "after last task"])
        ax.set_xlim(-0.2, 1.2)
        legend_below(ax, ncols=2)
    panels[0].set_ylabel("accuracy on task (%)")
    return fig


def component_attribution(runs: Runs) -> Figure:
    """fig:app-component-attribution: per-seed a* - B3 deltas of ACC and F, bars at their mean."""
    run_ids = ("a1", "a2", "a3", "a4")
    fig = Figure(figsize=(7.0, 3.2), layout="constrained")
    panels = fig.subplots(1, 2)
    # (table, x shift, marker style, bar label, seed labels): the paper's values are hollow, grey, dashed
    sources = [(runs.per_seed, 0.0, {"color": "black"}, "re-run: mean", True)]
    if runs.paper is not None:
        sources.append(
            (runs.paper, 0.3, {"color": PAPER_STYLE["color"], "markerfacecolor": "none"}, PAPER_LABEL, False)
        )
    for ax, (metric, name) in zip(panels, (("acc", "ACC"), ("forgetting", "F")), strict=True):
        for source in sources:
            _attribution_deltas(ax, run_ids, metric, *source)
        ax.axhline(0, color="black", linewidth=0.8)
        ax.set_xticks(range(len(run_ids)), [f"{r}\n{run_name(r, runs.profile).replace(' ', chr(10))}" for r in run_ids])
        ax.set_ylabel(f"Δ {name} vs B3 (pp)")
        panel_title(
            ax,
            f"Δ {name} paired by seed ({'negative' if metric == 'acc' else 'positive'} is worse)",
            runs.missing(("B3", *run_ids)),
        )
    unique = {label: handle for ax in panels for handle, label in zip(*ax.get_legend_handles_labels(), strict=True)}
    fig.legend(unique.values(), unique.keys(), loc="outside lower center", ncols=min(len(unique), 6))
    return fig


def _attribution_deltas(
    ax: Axes,
    run_ids: tuple[str, ...],
    metric: str,
    table: pd.DataFrame,
    shift: float,
    style: dict[str, str],
    bar_label: str,
    seed_labels: bool,
) -> None:
    """One source's (the re-run's, or the paper's shifted right) per-seed deltas of each ablation against its base,
    B3: a mark per seed and a bar at their mean."""
    for i, run_id in enumerate(run_ids):
        deltas = paired(table, run_id, base_of(run_id), metric)  # against B3
        if deltas.empty:
            continue
        ax.bar(
            i + shift,
            deltas.mean(),
            width=0.28,
            facecolor="0.85" if shift == 0 else "none",
            edgecolor=style["color"],
            linestyle="-" if shift == 0 else "--",
            label=bar_label,
        )
        for k, (seed, delta) in enumerate(deltas.items()):
            ax.plot(
                i + shift + 0.06 * (k - 1),
                delta,
                marker=seed_marker(seed),
                linestyle="none",
                **style,
                label=f"seed {seed}" if seed_labels else None,
            )


def accuracy_vs_forgetting(runs: Runs) -> Figure:
    """fig:app-accuracy-forgetting: mean ACC against mean F of every configuration, +/- std."""
    fig = Figure(figsize=(6.5, 4.4), layout="constrained")
    ax = fig.subplots()
    summary = summarize(runs.per_seed)
    published = summarize(runs.paper) if runs.paper is not None else None
    for run_id in (r for r in summary.index if r in STYLE):  # the run IDs; variants have their own table
        colour, marker, _ = STYLE[run_id]
        x, y = summary.loc[run_id, "forgetting_mean"], summary.loc[run_id, "acc_mean"]
        ax.errorbar(
            x,
            y,
            xerr=summary.loc[run_id, "forgetting_std"],
            yerr=summary.loc[run_id, "acc_std"],
            color=colour,
            marker=marker,
            markersize=6,
            linestyle="none",
            label=run_label(run_id, runs.profile),
        )
        ax.annotate(run_id, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7)
        if published is not None and run_id in published.index:
            px, py = published.loc[run_id, "forgetting_mean"], published.loc[run_id, "acc_mean"]
            ax.plot([px, x], [py, y], color=PAPER_STYLE["color"], linestyle=":", linewidth=0.8)
            ax.plot(px, py, marker=marker, color=PAPER_STYLE["color"], markerfacecolor="none", linestyle="none")
    if published is not None:  # one legend entry for all the hollow marks
        ax.plot(
            [],
            [],
            marker="o",
            color=PAPER_STYLE["color"],
            markerfacecolor="none",
            linestyle=":",
            label=f"{PAPER_LABEL},\ndotted to the re-run",
        )
    ax.set_xlabel("forgetting F (pp, lower is better)")
    ax.set_ylabel("average accuracy ACC (%, higher is better)")
    panel_title(ax, "Accuracy vs forgetting (mean ± std over seeds)", runs.missing(PAPER_RUNS))
    fig.legend(loc="outside right upper")
    return fig


REFRESH_RUNS = ("B1", "r3", "r1", "r2", "B3")  # iCaRL, its refresh, UH without, UH at rho = 1, UH


def refresh_isolation(runs: Runs) -> Figure:
    """Beyond the paper: final per-task accuracy (a) and per-task forgetting (b) of B1, r3, r1, r2, B3."""
    fig = Figure(figsize=(8.0, 4.0), layout="constrained")
    panels = fig.subplots(1, 2)
    for ax, (title, of, label) in zip(
        panels,
        (
            ("(a) final per-task accuracy", lambda R: R[:, -1, :], "final accuracy (%)"),
            ("(b) forgetting by task (0 for the last task)", task_forgetting, "forgetting (pp)"),
        ),
        strict=True,
    ):
        per_task(ax, runs, REFRESH_RUNS, of)
        panel_title(ax, title, runs.missing(REFRESH_RUNS))
        ax.set_ylabel(label)
    panels[0].set_ylim(0, 100)
    handles, labels = panels[0].get_legend_handles_labels()  # the same runs in both panels: one legend
    if handles:
        fig.legend(handles, labels, loc="outside lower center", ncols=3)
    return fig


def training_loss(runs: Runs) -> Figure:
    """Mean training loss of every epoch, task after task (mean +/- std over seeds), for the runs present:
    a diverging or stalling task shows here first. Dotted lines mark the task boundaries."""
    fig = Figure(figsize=(7.0, 3.0), layout="constrained")
    ax = fig.subplots()
    present = [r for r in (*PAPER_RUNS, *BEYOND_PAPER) if r in runs.epoch_loss]
    epochs = 0
    for run_id in present:
        stack = np.stack([runs.epoch_loss[run_id][s] for s in sorted(runs.epoch_loss[run_id])])  # [seeds, T, E]
        epochs = stack.shape[2]
        colour, _, dashes = STYLE[run_id]
        flat = stack.reshape(len(stack), -1)
        x = np.arange(flat.shape[1]) + 1
        ax.plot(x, flat.mean(axis=0), color=colour, linestyle=dashes, label=run_label(run_id, runs.profile))
        ax.fill_between(
            x,
            flat.mean(axis=0) - flat.std(axis=0),
            flat.mean(axis=0) + flat.std(axis=0),
            color=colour,
            alpha=0.15,
            linewidth=0,
        )
    for t in range(1, runs.n_tasks):
        ax.axvline(t * epochs + 0.5, color="0.7", linestyle=":", linewidth=0.8)
    ax.set_xlabel(f"epoch ({epochs} per task, tasks T0-T{runs.n_tasks - 1} in turn)")
    ax.set_ylabel("mean training loss")
    panel_title(ax, "Training loss per epoch", [])
    legend_below(ax, ncols=4)
    return fig


FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        "fig_per_task_accuracy",
        "fig:per-task-accuracy",
        f"Final per-task accuracy: mean over seeds, {PER_TASK_BARS}",
        ("B0", "B1", "B2", "B3", "a1", "a2", "a3", "a4"),
        ("C1",),
        per_task_accuracy,
        False,
    ),
    FigureSpec(
        "fig_forgetting_by_task",
        "fig:forgetting-by-age",
        "Forgetting by task: B3, static bank, head-logit",
        ("B3", "B2", "a2"),
        ("C1", "C2"),
        forgetting_by_task,
        True,
    ),
    FigureSpec(
        "fig_resource_sensitivity",
        "fig:resource-sensitivity",
        "Sensitivity to M and b",
        ("s1", "B3", "s2", "s3", "s4"),
        ("C5",),
        resource_sensitivity,
        True,
        needs=tuple(
            pair for axis in (("s1", "B3", "s2"), ("s3", "B3", "s4")) for pair in itertools.combinations(axis, 2)
        ),
    ),  # two points of one axis
    FigureSpec(
        "fig_forgetting_heatmap",
        "fig:app-forgetting",
        "Per-task forgetting, every configuration",
        PAPER_RUNS,
        (),
        forgetting_heatmap,
        False,
    ),
    FigureSpec(
        "fig_evolution_B3",
        "fig:app-uniform-evolution",
        "Accuracy matrix, Uniform Herding",
        ("B3",),
        (),
        evolution("B3"),
        False,
    ),
    FigureSpec(
        "fig_evolution_B1", "fig:app-icarl-evolution", "Accuracy matrix, iCaRL", ("B1",), (), evolution("B1"), False
    ),
    FigureSpec(
        "fig_kd_slopes",
        "fig:app-kd-slopes",
        "Introduction to final accuracy: B3 vs no KD",
        ("B3", "a1"),
        ("C4",),
        kd_slopes,
        False,
        needs=(("B3", "a1"),),
    ),
    FigureSpec(
        "fig_component_attribution",
        "fig:app-component-attribution",
        "Per-seed deltas vs B3",
        ("B3", "a1", "a2", "a3", "a4"),
        ("C2", "C3", "C4"),
        component_attribution,
        True,
        needs=tuple((base_of(a), a) for a in ("a1", "a2", "a3", "a4")),
    ),
    FigureSpec(
        "fig_accuracy_vs_forgetting",
        "fig:app-accuracy-forgetting",
        "Accuracy vs forgetting",
        PAPER_RUNS,
        ("C1",),
        accuracy_vs_forgetting,
        True,
    ),
    FigureSpec(
        "fig_refresh_isolation",
        "fig:refresh-isolation",
        "Beyond the paper: refresh isolated (B1, r3, r1, r2, B3), final per-task accuracy and forgetting",
        REFRESH_RUNS,
        ("C6", "C7", "C8"),
        refresh_isolation,
        False,
        needs=(("r2", "r1"), ("B3", "r2"), ("B3", "r1"), ("r3", "B1")),
    ),  # a pair of report's T4
    FigureSpec(
        "fig_training_loss",
        "fig:training-loss",
        "Training loss per epoch and task",
        PAPER_RUNS,
        (),
        training_loss,
        False,
        needs=tuple((r,) for r in (*PAPER_RUNS, *BEYOND_PAPER)),
        recorded=lambda runs: runs.epoch_loss.keys(),
    ),
)
