"""The models `uh oc` simulates re-runs under: the paper's per-seed table as a generative world (`World`), and
each stated model (`Model`) that perturbs it, in percentage points (pp), from the paper's own per-seed table
(tab:app-seeds). Three faithful ones, which differ in what they take the paper's table to be:
  - (b) the paper's means are the truth; each run ID's true mean is moved by the stack's offset (another GPU
    and software stack: SD tau per run ID and metric).
  - (a) the paper's means also carry their sampling error: each true mean is the paper's minus the mean of
    three simulated paper seeds, plus the offset (a faithful re-run can then land far from the paper's means).
  - (c) the truth is (b)'s, and the paper's table itself is redrawn in each world from the per-run SDs; the
    expected set is re-derived from the redrawn table (means, moderated spreads, tolerances), so the rules'
    own estimated inputs are redrawn too and the simulation cannot flatter them.
In every model a seed's value is the true mean plus noise with the paper's sample SD for that run ID and
metric. Seeds are shared across run IDs: one metric's noise on one seed is correlated exactly rho between
any two run IDs (seed 42 is the same seed for B1 and B3), and so are the stack's offsets (one stack runs
them all); rho = 0 treats them as independent. Across metrics, within a run ID, noise and offsets carry the
paper's pooled within-run correlation (all twelve run IDs' standardized residuals: 24 degrees of freedom).
The misses, under (c): noisier (every seed's noise doubled: it must not pass more often); B3 ACC shifted by
4 pp; the a3 noisy miss (a3's ACC on the paper's seeds 35.5, 39.0, 40.5); each comparison of a claim with
no true effect (the claimed-better run's true metric set to the other's; C5, the budget sweep's true ACC
spread shrunk to the retrieval sweep's); and, for the contradicts side, each claim with every comparison at
zero effect, judged by the claim's own procedure.
Under the seed noise laws the rule does not assume (`NOT_ASSUMED`: Student t of 3 df, chi-square of 4 df and its
mirror, each scaled to SD 1), the nulls again (`law_nulls`): C1's B3 - B1 ACC without its true effect through the
whole procedure, and each claim with every comparison at zero effect, judged alone (both sides).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from uniform_herding.catalogue import PAPER_RUNS
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict import decide
from uniform_herding.verdict.claims import PAPER_CLAIMS
from uniform_herding.verdict.expected import Expected

CENTER = (0.5, 0.5)  # rho, tau: where the targets ask for the most draws
LAWS: dict[str, Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]] = {  # a seed's noise, mean 0, SD 1
    "normal": lambda rng, shape: rng.standard_normal(shape),
    "heavy-tailed": lambda rng, shape: rng.standard_t(3, shape) / math.sqrt(3),  # Student t, 3 df: kurtosis infinite
    "skewed": lambda rng, shape: (rng.chisquare(4, shape) - 4) / math.sqrt(8),  # chi-square, 4 df: skewness 1.41
    "skewed, mirrored": lambda rng, shape: (4 - rng.chisquare(4, shape)) / math.sqrt(8),  # its long tail below
}
NOT_ASSUMED = ("heavy-tailed", "skewed", "skewed, mirrored")  # the laws the rule's t-tests do not assume


def _factor(corr: np.ndarray) -> np.ndarray:
    """A matrix F with F @ F.T = corr, for a correlation of rank < 3 too (BWT = -F on most rows)."""
    w, v = np.linalg.eigh(corr)
    return v * np.sqrt(np.clip(w, 0, None))


@dataclass(frozen=True)
class World:
    """The paper's per-seed table as a generative model: means [R, M], sample SDs [R, M], and one factor [M, M]
    of the pooled within-run correlation of the metrics. One factor for every run ID, so that a shared draw
    moves one metric of two run IDs with correlation exactly rho."""

    runs: tuple[str, ...]
    mean: np.ndarray
    sd: np.ndarray
    factor: np.ndarray

    @classmethod
    def of(cls, expected: Expected) -> World:
        table = expected.per_seed[expected.per_seed["run_id"].isin(PAPER_RUNS)]
        runs = tuple(dict.fromkeys(table["run_id"]))
        values = [table.loc[table["run_id"] == r, list(METRICS)].to_numpy(float) for r in runs]
        sd = np.stack([v.std(0, ddof=1) for v in values])
        standardized = [(v - v.mean(0)) / s.clip(1e-12) for v, s in zip(values, sd, strict=True)]
        corr = sum(z.T @ z for z in standardized) / sum(len(z) - 1 for z in standardized)
        return cls(runs, np.stack([v.mean(0) for v in values]), sd, _factor(corr))

    def index(self, run_id: str) -> int:
        return self.runs.index(run_id)

    def correlated(self, common: np.ndarray, own: np.ndarray, scale: np.ndarray | float, rho: float) -> np.ndarray:
        """[..., R, n, M] draws of SD `scale` ([R, M], or one number) from standard ones, over any leading axes:
        `common` [..., 1, n, M] to every run ID, `own` [..., R, n, M] to each; the pooled metric correlation, one
        metric correlated exactly rho across run IDs per draw."""
        z = math.sqrt(rho) * common + math.sqrt(1 - rho) * own
        scale = np.asarray(scale)
        return (scale[:, None, :] if scale.ndim else scale) * (z @ self.factor.T)


def standard(rng: np.random.Generator, segments: list[tuple[str, tuple[int, ...]]], n: int) -> list[np.ndarray]:
    """n worlds' standard draws, [n, *shape] per segment (law, shape), taken world by world and segment by segment
    as n calls drawing one world each would take them: where every segment has one law, in one call."""
    sizes = [math.prod(shape) for _, shape in segments]
    laws = {law for law, _ in segments}
    if len(laws) == 1:
        flat = LAWS[laws.pop()](rng, (n, sum(sizes)))
    else:
        flat = np.stack([np.concatenate([LAWS[law](rng, shape).ravel() for law, shape in segments]) for _ in range(n)])
    parts = np.split(flat, np.cumsum(sizes)[:-1], axis=1)
    return [part.reshape(n, *shape) for part, (_, shape) in zip(parts, segments, strict=True)]


@dataclass(frozen=True)
class Model:
    """One stated model: a faithful one ("a", "b" or "c") at rho and tau, optionally noisier, shifted, a claim's
    nulls (a claim's comparisons without their true effect), or fixed values."""

    name: str
    faithful: str = "c"
    rho: float = 0.5
    tau: float = 0.5
    noise_scale: float = 1.0
    law: str = "normal"  # each seed's noise: LAWS (heavy-tailed and skewed: what the rule does not assume)
    shift: tuple[str, str, float] | None = None  # run ID, metric, pp added to its true mean
    nulls: tuple[tuple[str, str, str], ...] = ()  # (run ID, the run ID whose true metric it is set to, metric)
    null_c5: bool = False
    fixed: tuple[str, str, tuple[float, ...]] | None = None  # run ID, metric, values on the paper's seeds
    kind: str = "miss"  # "faithful" (should pass) or "miss" (should fail)

    def segments(self, world: World, seeds: int | None) -> list[tuple[str, tuple[int, ...]]]:
        """The standard draws one world takes, in order, each for every run ID's shared and own part ([1 + R, k, M]):
        under (a) the paper's sampling error, the stack's offset, under (c) the redrawn paper table, then the re-run's
        `seeds` (None: the truth's alone)."""
        draws = [(self.law, 3)] * (self.faithful == "a") + [("normal", 1)]
        if seeds:
            draws += [(self.law, 3)] * (self.faithful == "c") + [(self.law, seeds)]
        r, m = len(world.runs), world.factor.shape[0]
        return [(law, (r + 1, k, m)) for law, k in draws]

    def _shared(self, world: World, z: np.ndarray, scale: np.ndarray | float) -> np.ndarray:
        return world.correlated(z[:, :1], z[:, 1:], scale, self.rho)

    def truth(self, world: World, rng: np.random.Generator) -> np.ndarray:
        """[R, M]: the true means of one simulated world."""
        return self._truths(world, iter(standard(rng, self.segments(world, None), 1)))[0]

    def _truths(self, world: World, draws: Iterator[np.ndarray]) -> np.ndarray:
        """[n, R, M]: the true means of n worlds, from their standard draws in `segments`' order."""
        truth = world.mean
        if self.faithful == "a":
            truth = truth - self._shared(world, next(draws), world.sd).mean(-2)
        truth = truth + self._shared(world, next(draws), self.tau)[..., 0, :]
        if self.shift:
            truth[:, world.index(self.shift[0]), METRICS.index(self.shift[1])] += self.shift[2]
        for run_id, other, metric in self.nulls:
            truth[:, world.index(run_id), METRICS.index(metric)] = truth[:, world.index(other), METRICS.index(metric)]
        if self.null_c5:
            acc, b3 = METRICS.index("acc"), world.index("B3")
            budget, retrieval = (
                truth[:, [world.index(r) for r in rs], acc] for rs in (("s1", "B3", "s2"), ("s3", "B3", "s4"))
            )
            scale = np.ptp(retrieval, -1) / np.ptp(budget, -1)
            for r in ("s1", "s2"):
                i = world.index(r)
                truth[:, i, acc] = truth[:, b3, acc] + scale * (truth[:, i, acc] - truth[:, b3, acc])
        return truth

    def draws(
        self, expected: Expected, world: World, rng: np.random.Generator, n: int
    ) -> tuple[np.ndarray | None, np.ndarray]:
        """n simulated re-runs, drawn as n calls of `draw` would draw them: under (c) the redrawn paper tables
        [n, R, 3, M], as printed (2 decimals), else None; and [n, R, registered seeds, M] values in the
        procedure's order."""
        draws = iter(standard(rng, self.segments(world, len(expected.registered)), n))
        truth = self._truths(world, draws)
        paper = (
            np.round(world.mean[:, None, :] + self._shared(world, next(draws), world.sd), 2)
            if self.faithful == "c"
            else None
        )
        values = truth[..., None, :] + self.noise_scale * self._shared(world, next(draws), world.sd)
        if self.fixed:
            fixed = np.asarray(self.fixed[2])
            values[:, world.index(self.fixed[0]), : len(fixed), METRICS.index(self.fixed[1])] = fixed
        return paper, values

    def draw(self, expected: Expected, world: World, rng: np.random.Generator) -> tuple[Expected, np.ndarray]:
        """One simulated re-run: the expected set it is judged against (under (c), re-derived from a redrawn
        paper table) and [R, registered seeds, M] values in the procedure's order."""
        paper, values = self.draws(expected, world, rng, 1)
        return (expected if paper is None else redrawn(expected, world, paper[0])), values[0]


def redrawn(expected: Expected, world: World, paper: np.ndarray) -> Expected:
    """The expected set as if the paper's table had come out as `paper` ([R, 3, M], as printed: Model.draws'):
    same rule, procedure and hash, everything derived from the table derived anew."""
    seeds = expected.seeds
    rows = [(r, s, *paper[i, j]) for i, r in enumerate(world.runs) for j, s in enumerate(seeds)]
    return replace(expected, per_seed=pd.DataFrame(rows, columns=["run_id", "seed", *METRICS]))


def pairs(expected: Expected) -> list[tuple[str, str, str, str, int]]:
    """The paired comparisons of claims C1-C4: (claim, run ID, other, metric, claimed sign). C5's comparisons are
    contrasts of four run IDs, not of two."""
    return [
        (claim.claim_id, c.weights[0][0], c.weights[1][0], c.metric, c.sign)
        for claim in PAPER_CLAIMS
        if claim.claim_id != "C5"
        for c in claim.comparisons
    ]


def models(expected: Expected) -> list[Model]:
    """The misses and nulls, under (c) at the centre of the grid, in the order printed."""
    rho, tau = CENTER
    out = [
        Model("noisier (seed noise x2)", noise_scale=2.0, rho=rho, tau=tau),
        Model("B3 ACC shifted -4 pp", shift=("B3", "acc", -4.0), rho=rho, tau=tau),
        Model("B3 ACC shifted +4 pp", shift=("B3", "acc", +4.0), rho=rho, tau=tau),
        Model("a3 noisy miss (ACC 35.5 / 39.0 / 40.5)", fixed=("a3", "acc", (35.5, 39.0, 40.5)), rho=rho, tau=tau),
    ]
    out += [
        Model(f"null {claim}: {run_id} {metric} = {other}", nulls=((run_id, other, metric),), rho=rho, tau=tau)
        for claim, run_id, other, metric, _ in pairs(expected)
    ]
    return [*out, Model("null C5: budget sweep spread = retrieval's", null_c5=True, rho=rho, tau=tau)]


def law_nulls(expected: Expected) -> list[Model]:
    """Per law the rule does not assume, under (c) at the centre of the grid: C1's B3 - B1 ACC without its true
    effect, the null whose whole procedure passes most often under normal noise (near 5%; every other, under 1%:
    expected_results/README.md)."""
    null = next(m for m in models(expected) if m.nulls == (("B3", "B1", "acc"),))
    return [replace(null, name=f"{null.name}, {law}", law=law) for law in NOT_ASSUMED]


def tolerances(expected: Expected, paper: np.ndarray, k: int) -> np.ndarray:
    """[n, R, M]: the tolerance at k counted seeds that each of n redrawn paper tables ([n, R, seeds, M], as
    printed) derives under the set's rule: world by world, redrawn(expected, world, paper[i]).tolerance_for(run,
    metric, k), by decide's batch moderation and rule in one pass."""
    if expected.rule is None:
        raise ValueError(f"{expected.directory}: its tolerances are stated as numbers, not derived")
    n = paper.shape[-2]
    variances = np.moveaxis(np.var(paper, axis=-2, ddof=1), -1, -2)  # [n, M, R]: one set per world and metric
    moderated, df = decide.moderated_variances(variances, n - 1)
    return expected.rule.tolerance(np.moveaxis(np.sqrt(moderated), -1, -2), df[:, None, :], n, k)
