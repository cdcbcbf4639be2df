"""The decision rules of `uh check`, on plain numbers: one function per rule, each stated here once.

Metrics (a re-run's mean against the expected mean, each over its own seeds):
  - the verdict: REPLICATED when |observed mean - expected mean| <= the pre-registered tolerance, else
    NOT REPLICATED. Nothing else decides it: an interval, however wide, never turns a miss into a pass.
  - the tolerance, where the set derives it (`Rule`): t * sqrt(s^2 (1/n + 1/k) + tau^2) for n expected and
    k counted re-run seeds, where s is the run ID's spread moderated across the set's run IDs
    (`moderated_spread`, limma's empirical Bayes) and t the two-sided t quantile of the degrees of freedom
    that moderated spread really has, at the metric's share of the family's alpha. The spread and the
    quantile come from the expected set alone, so a noisier re-run never gets a wider tolerance.
  - information beside it: the Welch 95% interval of the difference of means, and the equivalence at the
    tolerance by two one-sided Welch tests at 5% each (TOST; the same as the Welch 90% interval lying
    inside [-tol, +tol]). Where equivalence is not shown, the number of re-run seeds that would show it if
    the difference and both spreads stayed as they are.
Claims (a difference the paper asserts, e.g. B3 - B1 ACC > 0), on per-seed differences paired by seed:
  - one comparison supports the claim when a one-sided paired t-test in the claimed direction rejects
    "no difference or the other way" at 5% (the 90% t-interval of the mean paired delta lies above 0, or
    below it for a claimed decrease); it contradicts the claim when the same test in the other direction
    rejects at 5%; otherwise it is undecided, with the number of seeds that would decide it at this spread.
  - a claim of m comparisons is supported when every comparison supports it (an intersection-union test:
    level 5% without correction), contradicted when any contradicts it at alpha / 2m (`against`: a union,
    Bonferroni, at half the level, so a claim with no true effect is contradicted at most 2.5% of the time:
    NOT SUPPORTED is final, undecided asks for seeds), undecided otherwise.
  - where an expected set pre-registers a sequential design (a Procedure: seeds in order, looks, a level per
    look), each comparison is decided at the first look that decides it, each look at its own level, and
    extended no further (procedure.claim_state); the levels either sum to 5% (a Bonferroni split, contradicting
    at alpha / 2m a look) or are exact group-sequential boundaries (verdict/boundaries.py, contradicting at the
    level derived for the claim's m), so with normal seed noise, as the t-test assumes, each comparison, every look
    counted, errs at most 5% on the supporting side (and so the claim, all of whose comparisons must support it)
    and the claim at most 2.5% on the contradicting side; skewed noise errs more (uh oc --only laws).
Values carry a few decimals; a difference of them carries float noise (2.0000000000000018 for 2.00), so
every rule compares at DECIMALS places.
With fewer than MIN_SEEDS seeds on a side (metrics) or shared (claims) there is no interval and nothing
is decided from one: a standard deviation from 2 seeds has 1 degree of freedom, whose one-sided 95%
t-quantile (6.31) makes any interval uninformative.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from enum import StrEnum
from functools import cached_property

import numpy as np
from scipy import special, stats

from uniform_herding.verdict.boundaries import Design


@contextmanager
def _quiet() -> Iterator[None]:
    """scipy warns of precision loss when a side's values are all equal; smoke values lie on a 0.5 pp grid, so
    that happens, and a zero variance is exact there (the other side's, or none, carries the interval)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "Precision loss occurred", RuntimeWarning)
        yield


ALPHA = 0.05  # each one-sided test; two-sided intervals at 1 - 2 * ALPHA = 90%
MIN_SEEDS = 3
MAX_SEEDS = 1000  # "seeds needed" beyond this is reported as not reachable
DECIMALS = 9  # float noise of sums of values given to 2 decimals lies far below this, real differences above


class Decision(StrEnum):
    """What one test, a claim, or a claim under a procedure decides. A str enum: its value is the word an evidence
    line prints and check_report.json's state holds (words.py's kinds are the verdicts; this is a test's outcome)."""

    SUPPORTS = "supports"
    CONTRADICTS = "contradicts"
    UNDECIDED = "undecided"


def replicated(difference: float | np.ndarray, tolerance: float | np.ndarray) -> bool | np.ndarray:
    """The metric verdict: the pre-registered tolerance alone decides (both at DECIMALS places, so that a shift
    of exactly the tolerance passes whichever its sign, a derived tolerance's own decimals included). Elementwise
    over arrays (uh oc judges millions of simulated metrics at once); a Python bool for two numbers."""
    ok = np.round(np.abs(difference), DECIMALS) <= np.round(tolerance, DECIMALS)
    return bool(ok) if np.ndim(ok) == 0 else ok


def welch_interval(
    expected: Sequence[float], observed: Sequence[float], level: float = 0.95
) -> tuple[float, float] | None:
    """Welch interval of mean(observed) - mean(expected) (scipy); None below MIN_SEEDS on a side or with
    no spread on either side (a zero standard error)."""
    e, o = np.asarray(expected, float), np.asarray(observed, float)
    if min(len(e), len(o)) < MIN_SEEDS or np.var(e) + np.var(o) == 0:
        return None
    with _quiet():
        ci = stats.ttest_ind(o, e, equal_var=False).confidence_interval(level)
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class Equivalence:
    """TOST at the tolerance: `equivalent` is None without an interval; `seeds_needed` (re-run seeds in
    all) is None where no number of re-run seeds up to MAX_SEEDS would show it at this difference and spread."""

    equivalent: bool | None
    p_value: float | None  # the larger of the two one-sided p-values
    seeds_needed: int | None

    def describe(self, n_expected: int, n_observed: int, difference: float, tolerance: float) -> str:
        if self.equivalent is None:
            n = min(n_expected, n_observed)
            return f"no interval ({n} seed{'' if n == 1 else 's'}; needs {MIN_SEEDS} per side)"
        if self.equivalent:
            return f"equivalent at 90% (TOST {p_text(self.p_value)})"  # type: ignore[arg-type]
        if not replicated(difference, tolerance):
            return "not shown: the difference is beyond the tolerance"
        if self.seeds_needed is None:
            return f"not shown; no number of re-run seeds up to {MAX_SEEDS} would show it at this spread"
        more = self.seeds_needed - n_observed
        return f"not shown; about {more} more re-run seed{'' if more == 1 else 's'} would show it at this spread"


def p_text(p: float) -> str:
    return "p < 0.001" if p < 0.001 else f"p {p:.3f}"


def _welch_half_width(v_expected: float, v_observed: float, n_expected: int, n_observed: int) -> float:
    """Half-width of the Welch 90% interval for sample variances v and sizes n (Welch-Satterthwaite df)."""
    a, b = v_expected / n_expected, v_observed / n_observed
    df = (a + b) ** 2 / (a**2 / (n_expected - 1) + b**2 / (n_observed - 1))
    return float(stats.t.ppf(1 - ALPHA, df) * math.sqrt(a + b))


def equivalence(expected: Sequence[float], observed: Sequence[float], tolerance: float) -> Equivalence:
    """Two one-sided Welch tests (scipy) of |mean(observed) - mean(expected)| < tolerance, each at ALPHA."""
    e, o = np.asarray(expected, float), np.asarray(observed, float)
    if welch_interval(e, o) is None:
        return Equivalence(None, None, None)
    with _quiet():
        above = stats.ttest_ind(o + tolerance, e, equal_var=False, alternative="greater").pvalue  # diff > -tol
        below = stats.ttest_ind(o - tolerance, e, equal_var=False, alternative="less").pvalue  # diff < +tol
    p = float(max(above, below))
    if p < ALPHA:
        return Equivalence(True, p, len(o))
    difference, ve, vo = float(o.mean() - e.mean()), float(np.var(e, ddof=1)), float(np.var(o, ddof=1))
    needed = next(
        (n for n in range(len(o), MAX_SEEDS + 1) if abs(difference) + _welch_half_width(ve, vo, len(e), n) < tolerance),
        None,
    )
    return Equivalence(False, p, needed)


def t_interval(values: Sequence[float], level: float = 0.95) -> tuple[float, float] | None:
    """Student-t interval of the mean (scipy; n - 1 df, sample std); None below 2 values (no spread known),
    a point when every value is the same. Descriptive where fewer than MIN_SEEDS values decide nothing."""
    if len(values) < 2:
        return None
    if np.ptp(values) == 0:
        return float(values[0]), float(values[0])
    ci = stats.ttest_1samp(values, 0.0).confidence_interval(level)
    return float(ci.low), float(ci.high)


@dataclass(frozen=True)
class PairedTest:
    """One comparison of a claim: the per-seed deltas (run - other), the claimed sign (+1: delta > 0)."""

    deltas: tuple[float, ...]
    sign: int

    def __post_init__(self) -> None:  # float noise is no difference (equal ranges giving 3.6e-15 support nothing)
        object.__setattr__(self, "deltas", tuple(round(float(d), DECIMALS) for d in self.deltas))

    @property
    def n(self) -> int:
        return len(self.deltas)

    @cached_property  # read by every test and text of the comparison; uh oc reads it millions of times
    def mean(self) -> float:
        return float(np.mean(self.deltas))

    @cached_property
    def t(self) -> float | None:
        """The paired t statistic; None where the deltas do not spread."""
        spread = float(np.std(self.deltas, ddof=1)) if self.n > 1 else 0.0
        return None if np.ptp(self.deltas) == 0 else self.mean / (spread / math.sqrt(self.n))

    @property
    def decidable(self) -> bool:
        return self.n >= MIN_SEEDS

    def interval(self, alpha: float = ALPHA) -> tuple[float, float] | None:
        """The (1 - 2 alpha) t-interval of the mean paired delta: the two one-sided tests' bounds at `alpha`,
        so it excludes 0 exactly when the test at `alpha` decides."""
        return t_interval(self.deltas, 1 - 2 * alpha) if self.decidable else None

    def p_value(self, sign: int) -> float | None:
        """One-sided p-value of the paired t-test for `sign * mean delta > 0` (scipy)."""
        if not self.decidable:
            return None
        if self.t is None:  # no spread: the sign decides, exactly
            return 0.0 if sign * self.mean > 0 else 1.0
        # scipy's ttest_1samp(alternative=...), its t distribution's survival function called as the ufunc
        # (special.stdtr, what stats.t.sf computes, without its argument checks: uh oc calls this often)
        return float(special.stdtr(self.n - 1, -sign * self.t))

    def outcome(self, alpha: float = ALPHA, against: float | None = None) -> Decision:
        """The one-sided test in the claimed direction at `alpha`, and the same test the other way at
        `against` (default `alpha`; a claim's comparisons pass decide.against(alpha, m))."""
        if not self.decidable:
            return Decision.UNDECIDED
        if self.p_value(self.sign) < alpha:  # type: ignore[operator]
            return Decision.SUPPORTS
        if self.p_value(-self.sign) < (alpha if against is None else against):  # type: ignore[operator]
            return Decision.CONTRADICTS
        return Decision.UNDECIDED

    @property
    def leaning(self) -> str:
        """Which way the mean so far points: where more seeds would decide it, if it stayed."""
        return "for the claim" if self.sign * self.mean > 0 else "against the claim"

    def seeds_needed(self) -> int | None:
        """Seeds in all at which the one-sided test would decide, if the mean and spread stayed as they are;
        None with fewer than 2 seeds (no spread known), a zero mean, or beyond MAX_SEEDS."""
        if self.n < 2 or self.mean == 0:
            return None
        sd = float(np.std(self.deltas, ddof=1))
        return next(
            (
                n
                for n in range(max(self.n, MIN_SEEDS), MAX_SEEDS + 1)
                if stats.t.ppf(1 - ALPHA, n - 1) * sd / math.sqrt(n) < abs(self.mean)
            ),
            None,
        )


def against(alpha: float, m: int) -> float:
    """The level at which one of a claim's m comparisons contradicts it: alpha / 2m. A union of m chances to
    contradict (Bonferroni: alpha / m), at half the supporting side's alpha, because NOT SUPPORTED is final and
    fails the re-run while an undecided claim only asks for more seeds; and where the paper's own effect is
    small and noisy, a faithful re-run whose truth lies just below zero should not fail for it."""
    return alpha / (2 * m)


def combined(decisions: Sequence[Decision]) -> Decision:
    """A claim from its comparisons' decisions: contradicted when any is, supported when all are (an
    intersection-union test), undecided otherwise (and where there are none)."""
    if Decision.CONTRADICTS in decisions:
        return Decision.CONTRADICTS
    if decisions and all(d is Decision.SUPPORTS for d in decisions):
        return Decision.SUPPORTS
    return Decision.UNDECIDED


def claim_outcome(tests: Sequence[PairedTest], alpha: float = ALPHA) -> Decision:
    """A claim of m comparisons: supported when all support it at `alpha`, contradicted when any contradicts it
    at against(alpha, m)."""
    return combined([t.outcome(alpha, against(alpha, len(tests))) for t in tests])


def claim_seeds_needed(tests: Sequence[PairedTest]) -> int | None:
    """Seeds in all that would decide every undecided comparison of a claim; None if one never would."""
    needed = [t.seeds_needed() for t in tests if t.outcome() is Decision.UNDECIDED]
    return None if not needed or None in needed else max(needed)  # type: ignore[type-var]


@dataclass(frozen=True)
class Procedure:
    """A sequential design fixed before any re-run: the seeds in the order they are taken (the expected
    set's first), the looks (seeds in all at each) and the one-sided supporting level of each look. Either the
    levels are a Bonferroni split (summing to at most ALPHA, contradicting at `against`'s alpha / 2m), or they
    are exact boundaries (`design`, verdict/boundaries.py), with the contradicting levels per claim size m
    (`contradicts`) derived by the same design. One look of fewer than MIN_SEEDS seeds (a set's own, registering
    no procedure) decides no claim."""

    seeds: tuple[int, ...]
    looks: tuple[int, ...]
    alpha: tuple[float, ...]
    contradicts: dict[int, tuple[float, ...]] | None = None  # m -> level per look, with `design`
    design: Design | None = None

    def __post_init__(self) -> None:
        if not (
            self.looks
            and len(self.alpha) == len(self.looks)
            and list(self.looks) == sorted(set(self.looks))
            and (self.looks[0] >= MIN_SEEDS or len(self.looks) == 1)
            and self.looks[-1] <= len(self.seeds) == len(set(self.seeds))
        ):
            raise ValueError("looks must rise from 3 seeds to at most the registered seeds (distinct), one alpha each")
        if (self.design is None) != (self.contradicts is None):
            raise ValueError("exact boundaries need their design and the contradicting levels per m")
        levels = [self.alpha, *(self.contradicts or {}).values()]
        if not all(len(a) == len(self.looks) and all(0 < x <= ALPHA for x in a) for a in levels):
            raise ValueError(f"every level must be > 0 and at most {ALPHA}, one per look")
        if self.design is None and round(sum(self.alpha), DECIMALS) > ALPHA:
            raise ValueError(f"the looks' alphas must sum to at most {ALPHA} (or be exact boundaries)")

    def against(self, look: int, m: int) -> float:
        """The level at which one of a claim's m comparisons contradicts it at look `look` (0-based): the exact
        boundary for m where the set registers them, else decide.against's alpha / 2m."""
        if self.contradicts is None:
            return against(self.alpha[look], m)
        if m not in self.contradicts:
            raise ValueError(f"the procedure's boundaries hold no contradicting levels for a claim of {m} comparisons")
        return self.contradicts[m][look]

    def seeds_at(self, look: int) -> tuple[int, ...]:
        """The seeds counted at look `look` (0-based): the first looks[look] of the list."""
        return self.seeds[: self.looks[look]]


# --- the metric's tolerance, from the expected set alone -------------------------------------------------------


@dataclass(frozen=True)
class Spread:
    """One metric's spreads across a set's run IDs, moderated (limma's squeezeVar): each run ID's sample SD
    pulled toward a common prior (s0, with d0 prior degrees of freedom fitted to how far the sample variances
    scatter beyond what their own d degrees of freedom explain). `df` is what each moderated SD really has:
    d0 + d, at most the G d degrees of freedom all run IDs hold together (the prior is estimated from them)."""

    sd: dict[str, float]
    df: float


def _trigamma_inverse(y: np.ndarray) -> np.ndarray:
    """x with trigamma(x) = y (y > 0), elementwise: limma's Newton iteration (trigammaInverse), which falls to the
    root from 0.5 + 1/y (trigamma is convex and falls from +inf to 0 over (0, inf)), run to machine precision."""
    x = 0.5 + 1 / y
    for _ in range(100):
        tri = special.polygamma(1, x)
        step = tri * (1 - tri / y) / special.polygamma(2, x)
        x = x + step
        if np.all(np.abs(step) <= 1e-15 * x):
            break
    return x


def moderated_variances(variances: np.ndarray, d: int) -> tuple[np.ndarray, np.ndarray]:
    """moderated_spread's moderation over a batch of sets: `variances` [..., G] (G run IDs' sample variances per
    set), each set moderated alone; the moderated variances [..., G] and their degrees of freedom [...]."""
    raw = np.asarray(variances, float)
    smallest = np.where(raw > 0, raw, np.inf).min(-1, keepdims=True)
    v = np.where(raw > 0, raw, np.where(np.isfinite(smallest), smallest, 1e-12))
    e = np.log(v) - special.digamma(d / 2) + math.log(d / 2)
    g = v.shape[-1]
    excess = np.var(e, axis=-1, ddof=1) - special.polygamma(1, d / 2) if g > 1 else np.zeros(v.shape[:-1])
    pooled_df = g * d
    moderated = np.repeat(np.exp(e.mean(-1))[..., None], g, -1)  # no excess: every run ID gets the pooled s0^2
    df = np.full(excess.shape, float(pooled_df))
    some = excess > 0
    if some.any():
        d0 = 2 * _trigamma_inverse(excess[some])[..., None]
        s0 = np.exp(e[some].mean(-1, keepdims=True) + special.digamma(d0 / 2) - np.log(d0 / 2))
        moderated[some] = (d0 * s0 + d * v[some]) / (d0 + d)
        df[some] = np.minimum(d0[..., 0] + d, pooled_df)
    return np.maximum(moderated, raw), df


def moderated_spread(variances: dict[str, float], d: int) -> Spread:
    """limma's empirical Bayes moderation (Smyth 2004, fitFDist and squeezeVar) of sample variances with d
    degrees of freedom each: e = log s^2 - digamma(d/2) + log(d/2); the excess of var(e) over trigamma(d/2)
    is trigamma(d0/2); s0^2 = exp(mean(e) + digamma(d0/2) - log(d0/2)); moderated s^2 = (d0 s0^2 + d s^2) /
    (d0 + d). No excess (the spreads scatter no more than d degrees of freedom explain): d0 is infinite and
    every run ID gets s0^2, the pooled spread. Moderation may widen a run ID's spread, never narrow it below
    its own sample variance: a faithful run ID whose seeds truly spread more than the rest must not be judged
    by the rest's spread. A zero variance (values all equal) counts as the smallest positive one, so its log
    is finite. Computed by moderated_variances, the batch form."""
    runs = list(variances)
    moderated, df = moderated_variances(np.array([variances[r] for r in runs], float), d)
    return Spread({r: float(math.sqrt(m)) for r, m in zip(runs, moderated, strict=True)}, float(df))


@dataclass(frozen=True)
class Rule:
    """How a set derives each tolerance: t(nu, 1 - alpha / 2) * sqrt(sd^2 (1/n + 1/k) + tau^2), with n the
    expected set's seeds and k the re-run's counted seeds. Both means carry the seeds' noise (sd^2/n, sd^2/k),
    tau allows for another GPU and software stack moving the run ID's mean, and alpha is one metric's share
    of the family's (Bonferroni over the gating metrics). Only sd is estimated (with df degrees of freedom);
    tau^2 is a stated constant, so the sum has nu = df (sd^2 c + tau^2)^2 / (sd^2 c)^2 degrees of freedom
    (Welch-Satterthwaite, a known term carrying infinitely many), c = 1/n + 1/k."""

    tau: float
    alpha: float

    def degrees_of_freedom(self, sd: float | np.ndarray, df: float | np.ndarray, n: int, k: int) -> float | np.ndarray:
        noise = np.square(sd) * (1 / n + 1 / k)
        with np.errstate(divide="ignore", invalid="ignore"):
            nu = np.where(noise == 0, np.inf, df * np.square(noise + self.tau**2) / np.square(noise))
        return float(nu) if np.ndim(nu) == 0 else nu

    def tolerance(self, sd: float | np.ndarray, df: float | np.ndarray, n: int, k: int) -> float | np.ndarray:
        """Elementwise over arrays of spreads and their df (uh oc derives a batch of sets at once); a float for
        numbers."""
        t = -special.stdtrit(self.degrees_of_freedom(sd, df, n, k), self.alpha / 2)  # stats.t.isf, as a ufunc
        out = t * np.sqrt(np.square(sd) * (1 / n + 1 / k) + self.tau**2)
        return float(out) if np.ndim(out) == 0 else out
