"""`uh oc`: the operating characteristic of `uh check`. How often a faithful re-run is called RESULTS
REPLICATED, and how often a real miss or a claim with no true effect is, by simulating whole re-runs under
stated models and judging each with uh check's own function (judge.check: the procedure's state replayed, the
metrics, the claims and the verdict), following the
pre-registered procedure look by look (next_step's run IDs and seeds, then a check again).

The models are design/worlds.py's. Beside the pass rates, `Bound`: the most that any rule at 5% could pass a
faithful re-run with k seeds, so that a target no procedure can meet is shown to be one. `--derive` prints the
tolerances a per-seed table implies under the set's rule, and the claims' boundaries anew from their design
(design/boundaries.py), so anyone can re-derive the shipped set.
"""

from __future__ import annotations

import math
import multiprocessing
import os
import signal
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd
from scipy import stats

from uniform_herding.catalogue import PAPER_RUNS
from uniform_herding.design.boundaries import derive_lines
from uniform_herding.design.worlds import CENTER, NOT_ASSUMED, Model, World, law_nulls, models, pairs, tolerances
from uniform_herding.method.metrics import METRICS
from uniform_herding.runs.results import ResultError, read_per_seed_csv, write_text_atomic
from uniform_herding.runs.terminal import Progress
from uniform_herding.verdict.claims import PAPER_CLAIMS, Claim
from uniform_herding.verdict.decide import Decision, replicated
from uniform_herding.verdict.expected import (
    Expected,
    ExpectedError,
    expected_dir_for,
    find_expected_root,
    load_expected,
)
from uniform_herding.verdict.judge import check
from uniform_herding.verdict.procedure import replay
from uniform_herding.verdict.words import VerdictKind

TARGET_PASS, TARGET_MISS = 0.95, 0.05
TARGET_AGAINST = TARGET_MISS / 2  # the contradicting side's bound (its boundaries spend 2.45% / m of it)
TARGET_PASS_GRID, BOUND_GAP = 0.90, 0.03  # (b) elsewhere on the grid; (a) within this of the any-rule bound
RHOS, TAUS = (0.0, 0.5, 0.8), (0.5, 0.75, 1.0)
TAU_TARGETED = 0.75  # the largest stack offset the targets hold the rule to; the grid goes on to the rule's own tau
FAITHFUL = {
    "a": "(a) the paper's means carry their sampling error",
    "b": "(b) the paper's means are the truth",
    "c": "(c) the paper's table redrawn, the set re-derived",
}
PROGRESS_EVERY = 10.0  # s: where no bar can be drawn (a log, a pipe, a terminal with no width), a line this often
COMPUTE_CSV = "paper_compute.csv"  # seconds per run on the paper's Tesla T4 (tab:app-compute)
LAW_CLAIMS = [(law, claim.claim_id) for law in NOT_ASSUMED for claim in PAPER_CLAIMS]  # the contradicts side per law


# --- the procedure, through uh check's own functions ----------------------------------------------------------


def _table(world: World, values: np.ndarray, seeds: tuple[int, ...], have: set[tuple[str, int]]) -> pd.DataFrame:
    rows = [(r, s, *values[world.index(r), seeds.index(s)]) for r, s in sorted(have)]
    return pd.DataFrame(rows, columns=["run_id", "seed", *METRICS])


@dataclass
class ReRun:
    """One simulated re-run at the end of the procedure: its verdict, what kept it from passing, and what it ran
    beyond look 1."""

    kind: VerdictKind
    causes: tuple[str, ...]
    undecided_at_first_look: bool
    extra_runs: list[str] = field(default_factory=list)


def follow_procedure(expected: Expected, world: World, values: np.ndarray, claim: Claim | None = None) -> ReRun:
    """Check the paper's seeds (of `claim`'s run IDs alone, as uh check --claim does, where given); while the verdict
    names a next_step (UNDECIDED, or INCOMPLETE), run it and check again."""
    seeds = expected.registered
    have = {(r, s) for r in (claim.runs if claim else world.runs) for s in expected.seeds}
    extra: list[str] = []
    first = None
    while True:
        verdict = check(expected, _table(world, values, seeds, have), explain=False, claim=claim).verdict
        first = verdict.kind is VerdictKind.UNDECIDED if first is None else first
        if verdict.kind.final or not verdict.next_step:
            return ReRun(verdict.kind, verdict.causes, first, extra)
        for run_id in verdict.next_step["run_ids"]:
            for seed in verdict.next_step["seeds"]:
                if (run_id, seed) not in have:
                    have.add((run_id, seed))
                    extra.append(run_id)


def share(k: int, n: int) -> tuple[float, float, float]:
    """k of n, and its 95% Wilson interval (scipy)."""
    ci = stats.binomtest(k, n).proportion_ci(0.95, method="wilson")
    return k / n, float(ci.low), float(ci.high)


