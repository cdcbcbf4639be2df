"""`uh oc`: the operating characteristic of `uh check`. How often a faithful re-run is called RESULTS
REPLICATED, and how often a real miss or a claim with no true effect is, by simulating whole re-runs under
stated models and judging each with check.py's own functions (compare, check_claims, judge), following the
pre-registered procedure look by look (next_step's run IDs and seeds, then a check again).

The models, in percentage points (pp), from the paper's own per-seed table (tab:app-seeds):
  - faithful (rho): each run ID's true mean is the paper's mean minus the paper's own sampling error (the
    mean of three simulated paper seeds), plus an allowance for another GPU and software stack: an offset
    of standard deviation TAU per run ID and metric. A seed's value is the true mean plus noise with the
    paper's sample SD for that run ID and metric. Seeds are shared across run IDs: one metric's noise on
    one seed is correlated exactly rho between any two run IDs (seed 42 is the same seed for B1 and B3),
    and so are the stack's offsets (one stack runs them all); rho = 0 treats them as independent. Across
    metrics, within a run ID, noise and offsets carry the paper's pooled within-run correlation (all
    twelve run IDs' standardized residuals: 24 degrees of freedom, where one run ID's three seeds give 2).
  - noisier: faithful, every seed's noise doubled (a sloppier re-run must not pass more often).
  - shift: faithful, one run ID's true metric moved by d pp (a real miss).
  - null: faithful, one comparison of a claim with no true effect: the claimed-better run's true metric
    set to the other's (C5: the budget sweep's true ACC spread shrunk to the retrieval sweep's).
  - a3 noisy miss: faithful, a3's ACC on the paper's seeds exactly 35.5, 39.0, 40.5.

Beside the pass rates, `Bound`: the most that any rule at 5% could pass a faithful re-run with k seeds, so
that a target no procedure can meet is shown to be one. The tolerances of expected_results/tolerances.toml
are derived here too (`derive_tolerances`), so the rule and the simulation that calibrates it read side by
side.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import click
import numpy as np
import pandas as pd
from scipy import stats

from uniform_herding.check import (
    CLAIMS,
    EXIT_UNDECIDED,
    INCONCLUSIVE,
    RESULTS_NOT_REPLICATED,
    RESULTS_REPLICATED,
    SET_MATCHED,
    Expected,
    ExpectedError,
    MetricCheck,
    check_claims,
    compare,
    expected_dir_for,
    find_expected_root,
    judge,
    load_expected,
    wide,
)
from uniform_herding.config import PAPER_RUNS
from uniform_herding.results import METRICS

TAU = 0.5  # pp: the stack's allowance per run ID and metric (the floor; see expected_results/README.md)
FAMILY_MISS = 0.01  # the chance that a faithful re-run misses any gating metric's tolerance (Bonferroni split)
TARGET_PASS, TARGET_MISS = 0.95, 0.05
COMPUTE_CSV = "paper_compute.csv"  # seconds per run on the paper's Tesla T4 (tab:app-compute)


def z_for(n_gating: int) -> float:
    """The two-sided normal quantile that leaves FAMILY_MISS to n_gating metrics together."""
    return float(stats.norm.ppf(1 - FAMILY_MISS / (2 * n_gating)))


def derive_tolerances(per_seed: pd.DataFrame, n_gating: int, tau: float = TAU) -> dict[str, dict[str, float]]:
    """Per metric and run ID: z * sqrt(s^2/3 + s^2/3 + tau^2), rounded up to 0.1 pp, where s is the paper's
    sample SD over its three seeds. The difference of a faithful re-run's 3-seed mean and the paper's has that
    standard deviation (two samplings of the same seeds' noise, plus the stack's offset)."""
    z = z_for(n_gating)
    out: dict[str, dict[str, float]] = {}
    for metric in METRICS:
        out[metric] = {}
        for run_id, values in per_seed.groupby("run_id", sort=False)[metric]:
            n = len(values)
            sd = math.sqrt(2 * float(values.var(ddof=1)) / n + tau**2)
            out[metric][str(run_id)] = math.ceil(round(z * sd * 10, 6)) / 10
    return out


# --- the world the models perturb ----------------------------------------------------------------------------


def _factor(corr: np.ndarray) -> np.ndarray:
    """A matrix F with F @ F.T = corr, for a correlation of rank < 3 too (BWT = -F on most rows)."""
    w, v = np.linalg.eigh(corr)
    return v * np.sqrt(np.clip(w, 0, None))


@dataclass(frozen=True)
class World:
    """The paper's per-seed table as a generative model: means [R, M], sample SDs [R, M], one factor [M, M]
    of the pooled within-run correlation of the metrics, and the stack's allowance tau (pp). One factor for
    every run ID, so that a shared draw moves one metric of two run IDs with correlation exactly rho (a
    factor per run ID would mix the metrics differently for each, and could even turn rho negative)."""

    runs: tuple[str, ...]
    mean: np.ndarray
    sd: np.ndarray
    factor: np.ndarray
    tau: float

    @classmethod
    def of(cls, expected: Expected, tau: float = TAU) -> World:
        table = expected.per_seed[expected.per_seed["run_id"].isin(PAPER_RUNS)]
        runs = tuple(dict.fromkeys(table["run_id"]))
        values = [table.loc[table["run_id"] == r, list(METRICS)].to_numpy(float) for r in runs]
        sd = np.stack([v.std(0, ddof=1) for v in values])
        standardized = [(v - v.mean(0)) / s.clip(1e-12) for v, s in zip(values, sd, strict=True)]
        corr = sum(z.T @ z for z in standardized) / sum(len(z) - 1 for z in standardized)
        return cls(runs, np.stack([v.mean(0) for v in values]), sd, _factor(corr), tau)

    def index(self, run_id: str) -> int:
        return self.runs.index(run_id)

    def shared(self, rng: np.random.Generator, scale: np.ndarray | float, n: int, rho: float) -> np.ndarray:
        """[R, n, M] draws of SD `scale` ([R, M], or one number) with the pooled metric correlation, one metric
        correlated exactly rho across run IDs per draw."""
        r, m = len(self.runs), self.factor.shape[0]
        z = math.sqrt(rho) * rng.standard_normal((1, n, m)) + math.sqrt(1 - rho) * rng.standard_normal((r, n, m))
        scale = np.asarray(scale)
        return (scale[:, None, :] if scale.ndim else scale) * (z @ self.factor.T)


@dataclass(frozen=True)
class Model:
    """One stated model: faithful with rho, optionally noisier, shifted, a claim's null, or fixed values."""

    name: str
    rho: float = 0.5
    noise_scale: float = 1.0
    shift: tuple[str, str, float] | None = None  # run ID, metric, pp added to its true mean
    null: tuple[str, str, str] | None = None  # run ID set to the other's true metric
    null_c5: bool = False
    fixed: tuple[str, str, tuple[float, ...]] | None = None  # run ID, metric, values on the paper's seeds
    kind: str = "miss"  # "faithful" (should pass) or "miss" (should fail)

    def truth(self, world: World, rng: np.random.Generator) -> np.ndarray:
        """[R, M]: the true means of one simulated world."""
        truth = world.mean - world.shared(rng, world.sd, 3, self.rho).mean(1)
        truth = truth + world.shared(rng, world.tau, 1, self.rho)[:, 0]
        if self.shift:
            truth[world.index(self.shift[0]), METRICS.index(self.shift[1])] += self.shift[2]
        if self.null:
            m = METRICS.index(self.null[2])
            truth[world.index(self.null[0]), m] = truth[world.index(self.null[1]), m]
        if self.null_c5:
            acc, b3 = METRICS.index("acc"), world.index("B3")
            budget, retrieval = (np.array([truth[world.index(r), acc] for r in rs]) for rs in (("s1", "B3", "s2"),
                                                                                                ("s3", "B3", "s4")))
            scale = np.ptp(retrieval) / np.ptp(budget)
            for r in ("s1", "s2"):
                truth[world.index(r), acc] = truth[b3, acc] + scale * (truth[world.index(r), acc] - truth[b3, acc])
        return truth

    def draw(self, world: World, rng: np.random.Generator, n_seeds: int) -> np.ndarray:
        """[R, n_seeds, M]: one re-run's values on every registered seed, in the procedure's order."""
        truth = self.truth(world, rng)
        values = truth[:, None, :] + self.noise_scale * world.shared(rng, world.sd, n_seeds, self.rho)
        if self.fixed:
            fixed = np.asarray(self.fixed[2])
            values[world.index(self.fixed[0]), : len(fixed), METRICS.index(self.fixed[1])] = fixed
        return values


