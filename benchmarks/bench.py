"""Speed benchmark: our on-device data path against a conventional one, in one invocation.

Goal: one B3 run (70 epochs x 10 tasks, ~20 PFLOP) in <= 120 s on one H100. Prints, for a full-size
synthetic CIFAR-100 archive (speed does not depend on pixel values):
  data      images/s of producing augmented, normalised training batches on the device
  step      images/s of the training step (data + forward/backward of student and teacher + SGD),
            both pipelines through the same plain loop, then ours through the real training loop (train.fit_task)
  host      host synchronisations (should be 0; on a GPU, where each was called) and operator dispatches per step:
            each dispatch costs the host microseconds, so their count bounds an eager GPU step from
            below and says what CUDA graphs (UH_COMPILE=reduce-overhead) could save
            (on a CPU also counted for the GPU path: fp16 autocast, grad scaler, fused SGD)
  projection  the measured training step time x the 25,200 steps of a paper-size B3 run
  run       (--run PROFILE) wall time per task and per run of `uh run B3`, from result.json
  profile   (--profile-steps N) the top operators of N training steps (torch.profiler)

Conventional pipeline, as common continual-learning libraries feed CIFAR: a Dataset returning PIL
images with torchvision RandomCrop(32, padding=4) + RandomHorizontalFlip + ToTensor + Normalize and a
shuffling DataLoader with persistent worker processes (their start-up is not timed, which favours
it), batches copied to the device. torchvision's CIFAR100 class refuses archives whose md5 is not
the official one, so the Dataset is built from the same uint8 arrays. Every figure is the median
over --repeats timed repetitions. Results: benchmarks/RESULTS.md.

    python benchmarks/bench.py                              # GPU if present, else a small CPU setting
    python benchmarks/bench.py --run paper --profile-steps 20   # on a GPU: the full-size B3 run too
    python benchmarks/bench.py --before /tmp/ref/src          # the fit, this code against an older one
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from torch import Tensor
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils.data import DataLoader, Dataset
from torch.utils.flop_counter import FlopCounterMode
from torchvision import transforms

from uniform_herding.catalogue import resolve
from uniform_herding.data.archive import DATASETS, read_archive, write_synthetic_archive
from uniform_herding.method import engine, train
from uniform_herding.method.config import Config
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream
from uniform_herding.runs.devices import select
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.run import run_seed

HOST_READS = ("item", "tolist", "numpy", "cpu", "__bool__", "__int__", "__float__", "__index__")
# Dense fp16 tensor-core peaks (NVIDIA's datasheets: half the figures "with sparsity"); the first key found in
# the name torch.cuda.get_device_name() gives counts, so each PCIe or NVL card comes before its SXM sibling:
# "NVIDIA H100 80GB HBM3" (SXM), "NVIDIA H100 PCIe", "NVIDIA H100 NVL", "NVIDIA H200", "NVIDIA H200 NVL",
# "NVIDIA A100-SXM4-80GB" / "NVIDIA A100 80GB PCIe" (one peak), "Tesla T4".
PEAK_FP16_TFLOPS = {
    "H100 PCIe": 756.0,
    "H100 NVL": 835.0,
    "H100": 989.0,
    "H200 NVL": 835.0,
    "H200": 989.0,
    "A100": 312.0,
    "T4": 65.0,
}


def peak_tflops(device_name: str) -> float | None:
    """The GPU's dense fp16 peak, for MFU; None for a GPU not in the table."""
    return next((peak for key, peak in PEAK_FP16_TFLOPS.items() if key in device_name), None)


class PILCifar(Dataset):
    """CIFAR-100 the torchvision way: PIL image in, transform, (tensor, label) out."""

    def __init__(self, x: np.ndarray, y: np.ndarray, transform: Callable) -> None:
        self.images = x.transpose(0, 2, 3, 1)  # [N,32,32,3] HWC, as torchvision's CIFAR100 stores them
        self.y, self.transform = y, transform

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int) -> tuple[Tensor, int]:
        return self.transform(Image.fromarray(self.images[i])), int(self.y[i])


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def repeated(fn: Callable[[], int], device: torch.device, repeats: int) -> list[tuple[float, float]]:
    """(images/s, seconds) of each of `repeats` timed calls of `fn` (which returns the images it processed),
    after one warm-up."""
    fn()
    runs = []
    for _ in range(repeats):
        synchronize(device)
        tic = time.perf_counter()
        n = fn()
        synchronize(device)
        secs = time.perf_counter() - tic
        runs.append((n / secs, secs))
    return runs


