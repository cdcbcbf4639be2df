"""report/ (`uh report`): every table and figure from a small set of results; the tables print
aggregate's numbers; a missing run ID is a marked gap; the paper's values overlay on request.

One real smoke run (B3, seed 1993) checks that the report reads what `uh run` writes; the other
results are synthetic (random lower-triangular R, metrics from metrics.py's functions) to keep the
file fast. B2 is left out on purpose: it is the missing run whose gaps the tests look for.
"""

from __future__ import annotations

import dataclasses
import errno
import itertools
import json
import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import matrix_with, next_look

from uniform_herding.catalogue import PAPER_RUNS, RUNS, resolve
from uniform_herding.cli import main
from uniform_herding.method import metrics as metric
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.method.metrics import METRICS
from uniform_herding.report.figures import FIGURES
from uniform_herding.report.load import load_runs
from uniform_herding.report.style import PAPER_LABEL
from uniform_herding.report.summary import published_values, write_report
from uniform_herding.report.sweep_figures import sweep_specs
from uniform_herding.report.tables import T2_VARIANTS, TABLES, Table
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.provenance import code_hash
from uniform_herding.runs.results import read_per_seed_csv, write_json_atomic
from uniform_herding.runs.run import run_seed
from uniform_herding.verdict.aggregate import paired, paired_deltas, summarize
from uniform_herding.verdict.claims import CLAIMS

ROOT = Path(__file__).resolve().parents[2]
SYNTHETIC = [
    ("B3", 2023),
    ("B1", 1993),
    ("B1", 2023),
    ("a1", 1993),
    ("a1", 2023),
    ("a2", 1993),
    ("a3", 1993),
    ("a4", 1993),
    ("s1", 1993),
    ("s3", 1993),
    ("s4", 2023),
    ("B0", 42),
]
MISSING = "B2"


def fake_result(run_id: str, seed: int, profile: str, T: int, metrics: dict | None = None) -> dict:
    """A result.json body with a random lower-triangular R and its metrics; with `metrics` (ACC, F, BWT), an R that
    gives them (conftest.matrix_with)."""
    rng = np.random.default_rng([seed, list(RUNS).index(run_id)])
    R = [[float(rng.integers(0, 41) * 2.5) for _ in range(i + 1)] for i in range(T)]
    R = matrix_with(metrics["acc"], metrics["forgetting"], metrics["bwt"], T) if metrics else metric.square(R)
    metrics = metrics or {name: m.of(R) for name, m in metric.PAPER.items()}
    return {
        "config_version": CONFIG_VERSION,
        "run_id": run_id,
        "seed": seed,
        "profile": profile,
        "config": resolve(run_id, profile).to_dict(),
        "R": R,
        "metrics": metrics,
        "wall_s": float(rng.uniform(10, 20)),
        "environment": {"device": "cpu"},
    }


def write(results_dir: Path, body: dict) -> None:
    write_json_atomic(results_dir / body["run_id"] / f"seed-{body['seed']}" / "result.json", body)


@pytest.fixture(scope="module")
def smoke_cli(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """Smoke results (one real run, the rest synthetic); `uh report` run on them; its output."""
    base = tmp_path_factory.mktemp("smoke")
    results = base / "results"
    pair = RunOptions("smoke", base / "data", results).pair("B3", 1993)
    real = run_seed(pair, resolve("B3", "smoke"), echo=lambda _: None)
    T = len(json.loads(real.read_text())["R"])
    for run_id, seed in SYNTHETIC:
        write(results, fake_result(run_id, seed, "smoke", T))
    res = CliRunner().invoke(main, ["report", "--results-dir", str(results)])
    assert res.exit_code == 0, res.output
    return results, res.output


@pytest.fixture(scope="module")
def smoke(smoke_cli: tuple[Path, str]) -> Path:
    """The smoke results dir; the report is in its report/ folder."""
    return smoke_cli[0]


@pytest.fixture(scope="module")
def paper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Paper-profile results carrying the paper's per-seed metrics (R synthetic, 10 tasks)."""
    results = tmp_path_factory.mktemp("paper") / "results"
    for row in read_per_seed_csv(ROOT / "expected_results" / "paper_per_seed.csv").itertuples():
        metrics = {m: getattr(row, m) for m in METRICS}
        write(results, fake_result(row.run_id, row.seed, "paper", 10, metrics))
    write_report(results, results / "report", echo=lambda _: None)
    return results


def tables_of(results: Path) -> list[Table]:
    runs = load_runs(results)
    return [build(runs) for build in TABLES]


def md_rows(path: Path) -> list[list[str]]:
    """The body rows of the Markdown table in `path`, cell by cell."""
    lines = [line for line in path.read_text().splitlines() if line.startswith("| ")]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines[1:]]


def pm(summary: pd.DataFrame, run_id: str, metric: str) -> str:
    """Mean ± population std as the report prints it; a mean of one seed as "(n = 1)", never "± 0.00"."""
    mean = f"{summary.loc[run_id, f'{metric}_mean']:.2f}"
    if summary.loc[run_id, "n"] < 2:
        return f"{mean} (n = {summary.loc[run_id, 'n']})"
    return f"{mean} ± {summary.loc[run_id, f'{metric}_std']:.2f}"


def legend_texts(fig: object) -> list[str]:
    legends = [ax.get_legend() for ax in fig.axes if ax.get_legend()] + list(fig.legends)
    return [t.get_text() for legend in legends for t in legend.get_texts()]


@pytest.mark.trains
def test_every_table_and_figure_is_written(smoke: Path) -> None:
    out = smoke / "report"
    expected = {"t1_main", "t2_ablations", "t3_resource_sensitivity", "per_seed", "compute", "quotas"}
    assert {table.stem for table in tables_of(smoke)} == expected | {"t4_refresh_isolation"}
    written = sorted(p.name for p in (out / "tables").iterdir())  # no r1-r3 here: no T4 (a table of gaps)
    assert written == sorted(f"{stem}.{ext}" for stem in expected for ext in ("md", "tex"))
    for stem in expected:
        assert "\\toprule" in (out / "tables" / f"{stem}.tex").read_text()
        assert "|---" in (out / "tables" / f"{stem}.md").read_text().replace(":---", "---")
    drawn = [spec for spec in FIGURES if spec.drawable(load_runs(smoke))]  # no r1-r3 here: no refresh figure
    assert {spec.stem for spec in FIGURES} - {spec.stem for spec in drawn} == {"fig_refresh_isolation"}
    for spec in drawn:
        assert (out / "figures" / f"{spec.stem}.pdf").read_bytes().startswith(b"%PDF")
        assert (out / "figures" / f"{spec.stem}.png").read_bytes().startswith(b"\x89PNG")
    assert len(list((out / "figures").iterdir())) == 2 * len(drawn)  # no temp files left behind
    summary_md, summary_html = (out / "summary.md").read_text(), (out / "summary.html").read_text()
    for spec in drawn:
        assert f"figures/{spec.stem}.png" in summary_md and f'src="figures/{spec.stem}.png"' in summary_html


