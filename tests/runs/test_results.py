"""results.py: atomic writes never leave partial files; malformed results fail with a clear error."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from pathlib import Path

import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import MALFORMED_RESULTS, PROFILE_A_LIST, matrix_with
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from uniform_herding.catalogue import PROFILES, RUNS, resolve
from uniform_herding.cli import main
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.method.metrics import PAPER, REPORTED, Metric
from uniform_herding.runs.results import (
    PER_SEED_COLUMNS,
    RERUN,
    ResultError,
    is_finished,
    load_result,
    load_results,
    per_seed_table,
    read_per_seed_csv,
    results_profile,
    write_bytes_atomic,
    write_json_atomic,
    write_per_seed_csv,
    write_text_atomic,
)

PAPER_PER_SEED = Path(__file__).resolve().parents[2] / "expected_results" / "paper_per_seed.csv"


def result(run_id: str = "B3", seed: int = 1993, profile: str = "smoke", **changes: object) -> dict:
    """A minimal valid result.json body (the keys results.py checks): an R of the profile's n_tasks giving ACC 50,
    F 10 and BWT -10 (each task learned at 60, all at 50 after the last)."""
    T = resolve(run_id, profile).n_tasks if run_id in RUNS and profile in PROFILES else 5
    return {
        "config_version": CONFIG_VERSION,
        "run_id": run_id,
        "seed": seed,
        "profile": profile,
        "config": resolve(run_id, profile).to_dict() if run_id in RUNS and profile in PROFILES else {},
        "R": matrix_with(50.0, 10.0, -10.0, T),
        "metrics": {"acc": 50.0, "forgetting": 10.0, "bwt": -10.0},
    } | changes


def write_result(results_dir: Path, body: dict) -> Path:
    path = results_dir / body["run_id"] / f"seed-{body['seed']}" / "result.json"
    write_json_atomic(path, body)
    return path


# --- atomic writes -----------------------------------------------------------------------------


def test_write_json_atomic_writes_and_leaves_no_temp_file(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "r.json"
    write_json_atomic(target, {"a": 1})
    assert json.loads(target.read_text()) == {"a": 1}
    assert os.listdir(target.parent) == ["r.json"]


def test_a_target_that_is_not_a_regular_file_is_written_in_place_never_replaced(tmp_path: Path) -> None:
    """`--json-out /dev/null` once renamed a file over the device: as root, every later `> /dev/null` then wrote to a
    regular file (apt-get among them failed). A FIFO stands in for the device here: it stays a FIFO, and its reader
    gets the JSON."""
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    read: list[bytes] = []
    reader = threading.Thread(target=lambda: read.append(fifo.read_bytes()), daemon=True)
    reader.start()
    write_json_atomic(fifo, {"a": 1})
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode) and json.loads(read[0]) == {"a": 1}
    assert os.listdir(tmp_path) == ["pipe"]


def test_unserialisable_object_leaves_target_untouched(tmp_path: Path) -> None:
    target = tmp_path / "r.json"
    target.write_text("old")
    with pytest.raises(TypeError):
        write_json_atomic(target, {"a": object()})
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["r.json"]


def test_failed_replace_removes_temp_file_and_keeps_target(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.txt"
    target.write_text("old")

    def fail(*_: object) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", fail)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(target, "new")
    assert target.read_text() == "old"
    assert os.listdir(tmp_path) == ["t.txt"]


# --- result.json -------------------------------------------------------------------------------


def test_load_result_accepts_a_valid_file(tmp_path: Path) -> None:
    path = write_result(tmp_path, result())
    assert load_result(path)["metrics"]["acc"] == 50.0


PROVENANCE = {
    "code_sha256": "ab" * 32,
    "code_files": 25,
    "git_revision": "c0ffee",
    "git_revision_verified": True,
    "tree_modified": True,
    "diff_sha256": "cd" * 32,
}


@pytest.mark.parametrize("code", [None, PROVENANCE, PROVENANCE | {"tree_modified": None, "git_revision": None}])
def test_results_load_with_and_without_their_code(tmp_path: Path, code: dict | None) -> None:
    """Issue 51: results written before `provenance` was recorded still load, and so do those that record it,
    modified tree or none to compare with (uh check names them; provenance.made_by)."""
    write_result(tmp_path, result() | ({"provenance": code} if code else {}))
    (loaded,) = load_results(tmp_path)
    assert loaded.get("provenance") == code


@pytest.mark.parametrize(
    ("code", "problem"),
    [
        ("c0ffee", "$.provenance is 'c0ffee', not an object"),
        ({"code_sha256": 7, "tree_modified": False}, "$.provenance.code_sha256 is 7, not a string"),
        (PROVENANCE | {"tree_modified": "yes"}, "$.provenance.tree_modified is 'yes', not true or false or null"),
        ({"tree_modified": False}, "$.provenance lacks key(s) code_sha256"),
        (PROVENANCE | {"code_files": 2.5}, "$.provenance.code_files is 2.5, not an integer"),
    ],
)
def test_a_provenance_uh_run_never_writes_is_refused_in_one_line(tmp_path: Path, code: object, problem: str) -> None:
    path = write_result(tmp_path, result(provenance=code))
    with pytest.raises(ResultError) as e:
        load_results(tmp_path)
    assert str(e.value) == f"{path}: {problem}; {RERUN}"


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (result(metrics={"acc": 50.0, "forgetting": 10.0}), "metrics lack bwt"),
        (result(metrics={"acc": "high", "forgetting": 1.0, "bwt": -1.0}), "acc not a finite number"),
        ({k: v for k, v in result().items() if k != "R"}, "$ lacks key(s) R"),
        (result(run_id="B9"), "unknown run ID 'B9'"),
        (result(profile="huge"), "$.profile is 'huge', not one of paper, "),
        (result(seed="1993"), "$.seed is '1993', not an integer"),
        (result(seed=-1), "$.seed is -1, less than 0"),
        (result(seed=1993.0), "$.seed is 1993.0, not an integer"),
        (result(seed=2**32), "$.seed is 4294967296, more than 4294967295"),
        (result(config=resolve("B3", "paper").to_dict()), "config differs from B3's under profile smoke"),
        (result(config=None), "$.config is None, not an object"),
        (result(metrics=[50.0]), "$.metrics is [50.0], not an object"),
        ({k: v for k, v in result().items() if k != "config"}, "$ lacks key(s) config"),
        (result(metrics={"acc": 150.0, "forgetting": 1.0, "bwt": -1.0}), "out of range: acc 150.0"),
        (result(config_version=CONFIG_VERSION + 1), "re-run it"),
        (result(run_id="B3+M=500", config=resolve("s1", "smoke").to_dict()), "not a canonical ID: the same run is"),
        (result(run_id="B3+rho=5", config=resolve("B3+rho=5", "smoke").to_dict()), "records variant None, not"),
        (
            result(
                run_id="B3+rho=5",
                config=resolve("B3+rho=5", "smoke").to_dict(),
                variant={"base": "B3", "changes": {"rho": 4}},
            ),
            "records variant",
        ),
        (
            result(
                run_id="B3+rho=5",
                config=resolve("B3+rho=4", "smoke").to_dict(),
                variant={"base": "B3", "changes": {"rho": 5}},
            ),
            "config differs from B3+rho=5's under profile smoke",
        ),
        (result(run_id="B3+M=100"), "readout=nme needs one per class"),
        (result(run_id=7), "$.run_id is 7, not a string"),
        ([result()], "$ is [{'R': [...], 'config': {...}, 'config_version': 1, 'metrics': {...}, ...}], not an object"),
    ],
)
def test_load_result_names_file_and_problem(tmp_path: Path, body: dict, message: str) -> None:
    path = tmp_path / "result.json"
    path.write_text(json.dumps(body))
    with pytest.raises(ResultError) as e:
        load_result(path)
    assert str(path) in str(e.value) and message in str(e.value)
    assert "\n" not in str(e.value)


def test_load_result_rejects_broken_json(tmp_path: Path) -> None:
    path = tmp_path / "result.json"
    path.write_text("{not json")
    with pytest.raises(ResultError, match="cannot read JSON"):
        load_result(path)


def test_load_results_finds_every_run_and_seed(tmp_path: Path) -> None:
    write_result(tmp_path, result("B3", 1993))
    write_result(tmp_path, result("a1", 42))
    (tmp_path / "B3" / "seed-2023").mkdir()  # an unfinished run: no result.json yet
    assert sorted((r["run_id"], r["seed"]) for r in load_results(tmp_path)) == [("B3", 1993), ("a1", 42)]


def test_load_results_rejects_a_file_in_the_wrong_place(tmp_path: Path) -> None:
    path = tmp_path / "B3" / "seed-42" / "result.json"
    write_json_atomic(path, result("B3", 1993))
    with pytest.raises(ResultError, match="holds B3 seed 1993, not B3/seed-42"):
        load_results(tmp_path)


def test_a_folder_whose_name_holds_a_newline_gets_a_one_line_error(tmp_path: Path) -> None:
    """`B3\nx/seed-1993/result.json`: the error names the folder with its newline escaped, on one line, through
    `uh check` too (it once printed three lines, the last two looking like other paths)."""
    write_json_atomic(tmp_path / "B3\nx" / "seed-1993" / "result.json", result("B3", 1993))
    with pytest.raises(ResultError) as error:
        load_results(tmp_path)
    assert "\n" not in str(error.value) and "B3\\nx/seed-1993/result.json: holds B3 seed 1993" in str(error.value)
    res = CliRunner().invoke(main, ["check", "--results-dir", str(tmp_path), "--json-out", str(tmp_path / "r.json")])
    assert res.exit_code == 2 and len(res.output.strip().splitlines()) == 1, res.output


def test_load_results_rejects_empty_and_missing_dirs(tmp_path: Path) -> None:
    with pytest.raises(ResultError, match=r"no <RUN>/seed-<SEED>/result\.json"):
        load_results(tmp_path)
    with pytest.raises(ResultError, match="no such results directory"):
        load_results(tmp_path / "absent")


def test_per_seed_table_and_profile(tmp_path: Path) -> None:
    other_R = matrix_with(30.0, 20.0, -15.0, T=5)
    results = [result("B3", 1993), result("B3", 42, R=other_R, metrics={"acc": 30.0, "forgetting": 20.0, "bwt": -15.0})]
    table = per_seed_table(results)
    assert tuple(table.columns) == (*PER_SEED_COLUMNS, *REPORTED)  # the checked three, then the reported metrics
    assert table.set_index("seed").loc[42, "bwt"] == -15.0
    for name, metric in REPORTED.items():  # a result written before a reported metric gets it from its R
        assert table.set_index("seed").loc[42, name] == metric.of(other_R), name
    assert results_profile(results) == "smoke"
    with pytest.raises(ResultError, match="mix profiles paper, smoke"):
        per_seed_table([*results, result("a1", profile="paper")])


@pytest.mark.parametrize("name", [*PAPER, *REPORTED])
def test_a_metric_outside_its_declared_range_is_refused_and_one_inside_it_is_read(
    tmp_path: Path, name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each metric declares its range (metrics.py); results.py checks that, not a fixed [0, 100]: a metric that
    can be negative, like BWT, is read when negative. R is checked against it by its own function, here swapped
    for a constant so that the stored value is what R gives."""
    metric = {**PAPER, **REPORTED}[name]
    for value, valid in [
        (metric.low, True),
        (metric.high, True),
        (metric.low - 0.5, False),
        (metric.high + 0.5, False),
    ]:
        swapped = dataclasses.replace(metric, of=lambda R, v=value: v)
        table = PAPER if name in PAPER else REPORTED
        monkeypatch.setitem(table, name, swapped)
        body = result()
        body["metrics"] = {**{m: PAPER[m].of(body["R"]) for m in PAPER}, name: value}
        path = write_result(tmp_path, body)
        if valid:
            assert load_result(path)["metrics"][name] == value
        else:
            with pytest.raises(ResultError, match=rf"out of range: {name} {value} \(not in \[{metric.low:g}, "):
                load_result(path)