def pairs(expected: Expected) -> list[tuple[str, str, str, str, int]]:
    """The paired comparisons of claims C1-C4: (claim, run ID, other, metric, claimed sign). C5's comparison
    is of ranges, not of two run IDs."""
    out = []
    for claim in (c for c in CLAIMS if not c.finding and c.claim_id != "C5"):
        table = expected.per_seed[expected.per_seed["run_id"].isin(claim.runs)]
        for comparison in claim.comparisons(wide(table)):
            run_id, rest = comparison.label.split("-", 1)
            other, metric = rest.split(" ")
            out.append((claim.claim_id, run_id, other, metric, comparison.sign))
    return out


def models(expected: Expected) -> list[Model]:
    """The stated models, in the order printed."""
    out = [Model("faithful, rho 0.5", kind="faithful"), Model("faithful, rho 0", rho=0.0, kind="faithful"),
           Model("noisier (seed noise x2), rho 0.5", noise_scale=2.0, kind="faithful"),
           Model("B3 ACC shifted -4 pp", shift=("B3", "acc", -4.0)),
           Model("B3 ACC shifted +4 pp", shift=("B3", "acc", +4.0)),
           Model("a3 noisy miss (ACC 35.5 / 39.0 / 40.5)", fixed=("a3", "acc", (35.5, 39.0, 40.5)))]  # fmt: skip
    out += [Model(f"null {claim}: {run_id} {metric} = {other}", null=(run_id, other, metric))
            for claim, run_id, other, metric, _ in pairs(expected)]  # fmt: skip
    return [*out, Model("null C5: budget sweep spread = retrieval's", null_c5=True)]