def timed(fn: Callable[[], int], device: torch.device, repeats: int) -> tuple[float, float]:
    """Median images/s and seconds of `fn` (which returns the images it processed), after one warm-up."""
    runs = repeated(fn, device, repeats)
    return statistics.median(r for r, _ in runs), statistics.median(s for _, s in runs)


def print_before_after(args: argparse.Namespace) -> None:
    """--before: the fit's images/s and operator dispatches per step of the code in args.before (a src folder)
    and of this code, each measured by this script in its own process (--fit-only) with the same settings,
    alternating --rounds times so that the machine's load falls on both alike."""
    here = str(Path(train.__file__).parents[2])  # this code's src folder
    child = [
        sys.executable,
        __file__,
        "--fit-only",
        "--device",
        args.device,
        "--repeats",
        str(args.repeats),
        "--data-dir",
        str(args.data_dir),
    ]
    for flag in ("precision", "width", "steps", "threads"):
        if getattr(args, flag) is not None:
            child += [f"--{flag}", str(getattr(args, flag))]
    figures: dict[str, list[dict]] = {"before": [], "after": []}
    for _ in range(args.rounds):
        for side, src in (("before", str(args.before)), ("after", here)):
            out = subprocess.run(
                child, env={**os.environ, "PYTHONPATH": src}, capture_output=True, text=True, check=True
            ).stdout
            figures[side].append(json.loads(out.strip().splitlines()[-1]))
    print(f"before: {args.before}; after: {here}; {args.rounds} rounds of {args.repeats} repeats each")
    for side, runs in figures.items():
        rates = sorted(r for run in runs for r in run["rates"])
        ops = sorted({run["dispatches"] for run in runs})
        print(
            f"fit    {side:6} {statistics.median(rates):8.0f} img/s (median of {len(rates)}; "
            f"{rates[0]:.0f}-{rates[-1]:.0f})   {', '.join(f'{o:g}' for o in ops)} operator dispatches per step"
        )


@dataclass
class Task:
    """One task's fit as the benchmark runs it: train.fit_task's inputs (one epoch per fit; the replay draws from
    the task's own items: only their count matters for speed)."""

    cfg: Config
    learner: Learner
    teacher: Learner
    stream: TaskStream
    replay: Tensor
    generator: torch.Generator
    precision: engine.Precision  # a str: the code before it (--before) reads its value, "16-mixed" or "32-true"


def fit(task: Task, items: Tensor) -> train.TaskStats:
    """One task's fit through the code under test: train.fit_task's loop; or, where PYTHONPATH holds the code
    before the loop (--before: 33981c2's, whose train.py has a LightningModule), that module's Trainer.fit."""
    if hasattr(train, "TaskModule"):  # the code before the loop, for --before only
        module = train.TaskModule(
            task.cfg, task.learner, task.teacher, task.stream, task.replay, task.generator, task.precision
        )
        return train.fit_task(module, items, task.stream.device, False)
    return train.fit_task(
        task.cfg, task.learner, task.teacher, task.stream, task.replay, items, task.generator, task.precision
    )


def ours(task: Task, items: Tensor, steps: int) -> Iterator[tuple]:
    """`steps` batches of the real path: shuffled items through the step's inputs (b replay draws appended,
    crop, flip and normalise on the device)."""
    while True:
        for batch in train.Batches(items, task.cfg.batch_size, task.generator):
            yield train.inputs(task.cfg, task.stream, batch, task.replay, task.generator)
            steps -= 1
            if steps == 0:
                return


def conventional(loader: DataLoader, device: torch.device, steps: int) -> Iterator[tuple]:
    """`steps` batches from the DataLoader (a fresh iterator per epoch, as Lightning makes one), copied over."""
    while True:
        for x, y in loader:
            yield x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            steps -= 1
            if steps == 0:
                return