def pct(p: tuple[float, float, float]) -> str:
    """A share and its interval, in percent: the interval says how far the draws let the figure be trusted."""
    return f"{100 * p[0]:5.1f} [{100 * p[1]:.1f}, {100 * p[2]:.1f}]"


@dataclass(frozen=True)
class Summary:
    model: Model
    n: int
    passed: tuple[float, float, float]  # RESULTS REPLICATED at the end of the procedure
    failed: tuple[float, float, float]  # NOT REPLICATED
    inconclusive: tuple[float, float, float]  # INCONCLUSIVE: the last look left a claim undecided
    undecided_first: float  # UNDECIDED at the first look (the procedure asked for more seeds)
    extra_runs: float
    hours: tuple[float, float]  # GPU hours of the whole procedure on the paper's T4: mean, 90th percentile
    causes: list[tuple[str, float]]
    extra: Counter[tuple[tuple[str, int], ...]]  # how often each set of extra runs (run ID, seeds) was asked for

    def row(self, label: str) -> str:
        causes = ", ".join(f"{c} {p:.0%}" for c, p in self.causes[:2]) or "-"
        shares = " ".join(f"{pct(p):>19}" for p in (self.passed, self.failed, self.inconclusive))
        return (
            f"{label:44} {self.n:6} {shares} {self.undecided_first:6.0%} {self.extra_runs:5.1f} "
            f"{self.hours[0]:5.1f} {self.hours[1]:5.1f}  {causes}"
        )


HEADER = (
    f"{'model':44} {'draws':>6} {'P(RR) % [95% CI]':>19} {'P(NOT) % [95% CI]':>19} {'P(INC) % [95% CI]':>19} "
    f"{'und.1':>6} {'+runs':>5} {'T4 h':>5} {'p90':>5}  main causes of not passing"
)


def simulate(expected: Expected, model: Model, n: int, seconds: dict[str, float], rng: np.random.Generator) -> Summary:
    """P(RESULTS REPLICATED), P(NOT REPLICATED), P(INCONCLUSIVE) at the end of the procedure with intervals,
    P(undecided at look 1), the mean extra runs, the whole procedure's hours on the paper's GPU (mean and
    90th percentile, the least with 90% of the re-runs at or below it, as uh doctor takes it: the paper's runs
    plus what next_step asked for), and the commonest reasons for failing."""
    world = World.of(expected)
    base = sum(seconds.get(r, 0.0) for r in world.runs) * len(expected.seeds)
    outcomes = []
    for _ in counted(n):
        judged_by, values = model.draw(expected, world, rng)
        outcomes.append(follow_procedure(judged_by, world, values))
    causes = Counter(cause for o in outcomes for cause in o.causes)
    hours = np.array([base + sum(seconds.get(r, 0.0) for r in o.extra_runs) for o in outcomes]) / 3600
    return Summary(
        model,
        n,
        share(sum(o.kind is VerdictKind.RESULTS_REPLICATED for o in outcomes), n),
        share(sum(o.kind is VerdictKind.NOT_REPLICATED for o in outcomes), n),
        share(sum(o.kind is VerdictKind.INCONCLUSIVE for o in outcomes), n),
        sum(o.undecided_at_first_look for o in outcomes) / n,
        float(np.mean([len(o.extra_runs) for o in outcomes])),
        (float(hours.mean()), float(np.quantile(hours, 0.9, method="inverted_cdf"))),
        [(c, k / n) for c, k in causes.most_common()],
        Counter(tuple(sorted(Counter(o.extra_runs).items())) for o in outcomes),
    )


def cell(
    expected: Expected, model: Model, n: int, seconds: dict[str, float], max_seeds: int, rng: np.random.Generator
) -> tuple[Summary, float]:
    """One model simulated, and under (a) the any-rule bound at the procedure's most seeds (else 0)."""
    summary = simulate(expected, model, n, seconds, rng)
    return summary, Bound.of(expected, rng, model).at(max_seeds) if model.faithful == "a" else 0.0


_progress: Progress | None = None  # run_calls' progress while it runs; the pool's forked processes inherit it


def counted(n: int, step: int = 1) -> Iterator[int]:
    """range(0, n, step) for a simulation's n re-runs taken `step` at a time, each counted in run_calls' progress once
    done (it draws nothing: the random streams are those of the caller)."""
    for i in range(0, n, step):
        yield i
        if _progress is not None:
            _progress.advance(min(step, n - i))


@dataclass(frozen=True)
class Simulation:
    """One call of run_calls: `function(expected, subject, draws, *rest, rng)`, the form of every simulation here
    (cell, contradicts, gating_draws, claim_cost), simulating `draws` re-runs (what progress counts)."""

    draws: int
    function: Callable[..., Any]
    subject: tuple[Any, ...]  # (expected, subject)
    rest: tuple[Any, ...]

    def call(self, rng: np.random.Generator) -> Any:
        return self.function(*self.subject, self.draws, *self.rest, rng)