@pytest.mark.trains
def test_tables_print_the_aggregated_numbers(smoke: Path) -> None:
    runs = load_runs(smoke)
    summary, deltas = summarize(runs.per_seed), paired_deltas(runs.per_seed)
    tables = smoke / "report" / "tables"
    t1 = {row[0]: row[1:] for row in md_rows(tables / "t1_main.md")}
    for run_id in ("B1", "B3"):
        assert t1[RUNS[run_id].name] == [pm(summary, run_id, m) for m in METRICS]
    t2 = {row[0]: row[1:] for row in md_rows(tables / "t2_ablations.md")}
    for run_id, name in T2_VARIANTS.items():
        d = deltas.loc[run_id]
        assert t2[name] == [
            pm(summary, run_id, "acc"),
            pm(summary, run_id, "forgetting"),
            f"{d['acc']:+.2f}",
            f"{d['forgetting']:+.2f}",
        ]
    t3 = [row[2:] for row in md_rows(tables / "t3_resource_sensitivity.md")]
    assert t3[0][:2] == [pm(summary, "s1", "acc"), pm(summary, "s1", "forgetting")]
    assert t3[1] == [pm(summary, "B3", "acc"), pm(summary, "B3", "forgetting"), "0.00", "0.00"]
    assert t3[5][2:] == [f"{deltas.loc['s4', 'acc']:+.2f}", f"{deltas.loc['s4', 'forgetting']:+.2f}"]
    tex = (tables / "t1_main.tex").read_text()
    acc, std = summary.loc["B3", "acc_mean"], summary.loc["B3", "acc_std"]
    assert f"Uniform Herding & ${acc:.2f}\\pm{std:.2f}$ &" in tex
    per_seed = {(row[0], row[1]): row[2:] for row in md_rows(tables / "per_seed.md")}
    b3 = runs.per_seed.set_index(["run_id", "seed"]).loc[("B3", 1993)]
    assert per_seed[("B3", "Uniform Herding / 1993")] == [f"{b3[m]:.2f}" for m in METRICS]


@pytest.mark.trains
def test_a_missing_run_is_a_marked_gap(smoke: Path) -> None:
    out = smoke / "report"
    name = RUNS[MISSING].name
    assert {row[0]: row[1:] for row in md_rows(out / "tables" / "t1_main.md")}[name] == ["—"] * 3
    assert f"{name} & --- & --- & --- \\\\" in (out / "tables" / "t1_main.tex").read_text()
    per_seed = {(row[0], row[1]): row[2:] for row in md_rows(out / "tables" / "per_seed.md")}
    assert per_seed[(MISSING, f"{name} / 1993")] == ["—"] * 3
    assert per_seed[("s2", "Active budget 100 / 42")] == ["—"] * 3  # s2 has no result; its smoke M is 100
    summary = (out / "summary.md").read_text()
    assert f"| {MISSING} | {name} | missing | missing | missing | missing |" in summary
    assert f"- Runs: B3, {MISSING} (missing), a2;" in summary  # fig_forgetting_by_task
    t3 = md_rows(out / "tables" / "t3_resource_sensitivity.md")
    assert t3[2][2:] == ["—"] * 4  # s2


@pytest.mark.trains
def test_missing_runs_are_named_in_figure_titles(smoke: Path) -> None:
    runs = load_runs(smoke)
    spec = next(s for s in FIGURES if s.stem == "fig_forgetting_by_task")
    titles = [ax.get_title() for ax in spec.draw(runs).axes]
    assert any(f"missing: {MISSING}" in t for t in titles)


def test_paper_profile_reprints_the_published_tables(paper: Path) -> None:
    tables = paper / "report" / "tables"
    printed = pd.read_csv(ROOT / "expected_results" / "paper_t1.csv", dtype=str)
    t1 = {row[0]: row[1:] for row in md_rows(tables / "t1_main.md")}
    for row in printed.itertuples():
        assert t1[RUNS[row.run_id].name] == [
            f"{row.acc_mean} ± {row.acc_std}",
            f"{row.forgetting_mean} ± {row.forgetting_std}",
            f"{row.bwt_mean} ± {row.bwt_std}",
        ]
    t2 = (tables / "t2_ablations.tex").read_text()
    assert r"Without KD & $42.52\pm0.61$ & $28.88\pm0.19$ & $-1.48$ & $+11.66$ \\" in t2
    t3 = (tables / "t3_resource_sensitivity.tex").read_text()
    assert r"Active budget & 2,000 & $44.00\pm0.51$ & $17.22\pm0.43$ & $0.00$ & $0.00$ \\" in t3
    assert (
        "| 2,000 | 200 | 100 | 66–67 | 50 | 40 | 33–34 | 28–29 | 25 | 22–23 | 20 |"
        in (tables / "quotas.md").read_text()
    )
    summary = (paper / "report" / "summary.md").read_text()
    assert "NOT REPLICATED" not in summary and "| B3 | Uniform Herding | 1993, 2023, 42 | 44.00" in summary
    assert re.search(r"\| C1 \| UNDECIDED \(look 1 of 5", summary) and "Verdict: UNDECIDED" in summary
    assert "Verdict: UNDECIDED (C1 UNDECIDED at look 1 of 5" in summary  # the same line as `uh check`
    # the metric checks, as `uh check` prints them: the verdict, then the Welch interval and the TOST statement
    assert re.search(
        r"\| B3 \| ACC \| 44\.00 \| 44\.00 \| \+0\.00 \| [\d.]+ \| REPLICATED \| 3/3 \| "
        r"\[-1\.41, \+1\.41\] \| equivalent at 90%",
        summary,
    )
    # the interval at the look's level: 98.04% for a one-sided test at 0.0098
    assert "98.04% t-interval [-2.26, +5.61] (2 df), one-sided p 0.048: undecided at alpha 0.0098" in summary
    html_text = (paper / "report" / "summary.html").read_text()
    assert '<span class="noise">UNDECIDED</span>' in html_text