def make_step(
    cfg: Config, learner: Learner, teacher: Learner, device: torch.device, fp16: bool
) -> Callable[[Tensor, Tensor], None]:
    """The step of train.fit_task without Fabric: loss with KD, backward, unscale, clip, SGD; on the GPU
    path (16-mixed) fp16 autocast, loss scaling and fused SGD."""
    opt = train.sgd(cfg, learner.parameters(), fused=fp16)
    scaler = torch.amp.GradScaler(device.type, enabled=fp16)

    def step(x: Tensor, y: Tensor) -> None:
        with torch.autocast(device.type, torch.float16, enabled=fp16):
            logits = learner(x)[1]
            with torch.no_grad():
                teacher_logits = teacher(x)[1][:, : cfg.classes_per_task]
            loss = train.task_loss(cfg, logits, y, teacher_logits)
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(learner.parameters(), cfg.grad_clip)
        scaler.step(opt)
        scaler.update()

    return step


def unfused(cfg: Config, params: Iterable[Tensor], fused: bool) -> torch.optim.SGD:
    """The GPU path's SGD with the other fix for torch 2.11's fused-SGD defect: unfused (selftest's reference)."""
    return torch.optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)


SYNC_SITES: Counter[str] = Counter()  # file:line of each synchronising op the CUDA sync debug mode flagged


def host_syncs(fn: Callable[[], object], gpu: bool) -> int:
    """Reads of tensor values by the host while `fn` runs: Python-level reads, and on CUDA every op
    the sync debug mode flags (its place counted in SYNC_SITES). Each one stalls the GPU queue."""
    count = 0

    def counting(read: Callable) -> Callable:
        def counted(self: Tensor, *args: object, **kwargs: object) -> object:
            nonlocal count
            count += 1
            return read(self, *args, **kwargs)

        return counted

    originals = {name: getattr(Tensor, name) for name in HOST_READS}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            for name, read in originals.items():
                setattr(Tensor, name, counting(read))
            if gpu:
                torch.cuda.set_sync_debug_mode("warn")
            fn()
        finally:
            for name, read in originals.items():
                setattr(Tensor, name, read)
            if gpu:
                torch.cuda.set_sync_debug_mode("default")
    synced = [w for w in caught if "synchroniz" in str(w.message)]
    SYNC_SITES.update(f"{Path(w.filename).name}:{w.lineno}" for w in synced)
    return count + len(synced)


