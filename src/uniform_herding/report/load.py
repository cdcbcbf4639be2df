"""What `uh report` reads: every result of one profile as `Runs` (R matrices, per-seed metrics, wall times,
devices, per-epoch losses, uh doctor's estimates), and the seeds in the order the tables list them.

Every table and figure is drawn from one `Runs`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from uniform_herding.catalogue import BEYOND_PAPER, PAPER_RUNS, ConfigError, is_variant, pin
from uniform_herding.method.config import SEEDS
from uniform_herding.runs.jsonfiles import parse_json
from uniform_herding.runs.provenance import Made, made_by
from uniform_herding.runs.results import ResultError, load_results, per_seed_table, results_profile


@dataclass(frozen=True)
class Runs:
    """What every table and figure is drawn from: the results of one profile."""

    profile: str
    per_seed: pd.DataFrame  # run_id, seed, acc, forgetting, bwt (percent)
    R: dict[str, dict[int, np.ndarray]]  # run ID -> seed -> accuracy matrix [T, T], NaN above the diagonal
    n_tasks: int  # T
    wall_s: pd.DataFrame  # run_id, seed, wall_s: seconds of training, refresh and evaluation
    devices: tuple[str, ...]  # the devices the results were produced on
    paper: pd.DataFrame | None = None  # the paper's per-seed values to overlay, or None
    # run ID -> seed -> mean training loss of each epoch [T, epochs]; results that record it (result.json tasks)
    epoch_loss: dict[str, dict[int, np.ndarray]] = field(default_factory=dict)
    # run ID -> uh doctor's estimate of one seed in seconds (RESULTS_DIR/doctor.json of this profile), if any
    estimate_s: dict[str, float] = field(default_factory=dict)
    made: Made | None = None  # the results this checkout's code did not make (provenance.made_by)

    def stack(self, run_id: str) -> np.ndarray | None:
        """R of every seed of `run_id` [seeds, T, T], or None when the run is missing."""
        by_seed = self.R.get(run_id, {})
        return np.stack([by_seed[s] for s in sorted(by_seed)]) if by_seed else None

    def missing(self, run_ids: tuple[str, ...]) -> list[str]:
        return [r for r in run_ids if r not in self.R]

    def shown(self) -> tuple[str, ...]:
        """The paper's twelve run IDs (a missing one is a marked gap), then the runs beyond the paper
        that are present (a replication of the paper need not have them)."""
        return (*PAPER_RUNS, *(r for r in BEYOND_PAPER if r in self.R))


def load_runs(results_dir: Path) -> Runs:
    """Every result under `results_dir` (one profile), with R as float matrices (NaN above the diagonal)."""
    results = load_results(results_dir)
    profile = results_profile(results)
    R: dict[str, dict[int, np.ndarray]] = {}
    for r in results:  # each n_tasks x n_tasks of its profile's n_tasks (results.validate_result), one profile
        R.setdefault(r["run_id"], {})[r["seed"]] = np.array(r["R"], dtype=float)
    wall_s = pd.DataFrame(
        [(r["run_id"], r["seed"], float(r.get("wall_s", np.nan))) for r in results],
        columns=["run_id", "seed", "wall_s"],
    )
    recorded = {r.get("environment", {}).get("device", "unknown device") for r in results}
    recorded |= {t["device"] for r in results for t in r.get("tasks", []) if "device" in t}
    devices = tuple(sorted({device_label(str(d)) for d in recorded}))
    epoch_loss: dict[str, dict[int, np.ndarray]] = {}
    for r in results:  # recorded since the divergence guard; older results lack it
        if r.get("tasks") and all("epoch_loss" in t for t in r["tasks"]):
            epoch_loss.setdefault(r["run_id"], {})[r["seed"]] = np.array([t["epoch_loss"] for t in r["tasks"]])
    return Runs(
        profile,
        per_seed_table(results),
        R,
        len(results[0]["R"]),
        wall_s,
        devices,
        epoch_loss=epoch_loss,
        estimate_s=doctor_estimates(results_dir / "doctor.json", profile),
        made=made_by(results),
    )


def compared_with(runs: Runs, base: str) -> Runs:
    """`runs` with every variant compared with run ID `base` (uh report --base): renamed as uh run --base names it
    (catalogue.pin: `+vs=BASE`), so that every table, figure and finding reads the choice from its name."""
    try:
        names = {r: pin(r, base) for r in runs.R if is_variant(r)}
    except ConfigError as e:
        raise ResultError(str(e)) from None
    if len(set(names.values())) < len(names):
        same = sorted(r for r in names if list(names.values()).count(names[r]) > 1)
        raise ResultError(f"{' and '.join(same)} are one run compared with {base} ({names[same[0]]}); keep one of them")

    def by_name(table: dict) -> dict:
        return {names.get(r, r): value for r, value in table.items()}

    per_seed = runs.per_seed.assign(run_id=runs.per_seed["run_id"].replace(names))
    wall_s = runs.wall_s.assign(run_id=runs.wall_s["run_id"].replace(names))
    return dataclasses.replace(
        runs, per_seed=per_seed, R=by_name(runs.R), wall_s=wall_s, epoch_loss=by_name(runs.epoch_loss)
    )


def doctor_estimates(path: Path, profile: str, device: str | None = None) -> dict[str, float]:
    """uh doctor's estimate of one seed of each run ID, in seconds, where `path` holds a report of `profile` (the
    doctor writes RESULTS_DIR/doctor.json) and, where `device` is given ('cpu', 'cuda'), timed on a device of that
    type: the compute table sets each run's measured time beside it, uh price prices the device that will train."""
    try:
        report = parse_json(path, "uh doctor writes it again")
        if report.get("profile") != profile or device not in (None, str(report.get("device")).split(":")[0]):
            return {}
        return {run_id: float(parts["total_s"]) for run_id, parts in report["estimates"]["per_run_s"].items()}
    except (ValueError, KeyError, TypeError, AttributeError):  # ResultError (parse_json's) is a ValueError
        return {}  # no report, or one of another version: no estimate column


def device_label(device: str) -> str:
    """The device as a caption names it. Results written before result.json recorded the CPU's model say
    "cpu: cpu"; the caption says so rather than guess the model."""
    unnamed = device == "cpu: cpu"
    return "a CPU whose model these results do not name (written before uh recorded it)" if unnamed else device


def seed_order(per_seed: pd.DataFrame) -> list[int]:
    """The paper's seeds first (each a row, present or not), then any other seed the results hold."""
    return [*SEEDS, *sorted(set(per_seed["seed"]) - set(SEEDS))]


def seeds_of(per_seed: pd.DataFrame, run_id: str) -> list[int]:
    present = set(per_seed.loc[per_seed["run_id"] == run_id, "seed"])
    return [s for s in seed_order(per_seed) if s in present]
