"""uh status (progress.py): one summary (runs, the procedure replayed from the results done so far, the time left), then
each run with --runs."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
from click.testing import CliRunner
from conftest import fake_slurm_clients, matrix_with, next_look

from uniform_herding.catalogue import resolve
from uniform_herding.cli import main
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.runs.provenance import code_hash
from uniform_herding.runs.results import read_per_seed_csv, write_json_atomic
from uniform_herding.runs.status import SLURM_WAIT_S

EXPECTED = Path(__file__).resolve().parents[1] / "expected_results"


def write(
    results: Path, table: pd.DataFrame, wall_s: float | None = None, profile: str = "paper", code: dict | None = None
) -> None:
    for row in table.itertuples():
        config = resolve(row.run_id, profile)
        write_json_atomic(
            results / row.run_id / f"seed-{row.seed}" / "result.json",
            {
                "config_version": CONFIG_VERSION,
                "run_id": row.run_id,
                "seed": int(row.seed),
                "profile": profile,
                "config": config.to_dict(),
                "R": matrix_with(row.acc, row.forgetting, row.bwt, config.n_tasks),
                "metrics": {"acc": row.acc, "forgetting": row.forgetting, "bwt": row.bwt},
                **({"wall_s": wall_s} if wall_s else {}),
                **({"provenance": code} if code else {}),
            },
        )


def status(results: Path, *options: str) -> list[str]:
    out = CliRunner().invoke(main, ["status", "--wide", "--results-dir", str(results), *options])
    assert out.exit_code == 0, out.output
    return out.output.splitlines()


def test_status_says_where_the_procedure_stands(tmp_path: Path) -> None:
    """Issue 48: one summary first: the runs by state, the procedure's look, the claims decided and waiting, the
    verdict now and the run time left. The paper's 36 runs done: look 1 decided C2, C4 and C5; C1 and C3 wait for
    look 2, whose 6 runs are next. With B3's three runs missing, look 1 itself is incomplete and names them."""
    paper = read_per_seed_csv(EXPECTED / "paper_per_seed.csv")
    write(tmp_path / "r", paper)
    assert status(tmp_path / "r") == [
        "36 runs: 36 done, 0 running, 0 queued, 0 failed (uh status --runs lists each)",
        "procedure: look 2 of 5; claims decided: C2 (supports, look 1), C4 (supports, look 1), C5 (supports, look 1); "
        "waiting: C1 (look 2), C3 (look 2)",
        "verdict now: UNDECIDED (exit 4); next: seeds 1, 2 of B1, B3, a4",
        "ETA: 6 runs left; their time is unknown until one is done or uh doctor has timed them",
    ]
    write(tmp_path / "partial", paper[paper["run_id"] != "B3"])
    assert status(tmp_path / "partial")[1:3] == [
        "procedure: look 1 of 5; claims decided: none; waiting: C1 (look 1), C2 (look 1), C3 (look 1), C4 (look 1), "
        "C5 (look 1)",
        "verdict now: INCOMPLETE (exit 3); next: seeds 1993, 2023, 42 of B3",
    ]


def test_the_verdict_now_gives_no_badge_to_results_of_other_code(tmp_path: Path) -> None:
    """Issue 51: the verdict now is uh check's: results that pass every rule, made by this checkout's code, are
    RESULTS REPLICATED; with one made from a modified tree, EXPECTED SET MATCHED (exit 6)."""
    paper = read_per_seed_csv(EXPECTED / "paper_per_seed.csv")
    table = next_look(next_look(paper, ["B1", "B3", "a4"], [1, 2], lead=0.0), ["B1", "B3"], [3, 4, 5], lead=0.0)
    code = {"code_sha256": code_hash(), "tree_modified": None}
    write(tmp_path / "r", table, code=code)
    assert status(tmp_path / "r")[2] == "verdict now: RESULTS REPLICATED (exit 0)"
    write(tmp_path / "r", table[table["run_id"] == "a1"], code=code | {"tree_modified": True})
    assert status(tmp_path / "r")[2] == "verdict now: EXPECTED SET MATCHED (exit 6)"