def simulation(function: Callable[..., Any], expected: Expected, subject: Any, n: int, *rest: Any) -> Simulation:
    """`function(expected, subject, n, *rest, rng)` as a Simulation of n draws."""
    return Simulation(n, function, (expected, subject), rest)


def _leave_signals_to_the_parent() -> None:
    """A worker ignores SIGINT and SIGTERM (Ctrl-C reaches the whole group): the parent kills it (run_calls), with
    no traceback of its own."""
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, signal.SIG_IGN)


def _call(call: Callable[[np.random.Generator], Any], seed: np.random.SeedSequence) -> Any:
    return call(np.random.default_rng(seed))


def run_calls(parts: dict[str, list[Simulation]], seed: int | list[int], jobs: int) -> dict[str, list[Any]]:
    """Each simulation on its own random stream, spawned in order from `seed` (over the parts in order), in `jobs`
    processes: the figures do not depend on --jobs or on which process ran what. Progress on standard error: the
    re-runs done on a terminal, a line as each part ends elsewhere."""
    global _progress
    calls = [(part, s) for part, simulations in parts.items() for s in simulations]
    seeds = np.random.SeedSequence(seed).spawn(len(calls))
    left = Counter(part for part, _ in calls)
    progress = _progress = Progress("uh oc", total=sum(s.draws for _, s in calls), unit="re-run", every=PROGRESS_EVERY)

    def finished(part: str) -> None:
        left[part] -= 1
        if not left[part]:
            progress.stage(f"{part}: {len(parts[part])} simulation{'s' * (len(parts[part]) > 1)} done")

    try:
        if jobs == 1:
            with progress:
                results = []
                for (part, s), stream in zip(calls, seeds, strict=True):
                    results.append(_call(s.call, stream))
                    finished(part)
        else:  # the first submit forks every process, before progress starts its thread (no fork of a threaded one)
            fork = multiprocessing.get_context("fork")
            with ProcessPoolExecutor(jobs, mp_context=fork, initializer=_leave_signals_to_the_parent) as pool:
                futures = [pool.submit(_call, s.call, stream) for (_, s), stream in zip(calls, seeds, strict=True)]
                try:
                    with progress:
                        for (part, _), future in zip(calls, futures, strict=True):  # one stopped is not done
                            future.add_done_callback(
                                lambda f, part=part: f.cancelled() or f.exception() or finished(part)
                            )
                        results = [future.result() for future in futures]
                except BaseException:  # SIGTERM or SIGINT (cli.py): stop the simulations under way, not wait for them
                    pool.shutdown(wait=False, cancel_futures=True)
                    for worker in multiprocessing.active_children():
                        worker.kill()
                    raise
    finally:
        _progress = None
    out = iter(results)
    return {part: [next(out) for _ in simulations] for part, simulations in parts.items()}


CLAIM_HEADER = (
    f"{'claim':5} {'run IDs':18} {'look 1: runs':>12} {'T4 h':>6}   {'whole, alone: +runs':>19} "
    f"{'T4 h':>6} {'p90':>6} {'most':>6}  {'P(RR-like)':>10}"
)


def claim_cost(expected: Expected, claim: Claim, n: int, seconds: dict[str, float], rng: np.random.Generator) -> str:
    """What checking one claim alone (uh check --claim) costs on the paper's T4, under (a) at the grid's centre: its
    run IDs on the paper's seeds (look 1), then the whole of its own procedure over n simulated re-runs: mean and
    90th percentile (as uh doctor takes it), and the most (every look of every run ID)."""
    world, (rho, tau) = World.of(expected), CENTER
    model = Model(FAITHFUL["a"], faithful="a", rho=rho, tau=tau, kind="faithful")
    first = sum(seconds.get(r, 0.0) for r in claim.runs) * len(expected.seeds) / 3600
    reruns = []
    for _ in counted(n):
        judged_by, values = model.draw(expected, world, rng)
        reruns.append(follow_procedure(judged_by, world, values, claim))
    hours = np.array([first + sum(seconds.get(r, 0.0) for r in o.extra_runs) / 3600 for o in reruns])
    most = sum(seconds.get(r, 0.0) for r in claim.runs) * expected.procedure.looks[-1] / 3600
    passed = np.mean([o.kind is VerdictKind.SET_MATCHED for o in reruns])
    return (
        f"{claim.claim_id:5} {', '.join(claim.runs):18} {len(claim.runs) * len(expected.seeds):12} "
        f"{first:6.1f}   {np.mean([len(o.extra_runs) for o in reruns]):19.1f} {hours.mean():6.1f} "
        f"{np.quantile(hours, 0.9, method='inverted_cdf'):6.1f} {most:6.1f}  {passed:10.1%}"
    )


