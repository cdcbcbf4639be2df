"""The paper's tables (LaTeX + Markdown) from the re-run's results, and the variants table beyond the paper.

A missing run ID or seed leaves a marked gap (— in Markdown, --- in LaTeX); a table without the runs it needs is
left out, with one line saying so (Table.needs, tables_left_out). A mean of one seed is printed with "(n = 1)",
never "± 0.00". The numbers are aggregate.py's (mean, population std, deltas paired by seed against B3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from uniform_herding.catalogue import base_of, describe, is_variant, resolve, run_name
from uniform_herding.method.metrics import METRICS
from uniform_herding.report.figure_spec import wants
from uniform_herding.report.figures import REFRESH_RUNS
from uniform_herding.report.load import Runs, seed_order, seeds_of
from uniform_herding.verdict.aggregate import paired, paired_deltas, summarize, with_spread
from uniform_herding.verdict.decide import t_interval

GAP_MD, GAP_TEX = "—", "---"
METRIC_NAMES = {"acc": "ACC", "forgetting": "F", "bwt": "BWT"}


@dataclass(frozen=True)
class Num:
    """A printed number: mean (+/- std) to `digits` decimals, optionally signed; None or NaN is a gap. A mean of
    `n` < 2 seeds has no spread to print: its std becomes "(n = 1)" ("(n=1)" in LaTeX), never "± 0.00"."""

    value: float | None
    std: float | None = None
    digits: int = 2
    signed: bool = False
    n: int | None = None  # the seeds the mean is over, where it has a std

    def render(self, tex: bool) -> str:
        if self.value is None or np.isnan(self.value):
            return GAP_TEX if tex else GAP_MD
        sign = "+" if self.signed and round(self.value, self.digits) != 0 else ""
        text = f"{self.value:{sign}.{self.digits}f}"
        if self.std is None:
            return f"${text}$" if tex else text
        if tex:  # the number in math mode, the seed count beside it
            one_seed = self.n is not None and self.n < 2
            return f"${text}$ (n={self.n})" if one_seed else f"${text}\\pm{self.std:.{self.digits}f}$"
        return with_spread(text, f"{self.std:.{self.digits}f}", self.n, " ± ")

    def one_seed(self) -> bool:
        """Whether it prints as a mean of one seed, "(n = 1)"."""
        return self.std is not None and self.n is not None and self.n < 2 and self.render(False) != GAP_MD


def _tex(text: str) -> str:
    """Markdown-table text as LaTeX: the few special characters the tables use."""
    for plain, tex in (("%", r"\%"), ("_", r"\_"), ("Δ", r"$\Delta$"), ("–", "--"), ("—", "---")):
        text = text.replace(plain, tex)
    return text


@dataclass(frozen=True)
class Table:
    """One of the paper's tables, rendered as a drop-in LaTeX float (booktabs) and as Markdown."""

    stem: str
    label: str
    caption: str
    header: tuple[str, ...]
    align: str  # LaTeX column spec
    rows: list[list[str | Num]]
    note: str  # which seeds each number averages, what is missing
    resize: bool = True  # \resizebox to the line width, as the paper does for its wide tables
    # The groups of runs of which one must be present whole for a row to hold a result (a paired row needs both
    # sides); None for a table that needs no results (the quotas). Without one, the table is left out (tables_for).
    needs: tuple[tuple[str, ...], ...] | None = None

    def __post_init__(self) -> None:
        if any(c.one_seed() for row in self.rows for c in row if isinstance(c, Num)):
            object.__setattr__(self, "note", self.note + " (n = 1): a mean of one seed, which has no spread.")

    def written(self, runs: Runs) -> bool:
        """Whether the results hold a group it needs: otherwise every row would be a gap."""
        return self.needs is None or any(set(group) <= set(runs.R) for group in self.needs)

    def wants(self) -> str:
        """What it needs, for the line that says it was left out: `one of: a1, a2, a3, a4`."""
        return wants(self.needs or ())

    def cells(self, tex: bool) -> list[list[str]]:
        return [[c.render(tex) if isinstance(c, Num) else _tex(c) if tex else c for c in row] for row in self.rows]

    def markdown(self) -> str:
        align = ["---:" if a == "r" else ":---" for a in self.align]
        lines = [
            f"**{self.caption}** (`{self.label}`)",
            "",
            "| " + " | ".join(self.header) + " |",
            "|" + "|".join(align) + "|",
        ]
        lines += ["| " + " | ".join(row) + " |" for row in self.cells(tex=False)]
        return "\n".join([*lines, "", self.note, ""])

    def latex(self) -> str:
        body = pd.DataFrame(self.cells(tex=True), columns=[_tex(h) for h in self.header])
        tabular = body.to_latex(index=False, escape=False, column_format=self.align).strip()
        if self.resize:
            tabular = "\\resizebox{\\linewidth}{!}{%\n" + tabular + "\n}"
        return "\n".join(
            [
                "% generated by `uh report`; " + self.note.replace("\n", " "),
                "\\begin{table}[htbp]",
                "  \\centering",
                f"  \\caption{{{_tex(self.caption)}}}",
                f"  \\label{{{self.label}}}",
                "  \\small",
                tabular,
                "\\end{table}",
                "",
            ]
        )