# --- the procedure, through uh check's own functions ----------------------------------------------------------


def _table(world: World, values: np.ndarray, seeds: tuple[int, ...], have: set[tuple[str, int]]) -> pd.DataFrame:
    rows = [(r, s, *values[world.index(r), seeds.index(s)]) for r, s in sorted(have)]
    return pd.DataFrame(rows, columns=["run_id", "seed", *METRICS])


@dataclass
class Outcome:
    """One simulated re-run at the end of the procedure: its verdict word, why, and what it ran beyond look 1."""

    word: str
    why: tuple[str, ...]
    undecided_at_first_look: bool
    extra_runs: list[str] = field(default_factory=list)


def registered_seeds(expected: Expected) -> tuple[int, ...]:
    """Every seed a re-run may count, in order: the procedure's, else the set's own."""
    return expected.procedure.seeds if expected.procedure else expected.seeds


def follow_procedure(expected: Expected, world: World, values: np.ndarray) -> Outcome:
    """Check the paper's seeds; while the verdict is UNDECIDED, run its next_step and check again."""
    seeds = registered_seeds(expected)
    have = {(r, s) for r in world.runs for s in expected.seeds}
    extra: list[str] = []
    first = None
    while True:
        table = _table(world, values, seeds, have)
        claims = check_claims(table, expected.profile, expected.procedure, explain=False)
        verdict = judge(expected, table, compare(expected, table), claims)
        first = verdict.code == EXIT_UNDECIDED if first is None else first
        if verdict.code != EXIT_UNDECIDED:
            return Outcome(verdict.word, verdict.why, first, extra)
        for run_id in verdict.next_step["run_ids"]:
            for seed in verdict.next_step["seeds"]:
                if (run_id, seed) not in have:
                    have.add((run_id, seed))
                    extra.append(run_id)


@dataclass(frozen=True)
class Summary:
    model: Model
    passed: float  # RESULTS REPLICATED at the end of the procedure
    failed: float  # NOT REPLICATED
    inconclusive: float  # INCONCLUSIVE: the last look left a claim undecided
    undecided_first: float  # UNDECIDED at the first look (the procedure asked for more seeds)
    extra_runs: float
    extra_hours: float
    causes: list[tuple[str, float]]

    def row(self) -> str:
        causes = ", ".join(f"{c} {p:.0%}" for c, p in self.causes[:3]) or "-"
        return (f"{self.model.name:44} {self.passed:7.1%} {self.failed:7.1%} {self.inconclusive:7.1%} "
                f"{self.undecided_first:7.1%} {self.extra_runs:6.1f} {self.extra_hours:7.1f}   {causes}")


