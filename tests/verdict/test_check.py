"""uh check (verdict/): verdicts per metric, the paper's claims, exit codes and refusal of mismatched inputs."""

from __future__ import annotations

import errno
import json
import math
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner, Result
from conftest import matrix_with, next_look, smoke_rehearsal
from scipy import stats

from uniform_herding.catalogue import PAPER_RUNS, resolve
from uniform_herding.cli import main
from uniform_herding.errors import UhError
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.runs.provenance import code_files, code_hash
from uniform_herding.runs.results import read_per_seed_csv, write_json_atomic
from uniform_herding.verdict import judge
from uniform_herding.verdict.check import check_report, format_metrics, report_json, report_lines
from uniform_herding.verdict.expected import (
    Expected,
    ExpectedError,
    expected_dir_for,
    find_expected_root,
    load_expected,
)
from uniform_herding.verdict.metric_verdicts import MetricCheck
from uniform_herding.verdict.words import MetricKind

EXPECTED = Path(__file__).resolve().parents[2] / "expected_results"
# What a result made by this checkout's code records where git cannot compare the tree (as from an unpacked archive):
# independent of the state of the checkout the tests run in.
THIS_CODE = {
    "code_sha256": code_hash(),
    "code_files": len(code_files()),
    "git_revision": None,
    "git_revision_verified": False,
    "tree_modified": None,
    "diff_sha256": None,
}


@pytest.fixture
def paper() -> pd.DataFrame:
    return read_per_seed_csv(EXPECTED / "paper_per_seed.csv")


@pytest.fixture
def decided(paper: pd.DataFrame) -> pd.DataFrame:
    """The paper's table plus the looks next_step asks of it, each run at its paper mean: the second (B1, B3, a4 on
    seeds 1, 2) decides C3; the third (B1, B3 on seeds 3, 4, 5, for C1's B3 - B1 ACC) decides C1: RESULTS
    REPLICATED."""
    return next_look(next_look(paper, ["B1", "B3", "a4"], [1, 2], lead=0.0), ["B1", "B3"], [3, 4, 5], lead=0.0)


def check(tmp_path: Path, table: pd.DataFrame, *extra: str, results: bool = False) -> tuple[Result, dict]:
    """`uh check --per-seed` on `table` against the paper's expected set; output and JSON report. `results`: the
    table as result.json files made by this checkout's code instead (a per-seed CSV records no code: never the
    badge)."""
    csv, report = tmp_path / "rerun.csv", tmp_path / "report.json"
    if results:
        shutil.rmtree(tmp_path / "results", ignore_errors=True)
        write_results(tmp_path / "results", table, "paper", code=THIS_CODE)
        source = ["--results-dir", str(tmp_path / "results")]
    else:
        table.to_csv(csv, index=False)
        source = ["--per-seed", str(csv)]
    args = ["check", "--wide", *source, "--json-out", str(report), "--expected", str(EXPECTED), *extra]
    res = CliRunner().invoke(main, args)
    return res, (json.loads(report.read_text()) if report.exists() else {})


def decided_as(report: dict) -> tuple[str, list[dict]]:
    """The verdict as a script reads check_report.json: its kind and what decided it (judge.Cause)."""
    return report["verdict"]["kind"], report["verdict"]["causes"]


def missed(run_id: str, metric: str = "acc", final: bool = True) -> dict:
    """A gating metric beyond its tolerance, as a cause: final, or waiting for a look to come."""
    return {"state": "NOT_REPLICATED", "run_id": run_id, "metric": metric, "final": final}


def claim_is(claim_id: str, state: str) -> dict:
    """A claim as a cause, in its kind's name (words.ClaimKind)."""
    return {"state": state, "claim_id": claim_id}


def seeds_missing(run_id: str, *seeds: int) -> dict:
    """A run ID the pending look misses, with the seeds it lacks."""
    return {"state": "SEEDS_MISSING", "run_id": run_id, "seeds": list(seeds)}


def verdicts(report: dict) -> dict[tuple[str, str], str]:
    return {(m["run_id"], m["metric"]): m["verdict"] for m in report["metrics"]}


def claims(report: dict) -> dict[str, str]:
    return {c["claim_id"]: c["verdict"] for c in report["claims"]}


def write_results(results_dir: Path, table: pd.DataFrame, profile: str, code: dict | None = None) -> None:
    """Each row as a result.json; `code`, its provenance (None: none, as results made before it was recorded)."""
    for row in table.itertuples():
        write_json_atomic(
            results_dir / row.run_id / f"seed-{row.seed}" / "result.json",
            {
                "config_version": CONFIG_VERSION,
                "run_id": row.run_id,
                "seed": int(row.seed),
                "profile": profile,
                "config": resolve(row.run_id, profile).to_dict(),
                "R": matrix_with(row.acc, row.forgetting, row.bwt, resolve(row.run_id, profile).n_tasks),  # gives them
                "metrics": {"acc": row.acc, "forgetting": row.forgetting, "bwt": row.bwt},
            }
            | ({"provenance": code} if code else {}),
        )


def copy_expected_set(directory: Path, table: pd.DataFrame, gate: bool = True, profile: str = "paper") -> Path:
    """An expected set holding `table`, with the paper's tolerances."""
    directory.mkdir(parents=True, exist_ok=True)
    toml = (EXPECTED / "tolerances.toml").read_text()
    toml = toml.replace('"paper_per_seed.csv"', '"per_seed.csv"').replace('profile = "paper"', f'profile = "{profile}"')
    (directory / "tolerances.toml").write_text(
        toml.replace("gate_exit_code = true", f"gate_exit_code = {str(gate).lower()}")
    )
    runs = set(table["run_id"])  # a per-run-ID tolerance table names exactly the set's run IDs
    lines = [
        line
        for line in (directory / "tolerances.toml").read_text().splitlines(keepends=True)
        if not (line.split(" = ")[0] in PAPER_RUNS and line.split(" = ")[0] not in runs)
    ]
    (directory / "tolerances.toml").write_text("".join(lines))
    table.to_csv(directory / "per_seed.csv", index=False)
    return directory


# --- the paper's own values and shifted copies -------------------------------------------------


def test_the_papers_own_table_is_undecided_never_not_replicated(tmp_path: Path, paper: pd.DataFrame) -> None:
    """The paper's table against itself: every metric REPLICATED; C1's B3 - B1 ACC (2.76, 0.90, 1.36; one-sided
    p 0.048) and C3's B3 - a4 ACC (2.77, 2.69, 1.71; p 0.0099) are not decided at the procedure's first look
    (alpha 0.0098), so the verdict is UNDECIDED (exit 4), with next_step: the runs of C1's and C3's undecided
    comparisons (B3 - B2 is decided at look 1: B2 is not asked again) on the registered seeds of the second look."""
    res, report = check(tmp_path, paper)
    assert res.exit_code == 4, res.output
    assert len(report["metrics"]) == 36 and set(verdicts(report).values()) == {"REPLICATED"}
    assert decided_as(report) == ("UNDECIDED", [claim_is("C1", "UNDECIDED"), claim_is("C3", "UNDECIDED")])
    assert report["next_step"] == {"run_ids": ["B1", "B3", "a4"], "seeds": [1, 2]}
    assert "B3-B1 acc: 1993 +2.76, 2023 +0.90, 42 +1.36; mean +1.67 (claimed > 0); 98.04% t-interval" in res.output
    assert "one-sided p 0.048: undecided at alpha 0.0098" in res.output
    assert {k: v.split(" (")[0] for k, v in claims(report).items()} == {
        "C1": "UNDECIDED",
        "C2": "SUPPORTED",
        "C3": "UNDECIDED",
        "C4": "SUPPORTED",
        "C5": "SUPPORTED",
        "C6": "NOT CHECKED",
        "C7": "NOT CHECKED",
        "C8": "NOT CHECKED",
    }
    assert "B3-a2 acc: 1993 +9.55, 2023 +11.38, 42 +10.45; mean +10.46" in res.output
    assert report["exit_code"] == 4 and report["shipped_paper_set"] is True


@pytest.mark.slow
def test_the_next_looks_decide_and_the_badge_needs_the_shipped_set(tmp_path: Path, paper: pd.DataFrame) -> None:
    """next_step's seeds for next_step's runs, look by look: look 2 decides C3 and leaves C1's B3 - B1 ACC (p 0.003
    at alpha 0.00252), so look 3 asks B1 and B3 alone (not a4) and decides C1: RESULTS REPLICATED (exit 0), from
    results made by this checkout's code. The same rows against a copy of the set (one byte changed) pass every rule
    but print no badge; so do they as a per-seed CSV, which records no code (issue 51)."""
    look2 = next_look(paper, ["B1", "B3", "a4"], [1, 2], lead=0.0)
    res, report = check(tmp_path, look2)
    assert res.exit_code == 4 and report["next_step"] == {"run_ids": ["B1", "B3"], "seeds": [3, 4, 5]}, res.output
    assert claims(report)["C3"].startswith("SUPPORTED (look 2 of 5, 5 seeds")
    table = next_look(look2, ["B1", "B3"], [3, 4, 5], lead=0.0)
    res, report = check(tmp_path, table, results=True)
    assert res.exit_code == 0, res.output
    assert report["verdict"]["line"] == "RESULTS REPLICATED (ACM v1.1)" and report["next_step"] == {}
    assert claims(report)["C1"].startswith("SUPPORTED (look 3 of 5, 8 seeds")
    assert report["not_made_by_this_code"] == {} and "not plainly made" not in res.output
    copy = copy_expected_set(tmp_path / "copy", paper)
    (copy / "tolerances.toml").write_text((copy / "tolerances.toml").read_text() + "\n")
    res, report = check(tmp_path, table, "--expected", str(copy), results=True)
    assert res.exit_code == 6 and decided_as(report) == ("SET_MATCHED", [{"state": "NOT_SHIPPED_SET"}])
    assert "RESULTS REPLICATED" not in res.output
    res, report = check(tmp_path, table)
    assert res.exit_code == 6 and decided_as(report) == ("SET_MATCHED", [{"state": "NO_CODE_RECORDED"}])
    assert report["not_made_by_this_code"] is None


def made_elsewhere(results_dir: Path) -> None:
    """Five of the results in `results_dir` (made by this checkout's code) as other code would have made them: B3's
    seeds 1993 and 2023 from other code, a1 seed 42 from a modified tree of this code (its code.diff beside it), s1
    seed 1993 resumed after an edit (its second task under other code), B0 seed 42 before results recorded their
    code."""

    def edit(run_id: str, seed: int, change: dict) -> None:
        path = results_dir / run_id / f"seed-{seed}" / "result.json"
        body = json.loads(path.read_text()) | change
        write_json_atomic(path, {k: v for k, v in body.items() if v is not None})

    for seed in (1993, 2023):
        edit("B3", seed, {"provenance": THIS_CODE | {"code_sha256": "ab" * 32}})
    modified = {"git_revision": "12" * 20, "git_revision_verified": True, "tree_modified": True}
    edit("a1", 42, {"provenance": THIS_CODE | modified})
    (results_dir / "a1" / "seed-42" / "code.diff").write_text("+# an edit\n")
    edit(
        "s1",
        1993,
        {"tasks": [{"task": 0, "code_sha256": THIS_CODE["code_sha256"]}, {"task": 1, "code_sha256": "cd" * 32}]},
    )
    edit("B0", 42, {"provenance": None})


