"""One run ID and seed, end to end: the visible task loop and its record.

For t = 0..T-1: snapshot the teacher, grow the head (imprint new rows from t = 1), fit the task with
Lightning, refresh memory in the new representation, evaluate every seen task, checkpoint. The run
resumes from its last checkpoint by itself, and writes results/<RUN>/seed-<S>/result.json last.
"""

from __future__ import annotations

import fcntl
import os
import platform
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F

from uniform_herding import evaluate
from uniform_herding.archive import DATASETS, RawData, locate_archive, read_archive, write_synthetic_archive
from uniform_herding.config import CONFIG_VERSION, OPEN_CHOICES, Config, resolve
from uniform_herding.memory import Memory, make_memory, quotas
from uniform_herding.model import Learner
from uniform_herding.results import write_json_atomic
from uniform_herding.stream import TaskStream
from uniform_herding.train import TaskModule, fit_task, freeze


class RunBusy(RuntimeError):
    """Another process holds this run and seed."""


def result_path(results_dir: Path, run_id: str, seed: int) -> Path:
    return results_dir / run_id / f"seed-{seed}" / "result.json"


def default_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def load_data(cfg: Config, data_dir: Path, archive: Path | None) -> RawData:
    """The run's archive, verified; the smoke profile's synthetic archive is written on first use."""
    if cfg.dataset == "synthetic" and archive is None:
        n_train = cfg.probe_per_class + cfg.val_per_class + (cfg.train_per_class or 450)
        n_test = cfg.test_per_class or 100
        folder = data_dir / f"synthetic-{n_train}x{n_test}"
        archive = folder / DATASETS["cifar100"].filename
        if not archive.exists():
            write_synthetic_archive("cifar100", folder, train_per_class=n_train, test_per_class=n_test)
    dataset = "cifar100" if cfg.dataset == "synthetic" else cfg.dataset
    path, _ = locate_archive(dataset, data_dir, archive)
    return read_archive(dataset, path)


@contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on the run directory; released by the OS even on SIGKILL."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunBusy(f"{path.parent} is busy: another process is running it") from None
        yield


def git_revision() -> str:
    """The source revision: the image's build argument, else `git rev-parse` beside the package."""
    if rev := os.environ.get("UH_GIT_REVISION"):
        return rev
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=Path(__file__).parent, capture_output=True, text=True, timeout=10
        )
        return out.stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def environment(device: torch.device, raw: RawData) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "device": f"{device.type}: {name}",
        "git_revision": git_revision(),
        "data_md5": raw.md5,
        "data_source": raw.source,
    }


def manifest(cfg: Config, stream: TaskStream) -> dict:
    """The protocol as run: class order, split sizes, quota range per task, every open choice."""
    per_task = [quotas(cfg.budget, cfg.classes_per_task * (t + 1)) if cfg.budget else [0] for t in range(cfg.n_tasks)]
    return {
        **stream.manifest(),
        "quota_per_task": [[min(q), max(q)] for q in per_task],
        "open_choices": OPEN_CHOICES,
    }


def imprint(learner: Learner, stream: TaskStream, t: int, batch: int) -> None:
    """New head rows := normalised mean of the normalised features of each new class (Sec. 3.1)."""
    classes = stream.classes(t)
    means = [
        F.normalize(evaluate.features(learner, stream, stream.train_x[stream.class_items[c]], batch), dim=1).mean(0)
        for c in classes
    ]
    learner.head.imprint(slice(classes.start, classes.stop), torch.stack(means))


class Checkpoint:
    """Everything needed to continue after task t exactly as an uninterrupted run would."""

    def __init__(self, path: Path, cfg: Config) -> None:
        self.path, self.cfg = path, cfg

    def save(self, t: int, learner: Learner, memory: Memory, gens: list[torch.Generator], record: dict) -> None:
        state = {
            "config": self.cfg.to_dict(),
            "task": t,
            "learner": learner.state_dict(),
            "memory": memory.state(),
            "generators": [g.get_state() for g in gens],
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "record": record,
        }
        tmp = self.path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, self.path)

    def load(self, learner: Learner, memory: Memory, gens: list[torch.Generator]) -> tuple[int, dict] | None:
        """Restore state in place; returns (last finished task, record) or None without a checkpoint."""
        if not self.path.exists():
            return None
        state = torch.load(self.path, map_location="cpu", weights_only=False)
        if state["config"] != self.cfg.to_dict():
            raise ValueError(f"{self.path} was written by another config; rerun with --force to start over")
        t = state["task"]
        learner.head.grow(self.cfg.classes_per_task * (t + 1))
        learner.load_state_dict(state["learner"])
        device = learner.head.weight.device
        memory.load_state({k: {c: v.to(device) for c, v in d.items()} for k, d in state["memory"].items()})
        for g, s in zip(gens, state["generators"], strict=True):
            g.set_state(s)
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"]:
            torch.cuda.set_rng_state_all(state["cuda_rng"])
        return t, state["record"]