def simulate(expected: Expected, model: Model, n: int, rng: np.random.Generator, seconds: dict[str, float],
             tau: float = TAU) -> Summary:  # fmt: skip
    """P(RESULTS REPLICATED), P(NOT REPLICATED) at the end of the procedure, P(undecided at look 1), the mean
    extra runs and their hours on the paper's GPU, and the commonest reasons for failing."""
    world = World.of(expected, tau)
    n_seeds = len(registered_seeds(expected))
    outcomes = [follow_procedure(expected, world, model.draw(world, rng, n_seeds)) for _ in range(n)]
    passed = sum(o.word in (RESULTS_REPLICATED, SET_MATCHED) for o in outcomes) / n
    causes = Counter(reason.split(" (")[0] for o in outcomes if o.word not in (RESULTS_REPLICATED, SET_MATCHED)
                     for reason in o.why if not reason.startswith("no badge"))  # fmt: skip
    return Summary(model, passed, sum(o.word == RESULTS_NOT_REPLICATED for o in outcomes) / n,
                   sum(o.word == INCONCLUSIVE for o in outcomes) / n,
                   sum(o.undecided_at_first_look for o in outcomes) / n,
                   float(np.mean([len(o.extra_runs) for o in outcomes])),
                   float(np.mean([sum(seconds.get(r, 0.0) for r in o.extra_runs) for o in outcomes])) / 3600,
                   [(c, k / n) for c, k in causes.most_common()])  # fmt: skip


def detectable_miss(expected: Expected, run_id: str, metric: str, n: int, rng: np.random.Generator,
                    tau: float = TAU) -> float:  # fmt: skip
    """The smallest shift (0.1 pp steps, the worse sign) of a run ID's true mean at which its metric verdict
    (MetricCheck's, the one uh check prints) is REPLICATED at most TARGET_MISS of the time (faithful, rho 0.5)."""
    world = World.of(expected, tau)
    r, m = world.index(run_id), METRICS.index(metric)
    expected_values = tuple(expected.per_seed.loc[expected.per_seed["run_id"] == run_id, metric].astype(float))
    tolerance = expected.tolerance_for(run_id, metric)
    base = Model("faithful", kind="faithful")
    draws = np.stack([base.draw(world, rng, len(expected.seeds))[r, :, m] for _ in range(n)])  # [n, seeds]

    def pass_rate(shift: float) -> float:
        return float(np.mean([MetricCheck(run_id, metric, expected_values, tuple(d + shift), tolerance).verdict
                              == "REPLICATED" for d in draws]))  # fmt: skip

    shift = 0.0
    while max(pass_rate(shift), pass_rate(-shift)) > TARGET_MISS:
        shift = round(shift + 0.1, 1)
    return shift


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
    help); every comparison must pass, so at most the least of these; averaged over the model's worlds. Their
    truths differ from the paper's means by its own sampling error, so it stays below 1 however many seeds."""

    effect: np.ndarray  # [worlds, comparisons]: the true effects, signed so that > 0 is the claim
    sigma: np.ndarray  # [comparisons]: the per-seed SD of each comparison's paired delta

    DRAWS = 20000  # worlds: the bound needs no procedure run, so it can afford far more than the models
    MAX_SEEDS = 1000

    @classmethod
    def of(cls, expected: Expected, rng: np.random.Generator, rho: float = 0.5, tau: float = TAU) -> Bound:
        world, model = World.of(expected, tau), Model("faithful", rho=rho, kind="faithful")
        comparisons = [(world.index(r), world.index(o), METRICS.index(m), sign) for _, r, o, m, sign in pairs(expected)]
        sd = world.sd
        sigma = np.array([math.sqrt(sd[r, m] ** 2 + sd[o, m] ** 2 - 2 * rho * sd[r, m] * sd[o, m])
                          for r, o, m, _ in comparisons])  # fmt: skip
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


