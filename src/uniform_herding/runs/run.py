"""One run ID and seed, end to end: the task loop, made durable, and its record.

For t = 0..T-1: one task of the method (method/task.py's learn_task, in the order of the paper's Section 3), then
the task's record and a checkpoint. This module adds nothing to the method: it holds the run's lock, resumes from
its last checkpoint by itself, and writes the final state (final.pt, runs/final.py), then
results/<RUN>/seed-<S>/result.json last.
"""

from __future__ import annotations

import dataclasses
import os
import platform
import re
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

import lightning as L
import numpy as np
import torch

from uniform_herding import catalogue
from uniform_herding.data.archive import (
    DATASETS,
    DataError,
    RawData,
    locate_archive,
    read_archive,
    write_synthetic_archive,
)
from uniform_herding.method import components, engine, graph, metrics
from uniform_herding.method.config import CONFIG_VERSION, Config
from uniform_herding.method.engine import Precision
from uniform_herding.method.evaluate import ReadoutError
from uniform_herding.method.memory import Memory, make_memory, quotas
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream
from uniform_herding.method.task import Diverged, learn_task
from uniform_herding.method.train import TaskStats
from uniform_herding.runs.devices import (
    cpu_threads,
    deterministic_algorithms,
    driver_version,
    peak_gpu_memory_gb,
    select,
)
from uniform_herding.runs.durability import Checkpoint, Interrupted, RunError, run_lock
from uniform_herding.runs.final import FINAL_NAME, save_final
from uniform_herding.runs.pair import RunPair
from uniform_herding.runs.provenance import DIFF_NAME, code_hash, portable_command, provenance, unhashed_code
from uniform_herding.runs.results import claim_dir, done_already, result_path, write_text_atomic


def synthetic_sizes(cfg: Config) -> tuple[int, int]:
    """Training (probe and validation included) and test images per class of a synthetic profile's archive."""
    return cfg.probe_per_class + cfg.val_per_class + (cfg.train_per_class or 450), cfg.test_per_class or 100


def prepare_archive(cfg: Config, data_dir: Path, archive: Path | None, download: bool = True) -> tuple[str, Path]:
    """The run's dataset and verified archive (downloaded if need be and `download`); the smoke profile's synthetic
    archive is written on first use."""
    dataset = "cifar100" if cfg.dataset == "synthetic" else cfg.dataset
    fix = ""
    if cfg.dataset == "synthetic" and archive is None:
        n_train, n_test = synthetic_sizes(cfg)
        folder = data_dir / f"synthetic-{n_train}x{n_test}"
        archive = folder / DATASETS["cifar100"].filename
        fix = f"regenerate it with `{synth_command(cfg, folder)}`"
        if not archive.exists():
            write_synthetic_archive("cifar100", folder, train_per_class=n_train, test_per_class=n_test)
    return dataset, locate_archive(dataset, data_dir, archive, download, fix)[0]


def synth_command(cfg: Config, folder: Path) -> str:
    """The command that writes exactly the synthetic archive `cfg` uses into `folder`."""
    n_train, n_test = synthetic_sizes(cfg)
    return f"uh data synth --out {folder} --train-per-class {n_train} --test-per-class {n_test}"


def load_data(cfg: Config, data_dir: Path, archive: Path | None, download: bool = True) -> RawData:
    """The run's archive, read; a synthetic profile checks that it got the sizes it needs."""
    dataset, path = prepare_archive(cfg, data_dir, archive, download)
    raw = read_archive(dataset, path)
    if cfg.dataset == "synthetic":
        need = synthetic_sizes(cfg)
        got = np.bincount(raw.train_y).tolist(), np.bincount(raw.test_y).tolist()
        if {*got[0]} != {need[0]} or {*got[1]} != {need[1]}:
            holds = f"{min(got[0])}-{max(got[0])}" if min(got[0]) != max(got[0]) else f"{got[0][0]}"
            tests = f"{min(got[1])}-{max(got[1])}" if min(got[1]) != max(got[1]) else f"{got[1][0]}"
            raise DataError(
                f"{path} holds {holds} training and {tests} test images per class, but the profile needs "
                f"{need[0]} and {need[1]}; regenerate it with `{synth_command(cfg, path.parent)}`"
            )
    return raw


