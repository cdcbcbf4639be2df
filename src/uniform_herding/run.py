"""One run ID and seed, end to end: the visible task loop and its record.

For t = 0..T-1: snapshot the teacher, grow the head (imprint new rows from t = 1), fit the task with
Lightning, refresh memory in the new representation, evaluate every seen task, checkpoint. The run
resumes from its last checkpoint by itself, and writes results/<RUN>/seed-<S>/result.json last.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import lightning as L
import torch
import torch.nn.functional as F

from uniform_herding import evaluate, metrics
from uniform_herding.archive import DATASETS, RawData, locate_archive, read_archive, write_synthetic_archive
from uniform_herding.config import CONFIG_VERSION, OPEN_CHOICES, Config, resolve
from uniform_herding.memory import Memory, make_memory, quotas
from uniform_herding.model import Learner
from uniform_herding.results import write_bytes_atomic, write_json_atomic
from uniform_herding.stream import TaskStream
from uniform_herding.train import TaskModule, compile_mode, fit_task, freeze
from uniform_herding.train import precision as train_precision


class RunError(RuntimeError):
    """A run that cannot start or go on as asked (busy, foreign files, a failed write); says what to do."""


class Interrupted(BaseException):
    """SIGTERM or SIGINT; a BaseException, so that no `except Exception` on the way swallows it."""

    def __init__(self, signum: int, detail: str = "") -> None:
        self.signum = signum
        super().__init__(
            f"stopped by {signal.Signals(signum).name}{f'; {detail}' if detail else ''}; "
            "run the same command again to resume"
        )


START_OVER = "delete it or rerun with --force to start this seed over"


def result_path(results_dir: Path, run_id: str, seed: int) -> Path:
    return results_dir / run_id / f"seed-{seed}" / "result.json"


def default_device() -> torch.device:
    """The GPU when there is one; on the CPU, a fixed thread count (env UH_CPU_THREADS, default 1).

    A CPU run's numbers depend on its thread count (reductions split differently), so the count is
    fixed rather than taken from the machine: the same seed gives the same result on any CPU.
    """
    if torch.cuda.is_available():
        return torch.device("cuda")
    torch.set_num_threads(int(os.environ.get("UH_CPU_THREADS", "1")))
    return torch.device("cpu")


def prepare_archive(cfg: Config, data_dir: Path, archive: Path | None) -> tuple[str, Path]:
    """The run's dataset and verified archive (downloaded if need be); the smoke profile's synthetic
    archive is written on first use."""
    if cfg.dataset == "synthetic" and archive is None:
        n_train = cfg.probe_per_class + cfg.val_per_class + (cfg.train_per_class or 450)
        n_test = cfg.test_per_class or 100
        folder = data_dir / f"synthetic-{n_train}x{n_test}"
        archive = folder / DATASETS["cifar100"].filename
        if not archive.exists():
            write_synthetic_archive("cifar100", folder, train_per_class=n_train, test_per_class=n_test)
    dataset = "cifar100" if cfg.dataset == "synthetic" else cfg.dataset
    return dataset, locate_archive(dataset, data_dir, archive)[0]


def load_data(cfg: Config, data_dir: Path, archive: Path | None) -> RawData:
    return read_archive(*prepare_archive(cfg, data_dir, archive))


@contextmanager
def run_lock(path: Path) -> Iterator[None]:
    """An exclusive lock on one run and seed; the OS releases it when the holder exits, even on SIGKILL."""
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


def is_done(out: Path, cfg: Config, seed: int) -> bool:
    """Whether `out` holds this run's result; a result of another config version or config is refused."""
    if not out.exists():
        return False
    try:
        result = json.loads(out.read_text(encoding="utf-8"))
        version, config, found_seed = result["config_version"], dict(result["config"]), result["seed"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise RunError(f"{out} is unreadable ({type(e).__name__}); move it away or rerun with --force") from None
    expected = cfg.to_dict()
    if version != CONFIG_VERSION:
        differs = f"config_version {version!r} (this code: {CONFIG_VERSION})"
    elif config != expected:
        fields = sorted(k for k in expected.keys() | config.keys() if config.get(k) != expected.get(k))
        differs = f"another config (differs in {', '.join(fields)})"
    elif found_seed != seed:
        differs = f"seed {found_seed!r}"
    else:
        return True
    raise RunError(f"{out} holds a result of {differs}; move it away or rerun with --force to replace it")


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


def environment(device: torch.device, raw: RawData, precision: str) -> dict:
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "device": f"{device.type}: {name}",
        "cpu_threads": torch.get_num_threads(),
        "precision": precision,
        "compile": compile_mode() or "off",
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
    """Everything needed to continue after task t exactly as an uninterrupted run would.

    One file per run and seed, replaced atomically after every task: the learner (backbone, head),
    the memory's whole state (Memory.state(): active sets, candidate pools, iCaRL's ranked lists),
    every random generator the run draws from, and the record so far (R's rows, per-task sizes). No
    optimizer state: every task starts a fresh SGD. A checkpoint of another config version, config,
    seed, archive or device type is refused, never used.
    """

    def __init__(self, path: Path, cfg: Config, seed: int, data_md5: str, device: torch.device) -> None:
        self.path, self.cfg, self.device = path, cfg, device
        self.key = {
            "config_version": CONFIG_VERSION,
            "config": cfg.to_dict(),
            "seed": seed,
            "data_md5": data_md5,
            "device": device.type,
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
        state = {
            **self.key,
            "task": t,
            "learner": learner.state_dict(),
            "memory": memory.state(),
            "generators": [g.get_state() for g in gens],
            "torch_rng": torch.get_rng_state(),
            "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
            "record": record,
        }
        buffer = io.BytesIO()
        torch.save(state, buffer)
        with self.writing(self.path):
            write_bytes_atomic(self.path, buffer.getvalue())
        self.task = t

    def finish(self, out: Path, result: dict) -> None:
        """Write the result, then drop the checkpoint: a kill in between leaves both, never neither."""
        with self.writing(out):
            write_json_atomic(out, result)
        self.path.unlink(missing_ok=True)

    def load(self, learner: Learner, memory: Memory, gens: list[torch.Generator]) -> dict | None:
        """Restore state in place and return the record so far; None without a checkpoint."""
        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location=self.device, weights_only=True)
            key = {k: state[k] for k in self.key}
        except Exception as e:  # a truncated or foreign file: zip, pickle, EOF or key errors
            raise RunError(f"checkpoint {self.path} unreadable ({type(e).__name__}); {START_OVER}") from None
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
            if state["cuda_rng"]:
                torch.cuda.set_rng_state_all([s.cpu() for s in state["cuda_rng"]])
        except (KeyError, RuntimeError, ValueError) as e:
            raise RunError(
                f"checkpoint {self.path} does not fit this code ({type(e).__name__}); {START_OVER}"
            ) from None
        self.task = state["task"]
        return state["record"]


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
    precision: str | None = None,
) -> Path:
    """Train, refresh and evaluate all tasks of `run_id` for `seed`; returns the result.json path.

    Every input is checked before anything is written under results/; a checkpoint left by an
    interrupted run is resumed after its last task. `precision` (None: the device's default) picks
    the fp16 GPU path or fp32 (train.precision). A task that diverges stops the run before its
    checkpoint: the last good checkpoint stays and no result is written.
    """
    cfg = resolve(run_id, profile)
    compile_mode()  # a bad UH_COMPILE fails here, before anything is read or written
    out = result_path(results_dir, run_id, seed)
    if not force and is_done(out, cfg, seed):
        echo(f"{run_id} seed {seed}: done already ({out}); --force reruns it")
        return out
    device = default_device()
    precision = train_precision(device, precision)
    raw = load_data(cfg, data_dir, archive)
    stream = TaskStream(raw, cfg, device)
    checkpoint = Checkpoint(out.with_name("checkpoint.pt"), cfg, seed, raw.md5, device)
    with run_lock(out.with_name(".lock")):
        if force:
            checkpoint.path.unlink(missing_ok=True)
        L.seed_everything(seed, verbose=False)
        learner = Learner(cfg.width, cfg.head, cfg.cos_scale).to(device)
        data_gen = torch.Generator(device=device).manual_seed(seed)  # shuffles, replay draws, augmentation
        memory_gen = torch.Generator().manual_seed(seed)  # the memory policies' random choices
        memory = make_memory(cfg, memory_gen)
        record = checkpoint.load(learner, memory, [data_gen, memory_gen]) or {"rows": [], "tasks": []}
        if checkpoint.task >= 0:
            echo(f"{run_id} seed {seed}: resuming after task {checkpoint.task + 1}/{cfg.n_tasks} ({checkpoint.path})")

        def embed(items: torch.Tensor) -> torch.Tensor:
            return evaluate.features(learner, stream, stream.train_x[items], cfg.eval_batch_size)

        uses_teacher = cfg.loss == "icarl_bce" or cfg.kd_lambda > 0
        try:
            for t in range(checkpoint.task + 1, cfg.n_tasks):
                tic = time.perf_counter()
                teacher = freeze(learner) if t > 0 and uses_teacher else None
                learner.head.grow(cfg.classes_per_task)
                if cfg.imprint and t > 0:
                    imprint(learner, stream, t, cfg.eval_batch_size)
                module = TaskModule(cfg, learner, teacher, stream, memory.replay_items(), data_gen, precision)
                stats = fit_task(module, stream.train_items(t), device, progress)
                if problem := stats.divergence():  # before the checkpoint: the last good one stays
                    raise RunError(f"task {t + 1}/{cfg.n_tasks} diverged ({problem}); no result written, "
                                   f"{checkpoint.kept()}")
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
                        **stats.record(),
                    }
                )
                checkpoint.save(t, learner, memory, [data_gen, memory_gen], record)
                echo(
                    f"{run_id} seed {seed} task {t + 1}/{cfg.n_tasks}: accuracy on seen tasks "
                    f"{sum(row) / len(row):.2f}% ({record['tasks'][-1]['wall_s']:.1f} s)"
                )
            result = assemble(run_id, seed, profile, cfg, stream, raw, device, record, precision)
            checkpoint.finish(out, result)
        except Interrupted as e:
            raise Interrupted(e.signum, checkpoint.kept()) from None
    m = result["metrics"]
    echo(f"{run_id} seed {seed}: ACC {m['acc']:.2f}  F {m['forgetting']:.2f}  BWT {m['bwt']:.2f} -> {out}")
    return out


def assemble(
    run_id: str,
    seed: int,
    profile: str,
    cfg: Config,
    stream: TaskStream,
    raw: RawData,
    device: torch.device,
    record: dict,
    precision: str,
) -> dict:
    """result.json's content (docs/architecture.md): config, manifest, R, metrics, timings, environment."""
    R = metrics.square(record["rows"])
    return {
        "config_version": CONFIG_VERSION,
        "run_id": run_id,
        "seed": seed,
        "profile": profile,
        "config": cfg.to_dict(),
        "manifest": manifest(cfg, stream),
        "R": R,
        "metrics": {"acc": metrics.acc(R), "forgetting": metrics.forgetting(R), "bwt": metrics.bwt(R)},
        "tasks": record["tasks"],
        "wall_s": round(sum(task["wall_s"] for task in record["tasks"]), 3),
        "environment": environment(device, raw, precision),
        "command": " ".join(sys.argv),
    }