def contradicts(
    expected: Expected, claim_id: str, n: int, law: str, rng: np.random.Generator
) -> tuple[tuple, tuple, int]:
    """A claim with every comparison at zero true effect (faithful (b) truth at the grid's centre, each seed's noise
    of `law`), judged by the claim's procedure alone on every registered seed: P(NOT SUPPORTED) and P(SUPPORTED),
    with intervals; n."""
    world, (rho, tau) = World.of(expected), CENTER
    nulls = tuple((other, run_id, metric) for claim, run_id, other, metric, _ in pairs(expected) if claim == claim_id)
    model = Model(
        f"all of {claim_id} null", faithful="b", rho=rho, tau=tau, law=law, nulls=nulls, null_c5=claim_id == "C5"
    )
    claim = next(c for c in PAPER_CLAIMS if c.claim_id == claim_id)
    seeds, decisions = expected.registered, Counter()
    for _ in counted(n):
        _, values = model.draw(expected, world, rng)
        table = _table(world, values, seeds, {(r, s) for r in claim.runs for s in seeds})
        state = replay(table, expected.procedure, claim.runs, (claim,), gating=True)
        decisions[state.claims[claim_id].decision] += 1
    return share(decisions[Decision.CONTRADICTS], n), share(decisions[Decision.SUPPORTS], n), n


@dataclass(frozen=True)
class GatingDraws:
    """Each gating metric judged alone on the paper's three seeds, under (c) at the grid's centre rho and one tau:
    per world, the re-run mean minus the redrawn paper mean, and the tolerance re-derived from the redrawn table."""

    tau: float
    metrics: list[tuple[str, str]]  # (run ID, metric), in the set's order
    differences: np.ndarray  # [worlds, metrics]
    tolerances: np.ndarray  # [worlds, metrics]

    def pass_rate(self, shift: float) -> np.ndarray:
        """Per metric: how often decide.replicated passes it with its true mean moved by `shift` pp."""
        return replicated(self.differences + shift, self.tolerances).mean(0)

    def fails(self) -> np.ndarray:
        """[worlds, metrics]: where a faithful re-run reads NOT REPLICATED."""
        return ~replicated(self.differences, self.tolerances)

    def false_fails(self) -> np.ndarray:
        """Per metric: how often a faithful re-run reads NOT REPLICATED on it."""
        return self.fails().mean(0)

    def detectable_miss(self) -> np.ndarray:
        """Per metric: the smallest shift (0.1 pp steps, the worse sign) at which it passes at most TARGET_MISS of
        the time."""
        shifts, found = np.zeros(len(self.metrics)), np.zeros(len(self.metrics), bool)
        shift = 0.0
        while not found.all():
            done = ~found & (np.maximum(self.pass_rate(shift), self.pass_rate(-shift)) <= TARGET_MISS)
            shifts[done], found = shift, found | done
            shift = round(shift + 0.1, 1)
        return shifts


GATING_CHUNK = 10_000  # worlds gating_draws draws at once: about 15 kB of standard draws each, 150 MB a chunk


def gating_draws(expected: Expected, tau: float, n: int, rng: np.random.Generator) -> GatingDraws:
    """n worlds of (c) at the centre's rho and `tau`, each gating metric on the paper's seeds, GATING_CHUNK at once."""
    world, k = World.of(expected), len(expected.seeds)
    model = Model("faithful", rho=CENTER[0], tau=tau, kind="faithful")
    metrics = [(r, m) for m in expected.gate for r in dict.fromkeys(expected.per_seed["run_id"]) if r in PAPER_RUNS]
    at = ([world.index(r) for r, _ in metrics], [METRICS.index(m) for _, m in metrics])
    differences, tolerances_ = [], []
    for start in counted(n, GATING_CHUNK):
        paper, values = model.draws(expected, world, rng, min(GATING_CHUNK, n - start))
        differences.append((values[:, :, :k].mean(-2) - paper.mean(-2))[:, at[0], at[1]])  # type: ignore[union-attr]
        tolerances_.append(tolerances(expected, paper, k)[:, at[0], at[1]])  # type: ignore[arg-type]
    return GatingDraws(tau, metrics, np.concatenate(differences), np.concatenate(tolerances_))


def gating_lines(expected: Expected, draws: list[GatingDraws]) -> list[str]:
    """Per gating metric, worst first (at the largest tau): its false-fail rate at each tau beside the nominal share
    the rule gives it, and the detectable miss at the first tau."""
    share_ = expected.rule.alpha if expected.rule else float("nan")
    rates = np.stack([d.false_fails() for d in draws], 1)  # [metrics, taus]
    miss = draws[0].detectable_miss()
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


def paper_seconds(expected: Expected) -> dict[str, float]:
    path = expected.directory / COMPUTE_CSV
    if not path.is_file():
        return {}
    table = pd.read_csv(path)
    return dict(zip(table["run_id"], table["seconds_mean"].astype(float), strict=True))