def targets(summaries: list[Summary], most: Bound, max_seeds: int) -> list[tuple[str, bool]]:
    """The targets the rules are calibrated to, each with whether the simulation met it; beside the pass
    rate, the `most` any rule could give at the procedure's `max_seeds`, and the seeds the target takes."""
    needed = most.seeds_for(TARGET_PASS)
    by = {s.model.name: s for s in summaries}
    faithful, noisier = by["faithful, rho 0.5"], by["noisier (seed noise x2), rho 0.5"]
    out = [(f"faithful, rho 0.5: NOT REPLICATED <= {TARGET_MISS:.0%} ({faithful.failed:.1%})",
            faithful.failed <= TARGET_MISS),
           (f"faithful, rho 0.5: RESULTS REPLICATED at the end of the procedure >= {TARGET_PASS:.0%} "
            f"({faithful.passed:.1%}; any rule: at most {most.at(max_seeds):.1%} at {max_seeds} seeds, "
            f"{TARGET_PASS:.0%} at {needed or f'> {Bound.MAX_SEEDS}'} seeds)",
            faithful.passed >= TARGET_PASS)]  # fmt: skip
    for s in summaries:
        if s.model.kind == "miss":
            out.append((f"{s.model.name}: RESULTS REPLICATED <= {TARGET_MISS:.0%} ({s.passed:.1%})",
                        s.passed <= TARGET_MISS))  # fmt: skip
    out.append((f"noisier passes no more often than faithful ({noisier.passed:.1%} <= {faithful.passed:.1%})",
                noisier.passed <= faithful.passed))  # fmt: skip
    return out


@click.command("oc")
@click.option("--expected", "expected_dir", type=click.Path(file_okay=False, path_type=Path),
              help="Expected set [default: the paper's, expected_results/].")  # fmt: skip
@click.option("-n", "--draws", type=click.IntRange(min=10), default=1000, show_default=True,
              help="Simulated re-runs per model.")  # fmt: skip
@click.option("--seed", type=int, default=0, show_default=True, help="The simulation's random seed.")
@click.option("--tau", type=click.FloatRange(min=0.0), default=TAU, show_default=True,
              help="The stack's allowance per run ID and metric (pp).")  # fmt: skip
@click.option("--only", type=click.Choice(["models", "misses"]), help="Print one part only.")
def oc_command(expected_dir: Path | None, draws: int, seed: int, tau: float, only: str | None) -> None:
    """Operating characteristic of uh check: simulated re-runs under stated models, judged by its own code."""
    try:
        expected = load_expected(expected_dir or expected_dir_for("paper", find_expected_root(
            [Path.cwd(), Path(__file__).resolve().parent])))  # fmt: skip
    except ExpectedError as e:
        raise click.ClickException(str(e)) from None
    if expected.profile != "paper":
        raise click.ClickException(f"{expected.directory} holds profile {expected.profile}; the models are the paper's")
    rng = np.random.default_rng(seed)
    p = expected.procedure
    click.echo(f"uh oc: {draws} simulated re-runs per model, judged by uh check's code against {expected.describe()}")
    click.echo(f"gating metrics: {', '.join(expected.gate)}; tau {tau:g} pp; claims: "
               + (f"looks at {', '.join(map(str, p.looks))} seeds, one-sided alpha "
                  f"{' + '.join(f'{a:g}' for a in p.alpha)}, registered seeds {', '.join(map(str, p.seeds))}"
                  if p else "one look on the set's seeds, alpha 0.05"))  # fmt: skip
    if only != "misses":
        seconds = paper_seconds(expected)
        click.echo(f"\n{'model':44} {'P(RR)':>7} {'P(NOT)':>7} {'P(INC)':>7} {'undec.1':>7} {'+runs':>6} "
                   f"{'+T4 h':>7}   main causes of not passing")  # fmt: skip
        summaries = []
        for model in models(expected):
            summaries.append(simulate(expected, model, draws, rng, seconds, tau))
            click.echo(summaries[-1].row())
        click.echo("\nP(RR), P(NOT), P(INC): RESULTS REPLICATED, NOT REPLICATED, INCONCLUSIVE at the end of the "
                   "procedure; undec.1: UNDECIDED at the first look; +runs, +T4 h: the extra runs next_step asked "
                   "for, and their hours on the paper's Tesla T4")  # fmt: skip
        click.echo("\ntargets:")
        max_seeds = p.looks[-1] if p else len(expected.seeds)
        for text, met in targets(summaries, Bound.of(expected, rng, tau=tau), max_seeds):
            click.echo(f"  {'met    ' if met else 'NOT MET'}  {text}")
    if only != "models":
        click.echo(f"\ndetectable miss per gating metric (faithful, rho 0.5, {draws} draws): the smallest shift of the "
                   f"run ID's true mean that passes its tolerance at most {TARGET_MISS:.0%} of the time")
        runs = [r for r in dict.fromkeys(expected.per_seed["run_id"]) if r in PAPER_RUNS]
        for metric in expected.gate:
            cells = [f"{r} {detectable_miss(expected, r, metric, draws, rng, tau):.1f}" for r in runs]
            click.echo(f"  {metric:10} " + ", ".join(cells))