@pytest.mark.slow
def test_results_not_made_by_this_checkouts_code_are_named_and_never_get_the_badge(
    tmp_path: Path, decided: pd.DataFrame, paper: pd.DataFrame
) -> None:
    """Issue 51: results that would be RESULTS REPLICATED, five of them not made by this checkout's code, are named in
    one block before the verdict, grouped by why, in the JSON report too, and the badge is withheld (exit 6, saying
    why). On another profile they are named and the pipeline is checked as before. The report records this
    checkout's code hash."""
    res, report = check(tmp_path, decided, results=True)
    assert res.exit_code == 0, res.output
    made_elsewhere(tmp_path / "results")
    res = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "results"), "--expected", str(EXPECTED)])
    report = json.loads((tmp_path / "results" / "check_report.json").read_text())
    this = code_hash()
    withheld = "5 results not plainly made by this checkout's code"
    block = [
        f"provenance: results not plainly made by the checking code ({this[:12]}...), with every cause:",
        "  B0 seed 42: no code recorded (made before results recorded it)",
        f"  B3 seeds 1993, 2023: other code (its code abababababab... against the checking code's {this[:12]}...)",
        "  a1 seed 42: a modified tree (of revision 121212121212; code.diff beside its result.json)",
        "  s1 seed 1993: tasks made under different code (a run resumed after an edit)",
        f"  on the paper profile: no badge ({withheld})",
        f"verdict: EXPECTED SET MATCHED ({withheld}: no badge) -> exit 6",
    ]
    lines = res.output.splitlines()
    assert res.exit_code == 6 and lines[-8:-1] == block, res.output
    assert report["provenance_meaning"] == block[-2].strip()
    assert {"results": [["a1", 42]], "causes": [block[3].partition(": ")[2]]} in report["provenance"]
    assert report["not_made_by_this_code"] == {
        "made from other code (abababababab...)": [["B3", 1993], ["B3", 2023]],
        "made from a modified tree": [["a1", 42]],
        "tasks made under different code (a run resumed after an edit)": [["s1", 1993]],
        "no code recorded (made before results recorded it)": [["B0", 42]],
    }
    assert report["code_sha256"] == this
    assert report["expected_sha256"] == load_expected(EXPECTED).sha256
    smoke = copy_expected_set(tmp_path / "smoke", paper, gate=False, profile="smoke")
    write_results(tmp_path / "smoke-results", paper, "smoke", code=THIS_CODE)
    made_elsewhere(tmp_path / "smoke-results")
    res = CliRunner().invoke(
        main, ["check", "--results-dir", str(tmp_path / "smoke-results"), "--expected", str(smoke)]
    )
    assert res.exit_code == 0 and res.output.splitlines()[-2].startswith("verdict: PIPELINE CHECK PASSED"), res.output
    meaning = "  on profile smoke: this changes no verdict (only the paper profile has a badge)"
    assert res.output.splitlines()[-8:-2] == [*block[:-2], meaning], res.output
    write_results(tmp_path / "old-results", paper, "smoke")  # all made before results recorded their code
    res = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "old-results"), "--expected", str(smoke)])
    assert res.exit_code == 0 and res.output.splitlines()[-5:-2] == [
        block[0],
        "  all 36 results: no code recorded (made before results recorded it)",
        meaning,
    ], res.output


