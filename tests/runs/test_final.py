"""The final state (runs/final.py): what it keeps of a finished run, and what it refuses to load."""

from __future__ import annotations

import io

import pytest
import torch

from uniform_herding.catalogue import resolve
from uniform_herding.runs.durability import seal
from uniform_herding.runs.final import FinalError, key, load_final, save_final

SEED = 5
ITEMS = 1000  # the training items finished() draws exemplars from: 100 per class of the smoke profile's 10


def finished(fresh, run_id: str = "B3"):
    """A learner and memory as after the smoke profile's last task (two refreshes on 1-D features), and the result
    they belong to."""
    cfg = resolve(run_id, "smoke")
    learner, memory, _ = fresh(cfg, 0)
    learner.head.grow(cfg.n_classes)
    for t in range(cfg.n_tasks):
        new = {c: torch.arange(100 * c, 100 * c + 100) for c in range(2 * t, 2 * t + 2)}
        memory.refresh(new, lambda items: items.double()[:, None] % 7)
    result = {
        "run_id": run_id,
        "seed": SEED,
        "profile": "smoke",
        "config": cfg.to_dict(),
        "environment": {"data_md5": "0" * 32},
    }
    return cfg, learner, memory, result


def test_the_final_state_brings_back_the_learner_and_the_active_exemplars(fresh, tmp_path) -> None:
    cfg, learner, memory, result = finished(fresh)
    save_final(tmp_path / "final.pt", result, learner, memory)
    loaded, active = load_final(tmp_path / "final.pt", result, cfg, ITEMS)
    torch.testing.assert_close(loaded.state_dict(), learner.state_dict(), rtol=0, atol=0)
    assert active.keys() == memory.active.keys() and all(torch.equal(active[c], memory.active[c]) for c in active)


def test_the_final_state_of_another_run_or_a_damaged_one_is_refused(fresh, tmp_path) -> None:
    cfg, learner, memory, result = finished(fresh)
    path = tmp_path / "final.pt"
    save_final(path, result, learner, memory)
    with pytest.raises(FinalError, match=r"another run than its result.json \(they differ in seed\)"):
        load_final(path, {**result, "seed": SEED + 1}, cfg, ITEMS)
    with pytest.raises(FinalError, match="differ in data_md5"):
        load_final(path, {**result, "environment": {"data_md5": "1" * 32}}, cfg, ITEMS)
    data = bytearray(path.read_bytes())
    data[-100] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(FinalError, match=r"is damaged or unreadable \(digest mismatch\)"):
        load_final(path, result, cfg, ITEMS)


@pytest.mark.parametrize(
    ("active", "problem"),
    [
        ({0: torch.tensor([3, ITEMS])}, f"the active exemplars of class 0 hold positions outside [0, {ITEMS})"),
        ({0: torch.tensor([-1, 3])}, f"the active exemplars of class 0 hold positions outside [0, {ITEMS})"),
        ({0: torch.tensor([1.0, 2.0])}, "the active exemplars of class 0 are of torch.float32, not integers"),
        ({0: torch.tensor([[1, 2]])}, "the active exemplars of class 0 are not a 1-D tensor"),
        ({0: [1, 2]}, "the active exemplars of class 0 are not a 1-D tensor"),
        ({"0": torch.tensor([1, 2])}, "the active exemplars of class '0': the class is not an integer"),
        ([torch.tensor([1, 2])], "its active exemplars are not a mapping of class to exemplars"),
    ],
)
def test_exemplars_out_of_range_or_not_integral_are_refused_in_one_line(fresh, tmp_path, active, problem) -> None:
    """Issue 59.4: under uh check --bundle --recompute, a final.pt whose exemplar indices were out of range or floats
    ended in an IndexError's traceback; the readout indexes the stream with them, so they are checked first."""
    cfg, learner, _, result = finished(fresh)
    path = tmp_path / "final.pt"
    buffer = io.BytesIO()
    torch.save({**key(result), "learner": learner.state_dict(), "active": active}, buffer)
    path.write_bytes(seal(buffer.getvalue()))
    with pytest.raises(FinalError) as e:
        load_final(path, result, cfg, ITEMS)
    assert str(e.value) == f"{path}: {problem}, not what uh run writes; restore the final.pt that uh run wrote"
