"""`uh sweep`: the grid printed (its points: tests/test_catalogue.py), what is done, --dry-run, refusals, and a real
smoke sweep through the local executor that a second sweep finds done."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner, Result

from uniform_herding import catalogue, launch
from uniform_herding.cli import main
from uniform_herding.runs import run
from uniform_herding.runs.results import result_path


def uh(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def test_dry_run_prints_the_grid_with_what_is_done_and_starts_nothing(finished_result, no_training, tmp_path):
    finished_result(tmp_path, "r2", 42)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    res = uh("sweep", "B3", "rho=1,3,5", "--profile", "smoke", "--results-dir", str(tmp_path), "--dry-run")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines() == [
        f"sweep of B3: 3 settings x 3 seeds = 9 runs (profile smoke, {tmp_path}); 1 done already",
        "  rho=1  r2        done: 42    (run ID r2: the same config)",
        "  rho=3  B3        done: none  (B3 itself)",
        "  rho=5  B3+rho=5  done: none",
        "dry run: nothing started",
    ]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_sweep_resolves_each_point_once_and_trains_it_with_that_config(tmp_path, monkeypatch):
    """Issue 54: uh sweep resolves each point once, before it prints the grid, and uh run's work (launch.run_named)
    trains those configs without resolving them again."""
    resolved, trained, original = [], [], catalogue.resolve
    monkeypatch.setattr(launch, "resolve", lambda run_id, profile: resolved.append(run_id) or original(run_id, profile))
    monkeypatch.setattr(
        run, "run_seed", lambda pair, cfg, *args, **kwargs: trained.append((pair.run_id, cfg, pair.seed))
    )
    res = uh("sweep", "B3", "rho=1,5", "--seed", "42", "--profile", "smoke", "--results-dir", str(tmp_path))
    assert res.exit_code == 0, res.output
    assert resolved == ["r2", "B3+rho=5"]  # rho=1 is run ID r2
    assert trained == [(r, catalogue.resolve(r, "smoke"), 42) for r in ("r2", "B3+rho=5")]


def test_a_sweep_of_another_spelling_of_a_run_prints_its_one_name(finished_result, no_training, tmp_path):
    """`uh sweep B3+readout=head memory=...` sweeps a2: the grid names a2's variants, and says so in one line."""
    finished_result(tmp_path, "a2+memory=reservoir", 42)
    res = uh(
        "sweep",
        "B3+readout=head",
        "memory=reservoir,uniform_herding",
        "--seed",
        "42",
        "--profile",
        "smoke",
        "--results-dir",
        str(tmp_path),
        "--dry-run",
    )
    assert res.exit_code == 0 and res.output.splitlines() == [
        f"sweep of a2: 2 settings x 1 seed = 2 runs (profile smoke, {tmp_path}); 1 done already",
        "B3+readout=head is a2 (the same run, by its canonical name)",
        "  memory=reservoir        a2+memory=reservoir  done: 42",
        "  memory=uniform_herding  a2                   done: none  (a2 itself)",
        "dry run: nothing started",
    ], res.output


def test_a_sweep_of_one_setting_and_one_seed_says_so_in_the_singular(no_training, tmp_path):
    """Issue 52: `uh sweep --dry-run` printed "1 settings" (and "1 runs")."""
    res = uh("sweep", "B3", "rho=5", "--seed", "42", "--profile", "smoke", "--results-dir", str(tmp_path), "--dry-run")
    assert res.exit_code == 0, res.output
    assert res.output.splitlines()[0] == (
        f"sweep of B3: 1 setting x 1 seed = 1 run (profile smoke, {tmp_path}); 0 done already"
    )