@pytest.mark.slow
def test_a_setting_that_changes_numbers_is_named_beside_the_provenance(
    tmp_path: Path, decided: pd.DataFrame, paper: pd.DataFrame
) -> None:
    """Issue 59: a result that records another precision than the profile's default (UH_PRECISION=16-mixed on a CPU
    smoke run) is named in uh check's provenance block, one line for the setting, and in the JSON report; so is a
    setting in which the results differ. Results that all keep the defaults name none. It costs no badge."""
    cpu = {
        "device": "cpu: a CPU (AVX2)",
        "cpu_threads": 1,
        "precision": "32-true",
        "compile": "off",
        "deterministic": False,
    }
    smoke = copy_expected_set(tmp_path / "smoke", paper, gate=False, profile="smoke")
    results = tmp_path / "smoke-results"
    write_results(results, paper, "smoke", code=THIS_CODE)
    for path in results.glob("*/seed-*/result.json"):
        write_json_atomic(path, json.loads(path.read_text()) | {"environment": cpu})
    args = ["check", "--results-dir", str(results), "--expected", str(smoke)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0 and "provenance:" not in res.output, res.output
    for seed, env in ((1993, {"precision": "16-mixed"}), (2023, {"compile": "default"})):
        path = results / "B3" / f"seed-{seed}" / "result.json"
        write_json_atomic(path, json.loads(path.read_text()) | {"environment": cpu | env})
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0 and res.output.splitlines()[-6:-2] == [
        f"provenance: results not plainly made by the checking code ({code_hash()[:12]}...), with every cause:",
        "  B3 seed 1993: precision 16-mixed (the profile's default: 32-true)",
        "  B3 seed 2023: compile default (the profile's default: off)",
        "  on profile smoke: this changes no verdict (only the paper profile has a badge)",
    ], res.output
    report = json.loads((results / "check_report.json").read_text())
    assert report["settings_named"]["precision"]["values"]["16-mixed"] == [["B3", 1993]]
    res, report = check(tmp_path, decided, results=True)
    assert res.exit_code == 0 and report["settings_named"] == {}, res.output


def test_the_shipped_paper_sets_digest_is_the_one_in_the_code() -> None:
    """A change to the paper's expected set is a change to expected.PAPER_SET_SHA256, in review."""
    assert load_expected(EXPECTED).shipped


def test_a_byte_identical_copy_of_the_shipped_set_is_the_shipped_set(tmp_path: Path, decided: pd.DataFrame) -> None:
    """Issue 53.3: the shipped set is known by its content (expected.PAPER_SET_SHA256), wherever it lies: a
    byte-identical copy passed with --expected gets the badge, on results made by this checkout's code; the copy
    with one byte changed is another set: EXPECTED SET MATCHED (exit 6), saying so."""
    copy = tmp_path / "copy"
    copy.mkdir()
    for name in ("tolerances.toml", "paper_per_seed.csv"):
        shutil.copyfile(EXPECTED / name, copy / name)
    res, report = check(tmp_path, decided, "--expected", str(copy), results=True)
    assert res.exit_code == 0 and decided_as(report) == ("RESULTS_REPLICATED", []), res.output
    assert report["shipped_paper_set"] is True
    toml = (copy / "tolerances.toml").read_bytes()
    (copy / "tolerances.toml").write_bytes(toml.replace(b"# Expected set", b"# expected set", 1))
    res, report = check(tmp_path, decided, "--expected", str(copy), results=True)
    assert res.exit_code == 6 and decided_as(report) == ("SET_MATCHED", [{"state": "NOT_SHIPPED_SET"}]), res.output
    assert report["shipped_paper_set"] is False


def test_a_substituted_expected_set_found_from_the_working_directory_prints_no_badge(
    tmp_path: Path, paper: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An expected_results/ with tau 60 pp in the working directory: found first, and said to be another set."""
    loose = copy_expected_set(tmp_path / "expected_results", paper)
    text = (loose / "tolerances.toml").read_text()
    (loose / "tolerances.toml").write_text(re.sub(r"tau = [\d.]+\n", "tau = 60.0\n", text))
    shifted = paper.assign(acc=paper["acc"] - 6)
    monkeypatch.chdir(tmp_path)
    csv = tmp_path / "rerun.csv"
    shifted.to_csv(csv, index=False)
    res = CliRunner().invoke(main, ["check", "--per-seed", str(csv), "--json-out", str(tmp_path / "r.json")])
    said = " ".join(res.output.split())  # the words, however the terminal's width wraps the path before them
    assert "RESULTS REPLICATED" not in said and "not the shipped paper set" in said


def test_a_b3_only_expected_set_prints_no_badge(tmp_path: Path, paper: pd.DataFrame) -> None:
    b3 = paper[paper["run_id"] == "B3"]
    directory = tmp_path / "b3"
    directory.mkdir()
    b3.to_csv(directory / "per_seed.csv", index=False)
    (directory / "tolerances.toml").write_text(
        'profile = "paper"\nper_seed = "per_seed.csv"\n'
        "[tolerance]\nacc = 1.5\nforgetting = 2.0\nbwt = 2.0\n"
        "[claims]\ngate_exit_code = true\n"
    )
    res, report = check(tmp_path, b3, "--expected", str(directory))
    assert "RESULTS REPLICATED" not in res.output and report["shipped_paper_set"] is False


def test_one_seed_decides_no_metric_and_the_verdict_is_incomplete(tmp_path: Path, paper: pd.DataFrame) -> None:
    """The paper's own seed-1993 rows: s1 ACC is 1.87 below the 3-seed mean; one seed's luck decides nothing."""
    res, report = check(tmp_path, paper[paper["seed"] == 1993])
    assert res.exit_code == 3, res.output
    assert decided_as(report) == ("INCOMPLETE", [seeds_missing(r, 2023, 42) for r in PAPER_RUNS])
    assert verdicts(report)["s1", "acc"].startswith("NOT CHECKED (1 of the expected seeds; a metric needs 3")


def test_other_seeds_are_shown_never_counted(tmp_path: Path, paper: pd.DataFrame) -> None:
    """No seed shopping: three extra seeds cannot turn an a3 ACC miss of 5 pp into a pass; and a re-run on other
    seeds alone is INCOMPLETE, saying its seeds are shown and not counted (not "36 of 36 runs missing")."""
    a3 = paper[paper["run_id"] == "a3"]
    missed = paper.assign(acc=np.where(paper["run_id"] == "a3", paper["acc"] - 5, paper["acc"]))
    extra = a3.assign(seed=[987651, 987652, 987653])
    res, report = check(tmp_path, pd.concat([missed, extra], ignore_index=True))
    assert res.exit_code == 1 and verdicts(report)["a3", "acc"] == "NOT REPLICATED"
    assert "a3 seed 987651" in res.output
    res, report = check(tmp_path, paper.assign(seed=paper["seed"] + 1))
    assert res.exit_code == 3 and "are shown, never counted" in report["verdict"]["line"]
    assert "paper runs missing" not in report["verdict"]["line"]


@pytest.mark.parametrize("shift", [+1.0, -1.0])
def test_a_shift_of_exactly_the_tolerance_passes_either_way(tmp_path: Path, paper: pd.DataFrame, shift: float) -> None:
    """a3 ACC shifted by exactly its tolerance on each seed: REPLICATED at both signs, and never "beyond"."""
    tol = load_expected(EXPECTED).tolerance_for("a3", "acc")
    shifted = paper.assign(acc=np.where(paper["run_id"] == "a3", paper["acc"] + shift * tol, paper["acc"]))
    _, report = check(tmp_path, shifted)
    row = next(m for m in report["metrics"] if (m["run_id"], m["metric"]) == ("a3", "acc"))
    assert row["verdict"] == "REPLICATED" and "beyond" not in row["equivalence"]["text"]


def test_c5_is_not_supported_by_float_noise(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Budget and retrieval ranges equal in decimal give deltas of ~3.6e-15: no support."""
    values = {
        "s1": (32.14, 36.08, 34.04),
        "s2": (46.84, 47.77, 47.52),
        "s3": (28.94, 56.41, 42.84),
        "s4": (43.17, 55.77, 30.17),
    }
    table = paper.copy()
    for run_id, accs in values.items():
        table.loc[table["run_id"] == run_id, "acc"] = accs
    _, report = check(tmp_path, table)
    assert not claims(report)["C5"].startswith("SUPPORTED")


def test_a_missing_expected_set_is_a_state_not_an_error(tmp_path: Path, paper: pd.DataFrame) -> None:
    paper.to_csv(tmp_path / "rerun.csv", index=False)
    res = CliRunner().invoke(
        main,
        [
            "check",
            "--per-seed",
            str(tmp_path / "rerun.csv"),
            "--profile",
            "cifar10",
            "--json-out",
            str(tmp_path / "r.json"),
        ],
    )
    assert res.exit_code == 3, res.output
    assert "INCOMPLETE (no expected set for profile cifar10" in res.output and "cannot read TOML" not in res.output
    # a profile's folder without its tolerances.toml (a set being made, as docs/extending.md makes one) is none
    root = tmp_path / "repo" / "expected_results"
    shutil.copytree(EXPECTED, root, ignore=shutil.ignore_patterns("cifar10*", "smoke"))
    (root / "cifar10").mkdir()
    with pytest.MonkeyPatch.context() as mp:
        mp.chdir(root.parent)
        res = CliRunner().invoke(
            main,
            [
                "check",
                "--per-seed",
                str(tmp_path / "rerun.csv"),
                "--profile",
                "cifar10",
                "--json-out",
                str(tmp_path / "r.json"),
            ],
        )
    assert res.exit_code == 3 and "INCOMPLETE (no expected set for profile cifar10" in res.output, res.output
    assert decided_as(json.loads((tmp_path / "r.json").read_text())) == ("INCOMPLETE", [{"state": "NO_EXPECTED_SET"}])


def test_the_printer_and_the_json_report_read_one_check_report(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Issue 62: `uh check` decides once (check_report, no click): the printed verdict line and check_report.json's
    verdict (one object: its line, kind and causes, none of them beside it) and exit code are read off that one
    object; the library refuses a mismatched input with the project's own error (exit 2 at the edge), not click's."""
    paper.to_csv(tmp_path / "rerun.csv", index=False)
    report = check_report(None, tmp_path / "rerun.csv", expected_dir=EXPECTED, run_ids_option="B0,B3")
    written = report_json(report)
    assert report_lines(report)[-1] == f"verdict: {written['verdict']['line']} -> exit {written['exit_code']}"
    assert (
        report.verdict.line
        == written["verdict"]["line"]
        == ("EXPECTED SET MATCHED (subset B0, B3 of 12 run IDs: no badge, which needs every claim and run ID)")
    )
    assert (written["verdict"]["kind"], written["exit_code"]) == ("SET_MATCHED", 6)
    assert written["verdict"]["causes"] == [{"state": "SUBSET", "run_ids": ["B0", "B3"]}]
    assert set(written["verdict"]) == {"line", "kind", "causes"} and not {"line", "kind", "causes"} & set(written)
    with pytest.raises(UhError, match=r"re-run profile 'smoke' but .* holds profile 'paper'") as refused:
        check_report(None, tmp_path / "rerun.csv", expected_dir=EXPECTED, profile="smoke")
    assert refused.value.exit_code == 2


def test_the_verdict_loads_no_click() -> None:
    """Issue 62: click lives in the commands; the verdict's modules (the check, aggregation, the judge and what they
    read) load without it, so a script or uh status can judge results with no command line."""
    modules = ("check", "aggregate", "judge", "expected", "claim_verdicts", "metric_verdicts", "words", "procedure")
    code = "import sys\n" + "".join(f"import uniform_herding.verdict.{m}\n" for m in modules)
    code += "print('click' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


def test_a_bundle_is_checked_as_its_results_dir_is_by_the_same_function(tmp_path: Path, decided: pd.DataFrame) -> None:
    """`uh check --bundle` calls the check itself (never the command again through click): the bundled results get
    the verdict, kind, causes, metrics and exit code their results dir gets, and the report names the bundle."""
    results = tmp_path / "results"
    write_results(results, decided[decided["run_id"].isin(["B0", "B3"])], "paper", code=THIS_CODE)
    direct = CliRunner().invoke(main, ["check", "--results-dir", str(results)])
    assert direct.exit_code == 3, direct.output  # INCOMPLETE: 10 of the 12 run IDs are missing
    expected = json.loads((results / "check_report.json").read_text())
    zipped = tmp_path / "rerun.zip"
    assert CliRunner().invoke(main, ["bundle", "--results-dir", str(results), "-o", str(zipped)]).exit_code == 0
    res = CliRunner().invoke(main, ["check", "--bundle", str(zipped), "--json-out", str(tmp_path / "b.json")])
    assert res.exit_code == 3, res.output
    report = json.loads((tmp_path / "b.json").read_text())
    assert report["source"] == "--bundle .../rerun.zip" and decided_as(report) == decided_as(expected)  # portable
    same = ("verdict", "metrics", "claims", "exit_code", "not_made_by_this_code")
    assert {k: report[k] for k in same} == {k: expected[k] for k in same}


@pytest.mark.slow
def test_a_shift_past_the_tolerance_is_not_replicated(tmp_path: Path, decided: pd.DataFrame) -> None:
    shifted = decided.assign(acc=decided["acc"] + 5.0)  # B3's tolerance at 8 seeds: 4.01 pp
    res, report = check(tmp_path, shifted)
    assert res.exit_code == 1
    assert verdicts(report)[("B3", "acc")] == "NOT REPLICATED"
    assert any(line.startswith("B3  acc") and " NOT REPLICATED " in line for line in res.output.splitlines())
    assert verdicts(report)[("B3", "forgetting")] == "REPLICATED"
    assert {claims(report)[c].split(" (")[0] for c in ("C1", "C2", "C3", "C4", "C5")} == {"SUPPORTED"}  # deltas kept


def test_a_shift_inside_the_tolerance_is_replicated(tmp_path: Path, decided: pd.DataFrame) -> None:
    res, report = check(
        tmp_path, decided.assign(forgetting=decided["forgetting"] - 3.0, bwt=decided["bwt"] + 3.0), results=True
    )  # F tolerances >= 4.3 pp
    assert res.exit_code == 0 and set(verdicts(report).values()) == {"REPLICATED"}


def with_a3_acc(paper: pd.DataFrame, values: list[float]) -> pd.DataFrame:
    table = paper.copy()
    table.loc[table["run_id"] == "a3", "acc"] = values  # seeds 1993, 2023, 42
    return table


def test_a_noisy_miss_fails_however_wide_its_interval(tmp_path: Path, paper: pd.DataFrame) -> None:
    """a3 ACC 35.5 / 39.0 / 40.5 (mean 38.33) against the paper's 43.22, tolerance 4.17: 1.2 tolerances off. Its
    Welch interval [-11.01, +1.25] contains 0; that must not make it pass."""
    res, report = check(tmp_path, with_a3_acc(paper, [35.5, 39.0, 40.5]))
    a3 = next(m for m in report["metrics"] if (m["run_id"], m["metric"]) == ("a3", "acc"))
    assert a3["welch95"][0] < 0 < a3["welch95"][1] and a3["verdict"] == "NOT REPLICATED"
    assert "not shown: the difference is beyond the tolerance" in res.output
    assert res.exit_code == 1 and report["verdict"]["line"] == "NOT REPLICATED (a3 acc NOT REPLICATED)"  # the words
    assert decided_as(report) == ("NOT_REPLICATED", [missed("a3")])


def test_a_shift_of_one_point_on_every_seed_replicates(tmp_path: Path, decided: pd.DataFrame) -> None:
    a3 = decided.loc[decided["run_id"] == "a3", "acc"]
    res, report = check(tmp_path, with_a3_acc(decided, list(a3 + 1.0)), results=True)
    assert res.exit_code == 0, res.output
    assert verdicts(report)[("a3", "acc")] == "REPLICATED" and report["verdict"]["kind"] == "RESULTS_REPLICATED"


def test_one_seed_has_no_interval_and_decides_nothing(tmp_path: Path, paper: pd.DataFrame) -> None:
    rerun = paper[(paper["run_id"] == "B3") & (paper["seed"] == 1993)].assign(acc=40.0)
    res, report = check(tmp_path, rerun)
    assert verdicts(report)[("B3", "acc")].startswith("NOT CHECKED (1 of the expected seeds") and res.exit_code == 3
    assert "no interval (1 seed; needs 3 per side)" in res.output


def test_a_partial_set_works_and_leaves_claims_not_checked(tmp_path: Path, paper: pd.DataFrame) -> None:
    rerun = paper[(paper["run_id"] == "B3") & (paper["seed"] == 1993)]
    res, report = check(tmp_path, rerun)
    assert res.exit_code == 3, res.output
    assert set(verdicts(report)) == {("B3", "acc"), ("B3", "forgetting"), ("B3", "bwt")}
    assert decided_as(report) == (
        "INCOMPLETE",
        [seeds_missing(r, *((2023, 42) if r == "B3" else (1993, 2023, 42))) for r in PAPER_RUNS],
    )
    assert claims(report)["C1"] == "NOT CHECKED (missing: B1, B2)"
    assert all(v.startswith("NOT CHECKED") for v in claims(report).values())


def test_claims_need_a_seed_shared_by_their_runs(tmp_path: Path, paper: pd.DataFrame) -> None:
    rerun = paper[
        ((paper["run_id"] == "B3") & (paper["seed"] == 42)) | ((paper["run_id"] == "a4") & (paper["seed"] != 42))
    ]
    _, report = check(tmp_path, rerun)
    assert claims(report)["C3"] == "NOT CHECKED (no seed shared by B3, a4)"


# --- claims ------------------------------------------------------------------------------------


def set_from(table: pd.DataFrame, run_id: str, source: str, metric: str, offset: float = 0.0) -> pd.DataFrame:
    """`table` with run_id's `metric` replaced seed by seed by source's value plus `offset` (a new forgetting
    moves BWT with it, to -F: BWT below -F is no result)."""
    values = table.set_index(["run_id", "seed"])[metric]
    changed = table.copy()
    rows = changed["run_id"] == run_id
    changed.loc[rows, metric] = [values[(source, s)] + offset for s in changed.loc[rows, "seed"]]
    if metric == "forgetting":
        changed.loc[rows, "bwt"] = -changed.loc[rows, "forgetting"]
    return changed


@pytest.mark.parametrize(
    ("change", "claim"),
    [
        (lambda t: set_from(t, "B1", "B3", "forgetting", -0.5), "C1"),  # iCaRL forgets less
        (lambda t: set_from(t, "a2", "B3", "acc", +0.5), "C2"),
        (lambda t: set_from(t, "a4", "B3", "acc", +0.3), "C3"),
        (lambda t: set_from(t, "a1", "B3", "forgetting", -0.1), "C4"),
        # no budget rise (s2 = s1 = B3) beside a retrieval step of 8 pp: (s2 - s1) - (B3 - s3) = -8 on every seed
        (
            lambda t: set_from(set_from(set_from(t, "s1", "B3", "acc"), "s2", "B3", "acc"), "s3", "B3", "acc", -8.0),
            "C5",
        ),
    ],
)
def test_a_claim_the_rerun_contradicts_is_not_supported(
    tmp_path: Path, decided: pd.DataFrame, change, claim: str
) -> None:
    res, report = check(tmp_path, change(decided))
    assert claims(report)[claim].startswith("NOT SUPPORTED") and f"{claim} NOT SUPPORTED" in res.output
    assert sum(v.startswith("SUPPORTED") for v in claims(report).values()) == 4
    assert res.exit_code == 1


@pytest.mark.parametrize(("gate", "code"), [(True, 1), (False, 6)])
def test_claims_gate_the_exit_code_only_where_the_expected_set_says_so(
    tmp_path: Path, paper: pd.DataFrame, gate: bool, code: int
) -> None:
    rerun = set_from(paper, "a2", "B3", "acc", +0.5)
    expected = copy_expected_set(tmp_path / "expected", rerun, gate=gate)
    csv = tmp_path / "rerun.csv"
    rerun.to_csv(csv, index=False)
    res = CliRunner().invoke(
        main,
        [
            "check",
            "--per-seed",
            str(csv),
            "--expected",
            str(expected),
            "--json-out",
            str(tmp_path / "r.json"),
        ],
    )
    assert "36 REPLICATED" in res.output and "C2 NOT SUPPORTED" in res.output
    assert res.exit_code == code


@pytest.mark.parametrize(
    ("observed", "verdict"),
    [(41.0, "REPLICATED"), (51.0, "REPLICATED"), (40.75, "NOT REPLICATED"), (51.25, "NOT REPLICATED")],
)
def test_a_difference_of_exactly_the_tolerance_is_replicated(observed: float, verdict: str) -> None:
    """|difference| <= tolerance, boundary included: smoke accuracies lie on a grid of 0.5 pp, so differences of
    exactly a tolerance occur (B1's ACC +5.00 at 5.0 between two CPU kinds). Every value here is exactly representable:
    expected mean 46.0, differences -5.0 and +5.0 (on the boundary) and 0.25 past it."""
    expected = Expected(
        Path("."),
        "smoke",
        pd.DataFrame(
            {
                "run_id": ["B3"] * 3,
                "seed": [1993, 2023, 42],
                "acc": [44.0, 46.0, 48.0],
                "forgetting": [20.0] * 3,
                "bwt": [-20.0] * 3,
            }
        ),
        {"acc": 5.0, "forgetting": 7.5, "bwt": 7.5},
        gate_claims=False,
    )
    rerun = expected.per_seed.assign(acc=observed)
    (acc, *_) = judge.check(expected, rerun).metrics
    assert (acc.metric, abs(acc.difference), acc.verdict) == ("acc", abs(observed - 46.0), verdict)


def test_the_smoke_tolerances_are_the_spread_measured_between_cpu_kinds() -> None:
    """expected_results/smoke/tolerances.toml: each tolerance is the largest difference of 3-seed means between two
    of the three CPU kinds measured (the committed rows and expected_results/smoke/cpu_kinds/), rounded up to
    0.5 pp, so that every kind is REPLICATED on every metric against the committed rows."""
    smoke = load_expected(EXPECTED / "smoke")
    kinds = [smoke.per_seed, *(read_per_seed_csv(p) for p in sorted((EXPECTED / "smoke" / "cpu_kinds").glob("*.csv")))]
    assert len(kinds) == 3 and all(len(k) == 45 for k in kinds)
    means = [k.groupby("run_id")[["acc", "forgetting", "bwt"]].mean() for k in kinds]
    spread = pd.concat([(a - b).abs() for i, a in enumerate(means) for b in means[i + 1 :]]).max()
    assert smoke.tolerance == {m: math.ceil(2 * spread[m]) / 2 for m in ("acc", "forgetting", "bwt")}, spread
    for kind in kinds[1:]:
        assert {c.verdict for c in judge.check(smoke, kind).metrics} == {"REPLICATED"}


# --- results dirs, profiles, locating expected_results -----------------------------------------


def test_results_dir_writes_the_report_beside_the_results(tmp_path: Path, paper: pd.DataFrame) -> None:
    write_results(tmp_path / "results", paper, profile="paper")
    res = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "results")])
    assert res.exit_code == 4, res.output  # UNDECIDED: C1 awaits its second look
    report = json.loads((tmp_path / "results" / "check_report.json").read_text())
    assert report["profile"] == "paper" and len(report["metrics"]) == 36


def test_check_reads_uh_results_dir_like_run_and_report(
    tmp_path: Path, paper: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14.6: `uh check` ignored UH_RESULTS_DIR, so ./reproduce.sh check read ./results."""
    write_results(tmp_path / "elsewhere", paper, profile="paper")
    write_results(tmp_path / "results", paper.assign(acc=paper["acc"] / 2), profile="paper")  # old results
    monkeypatch.chdir(tmp_path)
    env = {"UH_RESULTS_DIR": str(tmp_path / "elsewhere")}
    res = CliRunner().invoke(main, ["check", "--expected", str(EXPECTED)], env=env)
    assert res.exit_code == 4 and f"--results-dir {tmp_path / 'elsewhere'}" in res.output, res.output
    assert (tmp_path / "elsewhere" / "check_report.json").exists()
    res = CliRunner().invoke(main, ["aggregate"], env=env)
    assert res.exit_code == 0 and "44.00 +/- 0.51" in res.output, res.output
    csv = tmp_path / "rerun.csv"
    paper.to_csv(csv, index=False)  # --per-seed wins over the variable
    res = CliRunner().invoke(main, ["check", "--per-seed", str(csv), "--expected", str(EXPECTED)], env=env)
    assert res.exit_code == 4, res.output


def test_an_unwritable_report_is_one_line_and_exit_2(
    tmp_path: Path, paper: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 14.9: a read-only or full results dir gave a 40-line traceback, and the check's exit code was lost."""
    write_results(tmp_path / "results", paper, profile="paper")
    real = os.fsync

    def fsync(fd: int) -> None:
        if ".check_report.json." in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    res = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "results"), "--expected", str(EXPECTED)])
    errors = [e for e in res.output.splitlines() if e.startswith("Error")]
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    assert res.exit_code == 2 and len(errors) == 1 and "Read-only file system" in errors[0], res.output
    assert "-> exit 4" in res.output and "--json-out" in errors[0]
    assert sorted(p.name for p in (tmp_path / "results").iterdir()) == [
        "B0",
        "B1",
        "B2",
        "B3",
        "a1",
        "a2",
        "a3",
        "a4",
        "s1",
        "s2",
        "s3",
        "s4",
    ]


def test_every_command_states_the_variables_it_reads() -> None:
    for command, variables in [
        ("run", ["UH_RESULTS_DIR", "UH_DATA_DIR", "UH_JOBS", "UH_CPU_THREADS", "UH_COMPILE"]),
        ("sweep", ["UH_RESULTS_DIR", "UH_DATA_DIR", "UH_JOBS", "UH_CPU_THREADS", "UH_COMPILE"]),
        ("doctor", ["UH_RESULTS_DIR", "UH_DATA_DIR", "UH_JOBS", "UH_CPU_THREADS", "UH_COMPILE", "UH_DEVICE"]),
        ("check", ["UH_RESULTS_DIR"]),
        ("aggregate", ["UH_RESULTS_DIR"]),
        ("report", ["UH_RESULTS_DIR"]),
    ]:
        help_text = CliRunner().invoke(main, [command, "--help"]).output
        assert all(v in help_text for v in variables), (command, help_text)


def test_profile_smoke_uses_expected_results_smoke(
    tmp_path: Path, paper: pd.DataFrame, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "repo" / "expected_results"
    copy_expected_set(root, paper)
    copy_expected_set(root / "smoke", paper.assign(acc=paper["acc"] / 2), gate=False, profile="smoke")
    write_results(tmp_path / "results", paper.assign(acc=paper["acc"] / 2), profile="smoke")
    monkeypatch.chdir(tmp_path / "repo")
    res = CliRunner().invoke(
        main, ["check", "--wide", "--results-dir", str(tmp_path / "results"), "--profile", "smoke"]
    )
    assert res.exit_code == 0, res.output
    assert f"vs expected {root / 'smoke'}" in res.output


def test_find_expected_root(tmp_path: Path) -> None:
    assert find_expected_root([EXPECTED / "smoke"]) == EXPECTED
    assert expected_dir_for("paper", EXPECTED) == EXPECTED and expected_dir_for("smoke", EXPECTED) == EXPECTED / "smoke"
    with pytest.raises(ExpectedError, match="pass --expected DIR"):
        find_expected_root([tmp_path])


# --- mismatched and malformed inputs: exit 2, one line -----------------------------------------


def assert_refused(res: Result, message: str) -> None:
    assert res.exit_code == 2, res.output
    assert message in res.output
    assert len(res.output.strip().splitlines()) == 1, res.output


def test_results_from_another_profile_are_refused(tmp_path: Path, paper: pd.DataFrame) -> None:
    write_results(tmp_path / "results", paper, profile="smoke")
    base = ["check", "--results-dir", str(tmp_path / "results")]
    assert_refused(CliRunner().invoke(main, [*base, "--expected", str(EXPECTED)]), "holds profile 'paper'")
    assert_refused(CliRunner().invoke(main, [*base, "--profile", "paper"]), "from profile 'smoke', not --profile")
    assert not (tmp_path / "results" / "check_report.json").exists()


def test_a_per_seed_csv_is_taken_to_be_of_the_given_profile(tmp_path: Path, paper: pd.DataFrame) -> None:
    res, _ = check(tmp_path, paper, "--profile", "smoke")
    assert_refused(res, "re-run profile 'smoke'")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("run_id,seed,acc,forgetting\nB3,1993,1,2\n", "expected run_id,seed,acc,forgetting,bwt"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,x,2,3\n", "non-numeric acc 'x'"),
        ("run_id,seed,acc,forgetting,bwt\nZ7,1993,1,2,3\n", "unknown run ID(s) Z7"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,1,2,3\nB3,1993,1,2,3\n", "duplicate row for B3 seed 1993"),
    ],
)
def test_malformed_per_seed_csv_is_refused(tmp_path: Path, text: str, message: str) -> None:
    csv = tmp_path / "rerun.csv"
    csv.write_text(text)
    assert_refused(CliRunner().invoke(main, ["check", "--per-seed", str(csv), "--expected", str(EXPECTED)]), message)


def test_result_without_metrics_is_refused(tmp_path: Path, paper: pd.DataFrame) -> None:
    write_results(tmp_path / "results", paper[paper["run_id"] == "B3"], profile="paper")
    path = tmp_path / "results" / "B3" / "seed-42" / "result.json"
    body = json.loads(path.read_text())
    del body["metrics"]["forgetting"]
    path.write_text(json.dumps(body))
    res = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path / "results")])
    assert_refused(res, f"{path}: metrics lack forgetting")


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        ("tau = 1.0", "tau = -1.0", "[derive] needs exactly tau"),
        ("family_alpha = 0.01", 'family_alpha = "0.02"', "[derive] needs exactly tau"),
        ("family_alpha = 0.01", "family_alpha = 1.5", "[derive] needs exactly tau"),
        ("\n[derive]\n", "\n[tolerance]\nacc = 1.0\n[derive]\n", "either [tolerance] (the numbers) or [derive]"),
        ('gate = ["acc", "forgetting"]', 'gate = ["ACC"]', "gate must list metrics"),
        ("looks = [3, 5, 8, 12, 20]", "looks = [2, 5, 8, 12, 20]", "[procedure] needs seeds, looks and alpha"),
        (
            "alpha = [0.0098, 0.00252, 0.00409, 0.00859, 0.0339]",
            "alpha = [0.0098, 0.00252, 0.00409, 0.00859, 0.06]",
            "[procedure] needs seeds, looks",
        ),
        ("gate_exit_code = true", "gate_exit_code = 1", "gate_exit_code must be true or false"),
        ('profile = "paper"', 'profile = "huge"', "profile must be one of"),
        ("\n[derive]\n", "\n[derive\n", "cannot read TOML"),
        (
            'per_seed = "per_seed.csv"',
            'per_seed = "absent.csv"',
            "uh aggregate --results-dir results --per-seed-out",
        ),
    ],
)
def test_malformed_expected_sets_are_refused(
    tmp_path: Path, paper: pd.DataFrame, old: str, new: str, message: str
) -> None:
    expected = copy_expected_set(tmp_path / "expected", paper)
    toml = expected / "tolerances.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new))
    csv = tmp_path / "rerun.csv"
    paper.to_csv(csv, index=False)
    assert_refused(CliRunner().invoke(main, ["check", "--per-seed", str(csv), "--expected", str(expected)]), message)