def test_a_reported_metric_declared_negative_is_read_negative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 36: a new metric that can be negative (declared [-100, 100], like BWT) invalidated every result."""
    monkeypatch.setitem(REPORTED, "drop", Metric(lambda R: R[-1][0] - R[0][0], -100, 100))
    body = result()
    body["metrics"]["drop"] = -10.0  # R's task 0: 60 after task 0, 50 at the end
    assert load_result(write_result(tmp_path, body))["metrics"]["drop"] == -10.0


@pytest.mark.parametrize("name", [*PAPER, *REPORTED])
def test_a_stored_metric_that_R_does_not_give_is_refused_in_one_line(tmp_path: Path, name: str) -> None:
    """Issue 34: an R of all 50.0 beside the paper's metrics passed. Each metric is recomputed from R; one off by more
    than the rounding of the decimals it is stored with is refused, naming the run, the metric, both values and
    what to do. One rounded to its decimals is read (the paper's values carry 2)."""
    body = result("B3", 1993, R=matrix_with(44.63, 30.2, -28.1, T=5))
    exact = {m: f.of(body["R"]) for m, f in {**PAPER, **REPORTED}.items()}
    body["metrics"] = {m: round(v, 2) for m, v in exact.items()}
    assert load_result(write_result(tmp_path, body))["metrics"][name] == round(exact[name], 2)
    body["metrics"][name] = round(exact[name], 2) + 0.01  # one unit of the last decimal: beyond its rounding
    path = write_result(tmp_path, body)
    with pytest.raises(ResultError) as e:
        load_result(path)
    message = str(e.value)
    assert (
        message.startswith(
            f"{path}: B3 seed 1993: stored {name} {round(exact[name], 2) + 0.01:.2f} is not what "
            f"its R gives ({exact[name]:.4f})"
        )
        and "re-run it (uh run --force)" in message
    )
    assert "\n" not in message


def test_an_R_of_all_50_beside_the_papers_metrics_is_refused_everywhere(tmp_path: Path) -> None:
    """Issue 34's case: the paper's B3 metrics beside an R of all 50.0; load_results (check, report, aggregate) and
    is_finished (uh run) refuse it, the latter as a stale copy that --force replaces."""
    R = [[50.0] * (i + 1) + [None] * (4 - i) for i in range(5)]
    path = write_result(tmp_path, result("B3", 1993, R=R, metrics={"acc": 44.63, "forgetting": 30.2, "bwt": -28.1}))
    with pytest.raises(ResultError, match=r"stored acc 44.63 is not what its R gives \(50.0000\)"):
        load_results(tmp_path)
    with pytest.raises(ResultError, match="rerun with --force"):
        is_finished(path, "B3", 1993, "smoke")


def short_R(rows: int) -> list[list[float | None]]:
    """An R of `rows` tasks in uh run's form giving ACC 50, F 10, BWT -10 (each task learned at 60, 50 at the end)."""
    return [[60.0] * (i + 1) + [None] * (rows - i - 1) for i in range(rows - 1)] + [[50.0] * rows]


@pytest.mark.parametrize("rows", [2, 4])
def test_a_short_R_under_n_tasks_is_refused(tmp_path: Path, rows: int) -> None:
    """Review 1: an R of 2 or 4 rows beside the paper profile's n_tasks 10 was valid (its stored metrics are its own
    R's), so uh check read a run of a few tasks as the paper's and said RESULTS REPLICATED. R must be n_tasks x n_tasks,
    as uh run writes it; the one-line error says what R must be, what this one is, and to re-run it."""
    path = write_result(tmp_path, result("B3", 1993, profile="paper", R=short_R(rows)))
    with pytest.raises(ResultError) as e:
        load_results(tmp_path)
    message = str(e.value)
    assert message.startswith(
        f"{path}: R must be 10 x 10 (n_tasks), row i holding i + 1 accuracies in [0, 100] "
        f"then nulls, as uh run writes it, but it has {rows} rows; re-run it (uh run --force)"
    )
    assert "\n" not in message
    with pytest.raises(ResultError, match="rerun with --force"):
        is_finished(path, "B3", 1993, "paper")


@pytest.mark.parametrize(
    ("R", "problem"),
    [
        ([[60.0] * (i + 1) for i in range(4)] + [[50.0] * 5], "row 0 has length 1"),  # lower-triangular, ragged
        (short_R(6), "it has 6 rows"),
        ([[*row, None] for row in short_R(5)], "row 0 has length 6"),
        ([[60.0, 60.0, *[None] * 3], *short_R(5)[1:]], "row 0 entry 1 is 60.0, not null"),
        ([*short_R(5)[:2], [60.0, 60.0, None, None, None], *short_R(5)[3:]], "row 2 entry 2 is None"),
        ([*short_R(5)[:4], [50.0] * 4 + [150.0]], "row 4 entry 4 is 150.0"),
        ("none", "it is not a list of rows"),
        ([], "it has 0 rows"),
    ],
)
def test_an_R_report_would_choke_on_is_refused_by_the_validator_check_and_report_share(
    tmp_path: Path, R: object, problem: str
) -> None:
    """Review 2: a lower-triangular R (rows of 1..T entries) passed validate_result, so uh check and uh aggregate
    read it, and uh report crashed on it (np.array of ragged rows: ValueError). The one validator refuses it, and
    every R that is not uh run's T x T form, with the same one-line error for check, aggregate and report."""
    from uniform_herding.report.load import load_runs

    path = write_result(tmp_path, result("B3", 1993, R=R))
    with pytest.raises(ResultError) as by_check:
        load_results(tmp_path)
    with pytest.raises(ResultError) as by_report:
        load_runs(tmp_path)
    message = str(by_check.value)
    assert str(by_report.value) == message and "\n" not in message
    assert message.startswith(f"{path}: R must be 5 x 5 (n_tasks)") and f"but {problem}; re-run it" in message


def test_report_and_check_read_the_same_valid_results(tmp_path: Path) -> None:
    """Review 2's other half: what check and aggregate accept, report reads, into the same per-seed table."""
    from uniform_herding.report.load import load_runs

    write_result(tmp_path, result("B3", 1993))
    write_result(
        tmp_path,
        result(
            "a1", 42, R=matrix_with(30.0, 20.0, -15.0, T=5), metrics={"acc": 30.0, "forgetting": 20.0, "bwt": -15.0}
        ),
    )
    runs = load_runs(tmp_path)
    pd.testing.assert_frame_equal(runs.per_seed, per_seed_table(load_results(tmp_path)))
    assert runs.n_tasks == 5 and runs.R["a1"][42].shape == (5, 5)


def test_per_seed_table_takes_the_metrics_R_gives_not_a_stored_integer(tmp_path: Path) -> None:
    """Review 3: acc stored as 46 beside an R giving 46.5 lies within half a unit of its last decimal, so it is read;
    the per-seed table took the stored 46 (a check then read +2.33 REPLICATED where R reads +2.83 NOT REPLICATED).
    Every table downstream takes the metrics R gives; the stored copies are only checked against them."""
    R = matrix_with(46.5, 10.0, -10.0, T=5)
    write_result(tmp_path, result("B3", 1993, R=R, metrics={"acc": 46, "forgetting": 10, "bwt": -10}))
    table = per_seed_table(load_results(tmp_path))
    assert table.loc[0, "acc"] == 46.5
    assert table.loc[0, [*PAPER, *REPORTED]].tolist() == [m.of(R) for m in {**PAPER, **REPORTED}.values()]


def test_a_mixed_results_dir_names_the_files_of_each_profile(tmp_path: Path) -> None:
    """Issue 14.1: check, report and aggregate named no file; they share load_results."""
    write_result(tmp_path, result("B3", 1993, profile="paper"))
    write_result(tmp_path, result("a1", 42, profile="smoke"))
    with pytest.raises(ResultError, match=r"mixes profiles \(paper: B3/seed-1993/result.json; smoke: a1/seed-42"):
        load_results(tmp_path)
    (tmp_path / "profile.json").write_text('{"profile": "paper"}')
    with pytest.raises(ResultError, match=r"belongs to profile 'paper' .* another profile: a1/seed-42/result.json"):
        load_results(tmp_path)


# --- per-seed CSV ------------------------------------------------------------------------------


def test_read_per_seed_csv_reads_the_papers_table() -> None:
    table = read_per_seed_csv(PAPER_PER_SEED)
    assert len(table) == 36 and table["seed"].dtype.kind == "i"
    assert table.set_index(["run_id", "seed"]).loc[("B3", 2023), "acc"] == 44.72


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("run_id,seed,acc,forgetting\nB3,1993,1,2\n", "columns run_id,seed,acc,forgetting; expected"),
        ("run_id,seed,acc,bwt,forgetting\nB3,1993,1,2,3\n", "expected run_id,seed,acc,forgetting,bwt"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,high,2,3\n", "non-numeric acc 'high' (line 2)"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,1,,3\n", "non-numeric forgetting ''"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,1,inf,3\n", "non-numeric forgetting 'inf'"),
        ("run_id,seed,acc,forgetting,bwt\nB3,19.5,1,2,3\n", "seeds must be integers"),
        ("run_id,seed,acc,forgetting,bwt\nX1,1993,1,2,3\n", "unknown run ID(s) X1"),
        ("run_id,seed,acc,forgetting,bwt\nB3+rho=1,1993,1,2,3\n", "'B3+rho=1' is not a canonical ID: the same run is"),
        ("run_id,seed,acc,forgetting,bwt\nB3+colour=red,1993,1,2,3\n", "unknown key 'colour'"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,1,2,3\nB3,1993,1,2,3\n", "duplicate row for B3 seed 1993"),
        ("run_id,seed,acc,forgetting,bwt\n", "no rows"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,150,2,3\n", "acc 150.0 out of range 0..100 (line 2)"),
        ("run_id,seed,acc,forgetting,bwt\nB3,1993,50,-2,3\n", "forgetting -2.0 out of range 0..100"),
        ("run_id,seed,acc,forgetting,bwt\nB3,-4,50,2,3\n", "seed -4 out of range 0..4294967295"),
        ("", "cannot read CSV"),
    ],
)
def test_read_per_seed_csv_rejects_malformed_tables(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "per_seed.csv"
    path.write_text(text)
    with pytest.raises(ResultError) as e:
        read_per_seed_csv(path)
    assert str(path) in str(e.value) and message in str(e.value)


@pytest.mark.parametrize(("bwt", "valid"), [(-10.01, True), (-10.02, False), (-12.5, False)])
def test_read_per_seed_csv_refuses_bwt_below_minus_forgetting(tmp_path: Path, bwt: float, valid: bool) -> None:
    """Review 4: BWT >= -F for every R (F_j = max_i R[i][j] - R[T-1][j] >= R[j][j] - R[T-1][j] = -BWT_j), so a row
    with bwt below -forgetting is no run's; it was read. Two-decimal values may round 0.01 apart, no more."""
    path = tmp_path / "per_seed.csv"
    path.write_text(f"run_id,seed,acc,forgetting,bwt\nB3,42,50,1,-1\nB3,1993,50,10,{bwt}\n")
    if valid:
        assert read_per_seed_csv(path)["bwt"].tolist() == [-1.0, bwt]
        return
    with pytest.raises(ResultError) as e:
        read_per_seed_csv(path)
    assert str(e.value) == (
        f"{path}: B3 seed 1993 (line 3): bwt {bwt:.2f} is below -forgetting -10.00, which no R gives (BWT >= -F); "
        "correct the row or write the table again (uh aggregate --per-seed-out)"
    )


def test_write_per_seed_csv_round_trips(tmp_path: Path) -> None:
    table = read_per_seed_csv(PAPER_PER_SEED)
    out = tmp_path / "out" / "per_seed.csv"
    write_per_seed_csv(out, table)
    pd.testing.assert_frame_equal(read_per_seed_csv(out), table)


@pytest.mark.parametrize(
    "changes",
    [
        {"config": resolve("B3", "paper").to_dict()},  # another config
        {"config": None},
        {"metrics": None},
        {"metrics": {"acc": 150.0, "forgetting": 1.0, "bwt": -1.0}},
        {"config_version": CONFIG_VERSION + 1},
    ],
)
def test_run_check_report_and_aggregate_share_one_definition_of_a_valid_result(tmp_path: Path, changes) -> None:
    """Issue 14.10: `uh run` skipped a result without metrics as done; `uh check` took another config's."""
    body = result("B3", 1993) | changes
    path = write_result(tmp_path, body)
    with pytest.raises(ResultError, match="rerun with --force"):
        is_finished(path, "B3", 1993, "smoke")
    with pytest.raises(ResultError, match=str(path)):
        load_results(tmp_path)
    write_result(tmp_path, result("B3", 1993))
    assert is_finished(path, "B3", 1993, "smoke") and len(load_results(tmp_path)) == 1


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_written_files_respect_the_umask(tmp_path: Path, umask: int, mode: int) -> None:
    """Issue 14.11: result, checkpoint and report files were 0600 whatever the umask."""
    before = os.umask(umask)
    try:
        write_json_atomic(tmp_path / "result.json", {"a": 1})
        write_bytes_atomic(tmp_path / "profile.json", b"{}", replace=False)
    finally:
        os.umask(before)
    assert {oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir()} == {oct(mode)}


def test_a_variant_result_and_csv_row_are_read_like_a_run_ids(tmp_path: Path) -> None:
    body = result(
        run_id="B3+M=1000+rho=5",
        config=resolve("B3+M=1000+rho=5", "smoke").to_dict(),
        variant={"base": "B3", "changes": {"M": 1000, "rho": 5}},
    )
    write_json_atomic(tmp_path / "B3+M=1000+rho=5" / "seed-1993" / "result.json", body)
    assert per_seed_table(load_results(tmp_path))["run_id"].tolist() == ["B3+M=1000+rho=5"]
    csv = tmp_path / "per_seed.csv"
    csv.write_text("run_id,seed,acc,forgetting,bwt\nB3+M=1000+rho=5,1993,1,2,-2\n")
    assert read_per_seed_csv(csv)["run_id"].tolist() == ["B3+M=1000+rho=5"]


# --- input that is no file uh wrote (issue 59.4) -------------------------------------------------------------------


def readers(results: Path, tmp_path: Path) -> dict[str, list[str]]:
    """Every command that reads a results dir, as uh's arguments."""
    other = tmp_path / "other"
    if not other.exists():
        write_result(other, result("B3", 42))
    return {
        "check": ["check", "--results-dir", str(results), "--json-out", str(tmp_path / "report.json")],
        "bundle": ["bundle", "--results-dir", str(results), "-o", str(tmp_path / "b.zip")],
        "stacks": ["stacks", str(results), str(other)],
        "report": ["report", "--results-dir", str(results), "--out", str(tmp_path / "report")],
        "aggregate": ["aggregate", "--results-dir", str(results)],
    }


def assert_one_line(res, *words: str) -> None:
    """Exit 2 (bad input, never 1: a failed replication) in one `Error:` line holding `words`, no traceback."""
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    lines = res.output.strip().splitlines()
    assert res.exit_code == 2 and len(lines) == 1 and lines[0].startswith("Error: "), res.output
    assert all(w in lines[0] for w in words), (words, lines[0])


@pytest.mark.parametrize("kind", [*MALFORMED_RESULTS, "profile.json a list"])
def test_a_malformed_result_or_profile_is_one_line_and_exit_2_from_every_reader(kind: str, tmp_path: Path) -> None:
    """Issue 59.4: result.json nested 100,000 deep (RecursionError), a seed of 5,000 digits (ValueError), tasks a
    number, a task's code hash a list, environment a string, profile.json's profile a list: each ended uh check, uh
    bundle, uh stacks (and uh report) in a traceback and exit 1, the code of a failed replication. Each is read
    through one bounded loader and its schema (runs/schemas.py): one line naming the file and the field, exit 2. uh
    status reads them through the same loader: a file no uh writes, one line and exit 2 (issue 62: it counted such a
    result done and exited 0); epoch losses of another length, JSON uh could write but no result of its config, are
    the verdict it cannot reach, on its line."""
    results = tmp_path / "results"
    path = write_result(results, result("B3", 1993))
    write_result(results, result("a2", 1993))
    if kind in MALFORMED_RESULTS:
        edit, words = MALFORMED_RESULTS[kind]
        path.write_text(edit(result("B3", 1993)))
    else:
        text, words = PROFILE_A_LIST
        path = results / "profile.json"
        path.write_text(text)
    for command, args in readers(results, tmp_path).items():
        res = CliRunner().invoke(main, args)
        assert_one_line(res, str(path), words), command
    res = CliRunner().invoke(main, ["status", "--results-dir", str(results)])
    if kind == "epoch losses ragged":
        assert res.exception is None and f"verdict now: cannot check: {path}: " in res.output and words in res.output
    else:
        assert_one_line(res, str(path), words)


# The fuzz test's valid result.json: every key the schema types, so that each can be broken.
ENVIRONMENT = ("python", "torch", "device", "precision", "compile", "data_md5", "data_source")
FUZZED = result("B3", 1993) | {
    "provenance": PROVENANCE,
    "environment": {key: "x" for key in ENVIRONMENT},
    "tasks": [{"task": t, "device": "x", "code_sha256": "ab", "wall_s": 1, "epoch_loss": [2, None]} for t in range(5)],
    "wall_s": 5.0,
    "started": "2026-01-01T00:00:00",
    "finished": "2026-01-01T00:01:00",
    "command": "uh run B3",
}
HUGE, DEEP, DELETE = "<huge>", "<deep>", "<delete>"  # placeholders: a 5,000-digit number, 100,000 levels, no key


def json_paths(value: object, where: tuple = ()) -> list[tuple]:
    """Every path into `value` (keys and indices), itself included."""
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    return [where, *(p for key, item in items for p in json_paths(item, (*where, key)))]


ODD = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**70), 2**70),
    st.floats(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(), max_size=2),
    st.sampled_from([HUGE, DEEP, DELETE]),
)


