"""`uh check --bundle F --recompute`: R's last row of each run evaluated again on the CPU from its final state.

A result.json is numbers anyone can type; its final state (final.pt: the learner after the last task and the
memory's active exemplars, runs/final.py) is what gave its last row. Here the row is evaluated again by the run's own
readout, `evaluate.accuracy_row` on the task stream the run read (the same function, nothing re-implemented), and
compared with the recorded row. That needs the dataset: the archive the run read, by its md5 (the smoke profile's
synthetic archive is written again as uh run writes it).

Tolerance: each entry may differ by `TOLERANCE` percentage points, or by one test image of its task where that is
more. Another device's float rounding (a GPU's kernels, another CPU's instruction set) moves a prediction only where
two classes' scores tie to within it, so a few of the paper's 1,000 test images per task at most; 0.5 points is 5 of
them. On the CPU kind that made a CPU run (the smoke profile), the row is bit-equal, as the tests require. A forged
entry beyond the tolerance is caught; one within it moves ACC by less than the checker's tolerances
(expected_results/README.md) could see.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from uniform_herding.catalogue import resolve
from uniform_herding.data.archive import DataError, RawData
from uniform_herding.errors import UhError
from uniform_herding.method.evaluate import ReadoutError, accuracy_row
from uniform_herding.method.stream import TaskStream
from uniform_herding.runs.devices import select
from uniform_herding.runs.final import FINAL_NAME, FinalError, load_final
from uniform_herding.runs.results import ResultError, load_results, result_path
from uniform_herding.runs.run import load_data, synthetic_sizes

TOLERANCE = 0.5  # percentage points per entry of R's last row (or one test image of the task, where more)


class RecomputeError(UhError):
    """A recompute that cannot run (no final state, no dataset, another archive): one line, exit 2."""


def differences(recorded: list[float], recomputed: list[float], test_images: list[int]) -> list[str]:
    """The entries of a last row beyond the tolerance, as "task j: recorded x, recomputed y"."""
    return [
        f"task {j + 1}: recorded {a:.2f}, recomputed {b:.2f}"
        for j, (a, b, n) in enumerate(zip(recorded, recomputed, test_images, strict=True))
        if abs(a - b) > max(TOLERANCE, 100 / n) + 1e-9
    ]


def recompute_last_rows(
    results_dir: Path, data_dir: Path, run_ids: tuple[str, ...], echo: Callable[[str], None]
) -> list[str]:
    """Each run's last row evaluated again from its final.pt, on the CPU; the runs whose row differs beyond the
    tolerance, each "RUN seed S (task j: recorded x, recomputed y; ...)". Only the runs of `run_ids` where given (uh
    check --run-ids): every one of them must have its final state, or none is recomputed and RecomputeError names
    those without (a run left unrecomputed would pass unchecked); likewise where the dataset is missing or not the
    one a run read."""
    try:
        results = load_results(results_dir)
    except ResultError as e:
        raise RecomputeError(str(e)) from None
    asked = [r for r in results if not run_ids or r["run_id"] in run_ids]
    if lacking := [f"{r['run_id']} seed {r['seed']}" for r in asked if not final_path(results_dir, r).is_file()]:
        named = ", ".join(lacking[:4]) + (f" and {len(lacking) - 4} more" if len(lacking) > 4 else "")
        raise RecomputeError(
            f"{named}: no final state (final.pt) in the bundle, so --recompute cannot check "
            f"{'its' if len(lacking) == 1 else 'their'} last row: bundle the runs with uh bundle --with-weights, or "
            "leave their run IDs out with --run-ids"
        )
    for r in results:
        if r not in asked:
            echo(f"{r['run_id']} seed {r['seed']}: not recomputed (--run-ids leaves it out)")
    archives: dict[tuple, RawData] = {}
    differ = []
    for result in asked:
        row, test_images = last_row(result, final_path(results_dir, result), data_dir, archives)
        name = f"{result['run_id']} seed {result['seed']}"
        if wrong := differences(result["R"][-1], row, test_images):
            differ.append(f"{name} ({'; '.join(wrong)})")
            echo(f"{name}: last row recomputed on the CPU DIFFERS from the recorded one: {'; '.join(wrong)}")
        else:
            gap = max(abs(a - b) for a, b in zip(result["R"][-1], row, strict=True))
            echo(f"{name}: last row recomputed on the CPU equals the recorded one (largest difference {gap:.2f})")
    return differ


def final_path(results_dir: Path, result: dict[str, Any]) -> Path:
    return result_path(results_dir, result["run_id"], result["seed"]).with_name(FINAL_NAME)


def last_row(
    result: dict[str, Any], path: Path, data_dir: Path, archives: dict[tuple, RawData]
) -> tuple[list[float], list[int]]:
    """R's last row from the final state at `path` under the run's readout, and each task's number of test images;
    `archives` keeps each archive read once."""
    cfg = resolve(result["run_id"], result["profile"])
    device = select("cpu", result["profile"])  # the CPU, with uh run's fixed thread count (UH_CPU_THREADS)
    which = (cfg.dataset, synthetic_sizes(cfg) if cfg.dataset == "synthetic" else None)
    try:
        if which not in archives:
            archives[which] = load_data(cfg, data_dir, None, download=False)
    except DataError as e:
        raise RecomputeError(f"{e}; or give the --data-dir that uh run used (it downloads the archive)") from None
    raw = archives[which]
    recorded = result.get("environment", {}).get("data_md5")
    if raw.md5 != recorded:
        raise RecomputeError(
            f"{result['run_id']} seed {result['seed']} read an archive of md5 {recorded}, but "
            f"--data-dir {data_dir} holds md5 {raw.md5}; give the --data-dir of the archive it read"
        )
    stream = TaskStream(raw, cfg, device)
    try:
        learner, active = load_final(path, result, cfg, len(stream.train_x))
    except FinalError as e:
        raise RecomputeError(str(e)) from None
    t = cfg.n_tasks - 1
    try:
        row = accuracy_row(learner, stream, t, cfg.readout, active, cfg.eval_batch_size)
    except ReadoutError as e:  # a final state whose memory the run's own readout could not have read
        raise RecomputeError(f"{path}: {e}") from None
    return row, [len(stream.test_items(j)) for j in range(t + 1)]
