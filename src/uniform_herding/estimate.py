"""What a run costs on this machine: `uh doctor`'s model, from its timings, and `uh price`'s sums over runs.

A run of one seed (runs/run.py's run_seed, in a process already started) spends:
  start-up     once: read and verify the archive, put its tensors on the device (timing's run_startup_s; None,
               counted 0, where uh doctor had no archive to read);
  per task t   the fit's start-up (startup_s) and its training steps (step_s, B3's; run_steps), the feature passes
               outside training (feature_image_s per image; feature_images), herding's selection loop (per
               step of a batch of classes, herd_step_s and herd_row_s per candidate row; herd_batches), and a
               checkpoint (checkpoint_s).
A lone `uh run` also starts its process first (launch_s: importing Lightning and the method), and so does every
job of `uh run --jobs N`; `uh run --jobs 1` runs its runs in its own process, started once.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from uniform_herding.catalogue import PAPER_RUNS, RUNS, images_per_class, resolve
from uniform_herding.method.components import POLICIES
from uniform_herding.method.config import SEEDS, Config

if TYPE_CHECKING:
    from uniform_herding.verdict.decide import Procedure

# Which classes a policy's refresh embeds (memory.py): every seen class's candidate pool (Uniform Herding re-selects
# all of them), the new classes only (ranked once on arrival), or none (a random choice reads no feature).
EMBEDS = {
    "uniform_herding": "pools",
    "icarl": "new",
    "closest_to_mean": "new",
    "static": None,
    "reservoir": None,
    "none": None,
}


def run_steps(cfg: Config) -> list[tuple[int, int, bool]]:
    """(steps, images per step, teacher?) of each task of a run."""
    per_class = images_per_class(cfg)[0]
    per_task = math.ceil(per_class * cfg.classes_per_task / cfg.batch_size) * cfg.epochs
    teacher = cfg.loss == "icarl_bce" or cfg.kd_lambda > 0
    return [(per_task, cfg.batch_size + (cfg.retrieval if t else 0), teacher and t > 0) for t in range(cfg.n_tasks)]


def herds(cfg: Config) -> bool:
    """Whether the run's memory selects by greedy herding (memory.herd): the policies that settle its features."""
    return "herding_features" in POLICIES[cfg.memory].open_choices(cfg)


def embedded_classes(cfg: Config) -> str | None:
    """EMBEDS' entry for the run: Uniform Herding with random selection (a4) embeds nothing."""
    return EMBEDS[cfg.memory] if cfg.memory != "uniform_herding" or herds(cfg) else None


def old_pools(cfg: Config, t: int) -> list[int]:
    """Uniform Herding's candidates per old class at task t: what task t-1's refresh kept, min(rho * q_c, n)."""
    from uniform_herding.method.memory import quotas  # here: `uh price` prices without torch

    per_class, old = images_per_class(cfg)[0], cfg.classes_per_task * t
    return [min(cfg.rho * q, per_class) for q in quotas(cfg.budget, old)] if old else []


def feature_images(cfg: Config, t: int) -> dict[str, int]:
    """Images task t passes through the backbone outside training, by what reads them: every seen test image
    (evaluation); the active exemplars (the NME prototypes, at most M); the new classes' training images (imprinting,
    from t = 1); the memory's refresh (the new classes' images, and for Uniform Herding the old classes' pools)."""
    per_class, test_per_class = images_per_class(cfg)
    new = cfg.classes_per_task * per_class
    embeds = embedded_classes(cfg)
    return {
        "evaluation": (t + 1) * cfg.classes_per_task * test_per_class,
        "prototypes": min(cfg.budget, (t + 1) * new) if cfg.readout == "nme" else 0,
        "imprint": new if cfg.imprint and t > 0 else 0,
        "refresh": (new + (sum(old_pools(cfg, t)) if embeds == "pools" else 0)) if embeds else 0,
    }


def herd_batches(cfg: Config, t: int, together: bool) -> list[tuple[int, int]]:
    """Herding's batches at task t (memory.herd_classes; herd_groups decides which classes go at once, `together`
    on a GPU): (steps, rows) of each, steps the most any of its classes chooses, rows its classes x candidates.
    Uniform Herding re-selects the q_c of every seen class, the old ones from their pools (old_pools); iCaRL herds
    the new classes once, from their stream."""
    if not herds(cfg):
        return []
    from uniform_herding.method.memory import herd_groups, quotas

    per_class, new = images_per_class(cfg)[0], cfg.classes_per_task
    q = quotas(cfg.budget, cfg.classes_per_task * (t + 1))
    uh = cfg.memory == "uniform_herding"
    sizes, ks = ([*old_pools(cfg, t), *[per_class] * new], q) if uh else ([per_class] * new, q[-new:])
    groups = herd_groups(sizes, together)
    return [(min(max(ks[c] for c in g), sizes[g[0]]), sizes[g[0]] * len(g)) for g in groups]


