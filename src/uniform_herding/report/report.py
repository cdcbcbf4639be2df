"""`uh report`: the paper's tables (LaTeX + Markdown), its figures (PDF + PNG) and a one-page summary;
with variants among the results, their table, a figure of each beside its base, and a figure per swept key
(beyond the paper).

Reads whatever results are present. A missing run ID or seed leaves a marked gap (— in Markdown,
--- in LaTeX, "missing" in figure titles and the summary), never a crash; a figure or table without the
runs it needs is left out, with one line saying so (FigureSpec.drawable, Table.needs). A mean of one
seed is printed with "(n = 1)", never "± 0.00". The numbers come from
aggregate.py (mean, population std, deltas paired by seed against B3) and the verdicts from check.py,
so the report prints exactly what `uh aggregate` and `uh check` decide. paper/README.md maps each
output to the paper's table, figure or claim.

OUT/tables/<stem>.{tex,md}, OUT/figures/<stem>.{pdf,png}, OUT/summary.{md,html}.
"""

from __future__ import annotations

import dataclasses
import html
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import click
import numpy as np
import pandas as pd

from uniform_herding.method.config import RUNS, SEEDS
from uniform_herding.method.metrics import PAPER, REPORTED
from uniform_herding.method.variants import base_of, describe, is_variant, resolve, run_name, sort_key
from uniform_herding.report.figures import (
    FIGURES,
    REFRESH_RUNS,
    FigureSpec,
    Runs,
    save,
    sweep_specs,
    variant_specs,
    wants,
)
from uniform_herding.runs.results import (
    METRICS,
    ResultError,
    load_results,
    per_seed_table,
    read_per_seed_csv,
    results_profile,
    write_text_atomic,
)
from uniform_herding.verdict.aggregate import REFERENCE, InputError, paired, paired_deltas, summarize
from uniform_herding.verdict.check import tally
from uniform_herding.verdict.claims import ClaimCheck, check_claims, check_variants
from uniform_herding.verdict.compare import MetricCheck, compare
from uniform_herding.verdict.decide import t_interval
from uniform_herding.verdict.expected import ExpectedError, expected_dir_for, find_expected_root, load_expected
from uniform_herding.verdict.judge import judge

GAP_MD, GAP_TEX = "—", "---"
METRIC_NAMES = {"acc": "ACC", "forgetting": "F", "bwt": "BWT"}


# --- loading -------------------------------------------------------------------------------------


def load_runs(results_dir: Path) -> Runs:
    """Every result under `results_dir` (one profile), with R as float matrices (NaN above the diagonal)."""
    results = load_results(results_dir)
    profile = results_profile(results)
    R: dict[str, dict[int, np.ndarray]] = {}
    for r in results:  # each n_tasks x n_tasks of its profile's n_tasks (results.validate_result), one profile
        R.setdefault(r["run_id"], {})[r["seed"]] = np.array(r["R"], dtype=float)
    wall_s = pd.DataFrame([(r["run_id"], r["seed"], float(r.get("wall_s", np.nan))) for r in results],
                          columns=["run_id", "seed", "wall_s"])
    recorded = {r.get("environment", {}).get("device", "unknown device") for r in results}
    recorded |= {t["device"] for r in results for t in r.get("tasks", []) if "device" in t}
    devices = tuple(sorted({device_label(str(d)) for d in recorded}))
    epoch_loss: dict[str, dict[int, np.ndarray]] = {}
    for r in results:  # recorded since the divergence guard; older results lack it
        if r.get("tasks") and all("epoch_loss" in t for t in r["tasks"]):
            epoch_loss.setdefault(r["run_id"], {})[r["seed"]] = np.array([t["epoch_loss"] for t in r["tasks"]])
    return Runs(profile, per_seed_table(results), R, len(results[0]["R"]), wall_s, devices, epoch_loss=epoch_loss,
                estimate_s=doctor_estimates(results_dir / "doctor.json", profile))