def _seeds_note(runs: Runs, run_ids: tuple[str, ...]) -> str:
    parts = [f"{r} {', '.join(map(str, seeds_of(runs.per_seed, r))) or 'missing'}" for r in dict.fromkeys(run_ids)]
    return f"Profile {runs.profile}; mean ± population std over the seeds present ({'; '.join(parts)})."


def _pm(summary: pd.DataFrame, run_id: str, metric: str) -> Num:
    if run_id not in summary.index:
        return Num(None)
    row = summary.loc[run_id]
    return Num(row[f"{metric}_mean"], row[f"{metric}_std"], n=int(row["n"]))


def _each(run_ids: tuple[str, ...]) -> tuple[tuple[str, ...], ...]:
    """Table.needs of a table whose every row is one run: any of them."""
    return tuple((r,) for r in dict.fromkeys(run_ids))


def _delta(runs: Runs, deltas: pd.DataFrame, run_id: str, metric: str) -> Num:
    """Mean paired delta against the run it is compared with (B3); B3's own row is 0 when B3 is present (as the paper
    prints it)."""
    if run_id == "B3":
        return Num(0.0 if "B3" in set(runs.per_seed["run_id"]) else None, signed=True)
    return Num(deltas.loc[run_id, metric] if run_id in deltas.index else None, signed=True)


def t1_main(runs: Runs) -> Table:
    summary, run_ids = summarize(runs.per_seed), ("B1", "B2", "B3")
    return Table(
        "t1_main",
        "tab:t1-master-results",
        "Main comparison. All methods use the same nominal active exemplar budget and retrieval budget. "
        "Uniform Herding also retains candidate storage for refresh.",
        ("Method", "Average accuracy (%)", "Forgetting (%)", "BWT (%)"),
        "lrrr",
        [[run_name(r, runs.profile), *(_pm(summary, r, m) for m in METRICS)] for r in run_ids],
        _seeds_note(runs, run_ids),
        needs=_each(run_ids),
    )


T2_VARIANTS = {"a1": "Without KD", "a2": "Head-logit evaluation", "a3": "Linear head", "a4": "Random selection"}


def t2_ablations(runs: Runs) -> Table:
    summary, deltas = summarize(runs.per_seed), paired_deltas(runs.per_seed)
    rows = [
        [
            name,
            _pm(summary, r, "acc"),
            _pm(summary, r, "forgetting"),
            _delta(runs, deltas, r, "acc"),
            _delta(runs, deltas, r, "forgetting"),
        ]
        for r, name in T2_VARIANTS.items()
    ]
    return Table(
        "t2_ablations",
        "tab:t2-component-ablations",
        "Matched within-method comparisons for Uniform Herding. Deltas are paired by seed against the "
        "main configuration.",
        ("Variant", "Average accuracy (%)", "Forgetting (%)", "Δ accuracy (pp)", "Δ forgetting (pp)"),
        "lrrrr",
        rows,
        _seeds_note(runs, ("B3", *T2_VARIANTS)),
        needs=_each(tuple(T2_VARIANTS)),
    )


T3_AXES = {"Active budget": (("s1", "B3", "s2"), "budget"), "Retrieval": (("s3", "B3", "s4"), "retrieval")}