@pytest.mark.slow
def test_the_report_says_which_look_left_a_claim_undecided(tmp_path: Path) -> None:
    """B3 - a4 ACC of -1, +2, +2: INCONCLUSIVE at the first look with the next look's seeds, as `uh check` says it."""
    results = tmp_path / "results"
    table = read_per_seed_csv(ROOT / "expected_results" / "paper_per_seed.csv")
    b3 = table[table["run_id"] == "B3"].set_index("seed")["acc"]
    for row in table.itertuples():
        metrics = {m: getattr(row, m) for m in METRICS}
        if row.run_id == "a4":
            metrics["acc"] = b3[row.seed] - {1993: -1.0, 2023: 2.0, 42: 2.0}[row.seed]
        write(results, fake_result(row.run_id, row.seed, "paper", 10, metrics))
    write_report(results, results / "report", echo=lambda _: None)
    summary = (results / "report" / "summary.md").read_text()
    assert (
        "| C3 | UNDECIDED (look 1 of 5, 3 seeds, one-sided alpha 0.0098: the next look adds seeds 1, 2 for "
        "B3, a4; its undecided comparisons point for the claim) |"
    ) in summary
    assert "Verdict: UNDECIDED (C1 UNDECIDED at look 1 of 5; C3 UNDECIDED at look 1 of 5" in summary
    assert '<span class="noise">UNDECIDED</span>' in (results / "report" / "summary.html").read_text()


def test_the_paper_values_overlay_can_be_turned_on_and_off(paper: Path) -> None:
    runs = load_runs(paper)
    overlaid = [s for s in FIGURES if s.overlay]
    assert len(overlaid) == 4
    on = dataclasses.replace(runs, paper=published_values(runs, True, print))
    for spec in overlaid:
        assert any(PAPER_LABEL in t for t in legend_texts(spec.draw(on))), spec.stem
        assert not any(PAPER_LABEL in t for t in legend_texts(spec.draw(runs))), spec.stem
    assert published_values(runs, False, print) is None
    assert published_values(runs, None, print) is not None  # on by default for the paper profile


@pytest.mark.trains
def test_no_overlay_for_smoke_results(smoke: Path) -> None:
    notes: list[str] = []
    assert published_values(load_runs(smoke), True, notes.append) is None
    assert "not overlaid" in notes[0]


@pytest.mark.trains
def test_cli_writes_to_results_dir_report_and_names_the_gaps(smoke_cli: tuple[Path, str]) -> None:
    results, output = smoke_cli
    assert f"missing run IDs: {MISSING}, s2" in output
    assert f"under {results / 'report'}" in output and (results / "report" / "summary.html").is_file()


def test_cli_refuses_a_missing_results_dir(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["report", "--results-dir", str(tmp_path / "none")])
    assert res.exit_code == 2 and "no such results directory" in res.output
    assert not (tmp_path / "none").exists()


@pytest.mark.trains
def test_paper_readme_maps_every_output(smoke: Path) -> None:
    readme = (ROOT / "paper" / "README.md").read_text()
    outputs = [(f"tables/{t.stem}.tex", t.label) for t in tables_of(smoke)]
    outputs += [(f"figures/{f.stem}.pdf", f.label) for f in FIGURES]
    for path, label in outputs:
        assert re.search(rf"`{label}`.*`{path}`", readme), f"paper/README.md lacks a row for {label} -> {path}"
    for claim in CLAIMS:
        assert f"| {claim.claim_id} |" in readme


@pytest.mark.trains
def test_training_loss_figure_draws_the_runs_that_record_it(smoke: Path) -> None:
    """Only the real B3 run records per-epoch losses (the synthetic results do not): one line, T x E points."""
    from uniform_herding.catalogue import resolve
    from uniform_herding.report.figures import training_loss

    runs = load_runs(smoke)
    assert set(runs.epoch_loss) == {"B3"}
    fig = training_loss(runs)
    (line,) = fig.axes[0].get_lines()[:1]
    cfg = resolve("B3", "smoke")
    assert len(line.get_xdata()) == cfg.n_tasks * cfg.epochs
    assert legend_texts(fig) == ["B3 Uniform Herding"]
    assert (smoke / "report" / "figures" / "fig_training_loss.png").exists()