def holds(container: object, key: str | int) -> bool:
    return (isinstance(container, dict) and key in container) or (
        isinstance(container, list) and isinstance(key, int) and key < len(container)
    )


def mutated(body: dict, edits: list[tuple[tuple, object]]) -> str:
    """`body` with each edit's path set to its value (or its key deleted), as text: NaN and Infinity as Python's json
    writes them, the placeholders as what they stand for. An edit below an earlier one's new value is skipped."""
    body = json.loads(json.dumps(body))
    for path, value in edits:
        parent = body if path else None
        for key in path[:-1]:
            parent = parent[key] if holds(parent, key) else None
        if not path:
            body = value
        elif value == DELETE and isinstance(parent, dict):
            parent.pop(path[-1], None)
        elif holds(parent, path[-1]) or isinstance(parent, dict):
            parent[path[-1]] = value
    return json.dumps(body).replace(f'"{HUGE}"', "9" * 5000).replace(f'"{DEEP}"', "[" * 100_000 + "]" * 100_000)


@pytest.mark.slow
@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(
    result_edits=st.lists(st.tuples(st.sampled_from(json_paths(FUZZED)), ODD), max_size=3),
    profile_edits=st.lists(st.tuples(st.sampled_from([(), ("profile",)]), ODD), max_size=1),
    raw=st.one_of(st.none(), st.binary(max_size=64)),
)
def test_no_result_or_profile_json_gets_a_traceback_from_uh_check(result_edits, profile_edits, raw) -> None:
    """Issue 59.4: valid files with keys of other types, deleted, nested deep or holding huge numbers, and raw bytes:
    uh check exits with one of its codes (0-6), never an exception's traceback."""
    with tempfile.TemporaryDirectory() as tmp:
        results = Path(tmp)
        path = write_result(results, FUZZED)
        path.write_bytes(raw if raw is not None else mutated(FUZZED, result_edits).encode())
        if profile_edits:
            (results / "profile.json").write_text(mutated({"profile": "smoke"}, profile_edits))
        res = CliRunner().invoke(main, ["check", "--results-dir", tmp, "--json-out", str(results / "c.json")])
    assert res.exception is None or isinstance(res.exception, SystemExit), repr(res.exception)
    assert res.exit_code in range(7) and "Traceback" not in res.output, res.output
