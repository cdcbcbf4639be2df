"""aggregate.py: the paper's per-seed values reproduce every number printed in T1, T2 and T3."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import matrix_with

from uniform_herding.catalogue import PAPER_RUNS, RUNS, resolve
from uniform_herding.cli import main
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.runs.results import read_per_seed_csv, write_json_atomic
from uniform_herding.verdict.aggregate import paired_deltas, summarize

EXPECTED = Path(__file__).resolve().parents[2] / "expected_results"
ROUNDING = 0.01 + 1e-9  # the tables print two decimals of values rounded from unrounded per-seed data


@pytest.fixture(scope="module")
def paper() -> pd.DataFrame:
    return read_per_seed_csv(EXPECTED / "paper_per_seed.csv")


def printed_vs_computed(table: str, paper: pd.DataFrame) -> list[tuple[str, str, float, float]]:
    """(run ID, column, printed, computed) for every number of a paper_t*.csv."""
    printed = pd.read_csv(EXPECTED / f"{table}.csv")
    summary, deltas = summarize(paper), paired_deltas(paper)
    pairs = []
    for _, row in printed.iterrows():
        for column in printed.columns:
            if column.endswith(("_mean", "_std")):
                computed = summary.loc[row["run_id"], column]
            elif column.startswith("delta_"):
                metric = column.removeprefix("delta_")
                computed = 0.0 if row["run_id"] == "B3" else deltas.loc[row["run_id"], metric]
            else:
                continue
            pairs.append((row["run_id"], column, float(row[column]), float(computed)))
    return pairs


@pytest.mark.parametrize(("table", "n_numbers"), [("paper_t1", 18), ("paper_t2", 24), ("paper_t3", 36)])
def test_paper_per_seed_values_reproduce_every_printed_number(paper: pd.DataFrame, table: str, n_numbers: int) -> None:
    pairs = printed_vs_computed(table, paper)
    assert len(pairs) == n_numbers
    wrong = [p for p in pairs if abs(p[2] - p[3]) > ROUNDING]
    assert not wrong, f"{table}: (run, column, printed, computed) {wrong}"


def test_summary_tables_name_their_latex_label() -> None:
    labels = {
        "paper_t1": "tab:t1-master-results",
        "paper_t2": "tab:t2-component-ablations",
        "paper_t3": "tab:t3-resource-sensitivity",
        "paper_compute": "tab:app-compute",
    }
    for name, label in labels.items():
        table = pd.read_csv(EXPECTED / f"{name}.csv")
        assert set(table["table"]) == {label} and set(table["run_id"]) <= set(RUNS)
    assert list(pd.read_csv(EXPECTED / "paper_compute.csv")["run_id"]) == list(PAPER_RUNS)


def test_summarize_uses_population_std_in_runs_order() -> None:
    per_seed = pd.DataFrame(
        {
            "run_id": ["a1", "a1", "B3"],
            "seed": [1, 2, 1],
            "acc": [1.0, 3.0, 5.0],
            "forgetting": 0.0,
            "bwt": 0.0,
        }
    )
    summary = summarize(per_seed)
    assert list(summary.index) == ["B3", "a1"]
    assert summary.loc["a1", ["n", "acc_mean", "acc_std"]].tolist() == [2, 2.0, 1.0]  # ddof=0


def test_paired_deltas_use_only_shared_seeds() -> None:
    per_seed = pd.DataFrame(
        {
            "run_id": ["B3", "B3", "a1", "a1", "a2"],
            "seed": [1, 2, 2, 3, 9],
            "acc": [10.0, 20.0, 25.0, 99.0, 0.0],
            "forgetting": [1.0, 2.0, 4.0, 0.0, 0.0],
            "bwt": 0.0,
        }
    )
    deltas = paired_deltas(per_seed)
    assert list(deltas.index) == ["a1"]  # a2 shares no seed with B3
    assert deltas.loc["a1", ["n_paired", "acc", "forgetting"]].tolist() == [1, 5.0, 2.0]


def test_uh_aggregate_prints_the_paper_tables_and_writes_the_per_seed_csv(tmp_path: Path) -> None:
    out = tmp_path / "per_seed.csv"
    res = CliRunner().invoke(
        main, ["aggregate", "--per-seed", str(EXPECTED / "paper_per_seed.csv"), "--per-seed-out", str(out)]
    )
    assert res.exit_code == 0, res.output
    b3 = next(line for line in res.output.splitlines() if line.startswith("B3 "))
    assert "44.00 +/- 0.51" in b3 and "17.22 +/- 0.43" in b3 and "-16.91 +/- 0.41" in b3
    a2 = next(line for line in res.output.splitlines() if line.startswith("a2 "))
    assert "dACC -10.46" in a2
    pd.testing.assert_frame_equal(
        read_per_seed_csv(out), read_per_seed_csv(EXPECTED / "paper_per_seed.csv"), check_like=True
    )


def write_smoke_b3(results: Path, seed: int, acc: float, R: list[list[float | None]] | None = None) -> None:
    """A smoke B3 result.json with metrics ACC `acc`, F 1, BWT -1, and an R that gives them (or `R`)."""
    write_json_atomic(
        results / "B3" / f"seed-{seed}" / "result.json",
        {
            "config_version": CONFIG_VERSION,
            "run_id": "B3",
            "seed": seed,
            "profile": "smoke",
            "config": resolve("B3", "smoke").to_dict(),
            "R": matrix_with(acc, 1.0, -1.0, T=5) if R is None else R,
            "metrics": {"acc": acc, "forgetting": 1.0, "bwt": -1.0},
        },
    )


def test_uh_aggregate_from_a_results_dir(tmp_path: Path) -> None:
    for seed, acc in [(1993, 40.0), (42, 44.0)]:
        write_smoke_b3(tmp_path / "results", seed, acc)
    out = tmp_path / "smoke" / "per_seed.csv"
    args = ["aggregate", "--results-dir", str(tmp_path / "results"), "--per-seed-out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "profile: smoke" in res.output and "42.00 +/- 2.00" in res.output
    assert read_per_seed_csv(out)["seed"].tolist() == [1993, 42]


def test_uh_aggregate_averages_what_R_gives_not_a_stored_integer(tmp_path: Path) -> None:
    """Review 3: acc stored as 46 and 44 beside Rs giving 46.5 and 44.5 (within the integers' rounding) printed and
    wrote 45.00, the stored values' mean; R's is 45.50."""
    for seed, acc in [(1993, 46), (42, 44)]:
        write_smoke_b3(tmp_path / "results", seed, acc, R=matrix_with(acc + 0.5, 1.0, -1.0, T=5))
    out = tmp_path / "per_seed.csv"
    args = ["aggregate", "--results-dir", str(tmp_path / "results"), "--per-seed-out", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "45.50 +/- 1.00" in res.output and read_per_seed_csv(out)["acc"].tolist() == [46.5, 44.5]


def test_uh_aggregate_refuses_a_short_R_with_exit_2(tmp_path: Path) -> None:
    """Review 1: an R of 3 tasks under the smoke profile's 5 was averaged as a smoke run's."""
    write_smoke_b3(tmp_path / "results", 1993, 40.0, R=matrix_with(40.0, 1.0, -1.0, T=3))
    res = CliRunner().invoke(main, ["aggregate", "--results-dir", str(tmp_path / "results")])
    assert res.exit_code == 2 and "R must be 5 x 5 (n_tasks)" in res.output and "it has 3 rows" in res.output


def test_uh_aggregate_refuses_bad_input_with_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("run_id,seed,acc\nB3,1,2\n")
    res = CliRunner().invoke(main, ["aggregate", "--per-seed", str(bad)])
    assert res.exit_code == 2 and "columns run_id,seed,acc" in res.output
    res = CliRunner().invoke(main, ["aggregate", "--per-seed", str(bad), "--results-dir", str(tmp_path)])
    assert res.exit_code == 2 and "not both" in res.output


def test_uh_aggregate_lists_variants_after_the_run_ids_with_deltas_against_their_base(tmp_path: Path) -> None:
    per_seed = pd.DataFrame(
        {
            "run_id": ["a1+lr=0.05", "B3+rho=5", "B3", "a1", "B3+rho=5", "B3", "a1+lr=0.05"],
            "seed": [1, 1, 1, 1, 2, 2, 2],
            "acc": [30.0, 41.0, 40.0, 35.0, 44.0, 42.0, 99.0],
            "forgetting": [5.0, 9.0, 10.0, 20.0, 8.0, 12.0, 1.0],
            "bwt": 0.0,
        }
    )
    assert list(summarize(per_seed).index) == ["B3", "a1", "B3+rho=5", "a1+lr=0.05"]
    csv, out = tmp_path / "in.csv", tmp_path / "out.csv"
    per_seed.to_csv(csv, index=False)
    res = CliRunner().invoke(main, ["aggregate", "--wide", "--per-seed", str(csv), "--per-seed-out", str(out)])
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line for line in res.output.splitlines()[2:-1]}
    assert "dACC  +1.50  dF  -2.50" in lines["B3+rho=5"] and "(n=2)" in lines["B3+rho=5"]  # (1 + 2) / 2, (-1 - 4) / 2
    assert "dACC  -5.00  dF -15.00" in lines["a1+lr=0.05"] and "(n=1) vs a1" in lines["a1+lr=0.05"]  # seed 1 only
    assert list(read_per_seed_csv(out)["run_id"]) == [
        "B3",
        "B3",
        "a1",
        "B3+rho=5",
        "B3+rho=5",
        "a1+lr=0.05",
        "a1+lr=0.05",
    ]


def test_uh_aggregate_prints_a_mean_of_one_seed_with_n_1_never_a_spread_of_zero(tmp_path: Path) -> None:
    """A run ID with one seed has no spread: its means read "(n = 1)", as the report prints them, not "+/- 0.00"."""
    per_seed = pd.DataFrame(
        {
            "run_id": ["B3", "B3", "a1"],
            "seed": [1, 2, 1],
            "acc": [40.0, 42.0, 47.0],
            "forgetting": [10.0, 12.0, 9.0],
            "bwt": [-10.0, -12.0, -9.0],
        }
    )
    csv = tmp_path / "in.csv"
    per_seed.to_csv(csv, index=False)
    res = CliRunner().invoke(main, ["aggregate", "--per-seed", str(csv)])
    assert res.exit_code == 0, res.output
    lines = {line.split()[0]: line for line in res.output.splitlines()[2:]}
    assert "47.00 (n = 1)" in lines["a1"] and "9.00 (n = 1)" in lines["a1"] and "-9.00 (n = 1)" in lines["a1"]
    assert "+/- 0.00" not in res.output and "41.00 +/- 1.00" in lines["B3"]


def test_every_run_is_compared_with_what_base_of_says(tmp_path: Path) -> None:
    """One rule for what a run is compared with (catalogue.base_of, from RunSpec.base): the ablations and sweeps against
    B3, r1 and r2 against B3, r3 against its base B1, B0-B3 against nothing; uh aggregate prints those deltas."""
    ids = ["B1", "B3", "a2", "s4", "r1", "r3"]
    per_seed = pd.DataFrame(
        {
            "run_id": [r for r in ids for _ in (1, 2)],
            "seed": [1, 2] * len(ids),
            "acc": [float(10 * i + s) for i in range(len(ids)) for s in (1, 3)],
            "forgetting": 5.0,
            "bwt": -5.0,
        }
    )
    assert paired_deltas(per_seed)["acc"].to_dict() == {"a2": 10.0, "s4": 20.0, "r1": 30.0, "r3": 50.0}
    csv = tmp_path / "in.csv"
    per_seed.to_csv(csv, index=False)
    res = CliRunner().invoke(main, ["aggregate", "--wide", "--per-seed", str(csv)])
    lines = {line.split()[0]: line for line in res.output.splitlines()[2:]}
    assert "dACC +30.00" in lines["r1"] and lines["r1"].endswith("(n=2)")
    assert "dACC +50.00" in lines["r3"] and lines["r3"].endswith("(n=2) vs B1")
    assert "dACC" not in lines["B1"] + lines["B3"]


def test_uh_aggregate_fits_columns_leaving_out_aia_and_la_first_then_wrapping_the_deltas(monkeypatch) -> None:
    """Issue 52: the table fits COLUMNS (120 where unset, at least 100): AIA and LA, reported and never checked, are
    left out first, with a line saying so; then each row's deltas move to a line under it. --wide prints every
    column, as before (160 characters on the refresh study's results: r3 is compared with B1)."""
    args = ["aggregate", "--results-dir", str(EXPECTED.parent / "docs" / "validation" / "refresh" / "results")]
    wide = CliRunner().invoke(main, [*args, "--wide"]).output.splitlines()
    assert max(map(len, wide)) > 150 and "AIA" in wide[1] and wide[1].endswith("deltas vs B3 (paired)")
    for columns in (None, "100", "40"):  # unset: 120; never under 100
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        width = 120 if columns is None else 100
        res = CliRunner().invoke(main, args)
        *lines, last = res.output.splitlines()
        assert res.exit_code == 0 and max(map(len, res.output.splitlines())) <= width, res.output
        assert last == f"(AIA, LA left out to fit {width} columns; --wide shows every column)"
        rows = [line for line in lines[1:] if not line.startswith(" ")]
        assert len(rows) == len(wide) - 1 and all(w.startswith(row) for row, w in zip(rows, wide[1:], strict=True))
        assert [line.strip() for line in lines if line.startswith("    ")] == [
            "deltas vs B3 (paired)",
            *(w.split("   ")[-1].strip() for w in wide[2:] if "dACC" in w),
        ]