@pytest.mark.parametrize("existed", [False, True])
def test_a_full_disk_leaves_no_partial_report(existed: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 14.9: a full disk gave a 50-line traceback and left a partial report/."""
    results = tmp_path / "results"
    for run_id, seed in [("B3", 1993), ("a1", 1993)]:
        write(results, fake_result(run_id, seed, "smoke", 5))
    out = results / "report"
    if existed:
        out.mkdir()
        (out / "summary.md").write_text("the old report")
    before = {p: p.read_bytes() for p in out.rglob("*") if p.is_file()}
    real, calls = os.fsync, []

    def fsync(fd: int) -> None:
        calls.append(fd)
        if len(calls) == 9:  # a few tables written, then the disk is full
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    res = CliRunner().invoke(main, ["report", "--results-dir", str(results)])
    errors = [e for e in res.output.splitlines() if e.startswith("Error")]
    assert res.exit_code == 1 and len(errors) == 1 and "No space left on device" in errors[0], res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert out.exists() == existed and {p: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    assert sorted(p.name for p in results.iterdir()) == ["B3", "a1", *(["report"] if existed else [])]


# --- beyond the paper: T4 and the refresh-isolation figure ------------------------------------------

REFRESH = {  # hand-made final metrics (acc, forgetting) per run ID and seed 1993, 2023, 42
    "B1": [(30.0, 20.0), (31.0, 21.0), (29.0, 22.0)],
    "B3": [(33.0, 18.0), (35.0, 17.0), (31.0, 19.0)],
    "r1": [(31.0, 24.0), (32.0, 22.0), (30.0, 23.0)],
    "r2": [(32.0, 21.0), (34.0, 20.0), (30.0, 22.0)],
    "r3": [(30.5, 19.0)],  # one seed only: its interval is a gap
}


@pytest.fixture(scope="module")
def refresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    results = tmp_path_factory.mktemp("refresh") / "results"
    for run_id, values in REFRESH.items():
        for seed, (acc, forgetting) in zip((1993, 2023, 42), values, strict=False):
            write(
                results,
                fake_result(run_id, seed, "smoke", 5, {"acc": acc, "forgetting": forgetting, "bwt": -forgetting}),
            )
    write_report(results, results / "report", echo=lambda _: None)
    return results


def test_t4_prints_the_four_pairs_with_paired_means_and_t_intervals(refresh: Path) -> None:
    rows = md_rows(refresh / "report" / "tables" / "t4_refresh_isolation.md")
    assert [row[0] for row in rows] == ["r2 - r1", "B3 - r2", "B3 - r1", "r3 - B1"]
    # r2 - r1: acc +1, +2, 0 (mean +1.00, sd 1, half 4.3027/sqrt(3) = 2.48); F -3, -2, -1 (mean -2, sd 1)
    assert rows[0][2:] == ["3", "+1.00", "[-1.48, +3.48]", "-2.00", "[-4.48, +0.48]"]
    # B3 - r2: acc +1, +1, +1 (sd 0: the interval is the point)
    assert rows[1][2:5] == ["3", "+1.00", "[+1.00, +1.00]"]
    runs = load_runs(refresh)
    assert rows[2][3] == f"{paired(runs.per_seed, 'B3', 'r1', 'acc').mean():+.2f}"
    assert rows[3][2:] == ["1", "+0.50", "—", "-1.00", "—"]  # one shared seed: no interval
    assert "Beyond the paper" in (refresh / "report" / "tables" / "t4_refresh_isolation.tex").read_text()


def test_the_refresh_figure_draws_the_five_runs_in_both_panels(refresh: Path) -> None:
    spec = next(s for s in FIGURES if s.stem == "fig_refresh_isolation")
    fig = spec.draw(load_runs(refresh))
    assert [label.split()[0] for label in legend_texts(fig)] == ["B1", "r3", "r1", "r2", "B3"]
    for ax in fig.axes:  # both panels draw all five runs (one error-bar container each)
        assert [c.get_label().split()[0] for c in ax.containers] == ["B1", "r3", "r1", "r2", "B3"]
        assert "missing" not in ax.get_title()
    assert (refresh / "report" / "figures" / "fig_refresh_isolation.png").is_file()


@pytest.mark.trains
def test_r_runs_are_shown_when_present_and_say_no_paper_value(refresh: Path, smoke: Path) -> None:
    summary = (refresh / "report" / "summary.md").read_text()
    assert "| r1 | Uniform Herding without refresh | 1993, 2023, 42 |" in summary
    assert "| C6 | NOT EVIDENCE (profile smoke: synthetic data) | Beyond the paper" in summary
    per_seed = {row[0] for row in md_rows(refresh / "report" / "tables" / "per_seed.md")}
    assert per_seed == set(PAPER_RUNS) | {"r1", "r2", "r3"}
    # a reproduction of the paper without them lists the paper's twelve and no r-run gap
    assert {row[0] for row in md_rows(smoke / "report" / "tables" / "per_seed.md")} == set(PAPER_RUNS)
    assert "r1" not in (smoke / "report" / "tables" / "compute.md").read_text()


# --- variants (uh run --set, uh sweep), beyond the paper ------------------------------------------------


@pytest.mark.trains
def test_a_three_value_smoke_sweep_gets_its_figure_and_the_variants_table(smoke_sweep) -> None:
    """`uh sweep B3 rho=1,3,5` (r2, B3, B3+rho=5, real smoke runs): fig_sweep_rho draws ACC and F at rho = 1, 3, 5
    from the results, with B3's (the paper's) rho = 3 marked; the variants table pairs B3+rho=5 with B3."""
    _, results, _ = smoke_sweep
    res = CliRunner().invoke(main, ["report", "--results-dir", str(results)])
    assert res.exit_code == 0, res.output
    out = results / "report"
    assert (out / "figures" / "fig_sweep_rho.png").read_bytes().startswith(b"\x89PNG")
    assert "figures/fig_sweep_rho.png" in (out / "summary.md").read_text()
    runs = load_runs(results)
    (spec,) = sweep_specs(runs)
    assert spec.stem == "fig_sweep_rho" and spec.runs == ("r2", "B3", "B3+rho=5")
    fig = spec.draw(runs)
    table = runs.per_seed.set_index("run_id")
    for ax, name in zip(fig.axes, ("acc", "forgetting"), strict=True):
        (line,) = [x for x in ax.get_lines() if x.get_label() == "B3, rho varied: mean"]  # one seed each
        assert list(line.get_xdata()) == [1.0, 3.0, 5.0]
        assert list(line.get_ydata()) == [table.loc[r, name] for r in ("r2", "B3", "B3+rho=5")]
        marked = [x for x in ax.get_lines() if x.get_label().startswith("paper's setting")]
        assert [(m.get_label(), list(m.get_xdata())) for m in marked] == [("paper's setting of B3: rho=3", [3, 3])]
    assert "B3, rho varied: mean" in legend_texts(fig) and "seed 1993" in legend_texts(fig)
    rows = md_rows(out / "tables" / "variants.md")
    acc = paired(runs.per_seed, "B3+rho=5", "B3", "acc").mean()
    assert [row[:4] for row in rows] == [["B3+rho=5", "B3", "rho=5", "1993"]] and rows[0][6] == f"{acc:+.2f}"
    assert r"B3+rho=5 & B3 & rho=5" in (out / "tables" / "variants.tex").read_text()


@pytest.mark.trains
def test_the_paper_runs_alone_get_no_variant_outputs(smoke: Path) -> None:
    assert not (smoke / "report" / "tables" / "variants.md").exists()
    assert not list((smoke / "report" / "figures").glob("fig_sweep_*"))


def test_results_that_do_not_name_their_cpu_are_captioned_so() -> None:
    """The committed validation results predate the CPU's model in result.json ("cpu: cpu"): the compute
    caption says the model is not recorded instead of "measured on cpu: cpu", and never guesses one."""
    runs = load_runs(ROOT / "docs" / "validation" / "results")
    caption = next(build(runs) for build in TABLES if build.__name__ == "compute").caption
    assert caption.endswith("measured on a CPU whose model these results do not name (written before uh recorded it).")
    assert "cpu: cpu" not in caption


def test_the_compute_table_sets_uh_doctors_estimate_beside_the_measured_time(tmp_path: Path) -> None:
    """With uh doctor's report of the same profile in the results dir, each run's measured mean time gets the
    doctor's estimate of one seed and its error (estimate / measured - 1): the figure to trust the estimate by."""
    from uniform_herding.report.tables import compute

    results = tmp_path / "results"
    for seed, wall in ((1993, 100.0), (2023, 110.0), (42, 90.0)):
        write(results, fake_result("B3", seed, "smoke", 5) | {"wall_s": wall})
    assert "estimate" not in compute(load_runs(results)).markdown()  # no doctor.json: no column
    doctor = {"profile": "smoke", "estimates": {"per_run_s": {"B3": {"total_s": 120.0}, "B0": {"total_s": 5.0}}}}
    (results / "doctor.json").write_text(json.dumps(doctor))
    table = compute(load_runs(results)).markdown()
    assert "| B3 | Uniform Herding | 100.0 ± 8.2 | 120 | +20 |" in table
    (results / "doctor.json").write_text(json.dumps(doctor | {"profile": "paper"}))  # another profile's: not used
    assert "estimate" not in compute(load_runs(results)).markdown()