def numeric_settings(device: torch.device, precision: Precision, deterministic: bool = False) -> dict:
    """What besides the config and seed fixes a run's numbers: a checkpoint resumes only under the same.

    The device and thread count split reductions differently; precision and compile mode change
    rounding; deterministic algorithms (--deterministic) change which kernels run.
    """
    return {
        "device": device.type,
        "cpu_threads": torch.get_num_threads() if device.type == "cpu" else None,
        "precision": str(precision),  # the setting's name: a checkpoint holds no object of the package
        "compile": engine.compile_mode() or "off",
        "deterministic": deterministic,
    }


def device_name(device: torch.device) -> str:
    """ "cuda: <the GPU's name>", or "cpu: <cpu_name()>": smoke numbers differ between CPU kinds
    (expected_results/README.md), so a result says which it is."""
    if device.type == "cuda":
        return f"cuda: {torch.cuda.get_device_name(device)}"
    return f"cpu: {cpu_name()}"


def cpu_name() -> str:
    """ "<the CPU's model> (<the instruction set torch's CPU kernels use>)", and oneDNN's cap where one is set
    (ONEDNN_MAX_CPU_ISA: its convolutions' kernels, which change R on their own, tests/test_golden_r.py)."""
    try:
        model = re.search(r"^model name\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.MULTILINE)
    except OSError:
        model = None
    name = model[1].strip() if model else platform.processor() or "cpu"
    onednn = os.environ.get("ONEDNN_MAX_CPU_ISA")
    return f"{name} ({torch.backends.cpu.get_cpu_capability()}{f', ONEDNN_MAX_CPU_ISA={onednn}' if onednn else ''})"


def stack(device: torch.device) -> dict:
    """The software and hardware a process computes with on `device`: Python, torch, Lightning, and on a GPU the
    CUDA, cuDNN and driver versions (None on a CPU), the device and the CPU."""
    gpu = device.type == "cuda"
    return {
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": L.__version__,
        "cuda": torch.version.cuda if gpu else None,
        "cudnn": str(torch.backends.cudnn.version()) if gpu else None,
        "driver": driver_version() if gpu else None,
        "device": device_name(device),
        "cpu": cpu_name(),
    }


def environment(device: torch.device, raw: RawData, settings: dict) -> dict:
    """The stack a result was made on and the settings besides its config that fix its numbers."""
    return {
        **stack(device),
        "cpu_threads": torch.get_num_threads(),
        "precision": settings["precision"],
        "compile": settings["compile"],
        "deterministic": settings["deterministic"],
        "data_md5": raw.md5,
        "data_source": raw.source,
        # the most GPU memory torch allocated in the process that finished the run; None on a CPU
        "peak_gpu_memory_gb": peak_gpu_memory_gb(device),
    }


def steps_record(tasks: list[dict]) -> dict:
    """How the tasks' training steps ran (method/graph.py): `step` "graph" or "eager" ("eager, graph" where tasks
    differ), and `step_refused`, each refused CUDA graph capture by task, or None."""
    ran = [task.get("step", "eager") for task in tasks]  # a task checkpointed before the record: eager
    refused = [f"task {t['task'] + 1}: {how.removeprefix('eager: ')}" for t, how in zip(tasks, ran, strict=True)]
    refused = [line for line, how in zip(refused, ran, strict=True) if how.startswith("eager: ")]
    return {"step": ", ".join(sorted({how.split(":")[0] for how in ran})), "step_refused": refused or None}


def manifest(cfg: Config, stream: TaskStream) -> dict:
    """The protocol as run: class order, split sizes, the settings the run read, the quota range per task
    (a policy that follows the quota rule), the open choices its protocol and components settle."""
    record = {**stream.manifest(), "settings_read": sorted(components.settings_read(cfg))}
    if components.POLICIES[cfg.memory].quotas:
        per_task = [quotas(cfg.budget, cfg.classes_per_task * (t + 1)) for t in range(cfg.n_tasks)]
        record["quota_per_task"] = [[min(q), max(q)] for q in per_task]
    return {**record, "open_choices": components.open_choices(cfg)}


@dataclasses.dataclass(frozen=True)
class Setup:
    """What a run computes with, each checked before anything is written under results/: the device, the precision
    decoded, the data and its task stream, the settings besides the config that fix the numbers, the checkpoint."""

    device: torch.device
    precision: Precision
    raw: RawData
    stream: TaskStream
    settings: dict
    checkpoint: Checkpoint
    trained_on: str  # device_name: where each task says it ran


@dataclasses.dataclass
class Learning:
    """A run's state between tasks, all of it in its checkpoint: the learner, the memory, the generators of the
    data (shuffles, replay draws, augmentation) and of the memory policies' choices, and the record so far."""

    learner: Learner
    memory: Memory
    data_gen: torch.Generator
    memory_gen: torch.Generator
    record: dict

    @property
    def generators(self) -> list[torch.Generator]:
        return [self.data_gen, self.memory_gen]


def run_seed(pair: RunPair, cfg: Config, echo: Callable[[str], None] = print, progress: bool = False) -> Path:
    """Every task of `pair` (method/task.py's learn_task), each checkpointed; the result.json path. `cfg` is the
    pair's config under its profile, resolved once by the command that names the run (catalogue.resolve).

    Every input is checked before anything is written under results/ (`set_up`); whether the run is done already is
    decided under its lock (results.done_already), and a checkpoint left by an interrupted run is resumed after its
    last task. A task that diverges, or that the readout cannot evaluate, stops the run before its checkpoint: the
    last good checkpoint stays and no result is written.
    """
    options = pair.options
    out = result_path(options.results_dir, pair.run_id, pair.seed)
    setup = set_up(pair, cfg, out)
    claim_dir(options.results_dir, options.profile)  # the results dir's profile, checked and recorded
    with run_lock(out.with_name(".lock")):
        if done_already(out, pair.run_id, pair.seed, options.profile, options.force, echo):  # no other process runs it
            return out
        if options.force:
            setup.checkpoint.path.unlink(missing_ok=True)
        learning = start(pair, cfg, setup, echo)
        try:
            learn_tasks(pair, cfg, setup, learning, echo, progress)
            result = finish(pair, cfg, setup, learning, out)
        except Interrupted as e:
            raise Interrupted(e.signum, setup.checkpoint.kept()) from None
    m = result["metrics"]
    echo(f"{pair}: ACC {m['acc']:.2f}  F {m['forgetting']:.2f}  BWT {m['bwt']:.2f} -> {out}")
    return out


def set_up(pair: RunPair, cfg: Config, out: Path) -> Setup:
    """The run's device (--device: devices.select), precision (--precision, decoded once: engine.precision), torch's
    deterministic algorithms (--deterministic), data and checkpoint; a bad UH_COMPILE, UH_STEP or UH_CPU_THREADS, a
    device that cannot run or data that cannot be read fails here, before anything is written under results/."""
    options = pair.options
    engine.compile_mode(), graph.setting(), cpu_threads()
    device = select(options.device, options.profile)
    precision = engine.precision(device, options.precision)
    deterministic_algorithms(options.deterministic)
    raw = load_data(cfg, options.data_dir, options.archive)
    settings = numeric_settings(device, precision, options.deterministic)
    checkpoint = Checkpoint(out.with_name("checkpoint.pt"), cfg, pair.seed, raw.md5, device, settings)
    stream = TaskStream(raw, cfg, device)
    return Setup(device, precision, raw, stream, settings, checkpoint, device_name(device))


def start(pair: RunPair, cfg: Config, setup: Setup, echo: Callable[[str], None]) -> Learning:
    """The learner, memory and generators of a fresh run, or as its checkpoint left them after its last task."""
    L.seed_everything(pair.seed, verbose=False)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale).to(setup.device)
    engine.channels_last(learner, setup.precision.fp16)  # before the checkpoint's weights are loaded into it
    data_gen = torch.Generator(device=setup.device).manual_seed(pair.seed)
    memory_gen = torch.Generator().manual_seed(pair.seed)
    memory = make_memory(cfg, memory_gen)
    fresh = {"rows": [], "tasks": [], "started": now()}
    record = setup.checkpoint.load(learner, memory, [data_gen, memory_gen]) or fresh
    if setup.checkpoint.task >= 0:
        echo(f"{pair}: resuming after task {setup.checkpoint.task + 1}/{cfg.n_tasks} ({setup.checkpoint.path})")
    return Learning(learner, memory, data_gen, memory_gen, record)


