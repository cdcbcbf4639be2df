"""What makes a run survive kills, signals and full disks: its checkpoint, its lock, signal handling
and the atomic finish (docs/reliability.md). run.py holds the task loop; this module holds the rest.

torch (and results.py, with pandas) is imported where a checkpoint is written or read, not at the
top: `uh run` installs its signal handlers from here before they load, so that a signal during
start-up is handled like a later one.
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from uniform_herding.method.config import CONFIG_VERSION, Config

if TYPE_CHECKING:
    import torch

    from uniform_herding.method.memory import Memory
    from uniform_herding.method.model import Learner


class RunError(RuntimeError):
    """A run that cannot start or go on as asked (busy, foreign files, a failed write); says what to do."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT; a BaseException, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int, detail: str = "", where: str = "") -> None:
        """`detail`: what is kept; `where`: the run ID and seed, once known."""
        self.signum, self.detail = signum, detail
        super().__init__(
            f"{f'{where} ' if where else ''}stopped by {signal.Signals(signum).name}"
            f"{f'; {detail}' if detail else ''}; run the same command again to resume"
        )


START_OVER = "delete it or rerun with --force to start this seed over"
MAGIC = b"uniform-herding checkpoint sha256 "  # then the payload's hex digest, a newline, the payload


def seal(payload: bytes) -> bytes:
    """The payload behind a header holding its sha256, so that a damaged file is refused, not loaded."""
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def unseal(data: bytes) -> bytes:
    """The payload of a sealed file; ValueError if the header is missing or the digest does not match."""
    header, _, payload = data.partition(b"\n")
    if not header.startswith(MAGIC):
        raise ValueError("no checkpoint header")
    if header[len(MAGIC) :].decode("ascii", "replace") != hashlib.sha256(payload).hexdigest():
        raise ValueError("digest mismatch")
    return payload


WRITTEN = ("checkpoint.pt", "final.pt", "result.json")  # the files a run writes into its folder, atomically


@contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on one run and seed; the OS releases it when the holder exits, even on SIGKILL.

    Once held, the temp files of atomic writes that a kill interrupted are removed (results.write_bytes_atomic).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        f = open(path, "w")  # noqa: SIM115 - held open for as long as the lock
    except OSError as e:
        raise RunError(f"cannot write to {path.parent} ({e.strerror}); choose a writable --results-dir") from None
    with f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunError(f"{path.parent} is busy: another process is running this run and seed") from None
        for name in WRITTEN:  # left by a writer killed mid-write; only the lock holder writes here
            for tmp in path.parent.glob(f".{name}.*.tmp"):
                tmp.unlink(missing_ok=True)
        yield