def test_malformed_expected_per_seed_csv_is_refused(tmp_path: Path, paper: pd.DataFrame) -> None:
    expected = copy_expected_set(tmp_path / "expected", paper)
    (expected / "per_seed.csv").write_text("run_id,seed,acc,forgetting,bwt\nB3,1993,1,2\n")
    shutil.copy(expected / "per_seed.csv", tmp_path / "rerun.csv")
    res = CliRunner().invoke(
        main, ["check", "--per-seed", str(EXPECTED / "paper_per_seed.csv"), "--expected", str(expected)]
    )
    assert res.exit_code == 2 and str(expected / "per_seed.csv") in res.output


def test_run_ids_without_expected_values_are_reported_not_judged(tmp_path: Path, paper: pd.DataFrame) -> None:
    expected = copy_expected_set(tmp_path / "expected", paper[paper["run_id"] == "B3"])
    csv = tmp_path / "rerun.csv"
    paper[paper["run_id"].isin(["B3", "a1"])].to_csv(csv, index=False)
    base = ["check", "--expected", str(expected), "--json-out", str(tmp_path / "r.json")]
    res = CliRunner().invoke(main, [*base, "--per-seed", str(csv)])
    assert res.exit_code == 3 and "C1 NOT CHECKED (missing: B1, B2)" in res.output, res.output  # never MATCHED
    report = json.loads((tmp_path / "r.json").read_text())
    assert verdicts(report)[("a1", "acc")] == "NOT CHECKED (no expected values)"
    paper[paper["run_id"] == "a1"].to_csv(csv, index=False)
    assert_refused(CliRunner().invoke(main, [*base, "--per-seed", str(csv)]), "no run ID of the re-run has expected")