def learn_tasks(
    pair: RunPair, cfg: Config, setup: Setup, learning: Learning, echo: Callable[[str], None], progress: bool
) -> None:
    """The tasks after the last checkpointed one, each learned (learn_task), recorded and checkpointed."""
    checkpoint = setup.checkpoint
    for t in range(checkpoint.task + 1, cfg.n_tasks):
        tic = time.perf_counter()
        try:
            row, stats = learn_task(
                t, cfg, learning.learner, learning.memory, setup.stream, learning.data_gen, setup.precision, progress
            )
        except Diverged as e:  # before the checkpoint: the last good one stays
            raise RunError(
                f"task {t + 1}/{cfg.n_tasks} diverged ({e}); no result written, {checkpoint.kept()}"
            ) from None
        except ReadoutError as e:  # before the checkpoint, as a divergence
            raise RunError(f"task {t + 1}/{cfg.n_tasks}: {e}; no result written, {checkpoint.kept()}") from None
        learning.record["rows"].append(row)
        seconds = time.perf_counter() - tic
        learning.record["tasks"].append(task_record(t, setup.trained_on, seconds, learning.memory, stats))
        checkpoint.save(t, learning.learner, learning.memory, learning.generators, learning.record)
        echo(
            f"{pair} task {t + 1}/{cfg.n_tasks}: accuracy on seen tasks "
            f"{sum(row) / len(row):.2f}% ({learning.record['tasks'][-1]['wall_s']:.1f} s)"
        )


