"""`uh report`: the paper's tables (LaTeX + Markdown), its figures (PDF + PNG) and a one-page summary;
with variants among the results, their table, a figure of each beside its base, and a figure per swept key
(beyond the paper).

Reads whatever results are present. A missing run ID or seed leaves a marked gap (— in Markdown,
--- in LaTeX, "missing" in figure titles and the summary), never a crash; a figure or table without the
runs it needs is left out, with one line saying so (FigureSpec.drawable, Table.needs). A mean of one
seed is printed with "(n = 1)", never "± 0.00". The numbers come from
aggregate.py (mean, population std, deltas paired by seed against B3) and the verdicts from verdict/,
so the report prints exactly what `uh aggregate` and `uh check` decide. paper/README.md maps each
output to the paper's table, figure or claim.

OUT/tables/<stem>.{tex,md}, OUT/figures/<stem>.{pdf,png}, OUT/summary.{md,html}.

This module chooses what is drawn, writes the one-page summary (Markdown, HTML) and the whole report
(write_report, which commands/report.py calls); the pieces: load.py (the results), tables.py, figures.py (the paper's
figures) and sweep_figures.py.
"""

from __future__ import annotations

import dataclasses
import html
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from uniform_herding.catalogue import RUNS, is_variant, run_name, sort_key
from uniform_herding.method.metrics import METRICS, PAPER, REPORTED
from uniform_herding.report.figure_spec import FigureSpec, save
from uniform_herding.report.figures import FIGURES
from uniform_herding.report.load import Runs, compared_with, load_runs, seeds_of
from uniform_herding.report.sweep_figures import sweep_specs, variant_specs
from uniform_herding.report.tables import METRIC_NAMES, Table, _pm, tables_for, tables_left_out
from uniform_herding.runs.results import ResultError, read_per_seed_csv, write_text_atomic
from uniform_herding.runs.terminal import HEARTBEAT_S, Progress
from uniform_herding.verdict.aggregate import summarize
from uniform_herding.verdict.check import tally
from uniform_herding.verdict.claim_verdicts import ClaimCheck, check_claims, check_variants
from uniform_herding.verdict.expected import ExpectedError, expected_dir_for, find_expected_root, load_expected
from uniform_herding.verdict.judge import check
from uniform_herding.verdict.metric_verdicts import MetricCheck


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
    variants: list[ClaimCheck]  # each variant against its base (evidence.check_variants)
    overall: str | None = None  # judge's one verdict line (Verdict.line)

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
        return Verdicts(
            None,
            f"not checked: {expected.directory} holds profile {expected.profile}",
            check_claims(runs.per_seed, runs.profile),
            variants,
        )
    checked = check(expected, runs.per_seed, made=runs.made)
    return Verdicts(
        checked.metrics,
        f"checked against {expected.describe()}",
        checked.claims,
        variants,
        overall=checked.verdict.line,
    )


def _metric_cell(runs: Runs, v: Verdicts, run_id: str, metric: str) -> str:
    """Re-run mean, expected mean and verdict of one metric; 'missing' without a result. The mean is over the seeds
    uh check counts; where it counts none (procedure.State.counted: the seeds the procedure asked for), over every
    seed."""
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
        rows.append(
            [
                m.run_id,
                METRIC_NAMES[m.metric],
                f"{m.expected_mean:.2f}",
                f"{m.observed_mean:.2f}",
                f"{m.difference:+.2f}",
                f"{m.tolerance:.2f}",
                m.verdict,
                f"{m.n_expected}/{m.n_observed}",
                m.welch_text(),
                m.equivalence_text(),
            ]
        )
    return rows


def _runs_line(runs: Runs, run_ids: tuple[str, ...]) -> str:
    """The runs a figure shows, each without a result marked missing; their metrics are the metrics table's."""
    shown = [r if r in runs.R else f"{r} (missing)" for r in run_ids]
    return f"Runs: {', '.join(shown)}; their metrics and verdicts are in the metrics table above"