# --- findings beyond the paper (C6-C8, run IDs r1-r3) ---------------------------------------------

T_975_2DF = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2), checked below


def with_refresh_runs(paper: pd.DataFrame, acc: dict[str, list[float]], forgetting: dict[str, list[float]]):
    """The paper's table plus hand-made r1-r3 rows (seeds 1993, 2023, 42)."""
    rows = [
        {"run_id": r, "seed": s, "acc": a, "forgetting": f, "bwt": -f}
        for r in acc
        for s, a, f in zip((1993, 2023, 42), acc[r], forgetting[r], strict=True)
    ]
    return pd.concat([paper, pd.DataFrame(rows)], ignore_index=True)


T_95_2DF = 2.919985580355516  # scipy.stats.t.ppf(0.95, 2): the 90% interval, the one-sided 5% test


def test_findings_print_paired_means_and_t_intervals_computed_by_hand(tmp_path: Path, decided: pd.DataFrame) -> None:
    assert stats.t.ppf(0.95, 2) == pytest.approx(T_95_2DF)
    # paper B3 acc by seed: 43.64, 44.72, 43.65; B1: 40.88, 43.82, 42.29
    table = with_refresh_runs(
        decided,
        acc={"r1": [40.0, 41.0, 42.0], "r2": [41.0, 43.0, 45.0], "r3": [40.88, 43.82, 42.29]},
        forgetting={"r1": [20.0, 20.0, 20.0], "r2": [19.0, 18.0, 20.5], "r3": [25.0, 25.0, 25.0]},
    )
    res, report = check(tmp_path, table, results=True)
    assert res.exit_code == 0, res.output  # the paper's claims hold; findings never gate
    # C6: r2 - r1 acc = +1, +2, +3 (mean 2, sd 1) supports; forgetting -1, -2, +0.5 does not decide
    assert claims(report)["C6"].startswith("INCONCLUSIVE (at this mean and spread about ")
    assert claims(report)["C6"].endswith("would decide it, for the claim)")
    assert claims(report)["C7"].startswith("INCONCLUSIVE")  # B3 - r2 acc = 2.64, 1.72, -1.35
    assert claims(report)["C8"] == (
        "INCONCLUSIVE (no number of seeds up to 1000 would decide it at this mean and spread)"
    )
    half = T_95_2DF / 3**0.5
    p = stats.ttest_1samp([1.0, 2.0, 3.0], 0, alternative="greater").pvalue
    assert (
        f"r2-r1 acc: 1993 +1.00, 2023 +2.00, 42 +3.00; mean +2.00 (claimed > 0); "
        f"90% t-interval [{2 - half:+.2f}, {2 + half:+.2f}] (2 df), one-sided p {p:.3f}: supports"
    ) in res.output
    sd = float(np.std([-1.0, -2.0, 0.5], ddof=1))
    lo, hi = -5 / 6 - T_95_2DF * sd / 3**0.5, -5 / 6 + T_95_2DF * sd / 3**0.5
    assert (
        "r2-r1 forgetting: 1993 -1.00, 2023 -2.00, 42 +0.50; mean -0.83 (claimed < 0); "
        f"90% t-interval [{lo:+.2f}, {hi:+.2f}] (2 df)"
    ) in res.output
    assert "B3-r2 acc: 1993 +2.64, 2023 +1.72, 42 -1.35; mean +1.00 (claimed > 0)" in res.output
    assert "findings beyond the paper: 3 INCONCLUSIVE (never gate)" in res.output
    assert not any(line.startswith(("C6", "C7", "C8")) and "CLAIM" in line for line in res.output.splitlines())
    assert [c["finding"] for c in report["claims"]] == [False] * 5 + [True] * 3


def test_r_runs_get_no_replicated_line_under_the_paper_profile(tmp_path: Path, paper: pd.DataFrame) -> None:
    table = with_refresh_runs(paper[paper["run_id"] == "B1"], acc={"r3": [1.0, 2.0, 3.0]}, forgetting={"r3": [1, 1, 1]})
    res, report = check(tmp_path, table)
    assert res.exit_code == 3, res.output  # INCOMPLETE: 11 paper run IDs missing
    assert {v for (r, _), v in verdicts(report).items() if r == "r3"} == {MetricKind.NO_PAPER_VALUE.value}
    assert MetricKind.NO_PAPER_VALUE.value == "NOT CHECKED (no paper value: beyond the paper)"
    assert not any(line.startswith("r3") and " REPLICATED" in line for line in res.output.splitlines())
    # a re-run of r-runs alone is checked (findings), not refused for lacking paper values
    res, report = check(tmp_path, table[table["run_id"] == "r3"])
    assert res.exit_code == 3 and claims(report)["C8"] == "NOT CHECKED (missing: B1)"


def test_claims_need_three_shared_seeds(tmp_path: Path, paper: pd.DataFrame) -> None:
    """One seed per run ID decides no claim (before, one seed made all five SUPPORTED); neither do two."""
    for seeds in ([42], [42, 1993]):
        table = with_refresh_runs(
            paper,
            acc={"r1": [40.0, 41.0, 42.0], "r2": [41.0, 43.0, 45.0]},
            forgetting={"r1": [20.0] * 3, "r2": [19.0] * 3},
        )
        res, report = check(tmp_path, table[table["seed"].isin(seeds)])
        assert res.exit_code == 3, res.output
        n = f"{len(seeds)} seed{'s' if len(seeds) > 1 else ''}"
        assert claims(report)["C6"] == f"NOT CHECKED ({n} shared; a claim needs 3)"
        assert all(claims(report)[c].startswith("NOT CHECKED (seeds ") for c in ("C1", "C2", "C3", "C4", "C5"))
        assert f"no interval ({n} shared; a claim needs 3)" in res.output
        assert report["verdict"]["kind"] == "INCOMPLETE"


def test_a_mean_lead_whose_interval_spans_zero_is_undecided_and_names_the_runs_to_add(
    tmp_path: Path, decided: pd.DataFrame
) -> None:
    """B3 - a4 ACC of -1, +2, +2 (mean +1, sd sqrt 3): the sign of the mean never makes C3 SUPPORTED. The first look
    leaves it undecided; next_step names a4 alone on the second look's seeds (B3 already has them, run for C1, so
    the second look has begun: INCOMPLETE, naming what it misses)."""
    b3 = decided.loc[(decided["run_id"] == "B3") & decided["seed"].isin([1993, 2023, 42]), "acc"].to_numpy()
    table = decided[~((decided["run_id"] == "a4") & decided["seed"].isin([1, 2]))].copy()
    table.loc[table["run_id"] == "a4", "acc"] = b3 - np.array([-1.0, 2.0, 2.0])
    res, report = check(tmp_path, table)
    assert claims(report)["C3"] == (
        "UNDECIDED (look 1 of 5, 3 seeds, one-sided alpha 0.0098: the next look adds "
        "seeds 1, 2 for B3, a4; its undecided comparisons point for the claim)"
    )
    assert report["next_step"] == {"run_ids": ["a4"], "seeds": [1, 2]} and res.exit_code == 3
    assert decided_as(report) == ("INCOMPLETE", [seeds_missing("a4", 1, 2)])