def finish(pair: RunPair, cfg: Config, setup: Setup, learning: Learning, out: Path) -> dict:
    """The run's final state (final.pt), then its result.json, last; the result."""
    code, diff = provenance()
    result = assemble(pair, cfg, setup, learning.record) | {
        "provenance": code,
        "command": portable_command(sys.argv, pair.options.results_dir),
    }
    keep_diff(out, diff)
    with setup.checkpoint.writing(out.with_name(FINAL_NAME)):
        save_final(out.with_name(FINAL_NAME), result, learning.learner, learning.memory)  # before the result
    setup.checkpoint.finish(out, result)
    return result


def now() -> str:
    """The time now in UTC, ISO 8601 to the second: when a run started and finished (result.json)."""
    return datetime.now(UTC).isoformat(timespec="seconds")


def keep_diff(out: Path, diff: str | None) -> None:
    """The modified tree's diff beside the result (code.diff, whose SHA-256 result.json records), before the result
    lands; a stale one from an earlier run of the pair goes."""
    path = out.with_name(DIFF_NAME)
    if diff is None:
        path.unlink(missing_ok=True)
    else:
        write_text_atomic(path, diff)


def task_record(t: int, device: str, seconds: float, memory: Memory, stats: TaskStats) -> dict:
    """result.json's record of task t: where it ran and with which code (a resumed run may go on elsewhere, or
    after an edit, or in a process that loaded other code: each task says so), its seconds, the memory's sizes after
    the refresh, and its training record (TaskStats)."""
    return {
        "task": t,
        "device": device,
        "code_sha256": code_hash(),
        "unhashed_code": unhashed_code(),
        "wall_s": round(seconds, 3),
        "active_size": sum(len(a) for a in memory.active.values()),
        "pool_size": memory.pool_size(),
        **stats.record(),
    }


def assemble(pair: RunPair, cfg: Config, setup: Setup, record: dict) -> dict:
    """result.json's content (docs/architecture.md): config, manifest, R, metrics, timings, environment."""
    R = metrics.square(record["rows"])
    return {
        "config_version": CONFIG_VERSION,
        "run_id": pair.run_id,
        "seed": pair.seed,
        "profile": pair.options.profile,
        "config": cfg.to_dict(),
        **catalogue.record(pair.run_id),  # a variant's base and changes (catalogue/variants.py); nothing for a run ID
        "manifest": manifest(cfg, setup.stream),
        "R": R,
        "metrics": {name: m.of(R) for name, m in {**metrics.PAPER, **metrics.REPORTED}.items()},
        "tasks": record["tasks"],
        "wall_s": round(sum(task["wall_s"] for task in record["tasks"]), 3),
        "started": record.get("started"),  # None for a run resumed from a checkpoint written before it was recorded
        "finished": now(),
        "environment": environment(setup.device, setup.raw, setup.settings) | steps_record(record["tasks"]),
    }