class Dispatches(TorchDispatchMode):
    """Counts the ATen operators dispatched while active (forward, backward, loss, clip, SGD)."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += 1
        return func(*args, **(kwargs or {}))


def dispatches(fn: Callable[[], object]) -> int:
    with Dispatches() as counter:
        fn()
    return counter.count


def fit_steps(task: Task, items: Tensor, n_steps: int) -> tuple[int, int]:
    """One train.fit_task (one epoch, set-up included) of exactly `n_steps` full batches: the task's items
    repeated past one epoch as needed (a paper task holds 36 batches). Returns the steps and images that ran,
    counted by the fit itself, so that every figure divides by what ran."""
    batch_size = task.cfg.batch_size
    repeated = items.repeat(-(-n_steps * batch_size // len(items)))[: n_steps * batch_size]
    ran = fit(task, repeated).steps
    if ran != n_steps:
        raise RuntimeError(f"asked for {n_steps} training steps, {ran} ran")
    return ran, ran * (batch_size + task.cfg.retrieval)  # + b replayed


def step_flops(learner: Learner, device: torch.device) -> float:
    """FLOPs of one training image: student forward + backward (3x forward) + teacher forward."""
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        learner.backbone(torch.zeros(1, 3, 32, 32, device=device))
    return 4.0 * counter.get_total_flops()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument(
        "--precision",
        choices=list(engine.Precision),
        help="default: the runs' own, 16-mixed on a GPU (the paper's) and 32-true on a CPU",
    )
    parser.add_argument("--width", type=int, help="ResNet-18 base width (default 64 on GPU, 16 on CPU)")
    parser.add_argument("--steps", type=int, help="training steps per repetition (default 108 GPU, 6 CPU)")
    parser.add_argument("--data-steps", type=int, default=36, help="batches per data-only repetition (one epoch)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--workers", type=int, default=2, help="DataLoader workers of the conventional pipeline")
    parser.add_argument("--threads", type=int, help="torch intra-op threads (default: torch's choice)")
    parser.add_argument("--data-dir", type=Path, default=Path("data/bench"), help="where the synthetic archive goes")
    parser.add_argument("--run", metavar="PROFILE", help="also time `uh run B3 --profile PROFILE --seed 1993`")
    parser.add_argument("--profile-steps", type=int, default=0, help="profile this many training steps")
    parser.add_argument(
        "--before",
        type=Path,
        metavar="SRC",
        help="only the fit's images/s and dispatches, of the code in SRC (a src folder) and of this",
    )
    parser.add_argument("--rounds", type=int, default=2, help="--before: alternations of the two codes")
    parser.add_argument("--fit-only", action="store_true", help=argparse.SUPPRESS)  # --before's measuring process
    args = parser.parse_args(argv)
    device = select("cuda", "paper") if args.device == "cuda" else torch.device("cpu")  # the runs' GPU settings
    gpu = device.type == "cuda"
    precision = engine.precision(device, args.precision)
    width, steps = args.width or (64 if gpu else 16), args.steps or (108 if gpu else 6)
    if args.threads:
        torch.set_num_threads(args.threads)

    folder = args.data_dir / "synthetic-500x100"  # full CIFAR-100 size: 50,000 train, 10,000 test images
    archive = folder / DATASETS["cifar100"].filename
    if not archive.exists():
        write_synthetic_archive("cifar100", folder)
    raw = read_archive("cifar100", archive)
    cfg = resolve("B3", "paper")  # batch 128 + b = 64 replayed images per step, 4500 images per task
    stream = TaskStream(raw, cfg, device)
    items = stream.train_items(0)
    gen = torch.Generator(device=device).manual_seed(0)
    batch = cfg.batch_size + cfg.retrieval
    name = torch.cuda.get_device_name(device) if gpu else f"cpu, {torch.get_num_threads()} threads"
    print(
        f"device: {name}; torch {torch.__version__}; {precision}; width {width}; {steps} steps of {batch} images; "
        f"median of {args.repeats}"
    )

    transform = transforms.Compose(
        [
            transforms.RandomCrop(32, padding=4),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(stream.mean.flatten().tolist(), stream.std.flatten().tolist()),
        ]
    )
    dataset = PILCifar(stream.train_x[items].cpu().numpy(), stream.train_y[items].cpu().numpy(), transform)
    loader = DataLoader(
        dataset,
        batch_size=batch,
        shuffle=True,
        num_workers=args.workers,
        pin_memory=gpu,
        persistent_workers=args.workers > 0,
    )

    def drain(batches: Iterator[tuple]) -> int:
        return sum(len(y) for _, y in batches)

    learner = Learner(width, cfg.head, cfg.cos_scale).to(device)
    learner.head.grow(2 * cfg.classes_per_task)
    engine.channels_last(learner, precision == "16-mixed")
    teacher = train.freeze(learner)
    task = Task(dataclasses.replace(cfg, epochs=1), learner, teacher, stream, items, gen, precision)

    def fit_images(n_steps: int) -> int:
        return fit_steps(task, items, n_steps)[1]

    def per_step(count: Callable[[Callable[[], object]], float]) -> float:
        """`count` per training step: a fit of 3 steps minus a fit of 1, so that set-up cancels out."""
        return (count(lambda: fit_images(3)) - count(lambda: fit_images(1))) / 2

    if args.fit_only:  # one side of --before's comparison: the figures as JSON, for the invocation that asked
        rates = [rate for rate, _ in repeated(lambda: fit_images(steps), device, args.repeats)]
        print(json.dumps({"rates": rates, "dispatches": per_step(dispatches)}))
        return
    if args.before:
        print_before_after(args)
        return

    data_ours, _ = timed(lambda: drain(ours(task, items, args.data_steps)), device, args.repeats)
    data_conv, _ = timed(lambda: drain(conventional(loader, device, args.data_steps)), device, args.repeats)
    print(
        f"data   ours {data_ours:10.0f} img/s   conventional {data_conv:10.0f} img/s   "
        f"ratio {data_ours / data_conv:6.1f}x"
    )

    step = make_step(cfg, learner, teacher, device, precision == "16-mixed")

    def run_steps(batches: Iterator[tuple]) -> int:
        n = 0
        for x, y in batches:
            step(x, y)
            n += len(y)
        return n

    step_ours, _ = timed(lambda: run_steps(ours(task, items, steps)), device, args.repeats)
    step_conv, _ = timed(lambda: run_steps(conventional(loader, device, steps)), device, args.repeats)
    print(
        f"step   ours {step_ours:10.0f} img/s   conventional {step_conv:10.0f} img/s   "
        f"ratio {step_ours / step_conv:6.1f}x   (same plain loop)"
    )

    fit_rate, fit_s = timed(lambda: fit_images(steps), device, args.repeats)  # fit_steps: exactly `steps` ran
    flops = step_flops(learner, device)
    line = (
        f"fit    ours {fit_rate:10.0f} img/s   {1000 * fit_s / steps:.2f} ms/step "
        f"(train.fit_task, its set-up included)   {flops / 1e9:.2f} GFLOP/img   "
        f"{fit_rate * flops / 1e12:.1f} TFLOP/s"
    )
    peak = peak_tflops(name) if gpu else None
    print(line + (f"   MFU {100 * fit_rate * flops / 1e12 / peak:.1f}% of {peak:.0f}" if peak else ""))

    syncs, ops = per_step(lambda fn: host_syncs(fn, gpu)), per_step(dispatches)
    print(
        f"host   {syncs:g} host synchronisations and {ops:g} operator dispatches per training step "
        "(fit of 3 steps minus fit of 1)"
    )
    if SYNC_SITES:  # where the synchronising ops were called (the fits of 3 and of 1 together)
        print("host   synchronised at " + ", ".join(f"{site} ({n}x)" for site, n in SYNC_SITES.most_common(8)))
    if not gpu and precision == "32-true":  # the GPU path's counts (fp16 casts, grad scaler, fused SGD) need no GPU
        task.precision = engine.Precision.FP16
        ops, syncs = per_step(dispatches), per_step(lambda fn: host_syncs(fn, gpu))
        print(
            f"host   GPU path, fused SGD with zero-filled momentum buffers (ours): {syncs:g} host "
            f"synchronisations and {ops:g} operator dispatches per training step (run here on the CPU)"
        )
        train.sgd, fused_sgd = unfused, train.sgd  # the alternative: unfused SGD, whose scaler step reads found_inf
        try:
            ops, syncs = per_step(dispatches), per_step(lambda fn: host_syncs(fn, gpu))
        finally:
            train.sgd = fused_sgd
        print(
            f"host   GPU path, unfused SGD (the alternative fix): {syncs:g} host synchronisations (the scaler "
            f"reads found_inf before each step) and {ops:g} operator dispatches per training step"
        )
        task.precision = engine.Precision.FP32
        learner.to(memory_format=torch.contiguous_format)
        teacher.to(memory_format=torch.contiguous_format)
    run_steps_paper = cfg.epochs * cfg.n_tasks * len(train.Batches(items, cfg.batch_size, gen))  # cfg: paper B3
    print(
        f"projection  {run_steps_paper} steps of a paper-size B3 run x {1000 * fit_s / steps:.2f} ms "
        f"= {run_steps_paper * fit_s / steps:.0f} s of training at width {width} (target: 120 s for "
        f"the whole run at width 64, i.e. {120_000 / run_steps_paper:.2f} ms per step)"
    )

    if args.profile_steps:
        activities = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if gpu else [])
        with torch.profiler.profile(activities=activities) as prof:
            fit_images(args.profile_steps)
            synchronize(device)
        sort = "self_device_time_total" if gpu else "self_cpu_time_total"
        print(prof.key_averages().table(sort_by=sort, row_limit=15))

    if args.run:
        with tempfile.TemporaryDirectory() as tmp:
            options = RunOptions(
                args.run,
                args.data_dir,
                Path(tmp),
                archive=archive if args.run == "paper" else None,
                precision=precision,
                device=device.type,
            )
            out = run_seed(options.pair("B3", 1993), resolve("B3", args.run), echo=lambda s: None)
            result = json.loads(out.read_text())
        per_task = " ".join(f"{t['wall_s']:.1f}" for t in result["tasks"])
        print(
            f"run    B3 --profile {args.run} --seed 1993: {result['wall_s']:.1f} s "
            f"(per task: {per_task}); ACC {result['metrics']['acc']:.2f}"
        )


if __name__ == "__main__":
    main()