@dataclass(frozen=True)
class Bound:
    """The most that any rule deciding each paired comparison of C1-C4 from its k per-seed deltas can pass a
    faithful re-run, if it passes a comparison whose true effect is zero at most TARGET_MISS of the time and
    passes no less readily the larger the deltas (so at most TARGET_MISS wherever the effect is <= 0). In one
    world, a comparison with true effect d and per-seed SD sigma passes at most Phi(max(d, 0) sqrt(k) / sigma
    - z) of the time (the one-sided z-test is the most powerful at every d > 0, and knowing sigma can only
    help); every comparison must pass, so at most the least of these; averaged over the model's worlds. Under
    (a) the truths differ from the paper's means by its own sampling error, so it stays below 1."""

    effect: np.ndarray  # [worlds, comparisons]: the true effects, signed so that > 0 is the claim
    sigma: np.ndarray  # [comparisons]: the per-seed SD of each comparison's paired delta

    DRAWS = 20000  # worlds: the bound needs no procedure run, so it can afford far more than the models
    MAX_SEEDS = 1000

    @classmethod
    def of(cls, expected: Expected, rng: np.random.Generator, model: Model) -> Bound:
        world = World.of(expected)
        comparisons = [(world.index(r), world.index(o), METRICS.index(m), sign) for _, r, o, m, sign in pairs(expected)]
        sd, rho = world.sd, model.rho
        sigma = np.array(
            [math.sqrt(sd[r, m] ** 2 + sd[o, m] ** 2 - 2 * rho * sd[r, m] * sd[o, m]) for r, o, m, _ in comparisons]
        )
        truths = np.stack([model.truth(world, rng) for _ in range(cls.DRAWS)])  # [worlds, R, M]
        return cls(np.stack([sign * (truths[:, r, m] - truths[:, o, m]) for r, o, m, sign in comparisons], 1), sigma)

    def at(self, k: int) -> float:
        """The bound with k re-run seeds."""
        power = stats.norm.cdf(self.effect.clip(0) * math.sqrt(k) / self.sigma - stats.norm.isf(TARGET_MISS))
        return float(power.min(1).mean())

    def seeds_for(self, target: float) -> int | None:
        """The fewest seeds at which the bound reaches `target` (it rises with k); None if not by MAX_SEEDS."""
        if self.at(self.MAX_SEEDS) < target:
            return None
        low, high = 3, self.MAX_SEEDS
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if self.at(mid) >= target else (mid + 1, high)
        return low


@dataclass(frozen=True)
class Target:
    """One target: a share (with its 95% Wilson interval) held to at most, or at least, `bound`; `at`: the part and
    index of the simulation that measured it, so that one too close to call can be simulated again on more draws."""

    text: str
    share: tuple[float, float, float]
    bound: float
    at_most: bool
    at: tuple[str, int]

    @property
    def close(self) -> bool:
        """The bound lies inside the interval: these draws cannot say on which side the share is."""
        return self.share[1] <= self.bound <= self.share[2]

    def line(self) -> str:
        met = self.share[0] <= self.bound if self.at_most else self.share[0] >= self.bound
        return f"  {'too close to call' if self.close else 'met' if met else 'NOT MET':17}  {self.text}"


def faithful_targets(s: Summary, bound: float, at: tuple[str, int]) -> list[Target]:
    """The faithful targets one cell of the grid is held to: NOT REPLICATED at most 5% under (a) and (c);
    RESULTS REPLICATED at least 95% under (b) at the centre, 90% elsewhere at rho >= 0.5; under (a), within
    BOUND_GAP of what any rule could reach."""
    m, out = s.model, []
    cell = f"{m.faithful}, rho {m.rho:g}, tau {m.tau:g}, {s.n} draws"
    if m.faithful in "ac":
        out.append(
            Target(f"{cell}: NOT REPLICATED <= {TARGET_MISS:.0%} ({pct(s.failed)})", s.failed, TARGET_MISS, True, at)
        )
    if m.faithful == "b" and m.rho >= 0.5:
        target = TARGET_PASS if (m.rho, m.tau) == CENTER else TARGET_PASS_GRID
        out.append(Target(f"{cell}: RESULTS REPLICATED >= {target:.0%} ({pct(s.passed)})", s.passed, target, False, at))
    if m.faithful == "a":
        out.append(
            Target(
                f"{cell}: RESULTS REPLICATED within {BOUND_GAP * 100:.0f} pp of the any-rule bound "
                f"({pct(s.passed)}; bound {100 * bound:.1f})",
                s.passed,
                bound - BOUND_GAP,
                False,
                at,
            )
        )
    return out