# --- the summary page ----------------------------------------------------------------------------

Block = tuple  # ("h", level, text) | ("p", text) | ("table", header, rows) | ("figure", src, title, lines)


def summary_blocks(runs: Runs, v: Verdicts, results_dir: Path, tables: list[Table]) -> list[Block]:
    """The summary page, section by section: the verdict and what was read, the claims, the metrics (checked, then
    reported), the metric checks, the variants, the figures and the tables."""
    return [
        *_heading_blocks(runs, v, results_dir),
        *_claim_blocks(v),
        *_metric_blocks(runs, v),
        *_reported_blocks(runs),
        *_check_blocks(v),
        *_variant_blocks(v),
        *_figure_blocks(runs, v),
        *_table_blocks(runs, tables),
    ]


def _heading_blocks(runs: Runs, v: Verdicts, results_dir: Path) -> list[Block]:
    """The title, the one verdict, what was read and the tally of every verdict."""
    missing = runs.missing(runs.shown())
    claims_of = {False: [c for c in v.claims if not c.finding], True: [c for c in v.claims if c.finding]}
    return [
        ("h", 1, "Uniform Herding: replication report"),
        ("p", f"Verdict: {v.overall or v.source} (expected_results/README.md states the rules)."),
        (
            "p",
            f"Results {results_dir} (profile {runs.profile}, {runs.n_tasks} tasks, {len(runs.per_seed)} "
            f"result files, devices: {', '.join(runs.devices)}). Missing run IDs: "
            f"{', '.join(missing) or 'none'}. Metrics {v.source}.",
        ),
        (
            "p",
            f"At a glance: metrics {tally(m.kind for m in v.metrics or [])}; claims "
            f"{tally(c.kind for c in claims_of[False])}; findings beyond the paper "
            f"{tally(c.kind for c in claims_of[True])}.",
        ),
    ]


def _claim_blocks(v: Verdicts) -> list[Block]:
    """The claims and findings, each with its verdict and its per-seed evidence."""
    return [
        ("h", 2, "Claims (from the re-run alone: paired by seed, one-sided paired t-tests, 5% in all)"),
        (
            "table",
            (
                "Claim",
                "Verdict",
                "Statement",
                "Evidence (per-seed deltas; mean; t-interval at the test's level: 90% for a one-sided 5%)",
            ),
            [
                [
                    c.claim_id,
                    c.verdict,
                    ("Beyond the paper, no paper value, never gates: " if c.finding else "") + c.statement,
                    " / ".join(c.evidence),
                ]
                for c in v.claims
            ],
        ),
    ]


def _metric_blocks(runs: Runs, v: Verdicts) -> list[Block]:
    """Every run's (and variant's) metrics, each against its expected mean with its verdict, then their definitions."""
    variants = sorted((r for r in runs.R if is_variant(r)), key=sort_key)
    return [
        ("h", 2, "Metrics: re-run mean (expected mean) and verdict"),
        (
            "table",
            ("Run", "Configuration", "Seeds", *METRIC_NAMES.values()),
            [
                [
                    r,
                    run_name(r, runs.profile),
                    ", ".join(map(str, seeds_of(runs.per_seed, r))) or "missing",
                    *(_metric_cell(runs, v, r, m) for m in METRICS),
                ]
                for r in (*runs.shown(), *variants)
            ],
        ),
        *(("p", f"{METRIC_NAMES[m]}: {PAPER[m].definition}") for m in METRICS),
    ]


