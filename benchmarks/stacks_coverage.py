"""The coverage of `uh stacks`' 95% interval for tau, measured on simulated stacks (expected_results/README.md,
"Measuring tau: uh stacks", quotes its table).

Each simulated study is what the module's model says a set of re-runs is: the paper's 12 run IDs, each re-run on S
stacks with 3 seeds per stack, the seeds' SD of each run ID its ACC SD in expected_results/paper_per_seed.csv, and
each stack's offset to each run ID's mean drawn N(0, tau^2). The package's own anova, pooled and interval compute
its estimate and interval, as `uh stacks` does (20,000 draws of the estimate's law, seed 0). Printed per tau and S:
how often the interval holds the true tau, lies wholly above it (its low bound above tau) or wholly below it, with
the binomial Monte Carlo SE of the coverage, and the mean of the estimate less the true tau (its bias), with its SE.

    OMP_NUM_THREADS=1 python benchmarks/stacks_coverage.py [--studies 500] [--seed 20261128]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from uniform_herding.design.stacks import LEVEL, anova, interval, pooled
from uniform_herding.runs.results import read_per_seed_csv

TAUS = (0.0, 0.5, 1.0)  # pp
STACKS = (2, 5, 10)
SEEDS_PER_STACK = 3  # the paper's
PAPER = Path(__file__).resolve().parent.parent / "expected_results" / "paper_per_seed.csv"


def paper_sds(metric: str = "acc") -> dict[str, float]:
    """Each run ID's seed SD in the paper's per-seed table: the sigma_r the simulated seeds are drawn with."""
    table = read_per_seed_csv(PAPER)
    return {str(r): float(sd) for r, sd in table.groupby("run_id")[metric].std(ddof=1).items()}


def study(rng: np.random.Generator, sds: dict[str, float], tau: float, stacks: int) -> tuple[float, float, float]:
    """One simulated study's (tau estimate, low, high): per run ID, a stack's seeds are its offset plus seed noise."""
    found = []
    for run_id, sd in sds.items():
        offsets = rng.normal(0.0, tau, stacks)
        groups = [offset + rng.normal(0.0, sd, SEEDS_PER_STACK) for offset in offsets]
        found.append(anova(run_id, "acc", groups))
    low, high = interval(found)
    return float(np.sqrt(max(0.0, pooled(found)))), low, high


def row(rng: np.random.Generator, sds: dict[str, float], tau: float, stacks: int, studies: int) -> str:
    """One line of the table: coverage, misses on each side and the estimate's bias, coverage and bias with their
    Monte Carlo SEs."""
    results = np.array([study(rng, sds, tau, stacks) for _ in range(studies)])
    estimates, low, high = results.T
    above, below = np.mean(low > tau), np.mean(high < tau)
    covered = 1 - above - below
    se = np.sqrt(covered * (1 - covered) / studies)
    bias, bias_se = np.mean(estimates) - tau, np.std(estimates, ddof=1) / np.sqrt(studies)
    return (
        f"{tau:5.1f} {stacks:6d} {studies:7d} {covered:9.1%} {se:6.1%} {above:13.1%} {below:13.1%} "
        f"{bias:+10.3f} {bias_se:6.3f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--studies", type=int, default=500, help="simulated studies per tau and number of stacks")
    parser.add_argument("--seed", type=int, default=20261128)
    args = parser.parse_args(argv)
    if args.studies < 2:
        parser.error("--studies must be 2 or more: a Monte Carlo SE needs two studies")
    rng, sds, start = np.random.default_rng(args.seed), paper_sds(), time.perf_counter()
    print(
        f"uh stacks' {LEVEL:.0%} interval on simulated stacks: {len(sds)} run IDs (the paper's ACC seed SDs), "
        f"{SEEDS_PER_STACK} seeds per stack, seed {args.seed}"
    )
    print(
        f"{'tau':>5} {'stacks':>6} {'studies':>7} {'coverage':>9} {'MC SE':>6} {'wholly above':>13} "
        f"{'wholly below':>13} {'bias (pp)':>10} {'MC SE':>6}"
    )
    for tau in TAUS:
        for stacks in STACKS:
            print(row(rng, sds, tau, stacks, args.studies), flush=True)
    print(f"{time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
