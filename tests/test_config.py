"""Run ID -> config: the twelve runs, what each changes, the profiles' sizes and the run labels."""

from __future__ import annotations

import dataclasses

import pytest

from uniform_herding.config import PROFILES, RUNS, SIZE_FIELDS, ConfigError, resolve, run_name


def differences(a, b) -> set[str]:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k for k in da if da[k] != db[k]}


@pytest.mark.parametrize("run_id", [r for r in RUNS if r[0] in "as"])
def test_every_ablation_and_sweep_changes_exactly_one_setting_of_b3(run_id):
    assert len(differences(resolve(run_id), resolve("B3"))) == 1


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
