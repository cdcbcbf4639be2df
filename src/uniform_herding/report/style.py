"""One style for every figure of the report: each run ID's colour, marker and line style (readable in grey scale),
the paper's published values as hollow grey marks, matplotlib's settings (RC), and the drawing every figure shares:
a mean over seeds, a task axis, a panel title naming the runs it missed, a legend, a seed band."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from matplotlib.axes import Axes

from uniform_herding.catalogue import run_name
from uniform_herding.method.config import SEEDS
from uniform_herding.report.load import Runs

PAPER_LABEL = "paper (published)"
PAPER_STYLE = {"color": "0.55", "markerfacecolor": "none", "linestyle": "--", "linewidth": 1.0}

# run ID -> (colour, marker, line style): Okabe-Ito colours, and marker + dashes for grey scale.
STYLE: dict[str, tuple[str, str, str]] = {
    "B0": ("#999999", "x", ":"),
    "B1": ("#E69F00", "s", "--"),
    "B2": ("#56B4E9", "^", "-."),
    "B3": ("#000000", "o", "-"),
    "a1": ("#D55E00", "v", "--"),
    "a2": ("#0072B2", "D", "-."),
    "a3": ("#009E73", "P", ":"),
    "a4": ("#CC79A7", "X", (0, (5, 1, 1, 1))),
    "s1": ("#882255", "<", "-"),
    "s2": ("#117733", ">", "-"),
    "s3": ("#332288", "h", "-"),
    "s4": ("#AA4499", "*", "-"),
    # beyond the paper (refresh isolation): Tol's muted colours
    "r1": ("#DDCC77", "p", "--"),
    "r2": ("#44AA99", "d", "-."),
    "r3": ("#88CCEE", "8", ":"),
}
SEED_MARKERS = ("o", "s", "^", "D", "v")
RC = {
    "font.size": 8,
    "axes.titlesize": 8.5,
    "axes.labelsize": 8,
    "legend.fontsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.color": "0.9",
    "lines.markersize": 4.5,
    "errorbar.capsize": 2,
    "savefig.dpi": 200,
    "savefig.bbox": "tight",
}


def seed_marker(seed: int) -> str:
    """One marker per seed, the same in every figure."""
    return SEED_MARKERS[SEEDS.index(seed)] if seed in SEEDS else SEED_MARKERS[len(SEEDS) + seed % 2]


def run_label(run_id: str, profile: str) -> str:
    return f"{run_id} {run_name(run_id, profile)}"


def panel_title(ax: Axes, title: str, missing: list[str]) -> None:
    """Panel title; the run IDs it needed and did not find are named under it, never silently dropped."""
    ax.set_title(title + (f"\nmissing: {', '.join(missing)}" if missing else ""))


def mean_line(
    ax: Axes, x: np.ndarray, values: np.ndarray, run_id: str, profile: str, dodge: float = 0.0, counted: bool = False
) -> None:
    """Mean +/- population std over seeds (axis 0) of `values` [seeds, n], in the run's style; `counted` puts the
    number of seeds in the legend label, "(n = 3)"."""
    colour, marker, dashes = STYLE[run_id]
    label = run_label(run_id, profile) + (f" (n = {len(values)})" if counted else "")
    ax.errorbar(
        x + dodge,
        values.mean(axis=0),
        yerr=values.std(axis=0),
        color=colour,
        marker=marker,
        linestyle=dashes,
        label=label,
    )


def task_axis(ax: Axes, T: int) -> None:
    ax.set_xticks(range(T), [f"T{t}" for t in range(T)])
    ax.set_xlim(-0.5, T - 0.5)
    ax.set_xlabel("task")


def legend_below(ax: Axes, ncols: int = 2) -> None:
    """Legend under the panel, clear of the data; none when the panel drew nothing."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncols=ncols, frameon=False)


def per_task(
    ax: Axes, runs: Runs, run_ids: tuple[str, ...], of: Callable[[np.ndarray], np.ndarray], counted: bool = False
) -> None:
    """One line per present run: `of(stack)` [seeds, T] against the task index, dodged apart (mean_line)."""
    present = [r for r in run_ids if r in runs.R]
    for k, run_id in enumerate(present):
        dodge = 0.08 * (k - (len(present) - 1) / 2)
        mean_line(ax, np.arange(runs.n_tasks), of(runs.stack(run_id)), run_id, runs.profile, dodge, counted)
    task_axis(ax, runs.n_tasks)


def seed_band(ax: Axes, runs: Runs, run_id: str, metric: str, colour: str = "#0072B2") -> None:
    """Shade the seed band of `run_id`, a run the figure draws: its mean +/- population std over its seeds, behind the
    data, labelled as that; nothing without its results."""
    values = runs.per_seed.loc[runs.per_seed["run_id"] == run_id, metric]
    if values.empty:
        return
    mean, std, n = values.mean(), values.std(ddof=0), len(values)
    ax.axhspan(
        mean - std,
        mean + std,
        color=colour,
        alpha=0.08,
        zorder=0.4,
        label=f"{run_id}'s seed band: mean ± std over its {n} seed{'s' * (n > 1)}",
    )
