"""docs/validation.md's refresh-isolation study: every number it prints comes from the committed results.

The study's results (docs/validation/refresh/results/, real CIFAR-10 at a CPU size) are committed; these
tests recompute its per-seed CSV, its finding lines and its table T4 from them with the same functions
that `uh aggregate`, `uh check` and `uh report` use, so the document cannot drift from the results.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.report.load import load_runs
from uniform_herding.report.tables import t4_refresh_isolation
from uniform_herding.runs.results import load_results, per_seed_table, read_per_seed_csv
from uniform_herding.verdict.check import format_claims
from uniform_herding.verdict.claim_verdicts import check_claims

ROOT = Path(__file__).resolve().parents[1]
STUDY = ROOT / "docs" / "validation" / "refresh"
DOC = (ROOT / "docs" / "validation.md").read_text()


def test_the_refresh_study_holds_its_fifteen_runs_and_its_per_seed_csv() -> None:
    table = per_seed_table(load_results(STUDY / "results"))
    assert sorted(set(zip(table["run_id"], table["seed"], strict=True))) == sorted(
        (r, s) for r in ("B1", "B3", "r1", "r2", "r3") for s in (1993, 2023, 42)
    )
    committed = read_per_seed_csv(STUDY / "per_seed.csv")
    key = ["run_id", "seed"]
    pd.testing.assert_frame_equal(
        committed.sort_values(key).reset_index(drop=True),
        table.sort_values(key).reset_index(drop=True)[committed.columns],
        check_dtype=False,
        atol=5e-5,
    )


@pytest.mark.parametrize(("results", "claims"), [("results", ("C6", "C7", "C8")), ("long/results", ("C6",))])
def test_the_documented_finding_lines_are_what_the_checker_prints(results: str, claims: tuple[str, ...]) -> None:
    runs = load_runs(STUDY / results)
    lines = format_claims([c for c in check_claims(runs.per_seed, runs.profile) if c.claim_id in claims])
    assert "\n".join(lines[1:]) in DOC  # after the header line, as docs/validation.md shows them


def test_the_larger_size_holds_r1_and_r2_of_its_own_profile() -> None:
    results = load_results(STUDY / "long" / "results")
    assert {(r["run_id"], r["profile"]) for r in results} == {("r1", "cifar10-cpu-long"), ("r2", "cifar10-cpu-long")}
    expected = read_per_seed_csv(ROOT / "expected_results" / "cifar10-cpu-long" / "per_seed.csv")
    assert len(results) == 6 and expected.shape[0] == 6


def test_the_documented_t4_is_what_uh_report_writes() -> None:
    table = t4_refresh_isolation(load_runs(STUDY / "results")).markdown()
    assert (STUDY / "t4_refresh_isolation.md").read_text() == table
    rows = [line for line in table.splitlines() if line.startswith("| r") or line.startswith("| B")]
    assert len(rows) == 4 and all(row in DOC for row in rows)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("results", "replicated", "subset"),
    [
        ("docs/validation/results", 36, ()),
        ("docs/validation/refresh/results", 6, ("--run-ids", "B1,B3")),
        ("docs/validation/refresh/long/results", 6, ()),
    ],
)
def test_uh_check_checks_the_committed_study_against_its_expected_set(
    tmp_path: Path, results: str, replicated: int, subset: tuple[str, ...]
) -> None:
    """`uh check --results-dir` on each committed study finds its profile's expected set
    (expected_results/cifar10-cpu*/) and replicates it. The refresh study ran B1 and B3 of cifar10-cpu's twelve
    (and r1-r3, which that set does not hold): it passes as the subset it is, with its findings decided; without
    --run-ids it is INCOMPLETE, naming the ten run IDs it lacks (docs/validation.md)."""
    args = ["check", "--results-dir", str(ROOT / results), "--json-out", str(tmp_path / "c"), *subset]
    out = CliRunner().invoke(main, args)
    assert out.exit_code == 0, out.output
    assert f"metrics: {replicated} REPLICATED" in out.output and "NOT REPLICATED" not in out.output
    if subset:
        assert "findings beyond the paper: 3 INCONCLUSIVE" in out.output
        assert "PIPELINE CHECK PASSED (profile cifar10-cpu, subset B1, B3 of 12 run IDs: " in out.output
        out = CliRunner().invoke(main, args[:-2])
        assert (
            out.exit_code == 3
            and ("INCOMPLETE (profile cifar10-cpu; 10 of 12 run IDs missing: B0, B2, a1-a4, s1-s4)") in out.output
        ), out.output


def test_the_documented_claim_lines_are_what_uh_check_prints() -> None:
    runs = load_runs(ROOT / "docs" / "validation" / "results")
    lines = format_claims([c for c in check_claims(runs.per_seed, runs.profile) if not c.finding])
    assert "\n".join(lines) in DOC