def t3_resource_sensitivity(runs: Runs) -> Table:
    summary, deltas = summarize(runs.per_seed), paired_deltas(runs.per_seed)
    rows = []
    for axis, (run_ids, size) in T3_AXES.items():
        for r in run_ids:
            value = getattr(resolve(r, runs.profile), size)
            rows.append(
                [
                    axis,
                    f"{value:,}",
                    _pm(summary, r, "acc"),
                    _pm(summary, r, "forgetting"),
                    _delta(runs, deltas, r, "acc"),
                    _delta(runs, deltas, r, "forgetting"),
                ]
            )
    return Table(
        "t3_resource_sensitivity",
        "tab:t3-resource-sensitivity",
        "Resource sensitivity relative to Uniform Herding. Active-budget changes also change the "
        "candidate-pool capacity through rho; deltas are paired by seed.",
        ("Axis", "Value", "Average accuracy (%)", "Forgetting (%)", "Δ accuracy (pp)", "Δ forgetting (pp)"),
        "llrrrr",
        rows,
        _seeds_note(runs, ("s1", "B3", "s2", "s3", "s4")),
        needs=_each(tuple(r for run_ids, _ in T3_AXES.values() for r in run_ids)),
    )


# Beyond the paper (issue 17): the refresh-isolation pairs, (run, other, what `run - other` isolates).
T4_PAIRS = (
    ("r2", "r1", "refresh alone, at matched storage M"),
    ("B3", "r2", "the extra candidate storage (rho*q pools)"),
    ("B3", "r1", "refresh with its candidate storage"),
    ("r3", "B1", "refresh under iCaRL's objective"),
)


def _paired_cells(runs: Runs, run_id: str, other: str, metric: str) -> list[str | Num]:
    """Mean paired delta and its 95% t-interval (n - 1 df); gaps without a shared seed or a second seed."""
    deltas = paired(runs.per_seed, run_id, other, metric)
    ci = t_interval(tuple(deltas))
    interval = GAP_MD if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]"
    return [Num(deltas.mean() if len(deltas) else None, signed=True), interval]


def t4_refresh_isolation(runs: Runs) -> Table:
    rows = [
        [
            f"{a} - {b}",
            what,
            str(len(paired(runs.per_seed, a, b, "acc"))),
            *_paired_cells(runs, a, b, "acc"),
            *_paired_cells(runs, a, b, "forgetting"),
        ]
        for a, b, what in T4_PAIRS
    ]
    return Table(
        "t4_refresh_isolation",
        "tab:t4-refresh-isolation",
        "Beyond the paper: refresh isolation (r1 no refresh, r2 rho = 1, r3 iCaRL with refresh). Deltas are "
        "paired by seed, mean and 95% t-interval (n - 1 df); the paper has no values for them.",
        ("Pair", "Isolates", "Seeds", "Δ accuracy (pp)", "95% CI", "Δ forgetting (pp)", "95% CI"),
        "llrrrrr",
        rows,
        _seeds_note(runs, REFRESH_RUNS),
        needs=tuple((a, b) for a, b, _ in T4_PAIRS),
    )


def per_seed(runs: Runs) -> Table:
    table = runs.per_seed.set_index(["run_id", "seed"])
    rows = []
    for r in runs.shown():
        for seed in seed_order(runs.per_seed):
            have = (r, seed) in table.index
            rows.append(
                [
                    r,
                    f"{run_name(r, runs.profile)} / {seed}",
                    *(Num(table.loc[(r, seed), m] if have else None) for m in METRICS),
                ]
            )
    return Table(
        "per_seed",
        "tab:app-seeds",
        "Per-seed final average accuracy, forgetting, and backward transfer.",
        ("ID", "Configuration / seed", "Average accuracy", "Forgetting", "BWT"),
        "llrrr",
        rows,
        f"Profile {runs.profile}; — marks a run ID and seed without a result.",
        resize=False,
        needs=_each(runs.shown()),
    )