def test_each_runs_line_only_with_runs(tmp_path: Path) -> None:
    """Issue 48: per-run lines only with --runs (or -v), after the summary."""
    paper = read_per_seed_csv(EXPECTED / "paper_per_seed.csv")
    write(tmp_path / "r", paper[paper["run_id"] == "B0"])
    assert not [line for line in status(tmp_path / "r") if " seed " in line]
    for option in ("--runs", "-v"):
        lines = status(tmp_path / "r", option)
        assert lines[0] == "3 runs: 3 done, 0 running, 0 queued, 0 failed"
        assert lines[-3:] == ["B0 seed 42: done", "B0 seed 1993: done", "B0 seed 2023: done"]


def test_the_eta_is_timed_by_the_runs_done_else_by_uh_doctor(tmp_path: Path) -> None:
    """Issue 48: the run time left is the next step's runs at their run ID's time: the mean wall time of its seeds
    done (result.json), else uh doctor's estimate for this machine (doctor.json, of the same profile)."""
    paper = read_per_seed_csv(EXPECTED / "paper_per_seed.csv")
    write(tmp_path / "r", paper, wall_s=600.0)
    assert status(tmp_path / "r")[-1] == (
        "ETA: 6 runs left, about 60.0 min of run time one at a time, less where "
        "they run at once (from the done runs' own times)"
    )
    write(tmp_path / "d", paper)
    doctor = {"profile": "paper", "estimates": {"per_run_s": {r: {"total_s": 300.0} for r in set(paper["run_id"])}}}
    write_json_atomic(tmp_path / "d" / "doctor.json", doctor)
    assert status(tmp_path / "d")[-1] == (
        "ETA: 6 runs left, about 30.0 min of run time one at a time, less where "
        "they run at once (from uh doctor's estimate)"
    )
    write_json_atomic(tmp_path / "d" / "doctor.json", {**doctor, "profile": "smoke"})  # another profile's timing
    assert status(tmp_path / "d")[-1].startswith("ETA: 6 runs left; their time is unknown")


def smoke_done(run_ids: list[str]) -> pd.DataFrame:
    """The smoke set's rows of `run_ids`, each at its run ID's mean (a result's R must give its metrics, and every
    seed of B1 and B3 at the mean has one): REPLICATED."""
    smoke = read_per_seed_csv(EXPECTED / "smoke" / "per_seed.csv")
    smoke = smoke[smoke["run_id"].isin(run_ids)]
    return smoke.assign(**smoke.groupby("run_id")[["acc", "forgetting", "bwt"]].transform("mean"))


def test_status_on_a_part_of_the_smoke_set_is_incomplete_never_passed(tmp_path: Path) -> None:
    """Issue 51.4: with B1 and B3 of the smoke profile's twelve run IDs done, uh status once said "verdict now:
    PIPELINE CHECK PASSED (exit 0)" with 30 runs left; now INCOMPLETE, naming the runs that are missing, and the
    ETA counts them."""
    write(tmp_path / "r", smoke_done(["B1", "B3"]), profile="smoke")
    assert status(tmp_path / "r")[2:] == [
        "verdict now: INCOMPLETE (exit 3); next: seeds 1993, 2023, 42 of B0, B2, a1-a4, s1-s4",
        "ETA: 30 runs left; their time is unknown until one is done or uh doctor has timed them",
    ]


def test_status_prints_why_uh_check_cannot_check(tmp_path: Path) -> None:
    """Issue 51.4: where uh check refuses the results (exit 2: here a result.json whose config names a memory policy
    no run ID has), uh status printed its run counts and silently nothing of the procedure or the verdict; it prints
    uh check's one-line error as the verdict now."""
    write(tmp_path / "r", smoke_done(["B1", "B3"]), profile="smoke")
    path = tmp_path / "r" / "B3" / "seed-42" / "result.json"
    result = json.loads(path.read_text())
    write_json_atomic(path, {**result, "config": {**result["config"], "memory": "no_such_policy"}})
    checked = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "r")])
    assert checked.exit_code == 2 and checked.output.startswith("Error: "), checked.output
    lines = status(tmp_path / "r")
    assert lines[0].startswith("6 runs: 6 done") and not any(line.startswith("procedure:") for line in lines)
    assert lines[1] == f"verdict now: cannot check: {checked.output.removeprefix('Error: ').rstrip()}"