def write_variant(results: Path, spelling: str, seed: int, T: int = 5) -> str:
    """A synthetic smoke result of the variant `spelling` (under its canonical ID, as uh run names it); the ID."""
    from uniform_herding.catalogue import name_runs, record
    from uniform_herding.catalogue import resolve as resolve_variant

    (run_id,) = name_runs([spelling], [], echo=lambda _: None)
    body = fake_result("B3", seed, "smoke", T) | {"run_id": run_id, **record(run_id)}
    body["config"] = resolve_variant(run_id, "smoke").to_dict()
    write(results, body)
    return run_id


def test_a_folder_of_a_users_own_runs_gets_the_figures_it_can_draw(tmp_path: Path) -> None:
    """A two-value sweep without its base (B3+rho=5, B3+rho=2, smoke): its sweep figure and the variants figure are
    drawn, and the paper's figures none of whose runs is present are left out, with one line saying which and what
    each needs (before, the folder gave blank paper figures and no sweep figure)."""
    results, lines = tmp_path / "results", []
    for spelling in ("B3+rho=5", "B3+rho=2"):
        for seed in (1993, 2023):
            write_variant(results, spelling, seed)
    write_report(results, results / "report", echo=lines.append)
    figures = {p.name for p in (results / "report" / "figures").glob("*.png")}
    assert {"fig_sweep_rho.png", "fig_variants.png"} <= figures and "fig_refresh_isolation.png" not in figures
    assert any(
        line.startswith("left out ") and "fig_refresh_isolation (needs one of: r2 & r1, B3 & r2" in line
        for line in lines
    )
    assert "Left out " in (results / "report" / "summary.md").read_text()


@pytest.mark.slow
def test_a_figure_whose_runs_are_absent_is_left_out_with_one_line(tmp_path: Path) -> None:
    """Issue 36: with B3 alone, fig_component_attribution was written blank (no a1-a4), fig_kd_slopes half empty (no
    a1) and fig_resource_sensitivity a single point. Every figure that needs a run that is absent is left out, the
    one line names each with what it needs, and every panel of every figure drawn holds data."""
    results, lines = tmp_path / "results", []
    for seed in (1993, 2023):
        write(results, fake_result("B3", seed, "smoke", 5))
    write_report(results, results / "report", echo=lines.append)
    drawn = {p.stem for p in (results / "report" / "figures").glob("*.png")}
    assert drawn == {
        "fig_per_task_accuracy",
        "fig_forgetting_by_task",
        "fig_forgetting_heatmap",
        "fig_evolution_B3",
        "fig_accuracy_vs_forgetting",
    }
    (line,) = [x for x in lines if x.startswith("left out") and "figure(s)" in x]  # the tables have a line of their own
    assert line.startswith("left out 6 figure(s) whose runs are not in these results: ")
    for needs in (
        "fig_kd_slopes (needs B3 & a1)",
        "fig_component_attribution (needs one of: B3 & a1, B3 & a2",
        "fig_resource_sensitivity (needs one of: s1 & B3",
        "fig_evolution_B1 (needs B1)",
        "fig_training_loss (needs one of: B0, B1",
    ):
        assert needs in line, needs
    runs = load_runs(results)
    for spec in FIGURES:
        if spec.drawable(runs):
            assert all(ax.has_data() for ax in spec.draw(runs).axes), spec.stem


@pytest.mark.slow
def test_uh_report_says_each_stage_on_standard_error(tmp_path: Path) -> None:
    """Issue 61.5: uh report was silent for 44 s. Away from a terminal it says each stage on standard error as it
    ends (runs/terminal.Progress): the results read, the tables made, each figure drawn, the summary written; its
    own lines stay on standard output."""
    results = tmp_path / "results"
    for seed in (1993, 2023):
        write(results, fake_result("B3", seed, "smoke", 5))
    res = CliRunner().invoke(main, ["report", "--results-dir", str(results)])
    assert res.exit_code == 0, res.output
    drawn = {p.stem for p in (results / "report" / "figures").glob("*.png")}
    stages = [line.split(" (")[0] for line in res.stderr.splitlines() if not line.endswith(" so far")]  # a heartbeat
    assert stages[0] == "uh report ..." and stages[-1].startswith(f"uh report: done, {len(drawn)} figures in ")
    assert stages[1] == "uh report: read 2 results" and re.fullmatch(r"uh report: \d+ tables made", stages[2])
    assert sorted(stages[3:-2]) == sorted(f"uh report: figure {stem} drawn" for stem in drawn)
    assert stages[-2] == "uh report: summary written" and "uh report" not in res.stdout


