"""Run ID -> config: the twelve runs and r1-r3 beyond the paper, what each changes, the profiles' sizes,
the run labels and the run groups."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.method.config import (
    BEYOND_PAPER,
    PAPER_RUNS,
    PROFILES,
    RUN_GROUPS,
    RUNS,
    SIZE_FIELDS,
    ConfigError,
    expand_run_ids,
    resolve,
    run_name,
)


def differences(a, b) -> set[str]:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k for k in da if da[k] != db[k]}


@pytest.mark.parametrize("run_id", [r for r in RUNS if r[0] in "as"])
def test_every_ablation_and_sweep_changes_exactly_one_setting_of_b3(run_id):
    assert len(differences(resolve(run_id), resolve("B3"))) == 1


# Issue 17: each run beyond the paper changes exactly one named setting of its base run.
STATED = {"r1": ("B3", {"memory": "icarl"}), "r2": ("B3", {"rho": 1}), "r3": ("B1", {"memory": "uniform_herding"})}


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("run_id", list(STATED))
def test_each_run_beyond_the_paper_differs_from_its_base_in_exactly_the_stated_setting(run_id, profile):
    base, stated = STATED[run_id]
    assert RUNS[run_id].base == base and RUNS[run_id].beyond_paper
    a = dataclasses.asdict(resolve(run_id, profile))
    assert {k: a[k] for k in differences(resolve(run_id, profile), resolve(base, profile))} == stated
    assert resolve(run_id, profile).budget == resolve(base, profile).budget  # same M, b: only storage policy
    assert resolve(run_id, profile).retrieval == resolve(base, profile).retrieval


def test_the_paper_runs_and_the_runs_beyond_it():
    assert PAPER_RUNS == ("B0", "B1", "B2", "B3", "a1", "a2", "a3", "a4", "s1", "s2", "s3", "s4")
    assert BEYOND_PAPER == ("r1", "r2", "r3") and set(RUNS) == set(PAPER_RUNS) | set(BEYOND_PAPER)
    assert RUN_GROUPS == {"all": PAPER_RUNS, "refresh": ("B1", "B3", "r1", "r2", "r3")}
    assert expand_run_ids(["all"]) == list(PAPER_RUNS)  # `uh run all` stays the paper's 36 runs
    assert expand_run_ids(["r2", "refresh", "B3"]) == ["r2", "B1", "B3", "r1", "r3"]  # each once
    assert expand_run_ids(["B9"]) == ["B9"]  # unknown names are left to resolve() to refuse


def test_uh_list_marks_the_runs_beyond_the_paper():
    out = CliRunner().invoke(main, ["list"]).output.splitlines()
    marked = [line.split()[0] for line in out if "beyond the paper" in line]
    assert marked == list(BEYOND_PAPER)
    assert any(line.startswith("r3") and "[vs B1: memory=uniform_herding]" in line for line in out)
    assert "group refresh: B1 B3 r1 r2 r3" in out


def test_the_long_cpu_profile_only_trains_longer():
    assert {**PROFILES["cifar10-cpu"], "epochs": 12} == PROFILES["cifar10-cpu-long"]


def test_the_paper_protocol_sizes():
    cfg = resolve("B3")
    sizes = (cfg.budget, cfg.retrieval, cfg.rho, cfg.n_tasks, cfg.classes_per_task, cfg.width)
    assert sizes == (2000, 64, 3, 10, 10, 64)
    assert [resolve(r).budget for r in ("s1", "s2")] == [500, 4000]
    assert [resolve(r).retrieval for r in ("s3", "s4")] == [32, 128]
    assert resolve("B0").budget == resolve("B0").retrieval == 0


@pytest.mark.parametrize("profile", list(PROFILES))
def test_a_profile_changes_sizes_only(profile):
    for run_id in RUNS:
        assert differences(resolve(run_id, profile), resolve(run_id)) <= SIZE_FIELDS


def test_run_names_state_the_sizes_the_profile_uses():
    assert [run_name(r) for r in RUNS] == [spec.name for spec in RUNS.values()]  # the paper's labels
    assert [run_name(r, "smoke") for r in ("s1", "s2", "s3", "s4")] == [
        "Active budget 12", "Active budget 100", "Retrieval 8", "Retrieval 32"
    ]
    assert run_name("B3", "smoke") == "Uniform Herding"


@pytest.mark.parametrize(("run_id", "profile", "message"), [("b3", "paper", "unknown run ID 'b3'"),
                                                             ("B3", "tiny", "unknown profile 'tiny'")])
def test_unknown_names_are_config_errors(run_id, profile, message):
    with pytest.raises(ConfigError, match=message):
        resolve(run_id, profile)


def test_config_imports_nothing_of_the_package_and_resolves_run_ids_only():
    """One-way: variants.py (and components.py) build on config.py, never the reverse; a variant ID is
    variants.resolve's to resolve and check."""
    tree = ast.parse((Path(__file__).parents[2] / "src" / "uniform_herding" / "method" / "config.py").read_text())
    modules = {n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    modules |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not {m for m in modules if m.startswith("uniform_herding")}, modules
    with pytest.raises(ConfigError, match=r"variants\.resolve resolves it"):
        resolve("B3+rho=5")
