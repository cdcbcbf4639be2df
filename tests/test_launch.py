"""`uh run` (launch.py): the run IDs named, each resolved once for the whole command and handed on with its config;
the procedure's options refused in one line where they do not go."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from click.testing import CliRunner

from uniform_herding import catalogue, launch
from uniform_herding.cli import main
from uniform_herding.runs import run
from uniform_herding.runs.pair import RunOptions


def test_uh_run_resolves_each_run_once_and_trains_it_with_that_config(tmp_path: Path, monkeypatch) -> None:
    """Issue 54: one resolution per run ID and command (run_names), and run_seed trains the very config it made, not
    one it resolves again; `--set M=500` names s1, resolved as s1."""
    resolved: list[tuple[str, str]] = []
    trained: list[tuple[str, object, int]] = []
    original = catalogue.resolve

    def resolve(run_id: str, profile: str = "paper") -> catalogue.Config:
        resolved.append((run_id, profile))
        return original(run_id, profile)

    def run_seed(pair, cfg, *args, **kwargs) -> Path:
        trained.append((pair.run_id, cfg, pair.seed))
        return tmp_path / "result.json"

    monkeypatch.setattr(launch, "resolve", resolve)
    monkeypatch.setattr(run, "run_seed", run_seed)
    res = CliRunner().invoke(
        main,
        [
            "run",
            "B3",
            "a1",
            "--set",
            "kd_lambda=0",
            "--profile",
            "smoke",
            "--seed",
            "1",
            "--seed",
            "2",
            "--results-dir",
            str(tmp_path / "results"),
        ],
    )
    assert res.exit_code == 0, res.output
    assert resolved == [("a1", "smoke")]  # B3 and a1 with kd_lambda=0 are both run ID a1: one run, one resolution
    assert trained == [("a1", catalogue.resolve("a1", "smoke"), 1), ("a1", catalogue.resolve("a1", "smoke"), 2)]


def test_run_names_gives_each_canonical_id_its_config_in_the_order_named() -> None:
    runs = launch.run_names(("s2", "B3", "a1", "refresh"), ("M=500",), "smoke")
    assert list(runs) == ["s1", "a1+M=500", "B1+M=500", "r1+M=500", "s1+rho=1", "r3+M=500"]  # s2, B3 with M=500: s1
    assert all(cfg == catalogue.resolve(run_id, "smoke") for run_id, cfg in runs.items())


def test_a_run_that_cannot_be_is_one_line_with_exit_2(tmp_path: Path) -> None:
    res = CliRunner().invoke(
        main, ["run", "B3", "--set", "M=981", "--profile", "smoke", "--results-dir", str(tmp_path)]
    )
    assert res.exit_code == 2 and res.output.count("\n") == 1 and "M=981 is the same run as M=1000" in res.output
    assert list(tmp_path.iterdir()) == []


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


def test_the_uh_run_a_pair_stands_for_gives_back_its_options(tmp_path: Path, monkeypatch) -> None:
    """Issue 62: RunPair.command is the `uh run` that trains the pair alone (a job's result.json records it as its
    command); parsed again by uh run's own options it is the same pair under the same options (no --force: a job
    started again resumes)."""
    options = RunOptions("smoke", tmp_path / "d", tmp_path / "r", tmp_path / "a.tar.gz", False, "16-mixed", "cpu", True)
    pair = options.pair("B3+rho=5", 42)
    asked: list[tuple[tuple[str, ...], launch.Plan]] = []
    monkeypatch.setattr(launch, "run", lambda run_ids, sets, base, plan, echo: asked.append((run_ids, plan)) or 0)
    (tmp_path / "a.tar.gz").touch()
    res = CliRunner().invoke(main, pair.command()[1:])
    assert res.exit_code == 0, res.output
    ((run_ids, plan),) = asked
    assert run_ids == ("B3+rho=5",) and plan.seeds == (42,) and plan.options == options


def test_the_run_paths_library_imports_no_click() -> None:
    """Issue 62: click lives in the commands (commands/run.py, commands/sweep.py) and cli.py; uh run's library raises
    errors.UhError, which cli.py turns into its line and exit code."""
    package = Path(launch.__file__).parent
    for module in ("launch.py", "sweep.py", "chain.py", "runs/executor.py", "runs/pair.py", "runs/run.py"):
        tree = ast.parse((package / module).read_text())
        imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
        imported |= {node.module or "" for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
        assert not {name for name in imported if name.split(".")[0] == "click"}, module
