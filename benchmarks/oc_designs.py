"""The boundary designs of expected_results/README.md ("Which boundaries") compared on the same draws of model (a):
mean extra runs and P(RESULTS REPLICATED) per design and cell. Not part of `uh oc`: it chose the design once and
stays to redo that choice. Each exact design's levels come from `boundaries.derive` on 1,000,000 null paths.

    PYTHONPATH=src python benchmarks/oc_designs.py N SEED [RHO,TAU ...]    # the README: 2000 101 0.5,0.5 0.5,0.75

Futility (not shipped): an undecided comparison at looks 2-4 whose one-sided p exceeds FUTILE stops there, as if
decided; its claim then ends INCONCLUSIVE, a verdict that asks for no more seeds.
"""

import sys
from dataclasses import replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from uniform_herding.design.boundaries import derive
from uniform_herding.design.simulation import paper_seconds, pct
from uniform_herding.design.targets import cell
from uniform_herding.design.worlds import Model
from uniform_herding.verdict import decide
from uniform_herding.verdict.boundaries import Design
from uniform_herding.verdict.expected import load_expected

E = load_expected(Path("expected_results"))
FUTILE = 0.5
FUTILITY_LOOKS = E.procedure.looks[1:-1]  # the seeds of looks 2-4
outcome = decide.PairedTest.outcome


def futile_outcome(test: decide.PairedTest, alpha: float = decide.ALPHA, against: float | None = None):
    """PairedTest.outcome, and at looks 2-4 an undecided test whose one-sided p exceeds FUTILE is futile."""
    decision = outcome(test, alpha, against)
    if decision is decide.Decision.UNDECIDED and test.n in FUTILITY_LOOKS and test.p_value(test.sign) > FUTILE:
        return "futile"  # neither SUPPORTS nor UNDECIDED: the comparison stops, its claim is not supported
    return decision


def exact(first: float, gamma: float) -> decide.Procedure:
    design = Design(0.049, 0.0245, first, gamma, 1_000_000, 1)
    supports, contradicts = derive(design, E.procedure.looks, (1, 4, 6))
    return replace(E.procedure, alpha=supports, contradicts=contradicts, design=design)


BEFORE = decide.Procedure(E.procedure.seeds, E.procedure.looks, (0.005, 0.002, 0.003, 0.005, 0.035))
DESIGNS = {
    "Bonferroni (before)": (BEFORE, False),
    "exact 0.2, gamma -2 (shipped)": (exact(0.2, -2.0), False),
    "exact 0.2, gamma -1": (exact(0.2, -1.0), False),
    "exact 0.2, gamma -2, futility": (exact(0.2, -2.0), True),
}


def run(job: tuple) -> str:
    name, rho, tau, n, seed = job
    procedure, futility = DESIGNS[name]
    decide.PairedTest.outcome = futile_outcome if futility else outcome  # this worker process only
    model = Model("design", faithful="a", rho=rho, tau=tau, kind="faithful")
    s, _ = cell(replace(E, procedure=procedure), model, n, paper_seconds(E), 20, np.random.default_rng(seed))
    return (
        f"{name:30} (a) rho {rho:g} tau {tau:g} n {n}: +runs {s.extra_runs:5.2f} RR {pct(s.passed)} NOT {pct(s.failed)}"
    )


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    cells = [tuple(map(float, c.split(","))) for c in sys.argv[3:]] or [(0.5, 0.5)]
    with Pool(2) as pool:
        for line in pool.imap(run, [(name, rho, tau, n, seed) for rho, tau in cells for name in DESIGNS]):
            print(line, flush=True)
