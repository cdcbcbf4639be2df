"""A finished run's final state, kept beside its result (final.pt): what evaluates R's last row again.

The last row of R is the readout after the last task: the learner (backbone and head) and, for NME, the memory's
active exemplars of each class (the prototypes' items, positions in the task stream). final.pt holds exactly those,
on the CPU, with the run it belongs to (run ID, seed, profile, config, the archive's md5), sealed with its payload's
SHA-256 as a checkpoint is (durability.seal). run.py writes it atomically before result.json, so a result whose run
finished under this code always has it; `uh bundle --with-weights` ships it and `uh check --bundle F --recompute`
evaluates it (evidence/recompute.py). No optimizer, pool or generator: nothing that trains further. torch is
imported where the file is written or read: `uh check --bundle` names the file without loading torch.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from uniform_herding.runs.durability import seal, unseal
from uniform_herding.runs.results import write_bytes_atomic

if TYPE_CHECKING:
    import torch

    from uniform_herding.method.config import Config
    from uniform_herding.method.memory import Memory
    from uniform_herding.method.model import Learner

FINAL_NAME = "final.pt"  # beside result.json


class FinalError(ValueError):
    """A final state that cannot be used for its result: damaged, unreadable or another run's; one line."""


def key(result: dict[str, Any]) -> dict[str, Any]:
    """What ties a final state to its result: the run, its config and the archive it read."""
    return {
        "run_id": result["run_id"],
        "seed": result["seed"],
        "profile": result["profile"],
        "config": result["config"],
        "data_md5": result.get("environment", {}).get("data_md5"),
    }


def save_final(path: Path, result: dict[str, Any], learner: Learner, memory: Memory) -> None:
    """Write the learner's weights and the memory's active sets, on the CPU, for `result` (its `key`)."""
    import torch

    state = {
        **key(result),
        "learner": {k: v.detach().cpu().contiguous() for k, v in learner.state_dict().items()},
        "active": {int(c): items.cpu() for c, items in memory.active.items()},
    }
    buffer = io.BytesIO()
    torch.save(state, buffer)
    write_bytes_atomic(path, seal(buffer.getvalue()))


def load_final(path: Path, result: dict[str, Any], cfg: Config, items: int) -> tuple[Learner, dict[int, torch.Tensor]]:
    """The learner after the last task, on the CPU, and the memory's active sets, from `path`; FinalError when the
    file is damaged, does not load into this code's learner, belongs to another run than `result`, or holds active
    sets that are not positions among the stream's `items` training items (active_problem)."""
    import torch

    from uniform_herding.method.model import Learner

    try:
        payload = unseal(path.read_bytes())
    except (OSError, ValueError) as e:
        raise FinalError(f"{path} is damaged or unreadable ({e})") from None
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        found = {k: state[k] for k in key(result)}
        same = found == key(result)
    except Exception as e:  # a foreign payload: zip, pickle, EOF or key errors, or tensors where the key has values
        raise FinalError(f"{path} cannot be read ({type(e).__name__})") from None
    if not same:
        differs = ", ".join(k for k in found if found[k] != key(result)[k])
        raise FinalError(f"{path} is the final state of another run than its result.json (they differ in {differs})")
    if problem := active_problem(state.get("active"), items):
        raise FinalError(f"{path}: {problem}, not what uh run writes; restore the final.pt that uh run wrote")
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.n_classes)
    try:
        learner.load_state_dict(state["learner"])
    except (KeyError, RuntimeError, TypeError, AttributeError) as e:  # no, or no dict of, or other tensors
        raise FinalError(f"{path} does not fit this code's learner ({type(e).__name__})") from None
    return learner, dict(state["active"])


def active_problem(active: Any, items: int) -> str | None:
    """What keeps `active` from the memory's active sets as save_final writes them (class -> 1-D integer tensor of
    positions in the stream's `items` training items), or None: the readout indexes the stream with them."""
    import torch

    if not isinstance(active, dict):
        return "its active exemplars are not a mapping of class to exemplars"
    for c, exemplars in active.items():
        where = f"the active exemplars of class {c!r}"
        if type(c) is not int:
            return f"{where}: the class is not an integer"
        if not isinstance(exemplars, torch.Tensor) or exemplars.dim() != 1:
            return f"{where} are not a 1-D tensor"
        if exemplars.dtype.is_floating_point or exemplars.dtype.is_complex or exemplars.dtype == torch.bool:
            return f"{where} are of {exemplars.dtype}, not integers"
        if len(exemplars) and (int(exemplars.min()) < 0 or int(exemplars.max()) >= items):
            return f"{where} hold positions outside [0, {items})"
    return None
