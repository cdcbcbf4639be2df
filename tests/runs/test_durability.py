"""The checkpoint: what it restores, and what it refuses (docs/reliability.md)."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from uniform_herding.catalogue import resolve
from uniform_herding.runs import durability

SEED = 5
SETTINGS = {"device": "cpu", "cpu_threads": 1, "precision": "32-true", "compile": "off", "deterministic": False}


@pytest.mark.parametrize("run_id", ["B1", "B2", "B3", "a4"])
def test_a_checkpoint_restores_learner_memory_and_every_generator(run_id, fresh, tmp_path) -> None:
    """Whatever Memory.state() holds (pools, iCaRL's ranked lists) comes back, on any policy."""
    cfg = resolve(run_id, "smoke")
    learner, memory, gens = fresh(cfg, 0)
    learner.head.grow(2 * cfg.classes_per_task)
    for t in range(2):  # two tasks' refreshes on 1-D features
        new = {c: torch.arange(30 * c, 30 * c + 30) for c in range(2 * t, 2 * t + 2)}
        memory.refresh(new, lambda items: items.double()[:, None] % 7)
    torch.randn(3, generator=gens[0])
    checkpoint = durability.Checkpoint(tmp_path / "checkpoint.pt", cfg, SEED, "md5", torch.device("cpu"), SETTINGS)
    checkpoint.save(1, learner, memory, gens, {"rows": [[50.0], [40.0, 60.0]]})
    rng = torch.get_rng_state()

    learner2, memory2, gens2 = fresh(cfg, 1)
    assert checkpoint.load(learner2, memory2, gens2) == {"rows": [[50.0], [40.0, 60.0]]}
    torch.testing.assert_close(memory2.state(), memory.state(), rtol=0, atol=0)
    torch.testing.assert_close(learner2.state_dict(), learner.state_dict(), rtol=0, atol=0)
    assert all(torch.equal(a.get_state(), b.get_state()) for a, b in zip(gens2, gens, strict=True))
    assert torch.equal(torch.get_rng_state(), rng)


def test_a_damaged_payload_is_refused_not_loaded(fresh, tmp_path) -> None:
    """Issue 14.2: 100 flipped bytes inside the weights loaded silently and changed the result."""
    cfg = resolve("B3", "smoke")
    learner, memory, gens = fresh(cfg, 0)
    learner.head.grow(cfg.classes_per_task)
    checkpoint = durability.Checkpoint(tmp_path / "checkpoint.pt", cfg, SEED, "md5", torch.device("cpu"), SETTINGS)
    checkpoint.save(0, learner, memory, gens, {"rows": [[1.0]]})
    data = bytearray(checkpoint.path.read_bytes())
    weights = data.index(b"backbone")  # inside the weights: the zip's entries follow their names
    middle = weights + (len(data) - weights) // 2
    data[middle : middle + 100] = bytes(b ^ 0xFF for b in data[middle : middle + 100])
    checkpoint.path.write_bytes(bytes(data))
    learner2, memory2, gens2 = fresh(cfg, 1)
    with pytest.raises(durability.RunError, match="is damaged: its payload's sha256 is not the one recorded"):
        checkpoint.load(learner2, memory2, gens2)


def test_the_lock_holder_removes_temp_files_a_killed_writer_left(tmp_path) -> None:
    """Issue 14.12: a SIGKILL during an atomic write left its temp file behind for good."""
    folder = tmp_path / "B3" / "seed-1"
    folder.mkdir(parents=True)
    left = [folder / ".checkpoint.pt.k2j4_x.tmp", folder / ".result.json.abc.tmp"]
    kept = [folder / "checkpoint.pt", folder / "notes.tmp"]
    for path in left + kept:
        path.write_bytes(b"x")
    with durability.run_lock(folder / ".lock"):
        assert sorted(p.name for p in folder.iterdir()) == sorted([".lock", *(p.name for p in kept)])


def test_a_checkpoint_that_no_longer_fits_the_code_is_refused(fresh, tmp_path) -> None:
    """A sealed checkpoint of this key whose weights no longer match the model (e.g. a renamed parameter)."""
    import io

    cfg = resolve("B3", "smoke")
    learner, memory, gens = fresh(cfg, 0)
    learner.head.grow(cfg.classes_per_task)
    checkpoint = durability.Checkpoint(tmp_path / "checkpoint.pt", cfg, SEED, "md5", torch.device("cpu"), SETTINGS)
    checkpoint.save(0, learner, memory, gens, {})
    state = torch.load(io.BytesIO(durability.unseal(checkpoint.path.read_bytes())), weights_only=True)
    state["learner"] = {f"renamed.{k}": v for k, v in state["learner"].items()}
    buffer = io.BytesIO()
    torch.save(state, buffer)
    checkpoint.path.write_bytes(durability.seal(buffer.getvalue()))
    with pytest.raises(durability.RunError, match="does not fit this code"):
        checkpoint.load(*fresh(cfg, 1))


@pytest.mark.trains
def test_a_checkpoint_of_another_precision_is_refused_with_how_to_resume(tmp_path):
    """--precision 16-mixed after a 32-true start would mix rounding regimes in one result."""
    from uniform_herding.cli import main

    args = [
        "run",
        "B0",
        "--profile",
        "smoke",
        "--seed",
        "3",
        "--data-dir",
        str(tmp_path / "d"),
        "--results-dir",
        str(tmp_path / "r"),
    ]
    folder = tmp_path / "r" / "B0" / "seed-3"
    child = subprocess.Popen([sys.executable, "-m", "uniform_herding", *args], stdout=subprocess.PIPE, text=True)
    for line in child.stdout:  # stop once task 1 is checkpointed
        if "task 1/5" in line:
            child.send_signal(signal.SIGTERM)
            break
    child.wait(timeout=120)
    assert (folder / "checkpoint.pt").exists()
    before = (folder / "checkpoint.pt").read_bytes()
    res = CliRunner().invoke(main, [*args, "--precision", "16-mixed"])
    assert res.exit_code == 1
    assert "precision 32-true (this process: precision 16-mixed)" in res.output
    assert "to resume it, run with --precision 32-true (or UH_PRECISION=32-true)" in res.output
    assert (folder / "checkpoint.pt").read_bytes() == before


def test_a_gpu_run_resumes_where_fewer_gpus_are_visible(fresh, tmp_path, monkeypatch) -> None:
    """A run started on a 2-GPU host resumes inside the 1-GPU image (or under --jobs, one GPU per job): the
    checkpoint holds its own GPU's random state, not every visible GPU's, and restores it to the run's GPU."""
    cfg = resolve("B3", "smoke")
    states = {0: torch.full((16,), 7, dtype=torch.uint8), 1: torch.full((16,), 9, dtype=torch.uint8)}
    restored = []

    def set_all(new):  # a 1-GPU host: torch raises for a second state
        if len(new) > 1:
            raise IndexError("list index out of range")
        restored.extend(new)

    monkeypatch.setattr(torch.cuda, "get_rng_state_all", lambda: list(states.values()))  # a 2-GPU host
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda device="cuda": states[0])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "set_rng_state_all", set_all)
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device="cuda": restored.append(state))
    load = torch.load
    monkeypatch.setattr(torch, "load", lambda *a, **k: load(*a, **{**k, "map_location": "cpu"}))  # no CUDA here
    settings = {**SETTINGS, "device": "cuda", "cpu_threads": None, "precision": "16-mixed"}
    learner, memory, gens = fresh(cfg, 0)
    learner.head.grow(cfg.classes_per_task)
    path = tmp_path / "checkpoint.pt"
    durability.Checkpoint(path, cfg, SEED, "md5", torch.device("cuda"), settings).save(0, learner, memory, gens, {})

    learner2, memory2, gens2 = fresh(cfg, 1)
    durability.Checkpoint(path, cfg, SEED, "md5", torch.device("cuda"), settings).load(learner2, memory2, gens2)
    assert len(restored) == 1 and torch.equal(restored[0], states[0])
