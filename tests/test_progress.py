"""uh status (progress.py): the runs' lines, then where the procedure stands, replayed from the results done so far."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from click.testing import CliRunner
from conftest import matrix_with

from uniform_herding.cli import main
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.runs.results import read_per_seed_csv, write_json_atomic
from uniform_herding.variants import resolve

EXPECTED = Path(__file__).resolve().parents[1] / "expected_results"


def write(results: Path, table: pd.DataFrame) -> None:
    for row in table.itertuples():
        config = resolve(row.run_id, "paper")
        write_json_atomic(results / row.run_id / f"seed-{row.seed}" / "result.json", {
            "config_version": CONFIG_VERSION, "run_id": row.run_id, "seed": int(row.seed), "profile": "paper",
            "config": config.to_dict(), "R": matrix_with(row.acc, row.forgetting, row.bwt, config.n_tasks),
            "metrics": {"acc": row.acc, "forgetting": row.forgetting, "bwt": row.bwt}})  # fmt: skip


def test_status_says_where_the_procedure_stands(tmp_path: Path) -> None:
    """The paper's 36 runs done: look 1 decided C2, C4 and C5; C1 and C3 wait for look 2, whose runs are next. With
    B3's three runs missing, look 1 itself is incomplete and names them."""
    paper = read_per_seed_csv(EXPECTED / "paper_per_seed.csv")
    write(tmp_path / "r", paper)
    out = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path / "r")])
    assert out.exit_code == 0, out.output
    lines = out.output.splitlines()
    assert lines[36] == "36 runs: 36 done"
    assert lines[37] == ("procedure: 5 looks; claims decided: C2 (supports, look 1), C4 (supports, look 1), "
                         "C5 (supports, look 1); waiting: C1 (look 2), C3 (look 2)")
    assert lines[38] == "verdict now: UNDECIDED (exit 4); next: seeds 1, 2 of B1, B3, a4"
    write(tmp_path / "partial", paper[paper["run_id"] != "B3"])
    out = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path / "partial")])
    assert out.output.splitlines()[-1] == "verdict now: INCOMPLETE (exit 3); next: seeds 1993, 2023, 42 of B3"
