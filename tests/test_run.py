"""End to end: every run ID trains, refreshes memory, evaluates and records in the smoke profile."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from uniform_herding import metrics
from uniform_herding.cli import main
from uniform_herding.config import CONFIG_VERSION, OPEN_CHOICES, RUNS, resolve
from uniform_herding.memory import quotas
from uniform_herding.results import read_per_seed_csv, write_per_seed_csv
from uniform_herding.run import result_path, run_seed

SEED = 1993


@pytest.fixture(scope="module")
def smoke_dirs(tmp_path_factory) -> tuple[Path, Path]:
    """(data dir, results dir) shared by the module: the synthetic archive is written once."""
    root = tmp_path_factory.mktemp("smoke")
    return root / "data", root / "results"


@pytest.fixture(scope="module")
def smoke_result(smoke_dirs):
    """result.json of a run ID for SEED, run on first request."""
    data_dir, results_dir = smoke_dirs

    def get(run_id: str) -> dict:
        path = run_seed(run_id, SEED, "smoke", data_dir, results_dir, echo=lambda _: None)
        return json.loads(path.read_text())

    return get


@pytest.mark.parametrize("run_id", list(RUNS))
def test_every_run_id_runs_and_records(smoke_result, run_id):
    result = smoke_result(run_id)
    cfg = resolve(run_id, "smoke")
    T = cfg.n_tasks
    assert (result["run_id"], result["seed"], result["profile"]) == (run_id, SEED, "smoke")
    assert result["config_version"] == CONFIG_VERSION and result["config"] == cfg.to_dict()

    R = result["R"]
    assert len(R) == T and all(len(row) == T for row in R)
    for i in range(T):
        assert all(0 <= R[i][j] <= 100 for j in range(i + 1))
        assert all(R[i][j] is None for j in range(i + 1, T))
    assert result["metrics"] == {"acc": metrics.acc(R), "forgetting": metrics.forgetting(R), "bwt": metrics.bwt(R)}

    manifest = result["manifest"]
    assert manifest["open_choices"] == OPEN_CHOICES
    assert manifest["per_class"]["train_used"] == [cfg.train_per_class]
    for t, task in enumerate(result["tasks"]):
        C = cfg.classes_per_task * (t + 1)
        assert task["task"] == t and task["wall_s"] > 0
        assert task["active_size"] == (sum(quotas(cfg.budget, C)) if cfg.memory != "none" else 0)
        if cfg.memory == "uniform_herding":
            assert task["active_size"] <= task["pool_size"] <= cfg.rho * cfg.budget
        else:
            assert task["pool_size"] == 0
    env = result["environment"]
    assert env["data_source"] == "synthetic" and len(env["data_md5"]) == 32 and env["device"].startswith("cpu")
    assert (env["precision"], env["compile"], env["cpu_threads"]) == ("32-true", "off", 1)


def test_uniform_herding_beats_no_replay_clearly(smoke_result):
    """The learnable synthetic stream must show replay working: higher ACC, far less forgetting."""
    b0, b3 = smoke_result("B0")["metrics"], smoke_result("B3")["metrics"]
    assert b3["acc"] > b0["acc"] + 10, (b3, b0)  # chance is 10% after the last task
    assert b3["forgetting"] < b0["forgetting"] - 20, (b3, b0)


def test_finished_run_is_skipped_unless_forced(smoke_result, smoke_dirs):
    data_dir, results_dir = smoke_dirs
    smoke_result("B0")
    path = result_path(results_dir, "B0", SEED)
    before = path.read_text()
    said: list[str] = []
    run_seed("B0", SEED, "smoke", data_dir, results_dir, echo=said.append)
    assert path.read_text() == before and "done already" in said[0]
    run_seed("B0", SEED, "smoke", data_dir, results_dir, force=True, echo=said.append)
    rerun = json.loads(path.read_text())
    assert rerun["R"] == json.loads(before)["R"]  # CPU fp32 runs are deterministic


def test_smoke_runs_reproduce_the_committed_smoke_expectations(smoke_result, smoke_dirs, tmp_path):
    """`uh check` on this run's seed against the committed expected_results/smoke rows of that seed."""
    for run_id in RUNS:
        smoke_result(run_id)
    expected = Path(__file__).parents[1] / "expected_results" / "smoke"
    rows = read_per_seed_csv(expected / "per_seed.csv")
    mine = tmp_path / "expected"
    mine.mkdir()
    shutil.copy(expected / "tolerances.toml", mine)
    write_per_seed_csv(mine / "per_seed.csv", rows[rows["seed"] == SEED])
    res = CliRunner().invoke(
        main,
        ["check", "--results-dir", str(smoke_dirs[1]), "--expected", str(mine), "--json-out", str(tmp_path / "r.json")],
    )
    assert res.exit_code == 0, res.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert len(report["metrics"]) == 3 * len(RUNS)
    assert {m["verdict"] for m in report["metrics"]} == {"REPRODUCED"}
