"""`uh oc`: the operating characteristic of `uh check`. How often a faithful re-run is called RESULTS REPLICATED,
and how often a real miss or a claim with no true effect is, from whole re-runs simulated under stated models
(design/worlds.py) and judged by uh check's own function (design/simulation.py), each figure beside the target it is
held to (design/targets.py). `operating_characteristic` plans the simulations `--only` asks for, runs them and yields
what `uh oc` prints, part by part; `--derive` prints the tolerances a per-seed table implies under the set's rule, and
the claims' boundaries anew from their design (design/boundaries.py), so anyone can re-derive the shipped set.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from uniform_herding.catalogue import PAPER_RUNS
from uniform_herding.design.boundaries import derive_lines
from uniform_herding.design.simulation import (
    CLAIM_HEADER,
    FAITHFUL,
    HEADER,
    LAW_CLAIMS,
    GatingDraws,
    Simulation,
    Summary,
    claim_cost,
    contradicts,
    gating_draws,
    paper_seconds,
    pct,
    run_calls,
    share,
    simulation,
)
from uniform_herding.design.targets import TARGET_MISS, TAU_TARGETED, cell, settle, targets
from uniform_herding.design.worlds import CENTER, Model, law_nulls, models
from uniform_herding.errors import UhError
from uniform_herding.method.metrics import METRICS
from uniform_herding.runs.results import ResultError, read_per_seed_csv, write_text_atomic
from uniform_herding.verdict.claims import PAPER_CLAIMS
from uniform_herding.verdict.expected import (
    Expected,
    ExpectedError,
    expected_dir_for,
    find_expected_root,
    load_expected,
)

RHOS, TAUS = (0.0, 0.5, 0.8), (0.5, 0.75, 1.0)
RUNS_CSV = "procedure_runs.csv"  # the extra runs' distribution uh doctor prices on this GPU (not part of the set)
ONLY = {  # `--only`'s part: the simulations it prints
    "faithful": ("faithful",),
    "misses": ("misses", "contradicts", "gating"),
    "gating": ("gating",),
    "claims": ("claims",),
    "laws": ("law nulls", "law claims"),
}


@dataclass(frozen=True)
class Options:
    """What `uh oc` is asked: the set (None: the paper's), the draws of each kind of simulation, the random seed, the
    grid of rho and tau, the one part to print (None: all), a per-seed CSV to derive from instead, the processes,
    and where to write the extra runs of (a) at the grid's centre."""

    expected_dir: Path | None
    draws: int
    grid_draws: int
    gating_draws: int
    close_draws: int
    seed: int
    rhos: tuple[float, ...]
    taus: tuple[float, ...]
    only: str | None
    derive_csv: Path | None
    jobs: int
    runs_out: Path | None


@dataclass(frozen=True)
class Plan:
    """The simulations of one `uh oc`, by part, and the faithful grid and the misses they were made from."""

    grid: list[tuple[str, float, float]]  # (faithful model, rho, tau)
    misses: list[Model]
    parts: dict[str, list[Simulation]]


def operating_characteristic(options: Options) -> Iterator[str]:
    """What `uh oc` prints, each line as soon as it is known: with --derive, the set's derivation alone; else the set
    and its procedure, then (after the simulations, whose progress goes to standard error) each part's figures, the
    targets and the time taken. UhError where the set cannot be used."""
    expected = expected_set(options.expected_dir)
    if options.derive_csv:
        yield "\n".join(derive_text(replace(expected, per_seed=per_seed(options.derive_csv))))
        return
    if expected.profile != "paper":
        raise UhError(f"{expected.directory} holds profile {expected.profile}; the models are the paper's")
    yield from procedure_lines(expected)
    started, plan = time.monotonic(), planned(expected, options)
    yield f"{sum(map(len, plan.parts.values()))} simulations on {options.jobs} process{'es' * (options.jobs > 1)} ..."
    done = run_calls(plan.parts, options.seed, options.jobs)
    done, close_draws = settle(
        plan.parts, done, targets(done, plan.grid, plan.misses), options.close_draws, options.seed, options.jobs
    )
    yield from part_lines(expected, plan, done, options)
    if found := targets(done, plan.grid, plan.misses):
        yield (
            f"\ntargets: where the first draws' interval held a target, its cell was simulated again on "
            f"{close_draws:,} fresh draws; where that one holds it too, it is too close to call"
        )
        yield "\n".join(t.line() for t in found)
    elapsed = time.monotonic() - started
    yield (
        f"\ntook {elapsed // 60:.0f} min {elapsed % 60:.0f} s in {options.jobs} process{'es' * (options.jobs > 1)} on "
        f"this machine's {os.cpu_count()} CPUs"
    )


def expected_set(directory: Path | None) -> Expected:
    """The set `uh oc` judges by: `directory`, else the paper's (expected_results/ in or above the working directory
    or the package)."""
    try:
        return load_expected(
            directory or expected_dir_for("paper", find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
        )
    except ExpectedError as e:
        raise UhError(str(e)) from None


def per_seed(path: Path) -> pd.DataFrame:
    """The per-seed table `--derive` derives from."""
    try:
        return read_per_seed_csv(path)
    except ResultError as e:
        raise UhError(str(e)) from None


def procedure_lines(expected: Expected) -> list[str]:
    """The set judged by, its gating metrics and the claims' looks and levels."""
    p = expected.procedure
    levels = (
        f"exact boundaries, supporting at one-sided {', '.join(f'{a:g}' for a in p.alpha)}"
        if p and p.design
        else f"one-sided alpha {' + '.join(f'{a:g}' for a in p.alpha)}"
        if p
        else ""
    )
    looks = (
        f"looks at {', '.join(map(str, p.looks))} seeds, {levels}" if p else "one look on the set's seeds, alpha 0.05"
    )
    return [
        f"uh oc: simulated re-runs judged by uh check's code against {expected.describe()}",
        f"gating metrics: {', '.join(expected.gate)}; claims: {looks}",
    ]


def planned(expected: Expected, options: Options) -> Plan:
    """Every simulation of the parts `--only` asks for: the faithful grid (--draws at its centre, --grid-draws
    elsewhere), the misses with the faithful (c) they must not beat, each claim with no effect, the nulls under the
    laws the rule does not assume, the gating table per tau and each claim alone."""
    p = expected.procedure
    max_seeds, seconds = p.looks[-1] if p else len(expected.seeds), paper_seconds(expected)
    n = options.grid_draws
    grid = [(f, rho, tau) for f in FAITHFUL for rho in options.rhos for tau in options.taus]
    misses = models(expected)
    yardstick = Model(FAITHFUL["c"], rho=CENTER[0], tau=CENTER[1], kind="faithful")  # what noisier must not beat
    parts = {
        "faithful": [
            simulation(
                cell,
                expected,
                Model(FAITHFUL[f], faithful=f, rho=rho, tau=tau, kind="faithful"),
                options.draws if (rho, tau) == CENTER else n,
                seconds,
                max_seeds,
            )
            for f, rho, tau in grid
        ],
        "misses": [simulation(cell, expected, m, n, seconds, max_seeds) for m in [*misses, yardstick]],
        "contradicts": [simulation(contradicts, expected, c.claim_id, n, "normal") for c in PAPER_CLAIMS],
        "law nulls": [simulation(cell, expected, m, n, seconds, max_seeds) for m in law_nulls(expected)],
        "law claims": [simulation(contradicts, expected, c, n, law) for law, c in LAW_CLAIMS],
        "gating": [simulation(gating_draws, expected, tau, options.gating_draws) for tau in sorted(set(options.taus))],
        "claims": [simulation(claim_cost, expected, c, n, seconds) for c in PAPER_CLAIMS],
    }
    return Plan(grid, misses, {k: v for k, v in parts.items() if options.only is None or k in ONLY[options.only]})


def part_lines(expected: Expected, plan: Plan, done: dict[str, list[Any]], options: Options) -> Iterator[str]:
    """Each part's figures, in the order printed, for the parts simulated."""
    if "faithful" in done:
        yield from faithful_lines(plan.grid, done["faithful"], options.runs_out)
    if "misses" in done:
        yield from misses_lines(plan.misses, done["misses"], done["contradicts"])
    if "gating" in done:
        yield (
            f"\neach gating metric alone under (c), rho {CENTER[0]:g}, on the paper's three seeds "
            f"({options.gating_draws:,} draws per tau): how often a faithful re-run fails it, beside the share of "
            f"the family's alpha the rule gives it ({expected.rule.alpha:.3%}: x, its multiple); and the "
            f"detectable miss, the smallest shift of its true mean that passes at most {TARGET_MISS:.0%} of "
            "the time"
        )
        yield "\n".join(gating_lines(expected, done["gating"]))
    if "law nulls" in done:
        yield "\n".join(law_lines(done["law nulls"], done["law claims"]))
    if "claims" in done:
        yield (
            f"\none claim alone (uh check --claim), under (a) at rho {CENTER[0]:g}, tau {CENTER[1]:g}, "
            f"{options.grid_draws} draws; T4 hours on the paper's Tesla T4; P(RR-like): EXPECTED SET MATCHED, the "
            "claim SUPPORTED and its run IDs REPLICATED"
        )
        yield "\n".join([CLAIM_HEADER, *done["claims"]])


def faithful_lines(
    grid: list[tuple[str, float, float]], done: list[tuple[Summary, float]], runs_out: Path | None
) -> Iterator[str]:
    """The faithful grid's rows (the extra runs of (a) at the centre written to `runs_out` where given) and what its
    columns mean."""
    yield f"\nfaithful re-runs, over rho x tau (targets up to tau {TAU_TARGETED:g}; beyond it, shown only):\n{HEADER}"
    for (f, rho, tau), (s, _) in zip(grid, done, strict=True):
        if runs_out and (f, rho, tau) == ("a", *CENTER):
            write_extra_runs(runs_out, s)
        yield s.row(f"{FAITHFUL[f][:3]} rho {rho:g}, tau {tau:g}")
    yield (
        "\nP(RR), P(NOT), P(INC): RESULTS REPLICATED, NOT REPLICATED, INCONCLUSIVE at the end of the "
        "procedure, each with its 95% Wilson interval; und.1: UNDECIDED after the paper's runs; +runs: the "
        "runs next_step asked for; T4 h, p90: the whole procedure's GPU hours on the paper's Tesla T4, mean "
        "and 90th percentile"
    )


def misses_lines(
    misses: list[Model], done: list[tuple[Summary, float]], against: list[tuple[tuple, tuple, int]]
) -> Iterator[str]:
    """The misses' and nulls' rows, then each claim with no effect judged alone: the contradicts side."""
    yield f"\nmisses and nulls, under (c) at rho {CENTER[0]:g}, tau {CENTER[1]:g}:\n{HEADER}"
    for model, (s, _) in zip(misses, done, strict=False):
        yield s.row(model.name)
    yield (
        f"\nthe contradicts side: each claim with every comparison at zero true effect ((b) truth, rho "
        f"{CENTER[0]:g}, tau {CENTER[1]:g}), judged by its procedure alone"
    )
    for claim, (contradicted, wrongly, n) in zip(PAPER_CLAIMS, against, strict=True):
        yield f"  {claim.claim_id}: NOT SUPPORTED {pct(contradicted)}%, SUPPORTED {pct(wrongly)}% ({n} draws)"


def gating_lines(expected: Expected, draws: list[GatingDraws]) -> list[str]:
    """Per gating metric, worst first (at the largest tau): its false-fail rate at each tau beside the nominal share
    the rule gives it, and the detectable miss at the first tau."""
    share_ = expected.rule.alpha if expected.rule else float("nan")
    rates = np.stack([d.false_fails() for d in draws], 1)  # [metrics, taus]
    miss = draws[0].detectable_miss(TARGET_MISS)
    lines = [
        f"  {'metric':14} "
        + " ".join(f"{f'tau {d.tau:g}':>16}" for d in draws)
        + f"  {f'detectable (tau {draws[0].tau:g})':>22}"
    ]
    for j in np.argsort(-rates[:, -1], kind="stable"):  # the largest tau orders them
        run_id, metric = draws[0].metrics[j]
        cells = " ".join(f"{100 * r:7.3f}% ({r / share_:4.1f}x)" for r in rates[j])
        lines.append(f"  {run_id + ' ' + metric:14} {cells}  {miss[j]:20.1f} pp")
    family = [share(int(d.fails().any(1).sum()), len(d.differences)) for d in draws]
    return [
        *lines,
        f"  the family: any gating metric fails, at each tau: {'; '.join(map(pct, family))} (% [95% CI]) "
        f"against its {100 * share_ * len(rates):g}%",
    ]


def law_lines(nulls: list[tuple[Summary, float]], claims: list[tuple[tuple, tuple, int]]) -> list[str]:
    """What `uh oc` prints of the nulls under the seed noise laws the rule does not assume: C1's null through the
    whole procedure, and each claim with no effect judged alone, per law."""
    centre = f"rho {CENTER[0]:g}, tau {CENTER[1]:g}"
    lines = [
        "\nnulls under seed noise laws the rule does not assume (Student t 3 df, chi-square 4 df and its mirror, each "
        f"scaled to the paper's SD), under (c) at {centre}:\n{HEADER}",
        *(s.row(s.model.name) for s, _ in nulls),
        f"each claim with every comparison at zero effect ((b) truth, {centre}), judged by its procedure alone:",
    ]
    for (law, claim_id), (against, supported, n) in zip(LAW_CLAIMS, claims, strict=True):
        lines.append(f"  {law:16} {claim_id}: SUPPORTED {pct(supported)}%, NOT SUPPORTED {pct(against)}% ({n} draws)")
    return lines


def write_extra_runs(path: Path, s: Summary) -> None:
    """Each set of extra runs the procedure asked for, as a row: its share of the simulated re-runs, and per paper
    run ID the seeds beyond the paper's three. uh doctor prices each row with its own per-run estimates."""
    rows = [{"share": k / s.n, **dict.fromkeys(PAPER_RUNS, 0), **dict(pattern)} for pattern, k in s.extra.most_common()]
    write_text_atomic(path, pd.DataFrame(rows, columns=["share", *PAPER_RUNS]).to_csv(index=False, float_format="%.5f"))


def derive_text(expected: Expected) -> list[str]:
    """What `uh oc --derive` prints: per metric the moderated spreads and their df, and each run ID's tolerance
    at every look's seeds."""
    if expected.rule is None:
        raise UhError(f"{expected.directory}: its tolerances are stated as numbers, not derived")
    rule = expected.rule
    looks = expected.procedure.looks if expected.procedure else (len(expected.seeds),)
    lines = [
        f"rule: tolerance = t(nu, 1 - alpha/2) * sqrt(s^2 (1/{len(expected.seeds)} + 1/k) + tau^2); "
        f"tau {rule.tau:g} pp, alpha {rule.alpha:.6g} per metric"
    ]
    for metric in METRICS:
        spread = expected.spreads[metric]
        lines.append(
            f"\n[{metric}] moderated spreads, {spread.df:.2f} df; tolerance (pp) at k = "
            + ", ".join(map(str, looks))
            + " counted seeds"
        )
        for run_id, sd in spread.sd.items():
            tolerances = "  ".join(f"{expected.tolerance_for(run_id, metric, k):5.2f}" for k in looks)
            lines.append(f"  {run_id:3} s {sd:5.2f}   {tolerances}")
    p = expected.procedure
    return lines + (derive_lines(p.design, p.looks, p.alpha, p.contradicts) if p and p.design and p.contradicts else [])
