"""A finished run's final state, kept beside its result (final.pt): what evaluates R's last row again.

The last row of R is the readout after the last task: the learner (backbone and head) and, for NME, the memory's
active exemplars of each class (the prototypes' items, positions in the task stream). final.pt holds exactly those,
on the CPU, with the run it belongs to (run ID, seed, profile, config, the archive's md5), sealed with its payload's
SHA-256 as a checkpoint is (durability.seal). run.py writes it atomically before result.json, so a result whose run
finished under this code always has it; `uh bundle --with-weights` ships it and `uh check --bundle F --recompute`
evaluates it (verdict/recompute.py). No optimizer, pool or generator: nothing that trains further. torch is
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
    return {"run_id": result["run_id"], "seed": result["seed"], "profile": result["profile"],
            "config": result["config"], "data_md5": result.get("environment", {}).get("data_md5")}  # fmt: skip


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


def load_final(path: Path, result: dict[str, Any], cfg: Config) -> tuple[Learner, dict[int, torch.Tensor]]:
    """The learner after the last task, on the CPU, and the memory's active sets, from `path`; FinalError when the
    file is damaged, does not load into this code's learner, or belongs to another run than `result`."""
    import torch

    from uniform_herding.method.model import Learner

    try:
        payload = unseal(path.read_bytes())
    except (OSError, ValueError) as e:
        raise FinalError(f"{path} is damaged or unreadable ({e})") from None
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
        found = {k: state[k] for k in key(result)}
    except Exception as e:  # a foreign payload: zip, pickle, EOF or key errors
        raise FinalError(f"{path} cannot be read ({type(e).__name__})") from None
    if found != key(result):
        differs = ", ".join(k for k in found if found[k] != key(result)[k])
        raise FinalError(f"{path} is the final state of another run than its result.json (they differ in {differs})")
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale)
    learner.head.grow(cfg.n_classes)
    try:
        learner.load_state_dict(state["learner"])
    except (KeyError, RuntimeError) as e:
        raise FinalError(f"{path} does not fit this code's learner ({type(e).__name__})") from None
    return learner, dict(state["active"])
