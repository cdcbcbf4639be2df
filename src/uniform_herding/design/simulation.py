"""Simulated re-runs of `uh oc`, each judged by uh check's own function (judge.check: the procedure's state replayed,
the metrics, the claims and the verdict), following the pre-registered procedure look by look (next_step's run IDs
and seeds, then a check again); what each model's re-runs come to (`Summary`, each share with its 95% Wilson
interval); a claim judged alone (`contradicts`, `claim_cost`) and each gating metric alone (`gating_draws`); and the
simulations run in processes, each on its own random stream, so that no figure depends on --jobs (`run_calls`).

The models are design/worlds.py's.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
from scipy import stats

from uniform_herding.catalogue import PAPER_RUNS
from uniform_herding.design.worlds import CENTER, NOT_ASSUMED, Model, World, pairs, tolerances
from uniform_herding.method.metrics import METRICS
from uniform_herding.runs.terminal import Progress
from uniform_herding.verdict.claims import PAPER_CLAIMS, Claim
from uniform_herding.verdict.decide import Decision, replicated
from uniform_herding.verdict.expected import Expected
from uniform_herding.verdict.judge import check
from uniform_herding.verdict.procedure import replay
from uniform_herding.verdict.words import VerdictKind

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


Calls = list[tuple[str, Simulation]]  # (part, simulation), in order
Finished = Callable[[str], None]  # told each part of a simulation that ends


def _in_this_process(calls: Calls, seeds: list[np.random.SeedSequence], progress: Progress, finished: Finished) -> list:
    """Each simulation in turn, here (--jobs 1)."""
    with progress:
        results = []
        for (part, s), stream in zip(calls, seeds, strict=True):
            results.append(_call(s.call, stream))
            finished(part)
    return results


def _in_processes(
    calls: Calls, seeds: list[np.random.SeedSequence], jobs: int, progress: Progress, finished: Finished
) -> list:
    """Each simulation in a pool of `jobs` forked processes. The first submit forks every process, before progress
    starts its thread (no fork of a threaded one); SIGTERM or SIGINT (cli.py) stops the simulations under way rather
    than waiting for them."""
    fork = multiprocessing.get_context("fork")
    with ProcessPoolExecutor(jobs, mp_context=fork, initializer=_leave_signals_to_the_parent) as pool:
        futures = [pool.submit(_call, s.call, stream) for (_, s), stream in zip(calls, seeds, strict=True)]
        try:
            with progress:
                for (part, _), future in zip(calls, futures, strict=True):  # one stopped is not done
                    future.add_done_callback(lambda f, part=part: f.cancelled() or f.exception() or finished(part))
                return [future.result() for future in futures]
        except BaseException:
            pool.shutdown(wait=False, cancel_futures=True)
            for worker in multiprocessing.active_children():
                worker.kill()
            raise


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
            results = _in_this_process(calls, seeds, progress, finished)
        else:
            results = _in_processes(calls, seeds, jobs, progress, finished)
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

    def detectable_miss(self, at_most: float) -> np.ndarray:
        """Per metric: the smallest shift (0.1 pp steps, the worse sign) at which it passes at most `at_most` of the
        time (targets.TARGET_MISS)."""
        shifts, found = np.zeros(len(self.metrics)), np.zeros(len(self.metrics), bool)
        shift = 0.0
        while not found.all():
            done = ~found & (np.maximum(self.pass_rate(shift), self.pass_rate(-shift)) <= at_most)
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


def paper_seconds(expected: Expected) -> dict[str, float]:
    path = expected.directory / COMPUTE_CSV
    if not path.is_file():
        return {}
    table = pd.read_csv(path)
    return dict(zip(table["run_id"], table["seconds_mean"].astype(float), strict=True))
