"""What `uh oc`'s figures are held to: a faithful re-run passes (RESULTS REPLICATED) at least TARGET_PASS of the time
and fails (NOT REPLICATED) at most TARGET_MISS; a real miss or a claim with no true effect passes at most TARGET_MISS,
and is contradicted at most TARGET_AGAINST. Beside them `Bound`: the most that any rule at 5% could pass a faithful
re-run with k seeds, so that a target no procedure can meet is shown to be one. A target whose share's interval holds
its bound is simulated again on fresh draws (`settle`), and still inside it is too close to call.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import stats

from uniform_herding.design.simulation import LAW_CLAIMS, Simulation, Summary, pct, run_calls, simulate
from uniform_herding.design.worlds import CENTER, Model, World, pairs
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict.claims import PAPER_CLAIMS
from uniform_herding.verdict.expected import Expected

TARGET_PASS, TARGET_MISS = 0.95, 0.05
TARGET_AGAINST = TARGET_MISS / 2  # the contradicting side's bound (its boundaries spend 2.45% / m of it)
TARGET_PASS_GRID, BOUND_GAP = 0.90, 0.03  # (b) elsewhere on the grid; (a) within this of the any-rule bound
TAU_TARGETED = 0.75  # the largest stack offset the targets hold the rule to; the grid goes on to the rule's own tau


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


def cell(
    expected: Expected, model: Model, n: int, seconds: dict[str, float], max_seeds: int, rng: np.random.Generator
) -> tuple[Summary, float]:
    """One model simulated, and under (a) the any-rule bound at the procedure's most seeds (else 0)."""
    summary = simulate(expected, model, n, seconds, rng)
    return summary, Bound.of(expected, rng, model).at(max_seeds) if model.faithful == "a" else 0.0


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
    print(
        f"uh oc: {len(again)} simulation{'s' * (len(again) > 1)} whose interval holds a target, again on {each:,} "
        f"fresh draws each: {each * len(again):,} in all, at most the {asked:,} the run asked of the simulations its "
        "targets read",
        file=sys.stderr,
        flush=True,
    )
    more = {f"{part} {i}": [replace(parts[part][i], draws=each)] for part, i in again}
    redone = run_calls(more, [seed, 1], jobs)
    done = {part: list(results) for part, results in done.items()}
    for part, i in again:
        done[part][i] = redone[f"{part} {i}"][0]
    return done, each
