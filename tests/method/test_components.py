"""The components' declarations (components.py): complete, consistent with the config, and honest: a setting a run's
components do not declare does not change its numbers, and the loss reads nothing it does not declare."""

from __future__ import annotations

import dataclasses
import itertools
import json

import pytest
import torch

from uniform_herding.catalogue import KEYS, RUNS, RunSpec, parse_value, resolve
from uniform_herding.method import components
from uniform_herding.method.config import OPEN_CHOICES, Config
from uniform_herding.method.train import task_loss
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.run import run_seed

SEED = 1993
EVERY_PART = [components.PROTOCOL, *(part for registry in components.CHOICES.values() for part in registry.values())]


def test_every_method_setting_is_read_by_some_component_and_nothing_else_is_declared():
    declared = [key for part in EVERY_PART for key in (*part.reads, *(k for k in part.only if k in KEYS))]
    assert set(declared) == set(KEYS)


def test_every_condition_names_a_setting_or_choice_of_its_own_component():
    for part in EVERY_PART:
        assert set(part.only) <= set(part.reads) | set(part.choices)


def test_an_open_choice_has_one_wording_and_the_protocol_settles_the_shared_ones():
    wording: dict[str, str] = {}
    for part in EVERY_PART:
        for key, how in part.choices.items():
            assert wording.setdefault(key, how) == how, key
    assert components.PROTOCOL.choices == OPEN_CHOICES


def test_every_choice_the_config_can_take_is_registered():
    for key, registry in components.CHOICES.items():
        assert getattr(Config(), key) in registry
        assert all(getattr(resolve(r), key) in registry for r in RUNS)
        assert [parse_value(key, name) for name in registry] == list(registry)  # what --set accepts


def test_the_components_of_b3_and_what_it_reads():
    cfg = resolve("B3")
    assert list(components.parts(cfg)) == [
        "the protocol",
        "memory=uniform_herding",
        "loss=ce_kd",
        "head=cosine",
        "readout=nme",
    ]
    assert components.settings_read(cfg) == set(KEYS)  # B3 reads every setting
    assert components.readers("rho") == ["memory=uniform_herding"]
    assert components.readers("kd_temperature") == ["loss=ce_kd when kd_lambda > 0"]


class Recording:
    """A config that records which fields are read."""

    def __init__(self, cfg: Config) -> None:
        self.cfg, self.read = cfg, set()

    def __getattr__(self, name: str):
        self.read.add(name)
        return getattr(self.cfg, name)


@pytest.mark.parametrize(
    ("loss", "head", "kd_lambda"), list(itertools.product(components.LOSSES, components.HEADS, [0, 1]))
)
def test_the_loss_reads_what_the_run_declares_and_each_declared_setting_moves_it(loss, head, kd_lambda):
    cfg = dataclasses.replace(resolve("B3"), loss=loss, head=head, kd_lambda=float(kd_lambda))
    torch.manual_seed(0)
    logits, y, teacher = torch.randn(8, 6), torch.randint(0, 6, (8,)), torch.randn(8, 4)
    recording = Recording(cfg)
    value = task_loss(recording, logits, y, teacher)  # type: ignore[arg-type]
    read = components.settings_read(cfg)
    assert recording.read & set(KEYS) <= read
    for key in sorted(read & {"kd_lambda", "kd_temperature", "cos_margin"}):  # the settings a loss may read
        moved = dataclasses.replace(cfg, **{key: getattr(cfg, key) + 0.5})
        assert not torch.equal(task_loss(moved, logits, y, teacher), value), key


def unread_changes(run_id: str) -> dict:
    """Every method setting run `run_id` does not read, changed to another valid value."""
    cfg = resolve(run_id)
    others = {
        "rho": 5,
        "selection": "random",
        "kd_lambda": 2.0,
        "kd_temperature": 4.0,
        "cos_scale": 16.0,
        "cos_margin": 0.1,
        "M": 1000,
        "b": 32,
    }
    unread = set(KEYS) - components.settings_read(cfg)
    assert unread <= set(others), unread
    return {key: others[key] for key in unread}


@pytest.mark.trains
@pytest.mark.parametrize(
    ("run_id", "unread"),
    [
        ("B0", {"M", "b", "rho", "selection", "kd_temperature"}),
        ("B1", {"rho", "selection", "kd_lambda", "kd_temperature", "cos_scale", "cos_margin"}),
    ],
)
def test_settings_a_run_does_not_read_leave_its_numbers_unchanged(run_id, unread, monkeypatch, tmp_path):
    """B0 and B1 rerun with every setting they do not declare changed (built by hand: as a variant each is refused)
    give the same R and training losses, bit for bit: the declarations are what the code reads."""
    changes = unread_changes(run_id)
    assert set(changes) == unread
    spec = RUNS[run_id]
    monkeypatch.setitem(RUNS, "x0", RunSpec("x0", "by hand", "unread settings changed", {**spec.changes, **changes}))
    own, other = (
        json.loads(
            run_seed(
                RunOptions("smoke", tmp_path / "data", tmp_path).pair(r, SEED), resolve(r, "smoke"), echo=lambda _: None
            ).read_text()
        )
        for r in (run_id, "x0")
    )
    assert other["config"] != own["config"]
    assert other["R"] == own["R"]
    assert [t["epoch_loss"] for t in other["tasks"]] == [t["epoch_loss"] for t in own["tasks"]]