def targets(done: dict[str, list[Any]], grid: list[tuple[str, float, float]], misses: list[Model]) -> list[Target]:
    """Every target the simulations in `done` measure, in the order printed."""
    out: list[Target] = []
    for i, ((_, _, tau), (s, bound)) in enumerate(zip(grid, done.get("faithful", []), strict=False)):
        out += faithful_targets(s, bound, ("faithful", i)) if tau <= TAU_TARGETED else []
    if "misses" in done:
        *summaries, (center, _) = done["misses"]
        for i, (model, (s, _)) in enumerate(zip(misses, summaries, strict=True)):
            if model.noise_scale == 1:  # a real miss, or a claim without its effect: it must not pass
                out.append(
                    Target(
                        f"{model.name}, {s.n} draws: RESULTS REPLICATED <= {TARGET_MISS:.0%} ({pct(s.passed)})",
                        s.passed,
                        TARGET_MISS,
                        True,
                        ("misses", i),
                    )
                )
            else:  # faithful, only noisier: it must not pass more often than faithful
                out.append(
                    Target(
                        f"noisier passes no more often than faithful (c) ({pct(s.passed)} <= {pct(center.passed)})",
                        s.passed,
                        center.passed[0],
                        True,
                        ("misses", i),
                    )
                )
        for i, (claim, (against, _, n)) in enumerate(zip(PAPER_CLAIMS, done["contradicts"], strict=True)):
            out.append(
                Target(
                    f"{claim.claim_id} with no effect, {n} draws: NOT SUPPORTED <= {TARGET_AGAINST:.1%} "
                    f"({pct(against)})",
                    against,
                    TARGET_AGAINST,
                    True,
                    ("contradicts", i),
                )
            )
    return out + law_targets(done)


def law_targets(done: dict[str, list[Any]]) -> list[Target]:
    """The null targets under the seed noise laws the rule does not assume: C1's null through the whole procedure
    passes at most TARGET_MISS of the time; each claim with no effect, judged alone, is supported at most TARGET_MISS
    and contradicted at most TARGET_AGAINST of the time."""
    if "law nulls" not in done:
        return []
    out = []
    for i, (s, _) in enumerate(done["law nulls"]):
        text = f"{s.model.name}, {s.n} draws: RESULTS REPLICATED <= {TARGET_MISS:.0%} ({pct(s.passed)})"
        out.append(Target(text, s.passed, TARGET_MISS, True, ("law nulls", i)))
    for i, ((law, claim_id), (against, supported, n)) in enumerate(zip(LAW_CLAIMS, done["law claims"], strict=True)):
        head, at = f"{claim_id} with no effect, {law}, {n} draws", ("law claims", i)
        out += [
            Target(f"{head}: SUPPORTED <= {TARGET_MISS:.0%} ({pct(supported)})", supported, TARGET_MISS, True, at),
            Target(
                f"{head}: NOT SUPPORTED <= {TARGET_AGAINST:.1%} ({pct(against)})", against, TARGET_AGAINST, True, at
            ),
        ]
    return out