def _reported_blocks(runs: Runs) -> list[Block]:
    """The metrics beyond the paper's (REPORTED) of every run of the results, variants too; none where none is."""
    reported = [m for m in REPORTED if m in runs.per_seed]
    if not reported:
        return []
    summary = summarize(runs.per_seed)
    return [
        ("h", 2, "Metrics beyond the paper's: reported, never checked"),
        (
            "p",
            "The paper has no value and uh check no tolerance for these; uh check never reads them. "
            "Mean ± population std over the seeds present.",
        ),
        *(("p", f"{m.upper()}: {REPORTED[m].definition}") for m in reported),
        (
            "table",
            ("Run", "Configuration", "Seeds", *(m.upper() for m in reported)),
            [
                [
                    r,
                    run_name(r, runs.profile),
                    ", ".join(map(str, seeds_of(runs.per_seed, r))),
                    *(_pm(summary, r, m).render(False) for m in reported),
                ]
                for r in summary.index
            ],
        ),
    ]


def _check_blocks(v: Verdicts) -> list[Block]:
    """Each checked metric as `uh check` prints it; none where no metric is checked."""
    rows = _metric_rows(v)
    if not rows:
        return []
    header = (
        "Run",
        "Metric",
        "Expected",
        "Re-run",
        "Diff",
        "Tol",
        "Verdict",
        "Seeds",
        "Welch 95% CI of diff",
        "Equivalence at the tolerance (TOST)",
    )
    return [
        ("h", 2, "Metric checks: the tolerance decides; the interval and equivalence are information"),
        ("table", header, rows),
    ]


def _variant_blocks(v: Verdicts) -> list[Block]:
    """Each variant against its base, measured and never judged; none without a variant."""
    if not v.variants:
        return []
    return [
        ("h", 2, "Variants against their base (no paper value: measured, not judged, never gate)"),
        (
            "table",
            ("Variant", "Verdict", "Paired deltas (per seed; mean; 95% t-interval)"),
            [[c.statement, c.verdict, " / ".join(c.evidence)] for c in v.variants],
        ),
    ]


def _figure_blocks(runs: Runs, v: Verdicts) -> list[Block]:
    """Every figure drawn, with the runs it shows and the claims it supports; a line naming those left out."""
    blocks: list[Block] = [("h", 2, "Figures")]
    if line := left_out(runs):
        blocks.append(("p", line[0].upper() + line[1:] + "."))
    claims = {c.claim_id: c for c in v.claims}
    for spec in figures_for(runs):  # each run's metrics are in the table above, once
        lines = [_runs_line(runs, spec.runs)]
        lines += [f"{c} {claims[c].verdict}: {claims[c].statement}" for c in spec.claims]
        blocks.append(("figure", f"figures/{spec.stem}.png", f"{spec.caption} ({spec.label})", lines))
    return blocks


def _table_blocks(runs: Runs, tables: list[Table]) -> list[Block]:
    """Where each table is written; a line naming those left out."""
    blocks: list[Block] = [("h", 2, "Tables")]
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
            out.append(
                "\n".join(
                    [
                        "| " + " | ".join(header) + " |",
                        "|" + "---|" * len(header),
                        *("| " + " | ".join(row) + " |" for row in rows),
                    ]
                )
            )
        else:
            src, title, lines = rest
            out.append("\n".join([f"### {title}", "", f"![{title}]({src})", "", *(f"- {x}" for x in lines)]))
    return "\n\n".join(out) + "\n"


VERDICT_RE = re.compile(
    r"RESULTS REPLICATED|NOT REPLICATED|REPLICATED|NOT SUPPORTED|SUPPORTED|INCONCLUSIVE"
    r"|UNDECIDED|EXPECTED SET MATCHED|PIPELINE CHECK PASSED|PIPELINE CHECK FAILED|NOT EVIDENCE"
    r"|INCOMPLETE|NOT CHECKED|not checked|missing"
)
VERDICT_CLASS = {
    "RESULTS REPLICATED": "ok",
    "REPLICATED": "ok",
    "SUPPORTED": "ok",
    "PIPELINE CHECK PASSED": "ok",
    "EXPECTED SET MATCHED": "ok",
    "NOT REPLICATED": "bad",
    "NOT SUPPORTED": "bad",
    "PIPELINE CHECK FAILED": "bad",
    "INCONCLUSIVE": "noise",
    "UNDECIDED": "noise",
    "INCOMPLETE": "noise",
}
CSS = """body{font-family:sans-serif;max-width:72em;margin:1em auto;font-size:14px}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left}
.fig{display:flex;gap:1.5em;align-items:flex-start;margin-bottom:1.5em}.fig img{max-width:58%}
.ok{background:#cfc;font-weight:bold}.noise{background:#ffd;font-weight:bold}
.bad{background:#fcc;font-weight:bold}.na{background:#eee;font-style:italic}"""