@pytest.mark.slow
def test_a_smoke_check_says_nothing_about_the_paper(tmp_path: Path) -> None:
    """The smoke profile's claims are NOT EVIDENCE, with their statistics for information; no line of it reads
    as a finding about the paper, and the verdict is a pipeline check."""
    res = CliRunner().invoke(
        main,
        [
            "check",
            "--per-seed",
            str(EXPECTED / "smoke" / "per_seed.csv"),
            "--profile",
            "smoke",
            "--json-out",
            str(tmp_path / "r.json"),
        ],
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert all(v.startswith("NOT EVIDENCE (profile smoke") for v in claims(report).values())
    claim_lines = [line for line in res.output.splitlines() if line[:2] in {f"C{i}" for i in range(1, 9)}]
    assert len(claim_lines) == 8
    assert not any(w in line for line in claim_lines for w in ("SUPPORTED", "INCONCLUSIVE", "CLAIM"))
    assert not any(line.rstrip().endswith(("supports", "contradicts", "undecided")) for line in res.output.splitlines())
    assert (
        report["verdict"]["line"] == "PIPELINE CHECK PASSED (profile smoke: not evidence about the paper)"
    )  # the words
    assert decided_as(report) == ("PIPELINE_PASSED", [])


def smoke_check(tmp_path: Path, table: pd.DataFrame, *extra: str) -> tuple[Result, dict]:
    """`uh check --per-seed` on `table` against the shipped smoke set."""
    return check(tmp_path, table, "--profile", "smoke", "--expected", str(EXPECTED / "smoke"), *extra)


@pytest.mark.slow
def test_a_part_of_the_smoke_set_is_incomplete_naming_every_run_id_missing(tmp_path: Path) -> None:
    """Issue 51.4: B0 and B3 of the smoke set alone once read PIPELINE CHECK PASSED (exit 0), the ten other run IDs
    never checked and nothing saying so. They are INCOMPLETE (exit 3), naming the ten, whom next_step runs on the
    set's seeds; a seed missing is named too. The twelve run IDs `uh run all` runs pass: the set's r1-r3, run by
    `uh run refresh`, are judged where present, never asked for."""
    smoke = read_per_seed_csv(EXPECTED / "smoke" / "per_seed.csv")
    res, report = smoke_check(tmp_path, smoke[smoke["run_id"].isin(["B0", "B3"])])
    assert res.exit_code == 3, res.output
    assert decided_as(report) == (
        "INCOMPLETE",
        [seeds_missing(r, 1993, 2023, 42) for r in PAPER_RUNS if r not in ("B0", "B3")],
    )
    assert report["next_step"] == {
        "run_ids": ["B1", "B2", "a1", "a2", "a3", "a4", "s1", "s2", "s3", "s4"],
        "seeds": [1993, 2023, 42],
    }
    twelve = smoke[smoke["run_id"].isin(PAPER_RUNS)]
    res, report = smoke_check(tmp_path, twelve)
    assert res.exit_code == 0 and decided_as(report) == ("PIPELINE_PASSED", [])
    res, report = smoke_check(tmp_path, twelve[(twelve["run_id"] != "s4") | (twelve["seed"] != 42)])
    assert res.exit_code == 3 and decided_as(report) == ("INCOMPLETE", [seeds_missing("s4", 42)])
    assert report["next_step"] == {"run_ids": ["s4"], "seeds": [42]}


def test_a_subset_named_with_run_ids_passes_as_that_subset(tmp_path: Path) -> None:
    """Issue 51.4: `uh check --run-ids B0,B3` asks for those run IDs alone, and the verdict says which subset passed;
    the set's other run IDs in the re-run are left out, never judged. A run ID of the subset missing is INCOMPLETE."""
    smoke = read_per_seed_csv(EXPECTED / "smoke" / "per_seed.csv")
    res, report = smoke_check(
        tmp_path, smoke.assign(acc=smoke["acc"] + 20.0 * (smoke["run_id"] == "a1")), "--run-ids", "B3, B0"
    )
    assert res.exit_code == 0, res.output
    assert decided_as(report) == ("PIPELINE_PASSED", []) and "subset B0, B3 of 12 run IDs" in report["verdict"]["line"]
    assert {m["run_id"] for m in report["metrics"]} == {"B0", "B3"} and report["run_ids"] == ["B0", "B3"]
    res, report = smoke_check(tmp_path, smoke[smoke["run_id"].isin(["B0", "B3"])], "--run-ids", "B0,B3")
    assert res.exit_code == 0 and report["verdict"]["kind"] == "PIPELINE_PASSED"
    res, report = smoke_check(tmp_path, smoke[smoke["run_id"] == "B3"], "--run-ids", "B0,B3")
    assert res.exit_code == 3 and decided_as(report) == ("INCOMPLETE", [seeds_missing("B0", 1993, 2023, 42)])


@pytest.mark.slow
def test_a_subset_of_the_paper_set_never_gets_the_badge(
    tmp_path: Path, paper: pd.DataFrame, decided: pd.DataFrame
) -> None:
    """Issue 51.4: on the paper profile a subset named with --run-ids, every rule on it passed and every claim within
    it decided (C2 on B3 and a2), is EXPECTED SET MATCHED (exit 6), as one claim alone is: never the badge, even
    naming all twelve run IDs of a re-run that earns it. Claims beyond the subset are not followed."""
    res, report = check(tmp_path, paper[paper["run_id"].isin(["B3", "a2"])], "--run-ids", "B3,a2")
    assert res.exit_code == 6, res.output
    assert decided_as(report) == ("SET_MATCHED", [{"state": "SUBSET", "run_ids": ["B3", "a2"]}])
    assert claims(report)["C2"].startswith("SUPPORTED (look 1 of 5") and claims(report)["C1"].startswith("NOT CHECKED")
    res, report = check(tmp_path, decided, results=True)
    assert res.exit_code == 0 and decided_as(report) == ("RESULTS_REPLICATED", []), res.output
    res, report = check(tmp_path, decided, "--run-ids", ",".join(PAPER_RUNS), results=True)
    assert res.exit_code == 6 and decided_as(report) == (
        "SET_MATCHED",
        [{"state": "SUBSET", "run_ids": list(PAPER_RUNS)}],
    )


def test_a_final_miss_fails_while_run_ids_are_missing(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Issue 51.4: INCOMPLETE never hides a failure: B0's ACC beyond its tolerance on its final seeds fails (exit 1)
    though ten run IDs are missing, on the smoke profile and on the paper's (B0 is in no claim: its miss is final at
    look 1)."""
    smoke = read_per_seed_csv(EXPECTED / "smoke" / "per_seed.csv")
    part = smoke[smoke["run_id"].isin(["B0", "B3"])]
    res, report = smoke_check(tmp_path, part.assign(acc=part["acc"] + 10.0 * (part["run_id"] == "B0")))
    assert res.exit_code == 1 and decided_as(report) == ("PIPELINE_FAILED", [missed("B0")])
    res, report = check(tmp_path, shifted(paper, ["B0"], 5.0).query("run_id in ['B0', 'B3']"))
    assert res.exit_code == 1 and decided_as(report) == ("NOT_REPLICATED", [missed("B0")]), res.output


@pytest.mark.parametrize(
    ("args", "error"),
    [
        (("--run-ids", "B0,B9"), "Error: --run-ids: unknown run ID 'B9'; known: B0, B1"),
        (("--run-ids", "B0,r1"), "Error: --run-ids: r1 not in the expected set "),
        (("--run-ids", " , "), "Error: --run-ids ' , ' names no run ID; give them comma-separated"),
        (("--run-ids", "B3,a2", "--claim", "C2"), "Error: give --run-ids or --claim, not both"),
    ],
)
def test_a_subset_it_cannot_check_is_refused_in_one_line(
    tmp_path: Path, paper: pd.DataFrame, args: tuple[str, ...], error: str
) -> None:
    """An unknown run ID, one the expected set does not hold (the paper's has no r1), none at all, or --run-ids with
    --claim: exit 2, one line that says what to do, and no report."""
    res, report = check(tmp_path, paper, *args)
    assert res.exit_code == 2 and res.output.startswith(error) and res.output.count("\n") == 1, res.output
    assert report == {}


def test_a_folder_of_variants_alone_is_reported_and_passes(tmp_path: Path, paper: pd.DataFrame) -> None:
    """A results dir holding only B3+rho=5: NOT CHECKED against its missing base, as docs/extending.md says; exit 3
    (INCOMPLETE: nothing of the paper's was checked)."""
    rows = paper[paper["run_id"] == "B3"].assign(run_id="B3+rho=5")
    res, report = check(tmp_path, rows)
    assert res.exit_code == 3, res.output
    assert report["metrics"] == [] and {c["verdict"] for c in report["variants"]} == {"NOT CHECKED (missing: B3)"}
    assert "B3+rho=5 against B3 (rho=5): NOT CHECKED (missing: B3)" in res.output


def test_variants_are_findings_against_their_base_computed_by_hand(tmp_path: Path, paper: pd.DataFrame) -> None:
    """B3+rho=5 (acc B3 + 1, 2, 3 by seed) and a1+lr=0.05 against their bases; a variant without its base is NOT
    CHECKED. Measured, never judged: the exit code is the paper's table's alone."""
    b3 = paper[paper["run_id"] == "B3"].set_index("seed")
    rows = [
        {
            "run_id": "B3+rho=5",
            "seed": s,
            "acc": b3.loc[s, "acc"] + d,
            "forgetting": b3.loc[s, "forgetting"] + f,
            "bwt": 0.0,
        }
        for s, d, f in ((1993, 1.0, -1.0), (2023, 2.0, -2.0), (42, 3.0, 0.5))
    ]
    rows += [
        {"run_id": "a1+lr=0.05", "seed": 42, "acc": 40.19, "forgetting": 30.64, "bwt": 0.0},
        {"run_id": "B1+M=1000", "seed": 42, "acc": 40.0, "forgetting": 30.0, "bwt": 0.0},
    ]
    table = pd.concat([paper[paper["run_id"] != "B1"], pd.DataFrame(rows)], ignore_index=True)
    res, report = check(tmp_path, table)
    assert res.exit_code == 3, res.output  # B1 missing: INCOMPLETE; the variants' deltas never gate
    half = T_975_2DF / 3**0.5
    sd = float(np.std([-1.0, -2.0, 0.5], ddof=1))
    lo, hi = -5 / 6 - T_975_2DF * sd / 3**0.5, -5 / 6 + T_975_2DF * sd / 3**0.5
    assert "B3+rho=5 against B3 (rho=5): MEASURED (no paper value)" in res.output
    assert (
        f"B3+rho=5 - B3 acc: 1993 +1.00, 2023 +2.00, 42 +3.00; mean +2.00; "
        f"95% t-interval [{2 - half:+.2f}, {2 + half:+.2f}] (2 df)"
    ) in res.output
    assert (
        f"B3+rho=5 - B3 forgetting: 1993 -1.00, 2023 -2.00, 42 +0.50; mean -0.83; "
        f"95% t-interval [{lo:+.2f}, {hi:+.2f}] (2 df)"
    ) in res.output
    # a1 seed 42: acc 43.19, forgetting 28.64; one seed: no interval
    assert "a1+lr=0.05 - a1 acc: 42 -3.00; mean -3.00; 95% t-interval undefined (fewer than 2 seeds)" in res.output
    verdicts_of = {c["claim_id"]: c["verdict"] for c in report["variants"]}
    assert verdicts_of == {
        "B3+rho=5": "MEASURED (no paper value)",
        "a1+lr=0.05": "MEASURED (no paper value)",
        "B1+M=1000": "NOT CHECKED (missing: B1)",
    }
    assert "variants: 2 measured, 1 not checked (never gate)\n" in res.output
    assert not any(m["run_id"] not in set(paper["run_id"]) for m in report["metrics"])  # no verdict without a value


def test_a_variant_is_measured_against_the_run_it_differs_from_in_the_fewest_settings(
    tmp_path: Path, paper: pd.DataFrame
) -> None:
    """a2 with a reservoir memory (which B3 would call B3+memory=reservoir+readout=head) against a2, one setting away,
    not against B3 (catalogue.base_of)."""
    a2 = paper[paper["run_id"] == "a2"]
    rows = a2.assign(run_id="a2+memory=reservoir", acc=a2["acc"] - 1.0)
    res, _ = check(tmp_path, pd.concat([paper, rows], ignore_index=True))
    assert "a2+memory=reservoir against a2 (memory=reservoir): MEASURED (no paper value)" in res.output, res.output
    assert "a2+memory=reservoir - a2 acc: 1993 -1.00, 2023 -1.00, 42 -1.00; mean -1.00" in res.output


def test_the_metric_table_keeps_its_columns_and_prints_no_negative_zero() -> None:
    """A verdict longer than the column (NOT CHECKED with 2 seeds) widens the column for every row, so each row's
    seeds sit under the header's; a difference that rounds to zero prints +0.00 (expected values read back from
    a CSV at 4 decimals gave -0.00)."""
    rows = [
        MetricCheck("B3", "acc", (11.9061, 11.9061, 11.9061), (11.90607, 11.9061, 11.9061), 7.5),
        MetricCheck("B3", "forgetting", (11.91, 11.92, 11.90), (11.9, 11.95), 14.0),
    ]
    header, first, second = format_metrics(rows)
    assert "NOT CHECKED (2 of the expected seeds" in second
    column = header.index("seeds") + 1  # " 3/3 " under "seeds"
    assert first[column : column + 3] == "3/3" and second[column : column + 3] == "3/2", (header, first, second)
    assert first.split()[4] == "+0.00"  # the diff column


# --- inputs an adversarial review tried --------------------------------------------------------------------


def test_the_sets_csv_is_hashed_and_parsed_from_the_same_bytes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A writer that swaps the CSV between two reads (the edited bytes parsed, the shipped bytes hashed) once won
    the badge for B3 ACC +5 with the shipped hash. Read once: whatever is parsed is what is hashed."""
    from uniform_herding.verdict import expected as expected_module

    directory = tmp_path / "expected_results"
    directory.mkdir()
    for name in ("tolerances.toml", "paper_per_seed.csv"):
        shutil.copy(EXPECTED / name, directory / name)
    csv = directory / "paper_per_seed.csv"
    shipped = csv.read_bytes()
    edited = shipped.replace(b"B3,1993,43.64", b"B3,1993,48.64")
    original = expected_module.read_per_seed_csv

    def racing(path: Path, data: bytes | None = None) -> pd.DataFrame:
        csv.write_bytes(edited)  # the writer strikes while the set is parsed...
        try:
            return original(path, data) if data is not None else original(path)
        finally:
            csv.write_bytes(shipped)  # ...and puts the shipped bytes back before they are hashed

    monkeypatch.setattr(expected_module, "read_per_seed_csv", racing)
    expected = load_expected(directory)
    b3 = expected.per_seed.loc[(expected.per_seed["run_id"] == "B3") & (expected.per_seed["seed"] == 1993), "acc"]
    assert not (expected.shipped and float(b3.iloc[0]) != 43.64)


def test_every_seed_the_procedure_asked_for_counts_and_no_other(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Seeds 1-17 of every run ID 30 pp below the paper, the paired deltas kept. C1's B3 - B1 comparisons and C3's
    wait after look 1; C3 is decided at look 2 and C1 at look 3. So B1 and B3 count the 8 seeds of look 3, a4 the
    5 of look 2 and B2 (its comparisons decided at look 1) the paper's 3, and those misses (diluted by nothing) are
    NOT REPLICATED; a2, whose claim look 1 decided, counts the paper's 3
    seeds, and its 17 others are shown, never counted (they would have failed it too: counting them would be
    shopping in the other direction)."""
    low = pd.concat(
        [paper[paper["seed"] == (1993, 2023, 42)[s % 3]].assign(seed=s) for s in range(1, 18)], ignore_index=True
    )
    low = low.assign(acc=(low["acc"] - 30).clip(lower=0))  # B0 has 7.9 to lose
    res, report = check(tmp_path, pd.concat([paper, low], ignore_index=True))
    assert res.exit_code == 1, res.output
    assert decided_as(report) == ("NOT_REPLICATED", [missed("B1"), missed("B3"), missed("a4")])
    metric = {(m["run_id"], m["metric"]): m for m in report["metrics"]}
    assert metric["B3", "acc"]["n_observed"] == 8 and metric["B3", "acc"]["uncounted_seeds"] == list(range(6, 18))
    assert metric["a4", "acc"]["n_observed"] == 5 and metric["B2", "acc"]["n_observed"] == 3
    assert metric["a2", "acc"]["n_observed"] == 3 and metric["a2", "acc"]["verdict"] == "REPLICATED"
    assert metric["a2", "acc"]["uncounted_seeds"] == list(range(1, 18))
    assert "not counted (not asked for by the procedure): B0 seed 1, B0 seed 2" in res.output


def test_a_look_missing_one_run_is_incomplete_and_names_it(tmp_path: Path, decided: pd.DataFrame) -> None:
    """B3 on seed 1 of the second look but not 2 (and on the third look's 3, 4, 5): the second look is interrupted,
    so no third look was asked for yet. B3 counts the four seeds asked of it that ran; 3, 4, 5 are not counted
    (none is shopped: only asked seeds count), nothing is final, and next_step names B3 seed 2."""
    table = decided[~((decided["run_id"] == "B3") & (decided["seed"] == 2))]
    res, report = check(tmp_path, table)
    b3 = next(m for m in report["metrics"] if (m["run_id"], m["metric"]) == ("B3", "acc"))
    assert b3["n_observed"] == 4 and b3["uncounted_seeds"] == [3, 4, 5] and not b3["final"]
    assert res.exit_code == 3 and report["next_step"] == {"run_ids": ["B3"], "seeds": [2]}
    assert decided_as(report) == ("INCOMPLETE", [seeds_missing("B3", 2)])
    assert report["verdict"]["line"].endswith("(their seeds 3, 4, 5 are shown, never counted for the badge))")


def test_a_difference_is_printed_at_the_precision_that_shows_its_verdict(tmp_path: Path, paper: pd.DataFrame) -> None:
    """a3 ACC 0.004 pp past its tolerance: +x.xx beside x.xx would read as a pass; three decimals show the miss."""
    tol = load_expected(EXPECTED).tolerance_for("a3", "acc")
    missed = paper.assign(acc=np.where(paper["run_id"] == "a3", paper["acc"] + round(tol, 2) + 0.004, paper["acc"]))
    res, _ = check(tmp_path, missed)
    row = next(line for line in res.output.splitlines() if line.startswith("a3  acc"))
    difference, tolerance = row.split()[4:6]
    assert "NOT REPLICATED" in row and float(difference) > float(tolerance), row


def test_a_set_whose_rows_are_sorted_by_seed_is_the_same_set(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Row order carries nothing: the paper's rows sorted by seed load, with the procedure's seed order."""
    directory = copy_expected_set(tmp_path / "sorted", paper.sort_values(["seed", "run_id"]))
    expected = load_expected(directory)
    assert expected.seeds == (1993, 2023, 42) and expected.procedure is not None
    res, report = check(tmp_path, paper, "--expected", str(directory))
    assert res.exit_code == 4 and report["next_step"] == {"run_ids": ["B1", "B3", "a4"], "seeds": [1, 2]}


def test_a_check_of_one_claims_runs_says_which_runs_come_next(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Only B1, B2, B3 run: INCOMPLETE, and next_step names the other paper runs on the set's seeds, so
    ./reproduce.sh next has somewhere to go."""
    res, report = check(tmp_path, paper[paper["run_id"].isin(["B1", "B2", "B3"])])
    assert res.exit_code == 3 and report["verdict"]["kind"] == "INCOMPLETE"
    assert report["next_step"] == {
        "run_ids": [r for r in PAPER_RUNS if r not in ("B1", "B2", "B3")],
        "seeds": [1993, 2023, 42],
    }


def test_one_claim_alone_gets_its_own_next_look_and_never_the_badge(tmp_path: Path, paper: pd.DataFrame) -> None:
    """`uh check --claim C1` on the paper's B1, B2, B3 rows: C1's verdict (UNDECIDED at look 1) and its own next look,
    B1 and B3 on seeds 1, 2 (B3 - B2 is decided), never the nine other run IDs; with its looks run (B3 - B1 ACC
    waits for the third), C1 is SUPPORTED and the verdict EXPECTED SET MATCHED (exit 6): one claim never earns the
    badge."""
    c1 = paper[paper["run_id"].isin(["B1", "B2", "B3"])]
    res, report = check(tmp_path, c1, "--claim", "C1")
    assert res.exit_code == 4 and report["next_step"] == {"run_ids": ["B1", "B3"], "seeds": [1, 2]}
    assert report["verdict"]["line"].endswith("then check again (uh check --claim C1))") and list(claims(report)) == [
        "C1"
    ]
    looks = next_look(next_look(c1, ["B1", "B3"], [1, 2], lead=0.0), ["B1", "B3"], [3, 4, 5], lead=0.0)
    res, report = check(tmp_path, looks, "--claim", "C1")
    assert res.exit_code == 6 and claims(report)["C1"].startswith("SUPPORTED (look 3 of 5"), res.output
    assert decided_as(report) == ("SET_MATCHED", [{"state": "CLAIM_ALONE", "claim_id": "C1"}])


def test_an_inconclusive_claim_says_where_its_interval_lies_against_the_papers_effect(
    tmp_path: Path, paper: pd.DataFrame
) -> None:
    """All 20 seeds, B3 - B1 ACC centred on zero: C1 is INCONCLUSIVE after the last look; its 93% interval excludes
    the paper's +1.67, so the verdict says the effect is below the paper's, not that nothing contradicts it."""
    seeds = list(load_expected(EXPECTED).procedure.seeds[3:])
    table = next_look(paper, ["B1", "B3", "a4"], seeds, lead=0.0)
    wobble = np.resize([1.0, -1.0, 0.5, -0.5], len(seeds))
    new = table["seed"].isin(seeds) & (table["run_id"] == "B1")
    table.loc[new, "acc"] = table.loc[table["seed"].isin(seeds) & (table["run_id"] == "B3"), "acc"].to_numpy() + wobble
    res, report = check(tmp_path, table)
    assert claims(report)["C1"].startswith("INCONCLUSIVE (after the last look, look 5 of 5, 20 seeds"), res.output
    assert "93.22% interval of B3-B1 acc excludes the paper's effect" in claims(report)["C1"]
    assert res.exit_code == 5 and decided_as(report) == ("INCONCLUSIVE", [claim_is("C1", "INCONCLUSIVE")])
    assert "below the paper's on C1 B3-B1 acc" in report["verdict"]["line"]
    assert "the paper's effect +1.67 is outside it" in res.output


def test_a_metric_miss_waits_for_the_seeds_the_next_look_adds(tmp_path: Path, paper: pd.DataFrame) -> None:
    """B1, B2, B3 and a4 each 5 pp higher in ACC on the paper's seeds: C1's and C3's deltas are the paper's, so
    both wait for look 2, which adds seeds to B1, B3 and a4 (C5, which reads B3 too, is decided at look 1). B3's ACC
    is outside its tolerance (4.25 pp at 3 seeds), and the next look decides it: UNDECIDED, saying so. With a2 5
    pp higher too (C2 is decided at look 1, so a2's seeds are final) the miss is NOT REPLICATED at once, and the
    verdict names the miss that waits beside it; and once the registered seeds are run with B3 still 5 pp
    higher, B3's miss is final."""
    waiting = ["B1", "B3", "a4"]  # each undecided comparison's runs: B3 - B2's and C5's are decided
    higher = paper.assign(acc=paper["acc"] + 5.0 * paper["run_id"].isin(["B1", "B2", "B3", "a4"]))
    res, report = check(tmp_path, higher)
    assert res.exit_code == 4, res.output
    assert verdicts(report)[("B3", "acc")] == "NOT REPLICATED"
    assert report["verdict"]["kind"] == "UNDECIDED" and missed("B3", final=False) in report["verdict"]["causes"]
    assert (
        "B3 acc outside its tolerance on 3 seeds, decided on the next look's seeds (1, 2)" in report["verdict"]["line"]
    )
    assert "NOT REPLICATED (not final: waits)" in res.output
    assert report["next_step"] == {"run_ids": waiting, "seeds": [1, 2]}
    res, report = check(tmp_path, higher.assign(acc=higher["acc"] + 5.0 * (higher["run_id"] == "a2")))
    assert res.exit_code == 1 and decided_as(report) == ("NOT_REPLICATED", [missed("a2")]), res.output
    assert (
        "B3 acc outside its tolerance on 3 seeds" in report["verdict"]["line"]
    )  # the miss that waits, named beside it
    later = next_look(higher, waiting, list(load_expected(EXPECTED).procedure.seeds[3:]), lead=0.0)
    res, report = check(tmp_path, later)
    assert (
        res.exit_code == 1
        and report["verdict"]["kind"] == "NOT_REPLICATED"
        and missed("B3") in report["verdict"]["causes"]
    ), res.output


# --- the procedure's state: interruptions and seeds no look asked for ---------------------------------------------


def shifted(paper: pd.DataFrame, runs: list[str], pp: float) -> pd.DataFrame:
    return paper.assign(acc=paper["acc"] + pp * paper["run_id"].isin(runs))


@pytest.mark.slow
def test_a_second_look_stopped_before_its_last_run_is_incomplete_not_a_final_miss(
    tmp_path: Path, paper: pd.DataFrame
) -> None:
    """B1, B2, B3 and a4 at +5 pp ACC: look 2 asks seeds 1, 2 of the runs of every comparison left undecided
    (C5's read B3). Stopped before a4's seed 2, a4's and B3's misses still wait (C3 may yet ask both for more):
    INCOMPLETE (exit 3), naming a4 seed 2. It once read NOT REPLICATED with an empty next_step, as a miss waited
    only while its run ID was in the earliest pending look's next_step. The completed look decides C3, so a4's
    miss on the five seeds it ends with is final, while B3's waits for C1's third look; after it, B3's is final."""
    higher = shifted(paper, ["B1", "B2", "B3", "a4"], 5.0)
    look2 = next_look(higher, ["B1", "B3", "a4", "s1", "s2", "s3"], [1, 2], lead=0.0)
    res, report = check(tmp_path, look2[~((look2["run_id"] == "a4") & (look2["seed"] == 2))])
    assert res.exit_code == 3, res.output
    assert report["verdict"]["kind"] == "INCOMPLETE" and report["verdict"]["causes"][0] == seeds_missing("a4", 2)
    assert report["next_step"] == {"run_ids": ["a4"], "seeds": [2]}
    res, report = check(tmp_path, look2)
    assert res.exit_code == 1 and decided_as(report) == ("NOT_REPLICATED", [missed("a4")])
    assert report["verdict"]["line"].endswith(
        "B3 acc outside its tolerance on 5 seeds, decided on the next look's seeds (3, 4, 5))"
    )
    res, report = check(tmp_path, next_look(look2, ["B1", "B3"], [3, 4, 5], lead=0.0))
    assert res.exit_code == 1 and decided_as(report) == ("NOT_REPLICATED", [missed("B3"), missed("a4")])


def test_a_run_id_without_its_paper_runs_leaves_the_verdict_incomplete(tmp_path: Path, paper: pd.DataFrame) -> None:
    """B1, B2, B3 and a4 at +5 pp ACC, and s4's three runs missing (a run that failed during `all`): C5 cannot be
    checked, so B3's miss waits for it; INCOMPLETE, naming s4, not NOT REPLICATED."""
    res, report = check(tmp_path, shifted(paper, ["B1", "B2", "B3", "a4"], 5.0).query("run_id != 's4'"))
    assert res.exit_code == 3, res.output
    waits = [missed("B3", final=False), missed("a4", final=False)]
    assert decided_as(report) == ("INCOMPLETE", [seeds_missing("s4", 1993, 2023, 42), *waits])
    assert report["next_step"] == {"run_ids": ["s4"], "seeds": [1993, 2023, 42]}


def test_a_miss_is_final_once_no_comparison_that_reads_it_can_ask_for_more(tmp_path: Path, paper: pd.DataFrame) -> None:
    """Issue 53.2: B1's look-1 runs missing and B2's ACC 9 pp low (its tolerance 7.55 pp): both comparisons that
    read B2 (C1's B3 - B2 ACC and forgetting) have their seeds and are decided at look 1, so B2's miss is final:
    NOT REPLICATED (exit 1), naming it, not INCOMPLETE; C1 itself waits for B1. B2 at B3's ACC + 0.5 contradicts
    C1 at look 1, so C1 is NOT SUPPORTED though B1 is missing."""
    no_b1 = paper[paper["run_id"] != "B1"]
    res, report = check(tmp_path, no_b1.assign(acc=no_b1["acc"] - 9.0 * (no_b1["run_id"] == "B2")))
    assert res.exit_code == 1 and decided_as(report) == ("NOT_REPLICATED", [missed("B2")]), res.output
    assert claims(report)["C1"].startswith(
        "UNDECIDED (look 1 of 5, 3 seeds, one-sided alpha 0.0098: B3-B1 acc waits "
        "for its runs (seeds 1993, 2023, 42 missing for B1)"
    )
    res, report = check(tmp_path, set_from(no_b1, "B2", "B3", "acc", +0.5))
    assert res.exit_code == 1 and decided_as(report) == (
        "NOT_REPLICATED",
        [missed("B2"), claim_is("C1", "NOT_SUPPORTED")],
    )
    assert claims(report)["C1"].startswith("NOT SUPPORTED (look 1 of 5"), res.output


@pytest.mark.slow
@pytest.mark.parametrize("run_id", ["a2", "a3"])
@pytest.mark.parametrize("source", ["--per-seed", "--results-dir"])
def test_seeds_no_look_asked_for_never_turn_a_miss_into_the_badge(
    tmp_path: Path, decided: pd.DataFrame, run_id: str, source: str
) -> None:
    """a2's (C2 is decided at look 1) or a3's (in no claim) ACC 6 pp low on the paper's seeds: NOT REPLICATED. Seeds
    1 and 2 of it at the paper's mean, which no look asked for, are listed as not counted and change nothing (they
    once made it RESULTS REPLICATED: the registered seeds in order, as far as run, allowed shopping for seeds)."""
    low = decided.assign(acc=decided["acc"] - 6.0 * (decided["run_id"] == run_id))
    mean = decided[decided["run_id"] == run_id][["acc", "forgetting", "bwt"]].mean()
    extra = pd.DataFrame([{"run_id": run_id, "seed": s, **mean} for s in (1, 2)])
    for table, listed in ((low, False), (pd.concat([low, extra], ignore_index=True), True)):
        if source == "--per-seed":
            res, report = check(tmp_path, table)
        else:
            results = tmp_path / f"results-{listed}"
            write_results(results, table, "paper")
            out = tmp_path / "report.json"
            res = CliRunner().invoke(main, ["check", "--results-dir", str(results), "--json-out", str(out)])
            report = json.loads(out.read_text())
        assert res.exit_code == 1 and decided_as(report) == ("NOT_REPLICATED", [missed(run_id)]), res.output
        uncounted = f"not counted (not asked for by the procedure): {run_id} seed 1, {run_id} seed 2"
        assert (uncounted in res.output) is listed


def test_a_not_supported_claim_names_the_miss_that_waits_beside_it(tmp_path: Path, paper: pd.DataFrame) -> None:
    """C2 contradicted at look 1 (a2 at B3's ACC + 0.5) while B3's ACC, 5 pp high, waits for C1's and C3's next
    look: NOT REPLICATED names both, the claim and the waiting miss."""
    table = set_from(shifted(paper, ["B3", "B1", "B2", "a4"], 5.0), "a2", "B3", "acc", +0.5)
    res, report = check(tmp_path, table)
    assert res.exit_code == 1, res.output
    assert decided_as(report) == ("NOT_REPLICATED", [missed("a2"), claim_is("C2", "NOT_SUPPORTED")])
    assert (
        "B3 acc outside its tolerance on 3 seeds" in report["verdict"]["line"]
    )  # the miss that waits, named beside them


@pytest.mark.slow
def test_a_set_of_another_profile_rehearses_its_registered_procedure(tmp_path: Path) -> None:
    """Issue 48: a smoke set that registers a procedure and gates on claims follows its looks as a pipeline check, so
    a cluster's chain can be tested end to end off the paper: C2 (B3 > a2) undecided at look 1 asks B3 and a2 for
    seed 1 (UNDECIDED, exit 4), the claim itself NOT EVIDENCE; one of those runs missing is INCOMPLETE; with both, the
    looks are done and the pipeline check passes. The same set gating on nothing follows no look."""
    directory = smoke_rehearsal(tmp_path / "set")
    smoke = read_per_seed_csv(directory / "per_seed.csv")
    res, report = check(tmp_path, smoke, "--profile", "smoke", "--expected", str(directory))
    assert res.exit_code == 4 and report["next_step"] == {"run_ids": ["B3", "a2"], "seeds": [1]}, res.output
    assert decided_as(report) == ("UNDECIDED", [claim_is("C2", "UNDECIDED")])
    assert report["verdict"]["line"].startswith("UNDECIDED (profile smoke, rehearsing the registered procedure")
    assert claims(report)["C2"].startswith(
        "NOT EVIDENCE (profile smoke: the paper's claims are about its own protocol; UNDECIDED (look 1 of 2"
    )
    look2 = pd.concat([smoke, smoke[smoke["seed"] == 1993].assign(seed=1)], ignore_index=True)
    res, report = check(
        tmp_path,
        look2[~((look2["run_id"] == "a2") & (look2["seed"] == 1))],
        "--profile",
        "smoke",
        "--expected",
        str(directory),
    )
    assert res.exit_code == 3 and report["next_step"] == {"run_ids": ["a2"], "seeds": [1]}, res.output
    res, report = check(tmp_path, look2, "--profile", "smoke", "--expected", str(directory))
    assert res.exit_code == 0 and decided_as(report) == ("PIPELINE_PASSED", []), res.output
    toml = directory / "tolerances.toml"
    toml.write_text(toml.read_text().replace("gate_exit_code = true", "gate_exit_code = false"))
    res, report = check(tmp_path, smoke, "--profile", "smoke", "--expected", str(directory))
    assert res.exit_code == 0 and report["next_step"] == {}, res.output


@pytest.mark.slow
def test_uh_check_fits_columns_dropping_tost_then_wrapping_welch_and_long_lines(monkeypatch, tmp_path: Path) -> None:
    """Issue 52: on the paper's table uh check printed lines of up to 235 characters whatever COLUMNS said. Now they
    fit COLUMNS (120 where unset, at least 100): the TOST text goes first, then the Welch interval moves under its row,
    long lines wrap with an indent; no row, verdict or word of the summary is lost. --wide prints everything unfitted,
    as before the change (the lines a width too great to fit anything gives)."""
    args = [
        "check",
        "--per-seed",
        str(EXPECTED / "paper_per_seed.csv"),
        "--expected",
        str(EXPECTED),
        "--json-out",
        str(tmp_path / "report.json"),
    ]

    def output(columns: str | None, *extra: str) -> list[str]:
        if columns is None:
            monkeypatch.delenv("COLUMNS", raising=False)
        else:
            monkeypatch.setenv("COLUMNS", columns)
        res = CliRunner().invoke(main, [*args, *extra])
        assert res.exit_code == 4, res.output
        return res.output.splitlines()

    unfitted = output("1000")
    assert max(map(len, unfitted)) > 200 and output("100", "--wide") == unfitted
    for columns, width in ((None, 120), ("120", 120), ("100", 100), ("40", 100)):  # never under 100
        lines = output(columns)
        assert max(map(len, lines)) <= width, "\n".join(line for line in lines if len(line) > width)
        header = next(i for i, line in enumerate(lines) if line.startswith("run metric"))
        assert " ".join(line.strip() for line in lines[:header]) == unfitted[0]  # a path wraps whole, never cut
        rows = [i for i, line in enumerate(lines) if re.match(r"[Bas]\d  ", line)]
        assert [lines[i].split()[:8] for i in rows] == [r.split()[:8] for r in unfitted if re.match(r"[Bas]\d  ", r)]
        assert not any("TOST p" in line for line in lines)
        left_out = f"(equivalence at the tolerance (TOST, information) left out to fit {width} columns;"
        assert left_out in " ".join(lines)
        b0_acc = lines[rows[0]] if width == 120 else lines[rows[0] + 1]  # beside its row, else on the line under it
        assert b0_acc.endswith(" [-0.30, +0.30]") and ("[" in lines[rows[0]]) == (width == 120)
        verdict = next(i for i, line in enumerate(lines) if line.startswith("verdict: "))
        joined = " ".join([lines[verdict], *(line.strip() for line in lines[verdict + 1 :] if line.startswith("    "))])
        assert joined == next(line for line in unfitted if line.startswith("verdict: "))