@contextmanager
def stop_on_signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise Interrupted at once, wherever the run is.

    Safe at any point: every file the run writes is replaced atomically, so the last checkpoint
    (and any result) survives and only the task in progress is lost.
    """

    def stop(signum: int, frame: object) -> None:
        raise Interrupted(signum)

    previous = {s: signal.signal(s, stop) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


class Checkpoint:
    """Everything needed to continue after task t exactly as an uninterrupted run would.

    One file per run and seed, replaced atomically after every task: the learner (backbone, head),
    the memory's whole state (Memory.state(): active sets, candidate pools, iCaRL's ranked lists),
    every random generator the run draws from, and the record so far (R's rows, per-task sizes). No
    optimizer state: every task starts a fresh SGD. The file is sealed with its payload's sha256
    (torch.load would accept many damaged weights). A damaged checkpoint, or one of another config
    version, config, seed, archive, device type, thread count, precision or compile mode, is refused,
    never used.
    """

    def __init__(
        self, path: Path, cfg: Config, seed: int, data_md5: str, device: torch.device, settings: dict[str, Any]
    ) -> None:
        """`settings`: what besides the config fixes the numbers (run.numeric_settings); resumed only under the same."""
        self.path, self.cfg, self.device, self.settings = path, cfg, device, settings
        self.key = {
            "config_version": CONFIG_VERSION,
            "config": cfg.to_dict(),
            "seed": seed,
            "data_md5": data_md5,
            "settings": settings,
        }
        self.task = -1  # the last task it holds

    def kept(self) -> str:
        """What survives an interruption or a failed write, for the error message (tasks from 1, as echoed)."""
        if self.task < 0:
            return "no task had finished"
        return f"{self.path} holds tasks 1-{self.task + 1} of {self.cfg.n_tasks}"

    @contextmanager
    def writing(self, path: Path) -> Iterator[None]:
        """A failed write (a full disk, say) becomes one line saying what is kept; the old file stays."""
        try:
            yield
        except OSError as e:
            raise RunError(
                f"cannot write {path} ({e.strerror or e}); {self.kept()}; "
                "make room and run the same command again to resume"
            ) from None

    def save(self, t: int, learner: Learner, memory: Memory, gens: list[torch.Generator], record: dict) -> None:
        import torch

        state = {
            **self.key,
            "task": t,
            "learner": learner.state_dict(),
            "memory": memory.state(),
            "generators": [g.get_state() for g in gens],
            "torch_rng": torch.get_rng_state(),
            # the run's own GPU only: a resume may see fewer GPUs (another host, --jobs, the 1-GPU image)
            "cuda_rng": torch.cuda.get_rng_state(self.device) if self.device.type == "cuda" else None,
            "record": record,
        }
        from uniform_herding.runs.results import write_bytes_atomic

        buffer = io.BytesIO()
        torch.save(state, buffer)
        with self.writing(self.path):
            write_bytes_atomic(self.path, seal(buffer.getvalue()))
        self.task = t

    def other_settings(self, theirs: dict[str, Any]) -> str:
        """One line for a checkpoint written under other numeric settings: how to resume, how to start over."""
        differs = [k for k in self.settings if theirs.get(k) != self.settings[k]]
        was = ", ".join(f"{k} {theirs.get(k)}" for k in differs)
        now = ", ".join(f"{k} {self.settings[k]}" for k in differs)
        how = {
            "cpu_threads": f"UH_CPU_THREADS={theirs.get('cpu_threads')}",
            "compile": f"UH_COMPILE={'0' if theirs.get('compile') == 'off' else theirs.get('compile')}",
            "precision": f"--precision {theirs.get('precision')} (or UH_PRECISION={theirs.get('precision')})",
            "device": f"--device {theirs.get('device')}",
            "deterministic": "--deterministic" if theirs.get("deterministic") else "no --deterministic",
        }
        return (
            f"checkpoint {self.path} was written with {was} (this process: {now}), which change the numbers; "
            f"to resume it, run with {' and '.join(how[k] for k in differs)}; {START_OVER}"
        )

    def finish(self, out: Path, result: dict[str, Any]) -> None:
        """Write the result, then drop the checkpoint: a kill in between leaves both, never neither."""
        from uniform_herding.runs.results import write_json_atomic

        with self.writing(out):
            write_json_atomic(out, result)
        self.path.unlink(missing_ok=True)

    def load(self, learner: Learner, memory: Memory, gens: list[torch.Generator]) -> dict | None:
        """Restore state in place and return the record so far; None without a checkpoint."""
        import torch

        if not self.path.exists():
            return None
        try:
            payload = unseal(self.path.read_bytes())
        except ValueError as e:
            damage = "its payload's sha256 is not the one recorded" if "digest" in str(e) else "it has no header"
            raise RunError(f"checkpoint {self.path} is damaged: {damage}; {START_OVER}") from None
        try:
            state = torch.load(io.BytesIO(payload), map_location=self.device, weights_only=True)
            key = {k: state[k] for k in self.key}
        except Exception as e:  # a truncated or foreign file: zip, pickle, EOF or key errors
            raise RunError(f"checkpoint {self.path} unreadable ({type(e).__name__}); {START_OVER}") from None
        if key["settings"] != self.settings and all(key[k] == self.key[k] for k in self.key if k != "settings"):
            raise RunError(self.other_settings(key["settings"]))
        if key != self.key:
            differs = ", ".join(k for k in key if key[k] != self.key[k])
            raise RunError(f"checkpoint {self.path} was written with another {differs}; {START_OVER}")
        try:
            learner.head.grow(self.cfg.classes_per_task * (state["task"] + 1))
            learner.load_state_dict(state["learner"])
            memory.load_state(state["memory"])
            for g, s in zip(gens, state["generators"], strict=True):
                g.set_state(s.cpu())
            torch.set_rng_state(state["torch_rng"].cpu())
            if state["cuda_rng"] is not None:
                torch.cuda.set_rng_state(state["cuda_rng"].cpu(), self.device)
        except (KeyError, RuntimeError, ValueError) as e:
            raise RunError(
                f"checkpoint {self.path} does not fit this code ({type(e).__name__}); {START_OVER}"
            ) from None
        self.task = state["task"]
        return state["record"]
