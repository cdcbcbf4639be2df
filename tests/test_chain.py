"""The Slurm chain (chain.py, uh run --procedure) without Slurm: its options, --cancel and what uh status says of a
chain's state. tests/test_slurm.py runs chains on a real Slurm."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.runs.results import write_json_atomic


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (["--procedure"], "--procedure needs --executor slurm"),
        (["--procedure", "--executor", "local"], "--procedure needs --executor slurm"),
        (["--cancel"], "--cancel goes with --procedure"),
        (["--procedure", "--executor", "slurm", "--wait"], "--procedure does not take --wait"),
        (["--procedure", "--executor", "slurm", "--force"], "--procedure does not take --force"),
    ],
)
def test_the_procedures_options_are_refused_in_one_line_where_they_do_not_go(tmp_path: Path, args, error) -> None:
    res = CliRunner().invoke(main, ["run", "B0", "--profile", "smoke", "--results-dir", str(tmp_path), *args])
    assert res.exit_code == 2 and f"Error: {error}" in res.output, res.output
    assert not (tmp_path / "chain.json").exists()


def test_cancel_without_a_chain_changes_nothing(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["run", "all", "--executor", "slurm", "--procedure", "--cancel",
                                    "--results-dir", str(tmp_path)])  # fmt: skip
    assert res.exit_code == 0 and res.output == f"No active chain in {tmp_path}; nothing to cancel.\n"
    assert not (tmp_path / "chain.json").exists()


def chain(results: Path, ended: dict | None) -> None:
    write_json_atomic(results / "chain.json", {
        "id": "20261127-120000", "started": 0.0, "profile": "smoke", "ended": ended,
        "steps": [{"step": {"run_ids": ["B0"], "seeds": [1993]}, "by": "the command", "array": "4", "controller": "5",
                   "rescue": "6"}]})  # fmt: skip


def test_status_says_where_the_chain_stands_ended_or_stalled(tmp_path: Path, monkeypatch) -> None:
    """An ended chain says why; one not ended whose jobs are all gone from the queue (here: no Slurm answers) is
    stalled, and the line says how to go on."""
    monkeypatch.delenv("SLURM_CONF", raising=False)  # squeue fails at once (a missing file: it retries for 60 s)
    chain(tmp_path, {"at": 1.0, "reason": "a run of step 1 did not finish: B0 seed 1993: failed"})
    res = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path)])
    assert "chain 20261127-120000: ended: a run of step 1 did not finish: B0 seed 1993: failed" in res.output
    chain(tmp_path, None)
    res = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path)])
    assert (f"chain 20261127-120000: stalled at step 1: its jobs ended without a verdict (log: {tmp_path}/submitit/"
            "slurm/6_0_log.out); the same command resumes from the results") in res.output.splitlines()  # fmt: skip