def doctor_estimates(path: Path, profile: str) -> dict[str, float]:
    """uh doctor's estimate of one seed of each run ID, in seconds, where `path` holds a report of `profile`
    (the doctor writes RESULTS_DIR/doctor.json): the compute table sets each run's measured time beside it."""
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
        if report.get("profile") != profile:
            return {}
        return {run_id: float(parts["total_s"]) for run_id, parts in report["estimates"]["per_run_s"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return {}  # no report, or one of another version: no estimate column


def device_label(device: str) -> str:
    """The device as a caption names it. Results written before result.json recorded the CPU's model say
    "cpu: cpu"; the caption says so rather than guess the model."""
    unnamed = device == "cpu: cpu"
    return "a CPU whose model these results do not name (written before uh recorded it)" if unnamed else device


def seed_order(per_seed: pd.DataFrame) -> list[int]:
    """The paper's seeds first (each a row, present or not), then any other seed the results hold."""
    return [*SEEDS, *sorted(set(per_seed["seed"]) - set(SEEDS))]


def seeds_of(per_seed: pd.DataFrame, run_id: str) -> list[int]:
    present = set(per_seed.loc[per_seed["run_id"] == run_id, "seed"])
    return [s for s in seed_order(per_seed) if s in present]


# --- tables --------------------------------------------------------------------------------------


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
        if self.std is not None and self.n is not None and self.n < 2:
            return f"${text}$ (n={self.n})" if tex else f"{text} (n = {self.n})"
        if self.std is not None:
            text += (r"\pm" if tex else " ± ") + f"{self.std:.{self.digits}f}"
        return f"${text}$" if tex else text

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
        lines = [f"**{self.caption}** (`{self.label}`)", "", "| " + " | ".join(self.header) + " |",
                 "|" + "|".join(align) + "|"]
        lines += ["| " + " | ".join(row) + " |" for row in self.cells(tex=False)]
        return "\n".join([*lines, "", self.note, ""])

    def latex(self) -> str:
        body = pd.DataFrame(self.cells(tex=True), columns=[_tex(h) for h in self.header])
        tabular = body.to_latex(index=False, escape=False, column_format=self.align).strip()
        if self.resize:
            tabular = "\\resizebox{\\linewidth}{!}{%\n" + tabular + "\n}"
        return "\n".join([
            "% generated by `uh report`; " + self.note.replace("\n", " "),
            "\\begin{table}[htbp]", "  \\centering", f"  \\caption{{{_tex(self.caption)}}}",
            f"  \\label{{{self.label}}}", "  \\small", tabular, "\\end{table}", "",
        ])


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
    """Mean paired delta vs B3; B3's own row is 0 when B3 is present (as the paper prints it)."""
    if run_id == REFERENCE:
        return Num(0.0 if REFERENCE in set(runs.per_seed["run_id"]) else None, signed=True)
    return Num(deltas.loc[run_id, metric] if run_id in deltas.index else None, signed=True)


def t1_main(runs: Runs) -> Table:
    summary, run_ids = summarize(runs.per_seed), ("B1", "B2", "B3")
    return Table(
        "t1_main", "tab:t1-master-results",
        "Main comparison. All methods use the same nominal active exemplar budget and retrieval budget. "
        "Uniform Herding also retains candidate storage for refresh.",
        ("Method", "Average accuracy (%)", "Forgetting (%)", "BWT (%)"), "lrrr",
        [[run_name(r, runs.profile), *(_pm(summary, r, m) for m in METRICS)] for r in run_ids],
        _seeds_note(runs, run_ids), needs=_each(run_ids),
    )


T2_VARIANTS = {"a1": "Without KD", "a2": "Head-logit evaluation", "a3": "Linear head", "a4": "Random selection"}


def t2_ablations(runs: Runs) -> Table:
    summary, deltas = summarize(runs.per_seed), paired_deltas(runs.per_seed)
    rows = [[name, _pm(summary, r, "acc"), _pm(summary, r, "forgetting"), _delta(runs, deltas, r, "acc"),
             _delta(runs, deltas, r, "forgetting")] for r, name in T2_VARIANTS.items()]
    return Table(
        "t2_ablations", "tab:t2-component-ablations",
        "Matched within-method comparisons for Uniform Herding. Deltas are paired by seed against the "
        "main configuration.",
        ("Variant", "Average accuracy (%)", "Forgetting (%)", "Δ accuracy (pp)", "Δ forgetting (pp)"), "lrrrr",
        rows, _seeds_note(runs, (REFERENCE, *T2_VARIANTS)), needs=_each(tuple(T2_VARIANTS)),
    )


T3_AXES = {"Active budget": (("s1", "B3", "s2"), "budget"), "Retrieval": (("s3", "B3", "s4"), "retrieval")}


def t3_resource_sensitivity(runs: Runs) -> Table:
    summary, deltas = summarize(runs.per_seed), paired_deltas(runs.per_seed)
    rows = []
    for axis, (run_ids, size) in T3_AXES.items():
        for r in run_ids:
            value = getattr(resolve(r, runs.profile), size)
            rows.append([axis, f"{value:,}", _pm(summary, r, "acc"), _pm(summary, r, "forgetting"),
                         _delta(runs, deltas, r, "acc"), _delta(runs, deltas, r, "forgetting")])
    return Table(
        "t3_resource_sensitivity", "tab:t3-resource-sensitivity",
        "Resource sensitivity relative to Uniform Herding. Active-budget changes also change the "
        "candidate-pool capacity through rho; deltas are paired by seed.",
        ("Axis", "Value", "Average accuracy (%)", "Forgetting (%)", "Δ accuracy (pp)", "Δ forgetting (pp)"),
        "llrrrr", rows, _seeds_note(runs, ("s1", "B3", "s2", "s3", "s4")),
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
    rows = [[f"{a} - {b}", what, str(len(paired(runs.per_seed, a, b, "acc"))),
             *_paired_cells(runs, a, b, "acc"), *_paired_cells(runs, a, b, "forgetting")] for a, b, what in T4_PAIRS]
    return Table(
        "t4_refresh_isolation", "tab:t4-refresh-isolation",
        "Beyond the paper: refresh isolation (r1 no refresh, r2 rho = 1, r3 iCaRL with refresh). Deltas are "
        "paired by seed, mean and 95% t-interval (n - 1 df); the paper has no values for them.",
        ("Pair", "Isolates", "Seeds", "Δ accuracy (pp)", "95% CI", "Δ forgetting (pp)", "95% CI"), "llrrrrr",
        rows, _seeds_note(runs, REFRESH_RUNS), needs=tuple((a, b) for a, b, _ in T4_PAIRS),
    )


def per_seed(runs: Runs) -> Table:
    table = runs.per_seed.set_index(["run_id", "seed"])
    rows = []
    for r in runs.shown():
        for seed in seed_order(runs.per_seed):
            have = (r, seed) in table.index
            rows.append([r, f"{run_name(r, runs.profile)} / {seed}",
                         *(Num(table.loc[(r, seed), m] if have else None) for m in METRICS)])
    return Table(
        "per_seed", "tab:app-seeds", "Per-seed final average accuracy, forgetting, and backward transfer.",
        ("ID", "Configuration / seed", "Average accuracy", "Forgetting", "BWT"), "llrrr", rows,
        f"Profile {runs.profile}; — marks a run ID and seed without a result.", resize=False,
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
            row += [Num(est, digits=0), Num(None if est is None or ran is None else 100 * (est / ran - 1),
                                            digits=0, signed=True)]  # fmt: skip
        header, align = (*header, "uh doctor's estimate (s)", "Error (%)"), "llrrr"
        note = " The estimate is uh doctor's (doctor.json in the results dir); its error is estimate / measured - 1."
    return Table(
        "compute", "tab:app-compute",
        f"Wall-clock time per run in seconds (mean ± standard deviation across seeds), measured on "
        f"{', '.join(runs.devices)}.",
        header, align, rows,
        _seeds_note(runs, runs.shown()) + " Seconds of training, refresh and evaluation, summed over tasks." + note,
        resize=False, needs=_each(runs.shown()),
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
        "quotas", "tab:app-quotas",
        "Per-class active exemplar quota after each task. Ranges indicate the one-exemplar difference "
        "induced by floor rounding.",
        ("Active budget", *(f"T{t}" for t in range(n_tasks))), "l" + "r" * n_tasks, rows,
        f"Profile {runs.profile}: the budgets of s1, B3 and s2 (memory.quotas; needs no results).",
    )


TABLES: tuple[Callable[[Runs], Table], ...] = (
    t1_main, t2_ablations, t3_resource_sensitivity, t4_refresh_isolation, per_seed, compute, quota_table,
)


def variants_table(runs: Runs) -> Table:
    """Beyond the paper: every variant present (uh run --set, uh sweep), paired by seed against its base."""
    summary = summarize(runs.per_seed)
    shown = [r for r in summary.index if is_variant(r)]
    rows = [[r, base_of(r), describe(r, runs.profile), ", ".join(map(str, seeds_of(runs.per_seed, r))),
             _pm(summary, r, "acc"), _pm(summary, r, "forgetting"),
             *_paired_cells(runs, r, base_of(r), "acc"), *_paired_cells(runs, r, base_of(r), "forgetting")]
            for r in shown]  # fmt: skip
    return Table(
        "variants", "tab:variants",
        "Beyond the paper: variants of the run IDs (uh run --set, uh sweep). Deltas are paired by seed against "
        "each variant's base, mean and 95% t-interval (n - 1 df); the paper has no values for them.",
        ("Variant", "Base", "Changes", "Seeds", "Average accuracy (%)", "Forgetting (%)", "Δ accuracy (pp)", "95% CI",
         "Δ forgetting (pp)", "95% CI"), "lllrrrrrrr",
        rows, _seeds_note(runs, tuple(dict.fromkeys(x for r in shown for x in (r, base_of(r))))), needs=_each(shown),
    )  # fmt: skip


def tables_for(runs: Runs) -> list[Table]:
    """The paper's tables that hold a result (Table.written; tables_left_out says which do not), and the variants
    table when the results hold variants."""
    tables = [table for table in (build(runs) for build in TABLES) if table.written(runs)]
    return tables + ([variants_table(runs)] if any(map(is_variant, runs.per_seed["run_id"])) else [])


def tables_left_out(runs: Runs) -> str | None:
    """One line naming the tables left out and what each needs; None when every table is written."""
    gone = [f"{table.stem} (needs {table.wants()})" for table in (build(runs) for build in TABLES)
            if not table.written(runs)]  # fmt: skip
    if not gone:
        return None
    return f"left out {len(gone)} table(s) whose runs are not in these results: {'; '.join(gone)}"


def figures_for(runs: Runs) -> tuple[FigureSpec, ...]:
    """The paper's figures whose results are here (FigureSpec.drawable; left_out says which are not), a sweep figure
    for every key the results sweep over two values or more, and the variants beside their bases."""
    return (*(spec for spec in FIGURES if spec.drawable(runs)), *sweep_specs(runs), *variant_specs(runs))


def left_out(runs: Runs) -> str | None:
    """One line naming the figures left out and what each needs; None when every figure is drawn."""
    gone = [f"{spec.stem} (needs {spec.wants()})" for spec in FIGURES if not spec.drawable(runs)]
    if not gone:
        return None
    return f"left out {len(gone)} figure(s) whose runs are not in these results: {'; '.join(gone)}"


# --- the checker's verdicts ----------------------------------------------------------------------


@dataclass(frozen=True)
class Verdicts:
    """`uh check`'s decisions on these results; `metrics` and `overall` are None when no expected set applies."""

    metrics: list[MetricCheck] | None
    source: str  # the expected set used, or why the metrics are not checked
    claims: list[ClaimCheck]
    variants: list[ClaimCheck]  # each variant against its base (claims.check_variants)
    overall: str | None = None  # check.overall: the one verdict line

    def of(self, run_id: str, metric: str) -> MetricCheck | None:
        return next((m for m in self.metrics or [] if (m.run_id, m.metric) == (run_id, metric)), None)


def expected_root() -> Path:
    return find_expected_root([Path.cwd(), Path(__file__).resolve().parent])


def verdicts(runs: Runs) -> Verdicts:
    """What `uh check` decides on these results against the profile's expected set (as it picks it)."""
    variants = check_variants(runs.per_seed)
    try:
        expected = load_expected(expected_dir_for(runs.profile, expected_root()))
    except (ExpectedError, ResultError) as e:
        return Verdicts(None, f"not checked: {e}", check_claims(runs.per_seed, runs.profile), variants)
    if expected.profile != runs.profile:
        return Verdicts(None, f"not checked: {expected.directory} holds profile {expected.profile}",
                        check_claims(runs.per_seed, runs.profile), variants)  # fmt: skip
    metrics = compare(expected, runs.per_seed)
    claims = check_claims(runs.per_seed, runs.profile, expected.procedure)
    line = judge(expected, runs.per_seed, metrics, claims).line
    return Verdicts(metrics, f"checked against {expected.describe()}", claims, variants, overall=line)


def _metric_cell(runs: Runs, v: Verdicts, run_id: str, metric: str) -> str:
    """Re-run mean, expected mean and verdict of one metric; 'missing' without a result. The mean is over the seeds
    uh check counts; where it counts none (compare.counted_seeds: the registered seeds in order), over every seed."""
    observed = runs.per_seed.loc[runs.per_seed["run_id"] == run_id, metric]
    if observed.empty:
        return "missing"
    check = v.of(run_id, metric)
    if check is None or check.expected_mean is None:
        beyond = run_id not in RUNS or RUNS[run_id].beyond_paper  # r1-r3 and variants
        return f"{observed.mean():.2f} {'no paper value' if beyond else 'not checked'}"
    mean = observed.mean() if check.observed_mean is None else check.observed_mean
    return f"{mean:.2f} (expected {check.expected_mean:.2f}) {check.verdict}"


def _metric_rows(v: Verdicts) -> list[list[str]]:
    """One row per checked metric, as `uh check` prints it: the verdict, then the interval and equivalence."""
    rows = []
    for m in v.metrics or []:
        if m.difference is None:
            continue
        rows.append([m.run_id, METRIC_NAMES[m.metric], f"{m.expected_mean:.2f}", f"{m.observed_mean:.2f}",
                     f"{m.difference:+.2f}", f"{m.tolerance:.2f}", m.verdict, f"{m.n_expected}/{m.n_observed}",
                     m.welch_text(), m.equivalence_text()])  # fmt: skip
    return rows


def _runs_line(runs: Runs, run_ids: tuple[str, ...]) -> str:
    """The runs a figure shows, each without a result marked missing; their metrics are the metrics table's."""
    shown = [r if r in runs.R else f"{r} (missing)" for r in run_ids]
    return f"Runs: {', '.join(shown)}; their metrics and verdicts are in the metrics table above"


# --- the summary page ----------------------------------------------------------------------------

Block = tuple  # ("h", level, text) | ("p", text) | ("table", header, rows) | ("figure", src, title, lines)


def summary_blocks(runs: Runs, v: Verdicts, results_dir: Path, tables: list[Table]) -> list[Block]:
    missing = runs.missing(runs.shown())
    variants = sorted((r for r in runs.R if is_variant(r)), key=sort_key)
    claims_of = {False: [c for c in v.claims if not c.finding], True: [c for c in v.claims if c.finding]}
    blocks: list[Block] = [
        ("h", 1, "Uniform Herding: replication report"),
        ("p", f"Verdict: {v.overall or v.source} (expected_results/README.md states the rules)."),
        ("p", f"Results {results_dir} (profile {runs.profile}, {runs.n_tasks} tasks, {len(runs.per_seed)} "
              f"result files, devices: {', '.join(runs.devices)}). Missing run IDs: "
              f"{', '.join(missing) or 'none'}. Metrics {v.source}."),
        ("p", f"At a glance: metrics {tally(m.verdict for m in v.metrics or [])}; claims "
              f"{tally(c.verdict for c in claims_of[False])}; findings beyond the paper "
              f"{tally(c.verdict for c in claims_of[True])}."),
        ("h", 2, "Claims (from the re-run alone: paired by seed, one-sided paired t-tests, 5% in all)"),
        ("table", ("Claim", "Verdict", "Statement",
                   "Evidence (per-seed deltas; mean; t-interval at the test's level: 90% for a one-sided 5%)"),
         [[c.claim_id, c.verdict, ("Beyond the paper, no paper value, never gates: " if c.finding else "")
           + c.statement, " / ".join(c.evidence)] for c in v.claims]),
        ("h", 2, "Metrics: re-run mean (expected mean) and verdict"),
        ("table", ("Run", "Configuration", "Seeds", *METRIC_NAMES.values()),
         [[r, run_name(r, runs.profile), ", ".join(map(str, seeds_of(runs.per_seed, r))) or "missing",
           *(_metric_cell(runs, v, r, m) for m in METRICS)] for r in (*runs.shown(), *variants)]),
        *(("p", f"{METRIC_NAMES[m]}: {PAPER[m].definition}") for m in METRICS),
    ]
    reported = [m for m in REPORTED if m in runs.per_seed]
    if reported:  # every run of the results, variants too
        summary = summarize(runs.per_seed)
        blocks += [("h", 2, "Metrics beyond the paper's: reported, never checked"),
                   ("p", "The paper has no value and uh check no tolerance for these; uh check never reads them. "
                         "Mean ± population std over the seeds present."),
                   *(("p", f"{m.upper()}: {REPORTED[m].definition}") for m in reported),
                   ("table", ("Run", "Configuration", "Seeds", *(m.upper() for m in reported)),
                    [[r, run_name(r, runs.profile), ", ".join(map(str, seeds_of(runs.per_seed, r))),
                      *(_pm(summary, r, m).render(False) for m in reported)] for r in summary.index])]  # fmt: skip
    if _metric_rows(v):
        blocks += [("h", 2, "Metric checks: the tolerance decides; the interval and equivalence are information"),
                   ("table", ("Run", "Metric", "Expected", "Re-run", "Diff", "Tol", "Verdict", "Seeds",
                              "Welch 95% CI of diff", "Equivalence at the tolerance (TOST)"), _metric_rows(v))]
    if v.variants:
        blocks += [("h", 2, "Variants against their base (no paper value: measured, not judged, never gate)"),
                   ("table", ("Variant", "Verdict", "Paired deltas (per seed; mean; 95% t-interval)"),
                    [[c.statement, c.verdict, " / ".join(c.evidence)] for c in v.variants])]  # fmt: skip
    blocks.append(("h", 2, "Figures"))
    if line := left_out(runs):
        blocks.append(("p", line[0].upper() + line[1:] + "."))
    claims = {c.claim_id: c for c in v.claims}
    for spec in figures_for(runs):  # each run's metrics are in the table above, once
        lines = [_runs_line(runs, spec.runs)]
        lines += [f"{c} {claims[c].verdict}: {claims[c].statement}" for c in spec.claims]
        blocks.append(("figure", f"figures/{spec.stem}.png", f"{spec.caption} ({spec.label})", lines))
    blocks.append(("h", 2, "Tables"))
    if line := tables_left_out(runs):
        blocks.append(("p", line[0].upper() + line[1:] + "."))
    for table in tables:
        blocks.append(("p", f"{table.label}: tables/{table.stem}.md, tables/{table.stem}.tex"))
    return blocks


def summary_markdown(blocks: list[Block]) -> str:
    out = []
    for kind, *rest in blocks:
        if kind == "h":
            out.append(f"{'#' * rest[0]} {rest[1]}")
        elif kind == "p":
            out.append(rest[0])
        elif kind == "table":
            header, rows = rest
            out.append("\n".join(["| " + " | ".join(header) + " |", "|" + "---|" * len(header),
                                  *("| " + " | ".join(row) + " |" for row in rows)]))
        else:
            src, title, lines = rest
            out.append("\n".join([f"### {title}", "", f"![{title}]({src})", "", *(f"- {x}" for x in lines)]))
    return "\n\n".join(out) + "\n"


VERDICT_RE = re.compile(r"RESULTS REPLICATED|NOT REPLICATED|REPLICATED|NOT SUPPORTED|SUPPORTED|INCONCLUSIVE"
                        r"|UNDECIDED|EXPECTED SET MATCHED|PIPELINE CHECK PASSED|PIPELINE CHECK FAILED|NOT EVIDENCE"
                        r"|INCOMPLETE|NOT CHECKED|not checked|missing")
VERDICT_CLASS = {"RESULTS REPLICATED": "ok", "REPLICATED": "ok", "SUPPORTED": "ok", "PIPELINE CHECK PASSED": "ok",
                 "EXPECTED SET MATCHED": "ok", "NOT REPLICATED": "bad", "NOT SUPPORTED": "bad",
                 "PIPELINE CHECK FAILED": "bad", "INCONCLUSIVE": "noise", "UNDECIDED": "noise", "INCOMPLETE": "noise"}
CSS = """body{font-family:sans-serif;max-width:72em;margin:1em auto;font-size:14px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
.fig{display:flex;gap:1.5em;align-items:flex-start;margin-bottom:1.5em}.fig img{max-width:58%}
.ok{background:#cfc;font-weight:bold}.noise{background:#ffd;font-weight:bold}
.bad{background:#fcc;font-weight:bold}.na{background:#eee;font-style:italic}"""


def _html(text: str) -> str:
    """Escaped text with every verdict marked by colour and weight (readable without colour too)."""
    return VERDICT_RE.sub(lambda m: f'<span class="{VERDICT_CLASS.get(m[0], "na")}">{m[0]}</span>', html.escape(text))


def summary_html(blocks: list[Block]) -> str:
    out = ["<!doctype html>", '<html><head><meta charset="utf-8"><title>Uniform Herding: replication report</title>',
           f"<style>{CSS}</style></head><body>"]
    for kind, *rest in blocks:
        if kind == "h":
            out.append(f"<h{rest[0]}>{html.escape(rest[1])}</h{rest[0]}>")
        elif kind == "p":
            out.append(f"<p>{_html(rest[0])}</p>")
        elif kind == "table":
            header, rows = rest
            out.append("<table><tr>" + "".join(f"<th>{html.escape(h)}</th>" for h in header) + "</tr>")
            out += ["<tr>" + "".join(f"<td>{_html(c)}</td>" for c in row) + "</tr>" for row in rows]
            out.append("</table>")
        else:
            src, title, lines = rest
            out.append(f'<h3>{html.escape(title)}</h3><div class="fig"><img src="{src}" alt="{html.escape(title)}">')
            out.append("<ul>" + "".join(f"<li>{_html(x)}</li>" for x in lines) + "</ul></div>")
    return "\n".join([*out, "</body></html>", ""])


# --- the command ---------------------------------------------------------------------------------


def published_values(runs: Runs, wanted: bool | None, echo: Callable[[str], None]) -> pd.DataFrame | None:
    """The paper's per-seed values to overlay: by default and only for paper-profile results."""
    if not (runs.profile == "paper" if wanted is None else wanted):
        return None
    if runs.profile != "paper":
        echo(f"note: the paper's values are not overlaid on {runs.profile}-profile results (other sizes)")
        return None
    try:
        return read_per_seed_csv(expected_root() / "paper_per_seed.csv")
    except (ExpectedError, ResultError) as e:
        echo(f"note: the paper's values are not overlaid ({e})")
        return None


def write_report(results_dir: Path, out: Path, overlay: bool | None = None,
                 echo: Callable[[str], None] = print) -> list[Path]:
    """Every table, figure and the summary under `out`; returns the files written.

    All of it is written into a staging folder beside `out` first and moved in only when complete,
    so a full or read-only disk leaves `out` as it was (or absent), never a partial report. Files
    are moved one by one, not `out` swapped whole: `out` may be a folder with other files (paper/).
    """
    runs = load_runs(results_dir)
    runs = dataclasses.replace(runs, paper=published_values(runs, overlay, echo))
    tables = tables_for(runs)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
    try:
        staged = []
        for table in tables:
            for ext, text in (("tex", table.latex()), ("md", table.markdown())):
                staged.append(staging / "tables" / f"{table.stem}.{ext}")
                write_text_atomic(staged[-1], text)
        for spec in figures_for(runs):
            staged += save(spec, runs, staging / "figures")
        blocks = summary_blocks(runs, verdicts(runs), results_dir, tables)
        for name, text in (("summary.md", summary_markdown(blocks)), ("summary.html", summary_html(blocks))):
            staged.append(staging / name)
            write_text_atomic(staged[-1], text)
        written = [out / path.relative_to(staging) for path in staged]
        for path, target in zip(staged, written, strict=True):
            target.parent.mkdir(parents=True, exist_ok=True)
            os.replace(path, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    missing = runs.missing(runs.shown())
    echo(f"profile {runs.profile}: {len(runs.per_seed)} results; missing run IDs: {', '.join(missing) or 'none'}")
    for line in (left_out(runs), tables_left_out(runs)):
        if line:
            echo(line)
    return written


@click.command("report")
@click.option("--results-dir", type=click.Path(file_okay=False, path_type=Path), envvar="UH_RESULTS_DIR",
              default="results", show_default=True, help="Where results/<RUN>/seed-<S>/ are. Env: UH_RESULTS_DIR.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path),
              help="Output folder, e.g. paper/ [default: <results-dir>/report].")
@click.option("--paper-values/--no-paper-values", default=None,
              help="Overlay the paper's published values on the figures [default: for paper-profile results].")
def report_command(results_dir: Path, out: Path | None, paper_values: bool | None) -> None:
    """Tables (LaTeX, Markdown), figures (PDF, PNG) and summary.{md,html} from whatever results exist."""
    out = out or results_dir / "report"
    try:
        written = write_report(results_dir, out, paper_values, click.echo)
    except ResultError as e:
        raise InputError(str(e)) from None
    except OSError as e:
        raise click.ClickException(
            f"cannot write {e.filename or out} ({e.strerror or e}); {out} is as it was; choose a writable --out"
        ) from None
    click.echo(f"wrote {len(written)} files under {out} (open {out / 'summary.html'})")