def _html(text: str) -> str:
    """Escaped text with every verdict marked by colour and weight (readable without colour too)."""
    return VERDICT_RE.sub(lambda m: f'<span class="{VERDICT_CLASS.get(m[0], "na")}">{m[0]}</span>', html.escape(text))


def summary_html(blocks: list[Block]) -> str:
    out = [
        "<!doctype html>",
        '<html><head><meta charset="utf-8"><title>Uniform Herding: replication report</title>',
        f"<style>{CSS}</style></head><body>",
    ]
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


def write_report(
    results_dir: Path,
    out: Path,
    overlay: bool | None = None,
    echo: Callable[[str], None] = print,
    base: str | None = None,
) -> list[Path]:
    """Every table, figure and the summary under `out`, every variant compared with run ID `base` where given
    (--base; else with its own base, catalogue.base_of); returns the files written.

    Its progress goes to standard error (runs/terminal.Progress: a line per stage, a figure each).
    All of it is written into a staging folder beside `out` first and moved in only when complete,
    so a full or read-only disk leaves `out` as it was (or absent), never a partial report. Files
    are moved one by one, not `out` swapped whole: `out` may be a folder with other files (paper/).
    """
    runs = load_runs(results_dir)  # read before the progress starts: a malformed result is one line, nothing before
    with Progress("uh report", unit="figure", every=HEARTBEAT_S) as progress:  # a line per stage: tens of seconds
        paper = published_values(runs, overlay, echo)
        runs = dataclasses.replace(compared_with(runs, base) if base else runs, paper=paper)
        progress.stage(f"read {len(runs.per_seed)} results")
        tables = tables_for(runs)
        progress.stage(f"{len(tables)} tables made")
        out.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp"))
        try:
            written = _move_in(_stage(runs, tables, results_dir, staging, progress), staging, out)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    missing = runs.missing(runs.shown())
    echo(f"profile {runs.profile}: {len(runs.per_seed)} results; missing run IDs: {', '.join(missing) or 'none'}")
    for line in (left_out(runs), tables_left_out(runs)):
        if line:
            echo(line)
    return written


def _stage(runs: Runs, tables: list[Table], results_dir: Path, staging: Path, progress: Progress) -> list[Path]:
    """Every table, figure and the summary written under `staging`, each atomically; the files written."""
    staged = []
    for table in tables:
        for ext, text in (("tex", table.latex()), ("md", table.markdown())):
            staged.append(staging / "tables" / f"{table.stem}.{ext}")
            write_text_atomic(staged[-1], text)
    for spec in figures_for(runs):
        staged += save(spec, runs, staging / "figures")
        progress.advance()
        progress.stage(f"figure {spec.stem} drawn")
    blocks = summary_blocks(runs, verdicts(runs), results_dir, tables)
    for name, text in (("summary.md", summary_markdown(blocks)), ("summary.html", summary_html(blocks))):
        staged.append(staging / name)
        write_text_atomic(staged[-1], text)
    progress.stage("summary written")
    return staged


def _move_in(staged: list[Path], staging: Path, out: Path) -> list[Path]:
    """The staged files moved to their places under `out`, one by one (`out` may hold other files: paper/); their
    new paths."""
    written = [out / path.relative_to(staging) for path in staged]
    for path, target in zip(staged, written, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(path, target)
    return written
