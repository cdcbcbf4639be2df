"""`uh stacks`: the stack offset tau of the checker's rule, measured from re-runs of the same run IDs on several stacks.

The rule (decide.Rule, tolerances.toml [derive]) allows each stack (GPU, driver, CUDA, torch, ...) to move a run
ID's mean by an offset of SD tau, on top of the seeds' noise; tau is stated, never measured. Here each SOURCE is one
stack, and the model is, for metric m, run ID r, stack s and seed k:

    y = mu_{r,m} + delta_{s,r,m} + e_{s,r,k,m},   delta ~ N(0, tau_m^2),   e ~ N(0, sigma_{r,m}^2),

all independent: one tau per metric, one seed spread per run ID and metric, and a seed run on two stacks two
independent draws of e (a seed's trajectory on one stack is taken to share nothing with its trajectory on another;
a shared part of variance a would lower the estimate of tau^2 by a / n, n the seeds per stack).

The estimate, per metric: each run ID's one-way random-effects ANOVA over the stacks holding it (method of moments:
tau_r^2 = (MS_between - MS_within) / n0, n0 the seeds per stack, Searle's n0 where the stacks ran different
numbers), pooled over the run IDs with weights proportional to their between-stack degrees of freedom (fixed
weights, so the pool is unbiased whatever each run ID's sigma), then truncated at 0: tau = sqrt(max(0, pooled)).

The interval inverts the test of each tau^2 by the pooled estimate's own law: under tau^2 it is a weighted sum
of chi-squares, sum_r w_r ((sigma_r^2 + n0 tau^2) X_r - sigma_r^2 W_r) / n0 with X_r ~ chi2(S_r - 1) / (S_r - 1),
W_r ~ chi2(N_r - S_r) / (N_r - S_r), the sigma_r^2 set to each run ID's MS_within; tau^2 is in the interval
where the estimate lies between that law's (1 - level) / 2 and (1 + level) / 2 quantiles (Monte Carlo, fixed
draws, so the bounds are monotone in tau^2 and reproducible). With two or three stacks a run ID's between-stack
mean square has 1 or 2 degrees of freedom, far from normal: that law is its exact chi-square (for equal seeds per
stack; approximate otherwise), where a Wald or Satterthwaite interval assumes it nearly normal, and a generalized
(fiducial) interval pools inverted chi-squares of 1 df, whose heavy tails undercover (expected_results/README.md,
"Measuring tau: uh stacks", gives the figures). benchmarks/stacks_coverage.py measures the inversion's coverage
on simulated stacks (that README quotes its table): near its level, but it errs more often above tau than below,
from the plugged-in sigmas.

"Stacks to pin tau to +/- 0.25 pp": the fewest stacks S at which the interval's half-width, (high - low) / 2, is
0.25 pp or less, were every run ID re-run on S stacks with the seeds per stack it has now and the mean squares at
their expectations under the current estimate (tau^2 and each MS_within as the truth): the same inversion, no
data simulated.

It only reports: a measured tau enters the rule only as a dated amendment to tolerances.toml, made before the
re-runs it would judge (expected_results/README.md, "Measuring tau: uh stacks").
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from scipy import optimize

from uniform_herding.catalogue import sort_key
from uniform_herding.runs.results import (
    METRICS,
    ResultError,
    load_results,
    per_seed_table,
    read_per_seed_csv,
    results_profile,
    stack_labels,
    write_json_atomic,
)
from uniform_herding.verdict.aggregate import InputError
from uniform_herding.verdict.expected import ExpectedError, expected_dir_for, find_expected_root, load_expected

LEVEL = 0.95
DRAWS = 20_000  # Monte Carlo draws of the estimate's law: its 2.5% quantile to about 2% of its SD
SEED = 0
PIN = 0.25  # pp: the half-width "stacks to pin" asks for
MOST_STACKS = 1000  # beyond this, "stacks to pin" says so
TAU_IS = "tau: the SD of the offset a stack adds to all seeds of a run ID alike, beyond the seeds' own noise,"
AMENDMENT = "Reported only: tau enters the rule as a dated tolerances.toml amendment, before re-runs it judges."


@dataclass(frozen=True)
class Stack:
    """One SOURCE: its per-seed table, the profile its results record (None for a per-seed CSV), its stack label
    (None for a CSV, which records none) and any other labels its results carry (a source that mixes stacks)."""

    source: str
    table: pd.DataFrame
    profile: str | None
    label: str | None
    other_labels: tuple[str, ...] = ()


def stack_label(results: list[dict[str, Any]]) -> tuple[str, tuple[str, ...]]:
    """The environment most of `results` ran in ("cuda: Tesla T4, torch 2.11.0+cu128, python 3.11.9, 16-mixed,
    compile off"), and the others."""
    (label, _), *others = stack_labels(results).most_common()
    return label, tuple(other for other, _ in others)


def read_stack(path: Path) -> Stack:
    """A results folder, a bundle zip (`uh bundle`) or a per-seed CSV as one stack; ResultError if unusable."""
    if path.suffix == ".zip" and path.is_file():
        from uniform_herding.evidence.verify import opened  # imported only for a bundle

        with opened(path) as bundle:
            results = load_results(bundle.results_dir)
    elif path.suffix == ".csv" and path.is_file():
        return Stack(str(path), read_per_seed_csv(path), None, None)
    elif path.is_dir():
        results = load_results(path)
    else:
        raise ResultError(f"{path}: not a results folder, a bundle (.zip, uh bundle) or a per-seed CSV (.csv)")
    label, others = stack_label(results)
    return Stack(str(path), per_seed_table(results), results_profile(results), label, others)


@dataclass(frozen=True)
class Cell:
    """One run ID and metric over the stacks holding it: the one-way ANOVA's sums of squares and degrees of freedom."""

    run_id: str
    metric: str
    stacks: int  # S
    seeds: float  # N, over all stacks (a projection's may be fractional: projected)
    ss_between: float
    ss_within: float
    n0: float  # seeds per stack (Searle's n0 where they differ)

    @property
    def df_between(self) -> float:
        return self.stacks - 1

    @property
    def df_within(self) -> float:
        return self.seeds - self.stacks

    @property
    def ms_between(self) -> float:
        return self.ss_between / self.df_between

    @property
    def ms_within(self) -> float:
        return self.ss_within / self.df_within

    @property
    def tau2(self) -> float:
        """The method-of-moments tau^2 of this run ID alone, untruncated (E[MS_between] = sigma^2 + n0 tau^2)."""
        return (self.ms_between - self.ms_within) / self.n0

    def to_dict(self) -> dict[str, Any]:
        fields = dataclasses.asdict(self)
        return fields | {k: getattr(self, k) for k in ("df_between", "df_within", "ms_between", "ms_within", "tau2")}


def anova(run_id: str, metric: str, groups: Sequence[np.ndarray]) -> Cell:
    """The one-way ANOVA of `groups`, one array of per-seed values per stack."""
    sizes = np.array([len(g) for g in groups], float)
    means = np.array([np.mean(g) for g in groups])
    total, grand = sizes.sum(), np.concatenate(groups).mean()
    ss_between = float(np.sum(sizes * (means - grand) ** 2))
    ss_within = float(sum(np.sum((g - np.mean(g)) ** 2) for g in groups))
    n0 = float((total - np.sum(sizes**2) / total) / (len(groups) - 1))
    return Cell(run_id, metric, len(groups), int(total), ss_between, ss_within, n0)


def cells(stacks: Sequence[Stack], metric: str) -> list[Cell]:
    """One Cell per run ID that two or more stacks hold, with 2 seeds or more on one of them (else the seeds' spread
    is unknown), in the paper's order."""
    run_ids = Counter(r for s in stacks for r in set(s.table["run_id"]))
    out = []
    for run_id in sorted((r for r, n in run_ids.items() if n >= 2), key=sort_key):
        groups = [s.table.loc[s.table["run_id"] == run_id, metric].to_numpy(float) for s in stacks]
        cell = anova(run_id, metric, [g for g in groups if len(g)])
        if cell.df_within > 0:
            out.append(cell)
    return out


def weights(cells: Sequence[Cell]) -> np.ndarray:
    """Each run ID's weight in the pool: its between-stack degrees of freedom, the information on tau it carries."""
    df = np.array([c.df_between for c in cells], float)
    return df / df.sum()


def pooled(cells: Sequence[Cell]) -> float:
    """The pooled method-of-moments tau^2, untruncated: sum_r w_r tau_r^2."""
    return float(weights(cells) @ np.array([c.tau2 for c in cells]))


def interval(cells: Sequence[Cell], level: float = LEVEL, draws: int = DRAWS, seed: int = SEED) -> tuple[float, float]:
    """The `level` interval for tau (pp) by inverting the test of each tau^2 by the pooled estimate (module doc).

    (0, 0) where the stacks' means agree more closely than even tau = 0 would have them at this level."""
    rng = np.random.default_rng(seed)
    w = weights(cells) / np.array([c.n0 for c in cells])
    sigma2 = np.array([c.ms_within for c in cells])
    n0 = np.array([c.n0 for c in cells])
    between = rng.chisquare([c.df_between for c in cells], (draws, len(cells))) / [c.df_between for c in cells]
    within = rng.chisquare([c.df_within for c in cells], (draws, len(cells))) / [c.df_within for c in cells]
    base, slope = (sigma2 * (between - within)) @ w, (n0 * between) @ w  # the estimate = base + tau^2 slope
    estimate, tail = pooled(cells), (1 - level) / 2

    def beyond(tau2: float, p: float) -> float:
        return float(np.quantile(base + tau2 * slope, p)) - estimate

    def root(p: float) -> float:
        if beyond(0.0, p) >= 0:
            return 0.0
        high = max(estimate, 1.0)
        while beyond(high, p) < 0:
            high *= 4
        return optimize.brentq(beyond, 0.0, high, args=(p,), xtol=1e-10)

    return float(np.sqrt(root(1 - tail))), float(np.sqrt(root(tail)))


def projected(cells: Sequence[Cell], tau2: float, stacks: int) -> list[Cell]:
    """`cells` as `stacks` stacks would give them, each run ID with its seeds per stack and its sums of squares at
    their expectations under tau^2 and its MS_within."""
    return [
        dataclasses.replace(
            c,
            stacks=stacks,
            seeds=stacks * c.n0,
            ss_between=(stacks - 1) * (c.ms_within + c.n0 * tau2),
            ss_within=stacks * (c.n0 - 1) * c.ms_within,
        )
        for c in cells
    ]


def stacks_to_pin(cells: Sequence[Cell], half_width: float = PIN, most: int = MOST_STACKS) -> int | None:
    """The fewest stacks whose interval has `half_width` or less at the current estimate (module doc); None if more
    than `most`. The half-width shrinks as stacks are added, so a bisection finds it."""
    tau2 = max(0.0, pooled(cells))

    def pinned(stacks: int) -> bool:
        low, high = interval(projected(cells, tau2, stacks))
        return (high - low) / 2 <= half_width

    if not pinned(most):
        return None
    fails, passes = 1, most
    while passes - fails > 1:
        middle = (fails + passes) // 2
        fails, passes = (fails, middle) if pinned(middle) else (middle, passes)
    return passes


@dataclass(frozen=True)
class Estimate:
    """tau of one metric, pooled over its run IDs, with its interval and the stacks that would pin it."""

    metric: str
    cells: tuple[Cell, ...]
    tau2_pooled: float  # untruncated
    low: float
    high: float
    stacks_to_pin: int | None

    @property
    def tau(self) -> float:
        return float(np.sqrt(max(0.0, self.tau2_pooled)))

    @property
    def seed_sd(self) -> float:
        """The seeds' SD within a stack, pooled with the same weights: what the rule's s is beside tau."""
        return float(np.sqrt(weights(self.cells) @ np.array([c.ms_within for c in self.cells])))

    def to_dict(self) -> dict[str, Any]:
        return {
            "metric": self.metric,
            "run_ids": [c.run_id for c in self.cells],
            "tau": self.tau,
            "tau2_pooled": self.tau2_pooled,
            "interval": [self.low, self.high],
            "seed_sd": self.seed_sd,
            "weights": weights(self.cells).tolist(),
            "stacks_to_pin": self.stacks_to_pin,
            "cells": [c.to_dict() for c in self.cells],
        }


def estimate(stacks: Sequence[Stack], metric: str) -> Estimate:
    """tau of `metric` from `stacks` (at least one run ID they share, cells)."""
    found = cells(stacks, metric)
    low, high = interval(found)
    return Estimate(metric, tuple(found), pooled(found), low, high, stacks_to_pin(found))


def runs_of(stack: Stack) -> dict[str, str]:
    """The runs of `stack` by what they are, whatever route brought them (a folder, a copy of it, its bundle, a CSV
    of it): {run ID, seed and each metric to the last bit: 'RUN seed S'}. The model takes a seed's runs on two
    stacks to share nothing; two sources that hold one such run share all of it."""
    rows = stack.table[["run_id", "seed", *METRICS]].itertuples(index=False)
    return {
        f"{run} {int(seed)} " + " ".join(float(v).hex() for v in values): f"{run} seed {int(seed)}"
        for run, seed, *values in rows
    }


def check_stacks(stacks: Sequence[Stack]) -> str:
    """Refuse what cannot measure tau (fewer than 2 sources, profiles that differ, two holding the same runs, no run
    ID two share with a seed spread), in one line; the profile they share ('not recorded' for CSVs alone)."""
    if len(stacks) < 2:
        raise InputError("uh stacks needs 2 SOURCEs or more, each the results of one stack")
    profiles = {s.source: s.profile for s in stacks if s.profile is not None}
    if len(set(profiles.values())) > 1:
        listed = ", ".join(f"{source} {profile}" for source, profile in profiles.items())
        raise InputError(f"the SOURCEs hold results of different profiles ({listed}); give one profile's")
    held: dict[str, Stack] = {}
    for stack in stacks:
        runs = runs_of(stack)
        if twice := next((key for key in runs if key in held), None):
            raise InputError(
                f"{held[twice].source} and {stack.source} hold the same run ({runs[twice]}, its metrics equal to the "
                "last bit): one stack's runs given twice (a copy, a bundle of a folder); each SOURCE must be another "
                "stack's re-run"
            )
        held |= dict.fromkeys(runs, stack)
    shared = [r for r, n in Counter(r for s in stacks for r in set(s.table["run_id"])).items() if n >= 2]
    if not shared:
        raise InputError("no run ID is held by 2 SOURCEs or more: give re-runs of the same run IDs")
    if not cells(stacks, METRICS[0]):
        raise InputError(
            f"each SOURCE holds one seed of every shared run ID ({', '.join(sorted(shared))}): the "
            "seeds' spread is unknown, so tau cannot be told from it; give 2 seeds or more"
        )
    return next(iter(profiles.values()), "not recorded (per-seed CSVs)")


@dataclass(frozen=True)
class Assumed:
    """The tau the tolerances of the stacks' profile assume, set beside the estimate: None where there is none, with
    where it comes from or why there is none."""

    tau: float | None
    source: str


def assumed_tau(stacks: Sequence[Stack]) -> Assumed:
    """The tau of the expected set `uh check` would judge these stacks' profile by ([derive] in its
    tolerances.toml); per-seed CSVs of no given profile are taken to be the paper's, as `uh check` takes them."""
    recorded = next((s.profile for s in stacks if s.profile is not None), None)
    profile = recorded or "paper"
    taken = "" if recorded else ": per-seed CSVs record none; --profile names theirs"
    try:
        directory = expected_dir_for(profile, find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
        rule = load_expected(directory).rule
    except ExpectedError as e:
        return Assumed(None, f"none found for profile {profile} ({e})")
    if rule is None:
        return Assumed(None, f"none: {directory / 'tolerances.toml'} states its tolerances as numbers")
    return Assumed(rule.tau, f"{rule.tau:g} pp, [derive] in {directory / 'tolerances.toml'} (profile {profile}{taken})")


def _stack_lines(stacks: Sequence[Stack]) -> list[str]:
    lines = [
        line
        for i, s in enumerate(stacks, 1)
        for line in (
            f"stack {i}: {s.source}",
            f"  {s.label or 'a per-seed CSV: its stack is not recorded'}",
            *(f"  also {label}: taken as one stack" for label in s.other_labels),
        )
    ]
    by_label: dict[str, list[int]] = {}
    for i, s in enumerate(stacks, 1):
        if s.label is not None:
            by_label.setdefault(s.label, []).append(i)
    lines += [
        f"note: stacks {', '.join(map(str, ids))} share a stack label; each SOURCE is taken as a stack of its own"
        for ids in by_label.values()
        if len(ids) > 1
    ]
    return lines


@dataclass(frozen=True)
class Measured:
    """What `uh stacks` measured: the stacks, the profile they share, tau per metric and the tau the rule assumes."""

    stacks: tuple[Stack, ...]
    profile: str
    estimates: tuple[Estimate, ...]
    assumed: Assumed

    def to_dict(self) -> dict[str, Any]:
        """Every figure, as `--json-out` writes it."""
        return {
            "profile": self.profile,
            "level": LEVEL,
            "draws": DRAWS,
            "seed": SEED,
            "pin_half_width": PIN,
            "stacks": [
                {
                    "source": s.source,
                    "label": s.label,
                    "other_labels": list(s.other_labels),
                    "profile": s.profile,
                    "rows": len(s.table),
                }
                for s in self.stacks
            ],
            "metrics": [e.to_dict() for e in self.estimates],
            "rule_tau": dataclasses.asdict(self.assumed),
            "note": AMENDMENT,
        }


def measure(sources: Sequence[Path], profile: str | None) -> Measured:
    """tau from the stacks at `sources` (per-seed CSVs taken to be of `profile` where given), each metric's estimate
    beside the tau the rule assumes; InputError for what cannot measure it."""
    try:
        stacks = [read_stack(path) for path in sources]
    except ResultError as e:
        raise InputError(str(e)) from None
    stacks = [dataclasses.replace(s, profile=profile) if s.profile is None else s for s in stacks]
    shared = check_stacks(stacks)
    return Measured(tuple(stacks), shared, tuple(estimate(stacks, m) for m in METRICS), assumed_tau(stacks))


def write_report(json_out: Path, measured: Measured) -> None:
    """Every figure, as JSON, written atomically."""
    try:
        write_json_atomic(json_out, measured.to_dict())
    except OSError as e:
        raise InputError(
            f"cannot write {json_out} ({e.strerror or e}); the figures above stand; pass a writable --json-out"
        ) from None


def format_report(measured: Measured) -> str:
    """The printed report: the stacks, tau per run ID and metric, then each metric's pooled beside the tau the
    tolerances assume; within 100 columns but for paths."""
    by_run = {c.run_id: {} for e in measured.estimates for c in e.cells}
    for e in measured.estimates:
        for c in e.cells:
            by_run[c.run_id][e.metric] = c
    return "\n".join(
        [
            f"uh stacks: {len(measured.stacks)} stacks of profile {measured.profile}, {len(by_run)} run IDs held by 2 "
            "or more",
            *_stack_lines(measured.stacks),
            "",
            *_run_lines(by_run),
            "",
            *_metric_lines(measured.estimates, measured.assumed),
            "",
            *_notes(measured.assumed),
        ]
    )


def _run_lines(by_run: dict[str, dict[str, Cell]]) -> list[str]:
    """tau per run ID and metric, each run ID alone."""
    width = max(3, *map(len, by_run))
    lines = [
        "tau per run ID (pp; method of moments, 0 where the stacks' means spread no more than seeds explain)",
        f"{'run':{width}} {'stacks':>6} {'seeds':>5}" + "".join(f" {m:>10}" for m in METRICS),
    ]
    for run_id, found in by_run.items():
        first = next(iter(found.values()))
        taus = "".join(f" {np.sqrt(max(0.0, found[m].tau2)):10.2f}" if m in found else f" {'-':>10}" for m in METRICS)
        lines.append(f"{run_id:{width}} {first.stacks:6d} {first.seeds:5g}{taus}")
    return lines


def _metric_lines(estimates: Sequence[Estimate], assumed: Assumed) -> list[str]:
    """Each metric's tau pooled over its run IDs, its interval, the seeds' SD, the stacks to pin it and the rule's."""
    pct = f"{LEVEL:.0%}"
    lines = [
        f"{'metric':12} {'run IDs':>7} {'tau (pp)':>9} {pct + ' interval':>16} {'seed SD':>8} "
        f"{'stacks to pin +/-' + format(PIN, 'g'):>20} {'rule tau':>8}",
    ]
    rule_tau = "-" if assumed.tau is None else f"{assumed.tau:.2f}"
    for e in estimates:
        pin = str(e.stacks_to_pin) if e.stacks_to_pin is not None else f"over {MOST_STACKS}"
        lines.append(
            f"{e.metric:12} {len(e.cells):7d} {e.tau:9.2f} {f'[{e.low:.2f}, {e.high:.2f}]':>16} "
            f"{e.seed_sd:8.2f} {pin:>20} {rule_tau:>8}"
        )
    return lines


def _notes(assumed: Assumed) -> list[str]:
    """What tau is and how each column was found."""
    return [
        TAU_IS,
        "pooled over run IDs (weights: their stacks - 1); interval: the pooled estimate's chi-square law",
        f"inverted ({DRAWS:,} draws, seed {SEED}; its measured coverage: expected_results/README.md); seed SD:",
        f"within a stack, pooled; stacks to pin: the fewest with a half-width of {PIN:g} pp at this estimate;",
        "rule tau: the tau uh check's tolerances assume for this profile, as they state it:",
        f"  {assumed.source}",
    ]