def test_status_refuses_a_result_json_that_uh_run_did_not_write_in_one_line(tmp_path: Path) -> None:
    """Issue 62: a result.json that is not JSON (here cut short) was counted done, and uh status exited 0 with uh
    check's line as the verdict now; it is read as every command reads it (jsonfiles.read_json: bounded, checked
    against its schema), and refused in one line naming the file, exit 2, as uh check refuses it."""
    write(tmp_path / "r", smoke_done(["B1", "B3"]), profile="smoke")
    path = tmp_path / "r" / "B3" / "seed-42" / "result.json"
    path.write_text(path.read_text()[:100])
    out = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path / "r")])
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert out.output.startswith(f"Error: {path}: cannot read JSON ("), out.output
    checked = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "r")])
    assert checked.exit_code == 2 and checked.output == out.output


def test_status_waits_seconds_for_a_slurm_that_does_not_answer(tmp_path: Path, monkeypatch) -> None:
    """Issue 52: squeue and sacct that give no answer (SLURM_CONF naming a missing file: squeue retries for a minute)
    hold uh status for a few seconds in all, not a minute each; the chain's line and the run's say what could not
    be read."""
    fake_slurm_clients(tmp_path / "bin", monkeypatch, "sleep 60")
    results = tmp_path / "r"
    write_json_atomic(
        results / "chain.json",
        {
            "id": "20261127-120000",
            "started": 0.0,
            "profile": "smoke",
            "ended": None,
            "steps": [
                {
                    "step": {"run_ids": ["B0"], "seeds": [1993]},
                    "by": "the command",
                    "array": "4",
                    "controller": "5",
                    "rescue": "6",
                }
            ],
        },
    )
    write_json_atomic(
        results / "submitit" / "submissions" / "1.json",
        {
            "written": 1.0,
            "pairs": [
                {
                    "run_id": "B0",
                    "seed": 1993,
                    "profile": "smoke",
                    "executor": "slurm",
                    "job_id": "4_0",
                    "folder": str(results / "submitit" / "slurm"),
                }
            ],
        },
    )
    tic = time.monotonic()
    lines = status(results, "--runs")
    assert time.monotonic() - tic < SLURM_WAIT_S + 4
    assert lines[0] == "1 run: 0 done, 0 running, 0 queued, 0 failed, 1 unknown"
    assert (
        "chain 20261127-120000: step 1 (B0 on seeds 1993, asked by the command): Slurm's queue could not be read "
        "(squeue failed or gave no answer in time), so whether its jobs are queued is unknown"
    ) in lines
    assert lines[-1] == (
        "B0 seed 1993: unknown [Slurm job 4_0] (Slurm's accounting could not be read: sacct failed or "
        f"gave no answer in time); log: {results}/submitit/slurm/4_0_0_log.err"
    )


def test_status_wraps_its_lines_to_columns_and_wide_keeps_them_whole(tmp_path: Path, monkeypatch) -> None:
    """Issue 52: uh status's lines fit COLUMNS (120 where unset), each long line wrapped at spaces, its continuation
    indented; --wide prints them whole. The procedure's line on the paper's table is 131 characters."""
    write(tmp_path / "r", read_per_seed_csv(EXPECTED / "paper_per_seed.csv"))
    monkeypatch.delenv("COLUMNS", raising=False)
    wide = status(tmp_path / "r")
    out = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path / "r")])
    assert out.exit_code == 0 and max(map(len, wide)) > 120 >= max(map(len, out.output.splitlines())), out.output
    joined: list[str] = []
    for line in out.output.splitlines():
        if line.startswith("    "):
            joined[-1] += " " + line.strip()
        else:
            joined.append(line)
    assert joined == wide