@pytest.mark.slow
def test_every_reported_metric_is_shown_for_every_run_with_its_docstrings_definition(tmp_path: Path) -> None:
    """Issue 36: the summary's reported metrics listed the named run IDs only, with a text written for AIA alone.
    Every metric of metrics.REPORTED now has a column, every run of the folder (variants too) a row, and each metric
    its definition, taken from its function's docstring (as are the paper's three)."""
    from uniform_herding.method.metrics import PAPER, REPORTED

    results = tmp_path / "results"
    for seed in (1993, 2023):
        write(results, fake_result("B3", seed, "smoke", 5))
        variant = write_variant(results, "B3+rho=5", seed)
    write_report(results, results / "report", echo=lambda _: None)
    summary = (results / "report" / "summary.md").read_text()
    section = summary[summary.index("## Metrics beyond the paper's") :]
    assert f"| Run | Configuration | Seeds | {' | '.join(m.upper() for m in REPORTED)} |" in section
    summary_table = summarize(load_runs(results).per_seed)
    for run_id in ("B3", variant):
        (row,) = [r for r in md_rows_of(section) if r[0] == run_id]
        assert row[3:] == [pm(summary_table, run_id, m) for m in REPORTED], run_id
    for name, declared in {**PAPER, **REPORTED}.items():
        assert declared.definition in summary, name
    assert f"| {variant} |" in summary[summary.index("## Metrics: re-run") : summary.index("## Metrics beyond")]