def run_seed(
    run_id: str,
    seed: int,
    profile: str,
    data_dir: Path,
    results_dir: Path,
    archive: Path | None = None,
    force: bool = False,
    progress: bool = False,
    echo: Callable[[str], None] = print,
) -> Path:
    """Train, refresh and evaluate all tasks of `run_id` for `seed`; returns the result.json path."""
    cfg = resolve(run_id, profile)
    out = result_path(results_dir, run_id, seed)
    if out.exists() and not force:
        echo(f"{run_id} seed {seed}: done already ({out}); --force reruns it")
        return out
    with run_lock(out.with_name(".lock")):
        checkpoint = Checkpoint(out.with_name("checkpoint.pt"), cfg)
        if force:
            checkpoint.path.unlink(missing_ok=True)
        device = default_device()
        raw = load_data(cfg, data_dir, archive)
        stream = TaskStream(raw, cfg, device)

        L.seed_everything(seed, verbose=False)
        learner = Learner(cfg.width, cfg.head, cfg.cos_scale).to(device)
        data_gen = torch.Generator(device=device).manual_seed(seed)  # shuffles, replay draws, augmentation
        memory_gen = torch.Generator().manual_seed(seed)  # the memory policies' random choices
        memory = make_memory(cfg, memory_gen)
        record: dict = {"rows": [], "tasks": []}
        start = 0
        if (resumed := checkpoint.load(learner, memory, [data_gen, memory_gen])) is not None:
            start, record = resumed[0] + 1, resumed[1]
            echo(f"{run_id} seed {seed}: resuming after task {start - 1}")

        def embed(items: torch.Tensor) -> torch.Tensor:
            return evaluate.features(learner, stream, stream.train_x[items], cfg.eval_batch_size)

        uses_teacher = cfg.loss == "icarl_bce" or cfg.kd_lambda > 0
        for t in range(start, cfg.n_tasks):
            tic = time.perf_counter()
            teacher = freeze(learner) if t > 0 and uses_teacher else None
            learner.head.grow(cfg.classes_per_task)
            if cfg.imprint and t > 0:
                imprint(learner, stream, t, cfg.eval_batch_size)
            module = TaskModule(cfg, learner, teacher, stream, memory.replay_items(), data_gen)
            fit_task(module, stream.train_items(t), device, progress)
            learner.to(device)  # Lightning hands the module back on the CPU
            memory.refresh({c: stream.class_items[c] for c in stream.classes(t)}, embed)
            row = evaluate.accuracy_row(learner, stream, t, cfg.readout, memory.active, cfg.eval_batch_size)
            record["rows"].append(row)
            record["tasks"].append(
                {
                    "task": t,
                    "wall_s": round(time.perf_counter() - tic, 3),
                    "active_size": sum(len(a) for a in memory.active.values()),
                    "pool_size": memory.pool_size(),
                }
            )
            checkpoint.save(t, learner, memory, [data_gen, memory_gen], record)
            echo(
                f"{run_id} seed {seed} task {t + 1}/{cfg.n_tasks}: accuracy on seen tasks "
                f"{sum(row) / len(row):.2f}% ({record['tasks'][-1]['wall_s']:.1f} s)"
            )

        R = evaluate.square(record["rows"])
        result = {
            "config_version": CONFIG_VERSION,
            "run_id": run_id,
            "seed": seed,
            "profile": profile,
            "config": cfg.to_dict(),
            "manifest": manifest(cfg, stream),
            "R": R,
            "metrics": {"acc": evaluate.acc(R), "forgetting": evaluate.forgetting(R), "bwt": evaluate.bwt(R)},
            "tasks": record["tasks"],
            "wall_s": round(sum(task["wall_s"] for task in record["tasks"]), 3),
            "environment": environment(device, raw),
            "command": " ".join(sys.argv),
        }
        write_json_atomic(out, result)
        checkpoint.path.unlink(missing_ok=True)
        m = result["metrics"]
        echo(f"{run_id} seed {seed}: ACC {m['acc']:.2f}  F {m['forgetting']:.2f}  BWT {m['bwt']:.2f} -> {out}")
        return out
