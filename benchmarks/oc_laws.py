"""The faithful targets before (Bonferroni looks) and after (exact boundaries) under seed noise laws the rule
does not assume (heavy-tailed: Student t 3 df; skewed: chi-square 4 df), on the same draws for both
(expected_results/README.md, "Under models the rule does not assume").

    PYTHONPATH=src python benchmarks/oc_laws.py N SEED [PROCESSES]    # the README: 1500 202
"""

import sys
from dataclasses import replace
from multiprocessing import Pool
from pathlib import Path

import numpy as np

from uniform_herding.design.simulation import paper_seconds, pct
from uniform_herding.design.targets import cell
from uniform_herding.design.worlds import Model
from uniform_herding.verdict import decide
from uniform_herding.verdict.expected import load_expected

E = load_expected(Path("expected_results"))
OLD = replace(E, procedure=decide.Procedure(E.procedure.seeds, E.procedure.looks, (0.005, 0.002, 0.003, 0.005, 0.035)))
SETS = {"before": OLD, "after": E}


def run(job):
    name, law, f, rho, tau, n, seed = job
    s, bound = cell(
        SETS[name],
        Model(law, faithful=f, rho=rho, tau=tau, law=law, kind="faithful"),
        n,
        paper_seconds(E),
        20,
        np.random.default_rng(seed),
    )
    b = f" bound {100 * bound:.1f}" if f == "a" else ""
    return (
        f"{law:12} {name:6} ({f}) rho {rho:g} tau {tau:g} n {n}: RR {pct(s.passed)} NOT {pct(s.failed)}{b} "
        f"+runs {s.extra_runs:.1f} T4h {s.hours[0]:.1f} p90 {s.hours[1]:.1f}"
    )


if __name__ == "__main__":
    n, seed = int(sys.argv[1]), int(sys.argv[2])
    cells = [("a", 0.0, 0.75), ("c", 0.0, 0.75), ("a", 0.5, 0.75), ("c", 0.5, 0.75)]
    jobs = [
        (name, law, f, rho, tau, n, seed)
        for law in ("heavy-tailed", "skewed")
        for f, rho, tau in cells
        for name in SETS
    ]
    with Pool(int(sys.argv[3]) if len(sys.argv) > 3 else 1) as pool:
        for line in pool.imap(run, jobs):
            print(line, flush=True)