def md_rows_of(text: str) -> list[list[str]]:
    """The body rows of the first Markdown table in `text`, cell by cell."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| "))
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    return [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]


def test_the_resource_sensitivity_figure_shades_b3s_seed_band_and_spans_each_sweep(paper: Path, tmp_path: Path) -> None:
    """Every panel (ACC and F against M and b) shades B3's seed band, its mean +/- population std, labelled as that
    (before, the profile's tolerance, labelled as noise); each axis spans its sweep's three values whatever is present,
    so that two points never squeeze the tick labels together ("50100")."""
    from uniform_herding.report.figures import resource_sensitivity

    runs = load_runs(paper)
    b3 = runs.per_seed[runs.per_seed["run_id"] == "B3"]
    fig = resource_sensitivity(runs)
    for ax, name in zip(fig.axes[:4], ("acc", "acc", "forgetting", "forgetting"), strict=True):  # row by row
        (band,) = [p for p in ax.patches if p.get_label().startswith("B3's seed band")]
        centre, half = b3[name].mean(), b3[name].std(ddof=0)
        assert (band.get_y(), band.get_y() + band.get_height()) == pytest.approx((centre - half, centre + half))
    assert legend_texts(fig).count("B3's seed band: mean ± std over its 3 seeds") == 1
    results = tmp_path / "results"
    for run_id in ("B3", "s1"):
        write(results, fake_result(run_id, 1993, "smoke", 5))
    ax = resource_sensitivity(load_runs(results)).axes[2]  # F against M (its ticks labelled): s1, B3; s2 not
    budgets = [resolve(r, "smoke").budget for r in ("s1", "B3", "s2")]
    assert [t.get_text() for t in ax.get_xticklabels()] == [f"{b:,}" for b in budgets]
    assert ax.get_xlim() == pytest.approx((budgets[0] / 1.5, budgets[-1] * 1.5))


def sweep_results(results: Path, spellings: tuple[str, ...], seeds: tuple[int, ...] = (1993, 2023, 42)) -> list[str]:
    """Synthetic smoke results of run IDs and variants (canonical IDs), for every seed; the IDs."""
    ids = []
    for spelling in spellings:
        for seed in seeds:
            if "+" in spelling:
                run_id = write_variant(results, spelling, seed)
            else:
                run_id = spelling
                write(results, fake_result(spelling, seed, "smoke", 5))
        ids.append(run_id)
    return ids


def test_a_sweep_figure_shows_each_points_paired_interval_against_the_lines_reference(tmp_path: Path) -> None:
    """Issue 36: the band was the profile's tolerance (+/- 7.5 pp ACC on smoke), labelled noise. Now each line's
    reference is its run at the base's own value, with its seed band, and every other point carries the paired 95%
    t-interval of its difference to it, drawn from the reference's mean: the seed noise of the runs compared."""
    from uniform_herding.verdict.decide import t_interval

    results = tmp_path / "results"
    r2, b3, rho5 = sweep_results(results, ("r2", "B3", "B3+rho=5"))
    runs = load_runs(results)
    (spec,) = sweep_specs(runs)
    fig = spec.draw(runs)
    for ax, name in zip(fig.axes, ("acc", "forgetting"), strict=True):
        (band,) = [p for p in ax.patches if "seed band" in p.get_label()]
        values = runs.per_seed.loc[runs.per_seed["run_id"] == b3, name]
        assert band.get_label() == "B3's seed band: mean ± std over its 3 seeds"
        assert band.get_y() == pytest.approx(values.mean() - values.std(ddof=0))
        bars = {
            next(iter(x.get_xdata())): tuple(x.get_ydata())
            for x in ax.get_lines()
            if x.get_label().startswith("paired 95% t-interval vs B3")
        }
        for x, run_id in ((1.0, r2), (5.0, rho5)):
            low, high = t_interval(tuple(paired(runs.per_seed, run_id, b3, name)))
            assert bars[x] == pytest.approx((values.mean() + low, values.mean() + high)), (name, run_id)
        assert not any("tolerance" in t or "within noise" in t for t in legend_texts(fig))


def test_a_sweep_on_a2s_settings_centres_its_band_on_a2_which_is_on_the_plot(tmp_path: Path) -> None:
    """Issue 36: `uh sweep B3+readout=head memory=...` drew a2's line with a band around B3's mean, B3 not being on
    the plot. The band is the line's own run at the base's value (a2 here), which the line draws."""
    results = tmp_path / "results"
    a2, reservoir = sweep_results(results, ("a2", "B3+memory=reservoir+readout=head"), seeds=(1993, 2023))
    runs = load_runs(results)
    (spec,) = sweep_specs(runs)
    assert set(spec.runs) == {a2, reservoir}
    fig = spec.draw(runs)
    for ax, name in zip(fig.axes, ("acc", "forgetting"), strict=True):
        (band,) = [p for p in ax.patches if "seed band" in p.get_label()]
        values = runs.per_seed.loc[runs.per_seed["run_id"] == a2, name]
        assert band.get_label().startswith(f"{a2}'s seed band")
        assert band.get_y() + band.get_height() / 2 == pytest.approx(values.mean())


@pytest.mark.slow
def test_with_base_a1_the_sweep_figure_and_the_variants_table_compare_with_a1(tmp_path: Path) -> None:
    """Issue 52: `uh report --base a1` on a sweep of kd_temperature drew "paper's setting of a1: kd_temperature=2.0"
    (a1 reads no temperature: it has no KD) and each point's interval against B3, while the variants table compared
    with a1. Now the figure marks no setting of a1, and its intervals and seed band are a1's, as the table's base."""
    from uniform_herding.report.load import compared_with

    results = tmp_path / "results"
    sweep_results(results, ("B3", "B3+kd_temperature=1", "B3+kd_temperature=4", "a1"))
    res = CliRunner().invoke(main, ["report", "--base", "a1", "--results-dir", str(results)])
    assert res.exit_code == 0, res.output
    rows = md_rows(results / "report" / "tables" / "variants.md")
    assert [row[:2] for row in rows] == [["B3+kd_temperature=1.0+vs=a1", "a1"], ["B3+kd_temperature=4.0+vs=a1", "a1"]]
    runs = compared_with(load_runs(results), "a1")
    (spec,) = sweep_specs(runs)
    fig = spec.draw(runs)
    for ax in fig.axes:
        labels = [x.get_label() for x in [*ax.get_lines(), *ax.patches]]
        assert not [label for label in labels if "setting of" in label or "'s setting" in label], labels
        (band,) = [p for p in ax.patches if "seed band" in p.get_label()]
        assert band.get_label().startswith("a1's seed band")
        bars = {next(iter(x.get_xdata())) for x in ax.get_lines() if x.get_label().startswith("paired 95% t-interval")}
        assert bars == {1.0, 2.0, 4.0}  # B3 at its 2.0 too: every point against a1
        assert {x.get_label() for x in ax.get_lines() if "t-interval" in x.get_label()} == {
            "paired 95% t-interval vs a1 (3 seeds)"
        }


@pytest.mark.slow
def test_a_single_variant_gets_a_figure_against_its_base_on_the_same_axes(tmp_path: Path) -> None:
    """Issue 36: a variant against its base had no figure (only tables/variants.md). fig_variants draws, per metric,
    the base and the variant side by side on one axes, each seed a mark, and names the mean paired delta and its 95%
    t-interval under the pair; the base is catalogue.base_of's."""
    from uniform_herding.catalogue import base_of
    from uniform_herding.report.sweep_figures import variant_specs
    from uniform_herding.verdict.decide import t_interval

    results = tmp_path / "results"
    (variant,) = sweep_results(results, ("B3+kd_lambda=2",))
    base = base_of(variant)
    sweep_results(results, (base,))
    runs = load_runs(results)
    (spec,) = variant_specs(runs)
    assert spec.stem == "fig_variants" and spec.runs == (variant, base)
    fig = spec.draw(runs)
    for ax, name in zip(fig.axes, ("acc", "forgetting"), strict=True):
        means = sorted((bar.get_x() + bar.get_width() / 2, bar.get_height()) for bar in ax.patches)
        expected = [runs.per_seed.loc[runs.per_seed["run_id"] == r, name].mean() for r in (base, variant)]
        assert [h for _, h in means] == pytest.approx(expected)  # base left, variant right, one axes
        deltas = paired(runs.per_seed, variant, base, name)
        low, high = t_interval(tuple(deltas))
        (tick,) = [t.get_text() for t in ax.get_xticklabels()]
        assert tick.endswith(f"Δ {deltas.mean():+.2f} [{low:+.2f}, {high:+.2f}]"), tick
    write_report(results, results / "report", echo=lambda _: None)
    assert "figures/fig_variants.png" in (results / "report" / "summary.md").read_text()


# --- a new user's walk-through: absent tables, one-seed means, the summary's figures ------------------------------


def test_a_table_whose_runs_are_absent_is_left_out_with_one_line(tmp_path: Path) -> None:
    """A table none of whose run IDs has results was written all "—" (t2 and t4 with B3 alone), while such a figure
    is left out. Now it is left out too, not listed in the summary, and one printed line names it and what it needs;
    a table with some of its runs present keeps "—" for the absent rows only."""
    results, lines = tmp_path / "results", []
    for seed in (1993, 2023):
        write(results, fake_result("B3", seed, "smoke", 5))
    write_report(results, results / "report", echo=lines.append)
    tables = results / "report" / "tables"
    assert {p.stem for p in tables.glob("*.md")} == {
        "t1_main",
        "t3_resource_sensitivity",
        "per_seed",
        "compute",
        "quotas",
    }
    assert {p.stem for p in tables.glob("*.tex")} == {p.stem for p in tables.glob("*.md")}
    (line,) = [x for x in lines if x.startswith("left out") and "table" in x]
    assert line == (
        "left out 2 table(s) whose runs are not in these results: t2_ablations (needs one of: a1, a2, "
        "a3, a4); t4_refresh_isolation (needs one of: r2 & r1, B3 & r2, B3 & r1, r3 & B1)"
    )
    t1 = {row[0]: row[1:] for row in md_rows(tables / "t1_main.md")}
    assert t1[RUNS["B1"].name] == ["—"] * 3 and "—" not in t1[RUNS["B3"].name]
    summary = (results / "report" / "summary.md").read_text()
    tables_section = summary[summary.index("## Tables") :]
    assert "tab:t2-component-ablations" not in tables_section and "tab:t4-refresh-isolation" not in tables_section
    assert "tab:t1-master-results: tables/t1_main.md" in tables_section
    assert "Left out 2 table(s)" in tables_section
    # a folder of variants alone: none of the paper's results tables, only the quotas and the variants table
    own, lines = tmp_path / "own", []
    for seed in (1993, 2023):
        write_variant(own, "B3+rho=5", seed)
    write_report(own, own / "report", echo=lines.append)
    assert {p.stem for p in (own / "report" / "tables").glob("*.md")} == {"quotas", "variants"}
    assert any(
        x.startswith("left out 6 table(s) whose runs are not in these results: t1_main (needs one of: B1, B2, B3)")
        for x in lines
    ), lines


@pytest.mark.slow
def test_a_one_seed_mean_shows_n_1_never_a_zero_std(tmp_path: Path) -> None:
    """A one-seed run or variant printed `50.00 ± 0.00`, which reads as zero noise. A mean of one seed is shown as the
    value and "(n = 1)" in Markdown and HTML, "(n=1)" in LaTeX; a mean of two seeds or more keeps its ± std."""
    results = tmp_path / "results"
    for seed, acc, forgetting in ((1993, 40.0, 20.0), (2023, 44.0, 22.0)):
        write(results, fake_result("B3", seed, "smoke", 5, {"acc": acc, "forgetting": forgetting, "bwt": -forgetting}))
    write(results, fake_result("a1", 1993, "smoke", 5, {"acc": 50.0, "forgetting": 30.0, "bwt": -30.0}))
    variant = write_variant(results, "B3+rho=5", 1993)
    write_report(results, results / "report", echo=lambda _: None)
    tables = results / "report" / "tables"
    t2 = {row[0]: row[1:] for row in md_rows(tables / "t2_ablations.md")}
    assert t2["Without KD"][:2] == ["50.00 (n = 1)", "30.00 (n = 1)"]
    assert r"Without KD & $50.00$ (n=1) & $30.00$ (n=1) &" in (tables / "t2_ablations.tex").read_text()
    t1 = {row[0]: row[1:] for row in md_rows(tables / "t1_main.md")}
    assert t1[RUNS["B3"].name][0] == "42.00 ± 2.00"  # two seeds: the std stays
    (row,) = [r for r in md_rows(tables / "variants.md") if r[0] == variant]
    assert row[4].endswith(" (n = 1)") and row[5].endswith(" (n = 1)")
    compute = {row[0]: row[2] for row in md_rows(tables / "compute.md")}
    assert compute["a1"].endswith(" (n = 1)") and " ± " in compute["B3"]
    for path in [*tables.glob("*.md"), *tables.glob("*.tex")]:
        assert "± 0.00" not in path.read_text() and r"\pm0.0" not in path.read_text(), path.name
    summary, page = (results / "report" / "summary.md").read_text(), (results / "report" / "summary.html").read_text()
    for text in (summary, page):
        assert "(n = 1)" in text and "± 0.00" not in text


@pytest.mark.slow
def test_the_summary_shows_each_runs_metric_lines_once(tmp_path: Path) -> None:
    """summary.html repeated each run's metric line under every figure that draws the run (B3's under seven). The
    metrics table shows them once; a figure names its runs (and which are missing) and its claims' verdicts."""
    from uniform_herding.report.summary import _html, _metric_cell, verdicts

    results = tmp_path / "results"
    for run_id in ("B0", "B1", "B3", "a1", "s1"):
        for seed in (1993, 2023):
            write(results, fake_result(run_id, seed, "smoke", 5))
    write_report(results, results / "report", echo=lambda _: None)
    summary, page = (results / "report" / "summary.md").read_text(), (results / "report" / "summary.html").read_text()
    runs = load_runs(results)
    v = verdicts(runs)
    for run_id in ("B0", "B1", "B3", "a1", "s1"):
        for m in METRICS:
            cell = _metric_cell(runs, v, run_id, m)
            assert summary.count(cell) == 1 and page.count(_html(cell)) == 1, (run_id, m, cell)
    assert "Runs: B0, B1, B2 (missing), B3, a1, a2 (missing), a3 (missing), a4 (missing)" in summary


def test_the_summarys_verdict_gives_no_badge_to_results_of_other_code(tmp_path: Path) -> None:
    """Issue 51: the summary prints uh check's verdict: results that pass every rule, made by this checkout's code,
    are RESULTS REPLICATED; with one made before results recorded their code, EXPECTED SET MATCHED."""
    from uniform_herding.report.summary import verdicts

    paper = read_per_seed_csv(ROOT / "expected_results" / "paper_per_seed.csv")
    table = next_look(next_look(paper, ["B1", "B3", "a4"], [1, 2], lead=0.0), ["B1", "B3"], [3, 4, 5], lead=0.0)
    for row in table.itertuples():
        body = fake_result(
            row.run_id, row.seed, "paper", 10, {"acc": row.acc, "forgetting": row.forgetting, "bwt": row.bwt}
        )
        write(tmp_path, body | {"provenance": {"code_sha256": code_hash(), "tree_modified": None}})
    assert verdicts(load_runs(tmp_path)).overall == "RESULTS REPLICATED (ACM v1.1)"
    write(tmp_path, fake_result("B0", 1993, "paper", 10, table.iloc[0][["acc", "forgetting", "bwt"]].to_dict()))
    withheld = "1 result not plainly made by this checkout's code"
    assert verdicts(load_runs(tmp_path)).overall == f"EXPECTED SET MATCHED ({withheld}: no badge)"


def test_the_per_task_accuracy_figure_says_what_its_error_bars_are(tmp_path: Path) -> None:
    """fig_per_task_accuracy drew error bars without saying what they were: its caption (the summary's heading) and
    the figure say they are the population std over each run's seeds, with each run's n in the legend."""
    from uniform_herding.report.figures import per_task_accuracy

    results = tmp_path / "results"
    for run_id, seeds in (("B3", (1993, 2023, 42)), ("B1", (1993,))):
        for seed in seeds:
            write(results, fake_result(run_id, seed, "smoke", 5))
    runs = load_runs(results)
    spec = next(s for s in FIGURES if s.stem == "fig_per_task_accuracy")
    assert "error bars" in spec.caption and "population std over" in spec.caption and "seeds" in spec.caption
    fig = per_task_accuracy(runs)
    assert "B3 Uniform Herding (n = 3)" in legend_texts(fig) and "B1 iCaRL (n = 1)" in legend_texts(fig)
    assert "error bars" in fig.get_suptitle() and "population std" in fig.get_suptitle()
    ax = fig.axes[0]
    (bars,) = [c for c in ax.containers if c.get_label().startswith("B3")]
    b3 = runs.stack("B3")[:, -1, :]
    segments = bars.lines[2][0].get_segments()  # the vertical error bars, one per task
    assert [s[1][1] - s[0][1] for s in segments] == pytest.approx(list(2 * b3.std(axis=0)))