def run_seconds(run_id: str, profile: str, timing: dict[str, float]) -> dict[str, float]:
    """One seed of `run_id` in a started process, in seconds, by part: training (from B3's measured step, a step
    costing in proportion to its images, a teacher adding a forward: 1 of a forward + backward's 4 units); and
    the rest (module docstring): the run's start-up, per task the fit's start-up, the feature passes of
    feature_images, herding's steps and a checkpoint."""
    cfg, b3 = resolve(run_id, profile), resolve("B3", profile)
    unit = timing["step_s"] / ((b3.batch_size + b3.retrieval) * 4)  # seconds per image-unit of a B3 step
    tasks = range(cfg.n_tasks)
    parts = {
        "train_s": sum(n * images * (4 if teacher else 3) * unit for n, images, teacher in run_steps(cfg)),
        "startup_s": (timing["run_startup_s"] or 0.0) + cfg.n_tasks * timing["startup_s"],
        "features_s": sum(sum(feature_images(cfg, t).values()) for t in tasks) * timing["feature_image_s"],
        "herding_s": sum(
            steps * (timing["herd_step_s"] + rows * timing["herd_row_s"])
            for t in tasks
            for steps, rows in herd_batches(cfg, t, bool(timing["herd_together"]))
        ),
        "checkpoints_s": cfg.n_tasks * timing["checkpoint_s"],
    }
    other = sum(parts.values()) - parts["train_s"]
    return {**parts, "other_s": other, "total_s": parts["train_s"] + other}


def estimates(timing: dict[str, float], profile: str, jobs: int, speedup: float | None) -> dict:
    """Seconds per run ID (one seed) and for `all` (the paper's run IDs x seeds), one at a time and, where a
    speed-up of `jobs` runs at once was measured on this machine, with --jobs: each run then is a job process
    of its own, which pays the job's start-up (timing's launch_s) before its run (not so with --jobs 1)."""
    per_run = {run_id: run_seconds(run_id, profile, timing) for run_id in RUNS}
    runs = len(PAPER_RUNS) * len(SEEDS)  # `all`: the paper's twelve run IDs x seeds
    total = sum(per_run[run_id]["total_s"] for run_id in PAPER_RUNS) * len(SEEDS)
    launch = timing["launch_s"] if jobs > 1 else 0.0  # --jobs 1 runs in `uh run`'s own process
    with_jobs = None if speedup is None else (total + runs * launch) / speedup
    return {"per_run_s": per_run, "all_s": total, "jobs": jobs, "jobs_speedup": speedup, "all_s_with_jobs": with_jobs}


PROCEDURE_RUNS = "procedure_runs.csv"  # uh oc --runs-out's, in expected_results/


def procedure_runs_csv() -> Path | None:
    """expected_results/procedure_runs.csv (uh oc --runs-out), found as uh check finds the expected set; None where
    there is none: procedure_seconds has nothing to price."""
    from uniform_herding.verdict.expected import ExpectedError, find_expected_root

    try:
        path = find_expected_root([Path.cwd(), Path(__file__).resolve().parent]) / PROCEDURE_RUNS
    except ExpectedError:
        return None
    return path if path.is_file() else None


def procedure_seconds(per_run: dict[str, dict[str, float]], extra_runs: pd.DataFrame) -> dict[str, float]:
    """The whole procedure on this machine, one run at a time: the paper's run IDs x seeds, plus each set of extra
    runs uh oc's faithful re-runs asked for (a row of expected_results/procedure_runs.csv: its share, and per run
    ID the seeds beyond the paper's), priced with this machine's per-run estimates. Mean and 90th percentile."""
    base = sum(per_run[r]["total_s"] for r in PAPER_RUNS) * len(SEEDS)
    totals = base + sum(extra_runs[r].to_numpy(float) * per_run[r]["total_s"] for r in PAPER_RUNS)
    order = np.argsort(totals)
    shares = np.cumsum(extra_runs["share"].to_numpy(float)[order])
    # the least total with 90% of the shares at or below it (uh oc's inverted_cdf); the shares are given to 5
    # decimals, so their sum may miss 0.9 by float noise, which must not move the percentile to the next total
    p90 = float(totals[order][np.searchsorted(shares, 0.9 * shares[-1] - 1e-9)])
    return {"mean_s": float(np.average(totals, weights=extra_runs["share"])), "p90_s": p90}


def price(
    per_run_s: dict[str, float], n_seeds: int, procedure: Procedure | None, extra_runs: pd.DataFrame | None
) -> dict[str, float]:
    """What `./reproduce.sh all` runs, at `per_run_s` per run (one seed of each run ID; 1 each counts the runs):
    "paper", the paper's run IDs on `n_seeds` seeds; with a procedure, "most", every run its looks can ask
    for (the claims' run IDs on the last look's seeds, the others' on the paper's), and, where uh oc's
    faithful re-runs are given (`extra_runs`, procedure_seconds), the whole procedure's "mean" and "p90"."""
    from uniform_herding.verdict.claims import CLAIMS

    out = {"paper": sum(per_run_s[r] for r in PAPER_RUNS) * n_seeds}
    if procedure is None:
        return out
    claims = {r for claim in CLAIMS if not claim.finding for r in claim.runs}
    out["most"] = sum(per_run_s[r] * (procedure.looks[-1] if r in claims else len(SEEDS)) for r in PAPER_RUNS)
    if extra_runs is not None:
        whole = procedure_seconds({r: {"total_s": s} for r, s in per_run_s.items()}, extra_runs)
        out |= {"mean": whole["mean_s"], "p90": whole["p90_s"]}
    return out