@pytest.mark.parametrize(
    ("grid", "words"),
    [
        (["rho=1,3,1"], "rho=1 is listed twice"),
        (["lr=0.1,0.10"], "lr=0.1 is listed twice"),
        (["rho=1,,5"], "an empty value"),
        (["rho=1,2", "rho=5"], "rho is given twice"),
        (["epochs=2,4"], "epochs is a size"),
        (["rho=1,x"], "rho=x: rho is a whole number >= 1"),
        (["M=100,2000"], "M >= 380"),  # checked under the profile, for every point
        (["rho=1,3,5,40"], "rho=40 is the same run as rho=20"),  # smoke: pools of 20 * q_c hold every item
    ],
)
def test_a_bad_grid_is_one_line_and_writes_nothing(grid, words, no_training, tmp_path):
    res = uh("sweep", "B3", *grid, "--profile", "smoke", "--results-dir", str(tmp_path / "r"))
    assert res.exit_code == 2 and res.output.splitlines() == [res.output.strip()] and words in res.output, res.output
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("run_id", "grid", "words"),
    [
        ("B2+memory=reservoir", ["rho=1,2"], "B2+memory=reservoir+rho=1: nothing in this run reads rho"),
        ("B3", ["memory=reservoir,static"], "B3+memory=reservoir: readout=nme needs an exemplar of every seen class"),
        ("B3", ["memory=uniform_herding,icarl", "rho=1,5"], "B3+memory=icarl+rho=1: nothing in this run reads rho"),
    ],
)
def test_a_grid_with_a_point_that_changes_nothing_read_is_one_line_and_writes_nothing(
    run_id, grid, words, no_training, tmp_path
):
    """Two points that differ only in a setting nothing reads would be two runs of the same numbers."""
    res = uh("sweep", run_id, *grid, "--profile", "smoke", "--results-dir", str(tmp_path / "r"))
    assert res.exit_code == 2 and res.output.splitlines() == [res.output.strip()] and words in res.output, res.output
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_of_a_key_its_base_already_sets_is_refused(tmp_path):
    res = uh("sweep", "B3+rho=5", "rho=1,2", "--results-dir", str(tmp_path / "r"))
    assert res.exit_code == 2 and "B3+rho=5 already sets rho" in res.output, res.output


def test_a_finished_sweep_is_skipped_whole(finished_result, no_training, tmp_path):
    paths = [finished_result(tmp_path, rid, seed) for rid in ("r2", "B3", "B3+rho=5") for seed in (1993, 42)]
    before = [p.read_bytes() for p in paths]
    res = uh(
        "sweep",
        "B3",
        "rho=1,3,5",
        "--seed",
        "1993",
        "--seed",
        "42",
        "--profile",
        "smoke",
        "--results-dir",
        str(tmp_path),
    )
    assert res.exit_code == 0, res.output
    assert "6 done already" in res.output.splitlines()[0] and res.output.count("done already (") == 6, res.output
    assert [p.read_bytes() for p in paths] == before


@pytest.mark.trains
def test_a_smoke_sweep_runs_every_point_and_a_second_sweep_finds_it_done(smoke_sweep):
    """Through `--jobs 2` (submitit's local executor): rho=1 and rho=3 run as r2 and B3, B3+rho=5 records its
    base and change; run again, the sweep starts nothing."""
    data, results, output = smoke_sweep
    assert output.splitlines()[:4] == [
        f"sweep of B3: 3 settings x 1 seed = 3 runs (profile smoke, {results}); 0 done already",
        "  rho=1  r2        done: none  (run ID r2: the same config)",
        "  rho=3  B3        done: none  (B3 itself)",
        "  rho=5  B3+rho=5  done: none",
    ]
    for run_id in ("r2", "B3"):  # run as the run IDs they are (their numbers: test_run.py, s1 bit for bit)
        result = json.loads(result_path(results, run_id, 1993).read_text())
        assert result["run_id"] == run_id and "variant" not in result
    variant = json.loads(result_path(results, "B3+rho=5", 1993).read_text())
    assert variant["run_id"] == "B3+rho=5" and variant["variant"] == {"base": "B3", "changes": {"rho": 5}}
    assert variant["command"].startswith("uh run B3+rho=5 --seed 1993 --profile smoke")  # as its job ran it

    stamps = {p: p.stat().st_mtime_ns for p in results.glob("*/seed-*/result.json")}
    res = uh(
        "sweep",
        "B3",
        "rho=1,3,5",
        "--seed",
        "1993",
        "--profile",
        "smoke",
        "--jobs",
        "2",
        "--data-dir",
        str(data),
        "--results-dir",
        str(results),
    )
    assert res.exit_code == 0 and "3 done already" in res.output.splitlines()[0], res.output
    assert res.output.count("done already (") == 3 and {p: p.stat().st_mtime_ns for p in stamps} == stamps