def settle(
    parts: dict[str, list[Simulation]],
    done: dict[str, list[Any]],
    found: list[Target],
    draws: int,
    seed: int,
    jobs: int,
) -> tuple[dict[str, list[Any]], int]:
    """Each simulation with a target too close to call, simulated again on fresh draws (their own streams, spawned
    from [seed, 1]) in place of the first: the figures stay independent of --jobs. `draws` each (--close-draws), but
    no more in all than the run asked of the simulations its targets read, so that a run asked for few draws does
    not wait on many more. The results, and the draws each simulation simulated again took."""
    asked = sum(parts[part][i].draws for part, i in {t.at for t in found})
    close = sorted({t.at for t in found if t.close})
    each = min(draws, asked // len(close)) if close else draws
    again = [(part, i) for part, i in close if parts[part][i].draws < each]
    if not again:
        return done, each
    click.echo(
        f"uh oc: {len(again)} simulation{'s' * (len(again) > 1)} whose interval holds a target, again on {each:,} "
        f"fresh draws each: {each * len(again):,} in all, at most the {asked:,} the run asked of the simulations its "
        "targets read",
        err=True,
    )
    more = {f"{part} {i}": [replace(parts[part][i], draws=each)] for part, i in again}
    redone = run_calls(more, [seed, 1], jobs)
    done = {part: list(results) for part, results in done.items()}
    for part, i in again:
        done[part][i] = redone[f"{part} {i}"][0]
    return done, each


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


RUNS_CSV = "procedure_runs.csv"  # the extra runs' distribution uh doctor prices on this GPU (not part of the set)


def write_extra_runs(path: Path, s: Summary) -> None:
    """Each set of extra runs the procedure asked for, as a row: its share of the simulated re-runs, and per paper
    run ID the seeds beyond the paper's three. uh doctor prices each row with its own per-run estimates."""
    rows = [{"share": k / s.n, **dict.fromkeys(PAPER_RUNS, 0), **dict(pattern)} for pattern, k in s.extra.most_common()]
    write_text_atomic(path, pd.DataFrame(rows, columns=["share", *PAPER_RUNS]).to_csv(index=False, float_format="%.5f"))


def derive_text(expected: Expected) -> list[str]:
    """What `uh oc --derive` prints: per metric the moderated spreads and their df, and each run ID's tolerance
    at every look's seeds."""
    if expected.rule is None:
        raise click.ClickException(f"{expected.directory}: its tolerances are stated as numbers, not derived")
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


@click.command("oc")
@click.option(
    "--expected",
    "expected_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Expected set [default: the paper's, expected_results/].",
)
@click.option(
    "-n",
    "--draws",
    type=click.IntRange(min=10),
    default=10000,
    show_default=True,
    help="Simulated re-runs per faithful model at rho 0.5, tau 0.5.",
)
@click.option(
    "--grid-draws",
    type=click.IntRange(min=10),
    default=2000,
    show_default=True,
    help="Simulated re-runs per model elsewhere: the grid, the misses and the nulls.",
)
@click.option(
    "--gating-draws",
    "gating_draws_",
    type=click.IntRange(min=10),
    default=2_000_000,
    show_default=True,
    help="Simulated re-runs per tau for the per-metric gating table: enough to order its worst metrics.",
)
@click.option(
    "--close-draws",
    type=click.IntRange(min=10),
    default=20000,
    show_default=True,
    help="Fresh draws for a cell whose interval holds its target; in all, no more than the run asked of "
    "the cells its targets read.",
)
@click.option("--seed", type=int, default=0, show_default=True, help="The simulation's random seed.")
@click.option(
    "--rho",
    "rhos",
    type=click.FloatRange(0.0, 1.0),
    multiple=True,
    help=f"Seed correlation across run IDs, repeatable [default: {', '.join(map(str, RHOS))}].",
)
@click.option(
    "--tau",
    "taus",
    type=click.FloatRange(min=0.0),
    multiple=True,
    help=f"The stack's offset SD (pp), repeatable [default: {', '.join(map(str, TAUS))}].",
)
@click.option(
    "--only",
    type=click.Choice(["faithful", "misses", "laws", "gating", "claims"]),
    help="Print one part only (misses: with the contradicts side and the gating table; laws: the nulls "
    "under seed noise laws the rule does not assume; gating: that table; claims: what one claim "
    "alone costs).",
)
@click.option(
    "--derive",
    "derive_csv",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    help="Print the tolerances the set's rule derives from this per-seed CSV, and stop.",
)
@click.option(
    "-j",
    "--jobs",
    type=click.IntRange(min=1),
    default=len(os.sched_getaffinity(0)),
    show_default="this machine's CPUs",
    help="Processes to simulate in; the figures do not depend on it.",
)
@click.option(
    "--runs-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help=f"Write the extra runs of (a) at rho 0.5, tau 0.5 as a CSV (uh doctor reads the set's {RUNS_CSV}).",
)
def oc_command(
    expected_dir: Path | None,
    draws: int,
    grid_draws: int,
    gating_draws_: int,
    close_draws: int,
    seed: int,
    rhos: tuple[float, ...],
    taus: tuple[float, ...],
    only: str | None,
    derive_csv: Path | None,
    jobs: int,
    runs_out: Path | None,
) -> None:
    """Operating characteristic of uh check: simulated re-runs under stated models, judged by its own code."""
    try:
        expected = load_expected(
            expected_dir or expected_dir_for("paper", find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
        )
        if derive_csv:
            click.echo("\n".join(derive_text(replace(expected, per_seed=read_per_seed_csv(derive_csv)))))
            return
    except (ExpectedError, ResultError) as e:
        raise click.ClickException(str(e)) from None
    if expected.profile != "paper":
        raise click.ClickException(f"{expected.directory} holds profile {expected.profile}; the models are the paper's")
    p = expected.procedure
    max_seeds = p.looks[-1] if p else len(expected.seeds)
    click.echo(f"uh oc: simulated re-runs judged by uh check's code against {expected.describe()}")
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
    click.echo(f"gating metrics: {', '.join(expected.gate)}; claims: {looks}")
    started, seconds = time.monotonic(), paper_seconds(expected)
    grid = [(f, rho, tau) for f in FAITHFUL for rho in rhos or RHOS for tau in taus or TAUS]
    misses, sweep = models(expected), sorted(set(taus or TAUS))
    yardstick = Model(FAITHFUL["c"], rho=CENTER[0], tau=CENTER[1], kind="faithful")  # what noisier must not beat
    parts: dict[str, list[Simulation]] = {
        "faithful": [
            simulation(
                cell,
                expected,
                Model(FAITHFUL[f], faithful=f, rho=rho, tau=tau, kind="faithful"),
                draws if (rho, tau) == CENTER else grid_draws,
                seconds,
                max_seeds,
            )
            for f, rho, tau in grid
        ],
        "misses": [simulation(cell, expected, m, grid_draws, seconds, max_seeds) for m in [*misses, yardstick]],
        "contradicts": [simulation(contradicts, expected, c.claim_id, grid_draws, "normal") for c in PAPER_CLAIMS],
        "law nulls": [simulation(cell, expected, m, grid_draws, seconds, max_seeds) for m in law_nulls(expected)],
        "law claims": [simulation(contradicts, expected, c, grid_draws, law) for law, c in LAW_CLAIMS],
        "gating": [simulation(gating_draws, expected, tau, gating_draws_) for tau in sweep],
        "claims": [simulation(claim_cost, expected, c, grid_draws, seconds) for c in PAPER_CLAIMS],
    }
    wanted = {
        "faithful": ["faithful"],
        "misses": ["misses", "contradicts", "gating"],
        "gating": ["gating"],
        "claims": ["claims"],
        "laws": ["law nulls", "law claims"],
    }
    parts = {k: v for k, v in parts.items() if only is None or k in wanted[only]}
    click.echo(f"{sum(map(len, parts.values()))} simulations on {jobs} process{'es' * (jobs > 1)} ...")
    done = run_calls(parts, seed, jobs)
    done, close_draws = settle(parts, done, targets(done, grid, misses), close_draws, seed, jobs)
    if "faithful" in done:
        click.echo(
            f"\nfaithful re-runs, over rho x tau (targets up to tau {TAU_TARGETED:g}; beyond it, shown only):\n{HEADER}"
        )
        for (f, rho, tau), (s, _) in zip(grid, done["faithful"], strict=True):
            if runs_out and (f, rho, tau) == ("a", *CENTER):
                write_extra_runs(runs_out, s)
            click.echo(s.row(f"{FAITHFUL[f][:3]} rho {rho:g}, tau {tau:g}"))
        click.echo(
            "\nP(RR), P(NOT), P(INC): RESULTS REPLICATED, NOT REPLICATED, INCONCLUSIVE at the end of the "
            "procedure, each with its 95% Wilson interval; und.1: UNDECIDED after the paper's runs; +runs: the "
            "runs next_step asked for; T4 h, p90: the whole procedure's GPU hours on the paper's Tesla T4, mean "
            "and 90th percentile"
        )
    if "misses" in done:
        click.echo(f"\nmisses and nulls, under (c) at rho {CENTER[0]:g}, tau {CENTER[1]:g}:\n{HEADER}")
        for model, (s, _) in zip(misses, done["misses"], strict=False):
            click.echo(s.row(model.name))
        click.echo(
            f"\nthe contradicts side: each claim with every comparison at zero true effect ((b) truth, rho "
            f"{CENTER[0]:g}, tau {CENTER[1]:g}), judged by its procedure alone"
        )
        for claim, (against, wrongly, n) in zip(PAPER_CLAIMS, done["contradicts"], strict=True):
            click.echo(f"  {claim.claim_id}: NOT SUPPORTED {pct(against)}%, SUPPORTED {pct(wrongly)}% ({n} draws)")
    if "gating" in done:
        click.echo(
            f"\neach gating metric alone under (c), rho {CENTER[0]:g}, on the paper's three seeds "
            f"({gating_draws_:,} draws per tau): how often a faithful re-run fails it, beside the share of "
            f"the family's alpha the rule gives it ({expected.rule.alpha:.3%}: x, its multiple); and the "
            f"detectable miss, the smallest shift of its true mean that passes at most {TARGET_MISS:.0%} of "
            "the time"
        )
        click.echo("\n".join(gating_lines(expected, done["gating"])))
    if "law nulls" in done:
        click.echo("\n".join(law_lines(done["law nulls"], done["law claims"])))
    if "claims" in done:
        click.echo(
            f"\none claim alone (uh check --claim), under (a) at rho {CENTER[0]:g}, tau {CENTER[1]:g}, "
            f"{grid_draws} draws; T4 hours on the paper's Tesla T4; P(RR-like): EXPECTED SET MATCHED, the "
            "claim SUPPORTED and its run IDs REPLICATED"
        )
        click.echo("\n".join([CLAIM_HEADER, *done["claims"]]))
    if found := targets(done, grid, misses):
        click.echo(
            f"\ntargets: where the first draws' interval held a target, its cell was simulated again on "
            f"{close_draws:,} fresh draws; where that one holds it too, it is too close to call"
        )
        click.echo("\n".join(t.line() for t in found))
    elapsed = time.monotonic() - started
    click.echo(
        f"\ntook {elapsed // 60:.0f} min {elapsed % 60:.0f} s in {jobs} process{'es' * (jobs > 1)} on this "
        f"machine's {os.cpu_count()} CPUs"
    )