def compute(runs: Runs) -> Table:
    grouped = runs.wall_s.dropna().groupby("run_id")["wall_s"]
    mean, std, n = grouped.mean(), grouped.std(ddof=0), grouped.size()
    rows = [[r, run_name(r, runs.profile), Num(mean.get(r), std.get(r), digits=1, n=n.get(r))] for r in runs.shown()]
    header, align, note = ("ID", "Configuration", "Seconds"), "llr", ""
    if runs.estimate_s:  # uh doctor's estimate beside what ran: its error is the figure to trust it by
        for row, r in zip(rows, runs.shown(), strict=True):
            est, ran = runs.estimate_s.get(r), mean.get(r)
            row += [
                Num(est, digits=0),
                Num(None if est is None or ran is None else 100 * (est / ran - 1), digits=0, signed=True),
            ]
        header, align = (*header, "uh doctor's estimate (s)", "Error (%)"), "llrrr"
        note = " The estimate is uh doctor's (doctor.json in the results dir); its error is estimate / measured - 1."
    return Table(
        "compute",
        "tab:app-compute",
        f"Wall-clock time per run in seconds (mean ± standard deviation across seeds), measured on "
        f"{', '.join(runs.devices)}.",
        header,
        align,
        rows,
        _seeds_note(runs, runs.shown()) + " Seconds of training, refresh and evaluation, summed over tasks." + note,
        resize=False,
        needs=_each(runs.shown()),
    )


def quota_table(runs: Runs) -> Table:
    from uniform_herding.method.memory import quotas  # here, not at the top: memory imports torch, `uh check` need not

    rows = []
    for r in ("s1", "B3", "s2"):
        cfg = resolve(r, runs.profile)
        cells = []
        for t in range(cfg.n_tasks):
            q = quotas(cfg.budget, cfg.classes_per_task * (t + 1))
            cells.append(f"{min(q)}" if min(q) == max(q) else f"{min(q)}–{max(q)}")
        rows.append([f"{cfg.budget:,}", *cells])
    n_tasks = resolve("B3", runs.profile).n_tasks
    return Table(
        "quotas",
        "tab:app-quotas",
        "Per-class active exemplar quota after each task. Ranges indicate the one-exemplar difference "
        "induced by floor rounding.",
        ("Active budget", *(f"T{t}" for t in range(n_tasks))),
        "l" + "r" * n_tasks,
        rows,
        f"Profile {runs.profile}: the budgets of s1, B3 and s2 (memory.quotas; needs no results).",
    )


TABLES: tuple[Callable[[Runs], Table], ...] = (
    t1_main,
    t2_ablations,
    t3_resource_sensitivity,
    t4_refresh_isolation,
    per_seed,
    compute,
    quota_table,
)


def variants_table(runs: Runs) -> Table:
    """Beyond the paper: every variant present (uh run --set, uh sweep), paired by seed against its base."""
    summary = summarize(runs.per_seed)
    shown = [r for r in summary.index if is_variant(r)]
    rows = [
        [
            r,
            base_of(r),
            describe(r, runs.profile),
            ", ".join(map(str, seeds_of(runs.per_seed, r))),
            _pm(summary, r, "acc"),
            _pm(summary, r, "forgetting"),
            *_paired_cells(runs, r, base_of(r), "acc"),
            *_paired_cells(runs, r, base_of(r), "forgetting"),
        ]
        for r in shown
    ]
    return Table(
        "variants",
        "tab:variants",
        "Beyond the paper: variants of the run IDs (uh run --set, uh sweep). Deltas are paired by seed against "
        "each variant's base, mean and 95% t-interval (n - 1 df); the paper has no values for them.",
        (
            "Variant",
            "Base",
            "Changes",
            "Seeds",
            "Average accuracy (%)",
            "Forgetting (%)",
            "Δ accuracy (pp)",
            "95% CI",
            "Δ forgetting (pp)",
            "95% CI",
        ),
        "lllrrrrrrr",
        rows,
        _seeds_note(runs, tuple(dict.fromkeys(x for r in shown for x in (r, base_of(r))))),
        needs=_each(shown),
    )


def tables_for(runs: Runs) -> list[Table]:
    """The paper's tables that hold a result (Table.written; tables_left_out says which do not), and the variants
    table when the results hold variants."""
    tables = [table for table in (build(runs) for build in TABLES) if table.written(runs)]
    return tables + ([variants_table(runs)] if any(map(is_variant, runs.per_seed["run_id"])) else [])


def tables_left_out(runs: Runs) -> str | None:
    """One line naming the tables left out and what each needs; None when every table is written."""
    gone = [
        f"{table.stem} (needs {table.wants()})"
        for table in (build(runs) for build in TABLES)
        if not table.written(runs)
    ]
    if not gone:
        return None
    return f"left out {len(gone)} table(s) whose runs are not in these results: {'; '.join(gone)}"
