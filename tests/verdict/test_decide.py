"""decide.py: each decision rule against scipy and against its textbook formula, on hand-made numbers."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from scipy import optimize, special, stats

from uniform_herding.verdict import decide
from uniform_herding.verdict.claims import Claim, Comparison
from uniform_herding.verdict.decide import PairedTest, equivalence, replicated, t_interval, welch_interval
from uniform_herding.verdict.expected import load_expected
from uniform_herding.verdict.procedure import ClaimState, claim_state

EXPECTED = Path(__file__).resolve().parents[2] / "expected_results"

T_95_2DF = 2.919985580355516  # scipy.stats.t.ppf(0.95, 2): the one-sided 5% quantile at 3 seeds
T_975_2DF = 4.302652729911275  # scipy.stats.t.ppf(0.975, 2)


def test_the_quantiles_used_below_are_scipys() -> None:
    assert stats.t.ppf(0.95, 2) == pytest.approx(T_95_2DF) and stats.t.ppf(0.975, 2) == pytest.approx(T_975_2DF)


# --- metrics -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("difference", "ok"), [(1.5, True), (-1.5, True), (1.5001, False), (-4.88, False)])
def test_the_tolerance_alone_decides_a_metric(difference: float, ok: bool) -> None:
    assert replicated(difference, 1.5) is ok


def test_welch_interval_is_the_textbook_formula_and_scipys() -> None:
    expected, observed = [43.64, 44.72, 43.65], [38.0, 46.0, 42.0, 41.0]
    v1, v2 = np.var(expected, ddof=1) / 3, np.var(observed, ddof=1) / 4
    df = (v1 + v2) ** 2 / (v1**2 / 2 + v2**2 / 3)
    half = stats.t.ppf(0.975, df) * math.sqrt(v1 + v2)
    diff = np.mean(observed) - np.mean(expected)
    assert welch_interval(expected, observed) == pytest.approx((diff - half, diff + half))
    ci = stats.ttest_ind(observed, expected, equal_var=False).confidence_interval(0.95)
    assert welch_interval(expected, observed) == pytest.approx((ci.low, ci.high))


def test_no_interval_below_three_seeds_on_a_side_or_without_spread() -> None:
    assert welch_interval([1.0, 2.0, 3.0], [5.0, 6.0]) is None
    assert welch_interval([1.0, 2.0], [5.0, 6.0, 7.0]) is None
    assert welch_interval([1.0, 1.0, 1.0], [2.0, 2.0, 2.0]) is None
    assert welch_interval([1.0, 2.0, 3.0], [2.0, 2.0, 2.0]) is not None
    assert equivalence([1.0, 2.0, 3.0], [2.0, 2.5], 1.0).equivalent is None


def test_tost_is_two_one_sided_welch_tests_and_the_90_percent_interval_inside_the_tolerance() -> None:
    """Equivalent iff both one-sided tests reject at 5%, iff the Welch 90% interval lies in [-tol, +tol]."""
    expected = [43.64, 44.72, 43.65]
    for observed, tol in (([44.0, 44.3, 43.8], 1.5), ([44.0, 46.3, 43.8], 1.5), ([44.0, 44.3, 43.8], 0.8)):
        ci = stats.ttest_ind(observed, expected, equal_var=False).confidence_interval(0.90)
        lower = stats.ttest_ind(np.add(observed, tol), expected, equal_var=False, alternative="greater").pvalue
        upper = stats.ttest_ind(np.subtract(observed, tol), expected, equal_var=False, alternative="less").pvalue
        eq = equivalence(expected, observed, tol)
        assert eq.p_value == pytest.approx(max(lower, upper))
        assert eq.equivalent == bool(-tol < ci.low and ci.high < tol) == bool(max(lower, upper) < 0.05)


def test_seeds_needed_for_equivalence_is_the_first_n_whose_90_percent_interval_fits() -> None:
    expected, observed, tol = [43.5, 44.0, 44.5], [43.5, 45.5, 44.6], 1.8
    eq = equivalence(expected, observed, tol)
    assert eq.equivalent is False and eq.seeds_needed is not None
    diff, v1, v2 = np.mean(observed) - 44.0, 0.25, np.var(observed, ddof=1)

    def fits(n: int) -> bool:
        a, b = v1 / 3, v2 / n
        df = (a + b) ** 2 / (a**2 / 2 + b**2 / (n - 1))
        return abs(diff) + stats.t.ppf(0.95, df) * math.sqrt(a + b) < tol

    assert fits(eq.seeds_needed) and not fits(eq.seeds_needed - 1)


def test_equivalence_a_few_more_seeds_would_show_is_never_called_out_of_reach() -> None:
    """The Welch df grows with the re-run's seeds, so its half-width can fall below the expected side's own
    t(0.95, 2) * s_e / sqrt(3) = 1.69 (the old shortcut said "the expected side's seeds are too spread")."""
    expected = observed = [43.0, 44.0, 45.0]
    eq = equivalence(expected, observed, 1.65)

    def fits(n: int) -> bool:
        a, b = 1.0 / 3, 1.0 / n
        df = (a + b) ** 2 / (a**2 / 2 + b**2 / (n - 1))
        return stats.t.ppf(0.95, df) * math.sqrt(a + b) < 1.65

    assert eq.equivalent is False and eq.seeds_needed is not None and eq.seeds_needed <= 5
    assert fits(eq.seeds_needed) and not fits(eq.seeds_needed - 1)
    assert "too spread" not in eq.describe(3, 3, 0.0, 1.65)
    more = eq.seeds_needed - 3
    text = eq.describe(3, 3, 0.0, 1.65)
    assert text.endswith(f"about {more} more re-run seed{'' if more == 1 else 's'} would show it at this spread")


def test_a_shift_of_exactly_the_tolerance_passes_whichever_its_sign() -> None:
    """a3 BWT shifted by 2.00 on each seed: the means' difference is 2.0000000000000018 in floats."""
    paper = [-17.73, -17.87, -16.39]
    for shift in (+2.0, -2.0):
        difference = float(np.mean([v + shift for v in paper]) - np.mean(paper))
        assert replicated(difference, 2.0)
    assert not replicated(2.01, 2.0)


def test_a_wider_spread_never_turns_a_miss_into_a_pass() -> None:
    """The a3 case: the paper's mean 43.22, a re-run mean 38.33 (tolerance 1.5). Any spread: NOT REPLICATED."""
    for spread in (0.0, 1.0, 3.0, 10.0, 100.0):
        observed = np.array([38.33 - spread, 38.33, 38.33 + spread])
        assert not replicated(float(observed.mean()) - 43.22, 1.5)
        assert equivalence([43.32, 43.60, 42.73], observed, 1.5).equivalent in (False, None)


# --- claims --------------------------------------------------------------------------------------


def test_a_paired_test_is_scipys_one_sided_t_test_and_the_90_percent_interval() -> None:
    deltas = (2.76, 0.90, 1.36)  # the paper's B3 - B1 ACC by seed
    test = PairedTest(deltas, +1)
    mean, sd = np.mean(deltas), np.std(deltas, ddof=1)
    assert test.interval() == pytest.approx((mean - T_95_2DF * sd / math.sqrt(3), mean + T_95_2DF * sd / math.sqrt(3)))
    assert test.p_value(+1) == pytest.approx(stats.ttest_1samp(deltas, 0, alternative="greater").pvalue)
    assert test.p_value(+1) == pytest.approx(
        stats.ttest_rel([d + 10 for d in deltas], [10] * 3, alternative="greater").pvalue
    )
    assert test.p_value(+1) < 0.05 and test.outcome() == "supports"
    assert test.outcome(0.01) == "undecided"  # p 0.048: not at a first look of alpha 0.01 (the shipped one's is 0.005)
    two_sided = stats.ttest_1samp(deltas, 0).confidence_interval(0.95)
    assert two_sided.low < 0 < two_sided.high  # a two-sided 95% interval would not decide the paper's own lead


@pytest.mark.parametrize(
    ("deltas", "sign", "outcome"),
    [
        ((-1.0, 2.0, 2.0), +1, "undecided"),  # mean +1 but the interval spans 0
        ((1.0, 2.0, 3.0), +1, "supports"),
        ((1.0, 2.0, 3.0), -1, "contradicts"),
        ((0.5, 0.5, 0.5), -1, "contradicts"),  # no spread: the sign decides
        ((0.0, 0.0, 0.0), +1, "undecided"),  # a tie is not "beats"
        ((5.0, 6.0), +1, "undecided"),  # two seeds: nothing is decided
    ],
)
def test_paired_outcomes(deltas: tuple[float, ...], sign: int, outcome: str) -> None:
    assert PairedTest(deltas, sign).outcome() == outcome


def test_float_noise_is_no_difference() -> None:
    """C5 on ranges equal in decimal: per-seed deltas of about 3.6e-15 must support nothing."""
    assert PairedTest((3.6e-15, 3.6e-15, 3.6e-15), +1).outcome() == "undecided"
    assert PairedTest((3.6e-15, -1.8e-15, 7.1e-15), +1).outcome() == "undecided"


PROCEDURE = decide.Procedure((1993, 2023, 42, 1, 2, 3, 4, 5, 6, 7), (3, 6, 10), (0.01, 0.015, 0.025))


def claim_of(deltas: list[list[float]], procedure: decide.Procedure, sign: int = +1) -> ClaimState:
    """A claim of one comparison per row of `deltas` (each row the per-seed deltas, in the registered order, as far
    as they are known), replayed under `procedure`."""
    runs = tuple(f"r{i}" for i in range(len(deltas)))
    claim = Claim("X", "x", runs, tuple(Comparison(r, "acc", ((r, 1),), sign) for r in runs))
    values = {
        ("acc", r): np.array([*d, *[np.nan] * (len(procedure.seeds) - len(d))], float)
        for r, d in zip(runs, deltas, strict=True)
    }
    return claim_state(claim, values, procedure)


def test_the_procedure_decides_at_the_first_look_that_decides_each_at_its_alpha() -> None:
    weak = [2.76, 0.90, 1.36]  # p 0.048: undecided at alpha 0.01
    strong = [*weak, 1.9, 1.5, 2.1]
    assert (claim_of([weak], PROCEDURE).decision, claim_of([weak], PROCEDURE).reached) == ("undecided", 1)
    assert (claim_of([strong], PROCEDURE).decision, claim_of([strong], PROCEDURE).reached) == ("supports", 2)
    decided_early = claim_of([[1.9, 1.5, 2.1, -5.0, -6.0, -4.0]], PROCEDURE)  # decided stays decided
    assert (decided_early.decision, decided_early.reached) == ("supports", 1)
    assert PROCEDURE.seeds_at(1) == (1993, 2023, 42, 1, 2, 3)


def test_each_comparison_is_extended_alone_until_it_is_decided() -> None:
    """A claim of two comparisons, one decided at look 1 and one not: only the open one's run asks for the next
    look's seeds, and the claim waits; once the open one supports it at look 2, the claim is SUPPORTED."""
    sure, weak = [1.9, 1.5, 2.1], [2.76, 0.90, 1.36]
    waiting = claim_of([sure, weak], PROCEDURE)
    assert (waiting.decision, waiting.settled, waiting.asks("r0"), waiting.asks("r1")) == ("undecided", False, 0, 1)
    supported = claim_of([sure, [*weak, 1.9, 1.5, 2.1]], PROCEDURE)
    assert (supported.decision, supported.asks("r0"), supported.asks("r1")) == ("supports", 0, 1)
    contradicted = claim_of([[-1.0, -1.0, -1.0], weak], PROCEDURE)  # one contradicted: settled, nothing more asked
    assert (contradicted.decision, contradicted.settled, contradicted.asks("r1")) == ("contradicts", True, 0)


@pytest.mark.parametrize(
    ("looks", "alpha"),
    [((3, 6), (0.03, 0.03)), ((2, 6), (0.01, 0.01)), ((6, 3), (0.01, 0.01)), ((3, 11), (0.01, 0.01)), ((3,), (0.0,))],
)
def test_a_procedure_that_could_err_more_than_5_percent_is_refused(
    looks: tuple[int, ...], alpha: tuple[float, ...]
) -> None:
    with pytest.raises(ValueError):
        decide.Procedure(PROCEDURE.seeds, looks, alpha)


@pytest.mark.parametrize("procedure", [PROCEDURE, load_expected(EXPECTED).procedure], ids=["3 looks", "shipped"])
def test_the_procedure_with_every_look_counted_errs_at_most_5_percent_under_no_effect(
    procedure: decide.Procedure,
) -> None:
    """Simulated: a claim with no true effect (normal deltas, mean 0), every look taken in turn; this one and
    the procedure the paper's set registers."""
    rng = np.random.default_rng(7)
    supported = 0
    for _ in range(4000):
        supported += claim_of([list(rng.standard_normal(procedure.looks[-1]))], procedure).decision == "supports"
    assert supported / 4000 <= 0.05


def test_seeds_needed_for_a_claim_is_the_first_n_whose_one_sided_bound_clears_zero() -> None:
    test = PairedTest((-1.0, 2.0, 2.0), +1)  # mean 1, sd sqrt(3)
    needed = test.seeds_needed()

    def bound(n: int) -> float:
        return stats.t.ppf(0.95, n - 1) * math.sqrt(3) / math.sqrt(n)

    assert needed == 11 and bound(11) < 1 <= bound(10)
    assert PairedTest((0.0, 1.0, -1.0), +1).seeds_needed() is None  # a zero mean is never decided
    assert PairedTest((1.0,), +1).seeds_needed() is None  # one seed: no spread known


def test_a_claim_of_several_comparisons_needs_each_one() -> None:
    sure, unsure = PairedTest((1.0, 2.0, 3.0), +1), PairedTest((-1.0, 2.0, 2.0), +1)
    against, weakly_against = PairedTest((1.0, 1.1, 1.2), -1), PairedTest((1.0, 1.5, 2.0), -1)  # p 0.0014, 0.018
    barely_against = PairedTest((1.0, 2.0, 3.0), -1)  # p 0.037: below the supporting side's 0.05
    assert decide.claim_outcome([sure, sure]) == "supports"
    assert decide.claim_outcome([sure, unsure]) == "undecided"
    assert decide.claim_outcome([sure, unsure, against]) == "contradicts"
    # contradicting takes alpha / 2m: p 0.018 contradicts a claim of one comparison (0.025), not of three
    # (0.05 / 6); p 0.037 contradicts none, though it would support at 0.05 the other way
    assert decide.against(0.05, 3) == pytest.approx(0.05 / 6)
    assert decide.claim_outcome([weakly_against]) == "contradicts"
    assert decide.claim_outcome([sure, unsure, weakly_against]) == "undecided"
    assert decide.claim_outcome([barely_against]) == "undecided"
    assert PairedTest((3.0, 2.0, 1.0), +1).outcome() == "supports"  # the same p supports at 0.05
    assert decide.claim_seeds_needed([sure, unsure]) == 11


def test_every_decision_is_a_decision_member_that_prints_as_its_word() -> None:
    """A test, a claim and a claim under a procedure each decide a `Decision`, never a bare string; the evidence
    lines print it, and check_report.json's state holds it, as the word it always was."""
    supports, contradicts, undecided = (
        PairedTest((1.0, 2.0, 3.0), +1),
        PairedTest((1.0, 2.0, 3.0), -1),
        PairedTest((5.0, 6.0), +1),
    )
    assert supports.outcome() is decide.Decision.SUPPORTS and undecided.outcome() is decide.Decision.UNDECIDED
    assert contradicts.outcome(against=0.05) is decide.Decision.CONTRADICTS
    assert decide.claim_outcome([supports, undecided]) is decide.Decision.UNDECIDED
    assert claim_of([[1.9, 1.5, 2.1]], PROCEDURE).decision is decide.Decision.SUPPORTS
    assert claim_of([[-1.0, -1.0, -1.0]], PROCEDURE).decision is decide.Decision.CONTRADICTS
    assert [f"{d}" for d in decide.Decision] == ["supports", "contradicts", "undecided"]
    assert json.dumps({"C1": decide.Decision.SUPPORTS}) == '{"C1": "supports"}'


def test_a_claim_with_no_true_effect_is_contradicted_at_most_2_5_percent_of_the_time() -> None:
    """Four comparisons at zero effect (C1's shape), the shipped procedure: contradicted when any one is, so at
    alpha / 8 each. (At alpha each the union erred about 15% of the time; at alpha / 4, about 5%.)"""
    procedure = load_expected(EXPECTED).procedure
    rng = np.random.default_rng(11)
    contradicted = 0
    for _ in range(3000):
        deltas = rng.standard_normal((4, procedure.looks[-1]))
        contradicted += claim_of([list(d) for d in deltas], procedure).decision == "contradicts"
    assert contradicted / 3000 <= 0.025 + 2 * math.sqrt(0.025 * 0.975 / 3000)  # Bonferroni's 2.5%, and the draws' noise


# --- the tolerance a set derives ------------------------------------------------------------------------------


def test_moderated_spread_is_limmas_squeezevar_by_hand() -> None:
    """Sample variances of 2 df that scatter more than 2 df explain: the prior df d0 solves trigamma(d0/2) =
    var(e) - trigamma(1), and each variance is pulled toward s0^2, never below its own."""
    variances = {"a": 0.02, "b": 0.5, "c": 3.0, "d": 1.0, "e": 0.1}
    v = np.array(list(variances.values()))
    e = np.log(v) - special.digamma(1) + math.log(1)
    excess = np.var(e, ddof=1) - special.polygamma(1, 1)
    d0 = 2 * optimize.brentq(lambda x: special.polygamma(1, x) - excess, 1e-6, 1e6)
    s0 = math.exp(e.mean() + special.digamma(d0 / 2) - math.log(d0 / 2))
    spread = decide.moderated_spread(variances, 2)
    assert spread.df == pytest.approx(min(d0 + 2, 10))
    expected = np.maximum((d0 * s0 + 2 * v) / (d0 + 2), v)
    assert [spread.sd[r] ** 2 for r in variances] == pytest.approx(list(expected))
    assert spread.sd["a"] ** 2 > 0.02 and spread.sd["c"] ** 2 == pytest.approx(3.0)  # pulled up, never down


def test_spreads_that_scatter_no_more_than_their_df_explain_are_pooled() -> None:
    """No excess: d0 is infinite, every run ID gets the pooled spread (at least its own), with the G d df the
    run IDs hold together."""
    spread = decide.moderated_spread({"a": 1.0, "b": 1.1, "c": 0.9}, 2)
    pooled = math.exp(np.mean(np.log([1.0, 1.1, 0.9])) - special.digamma(1))
    assert spread.df == 6
    assert [spread.sd[r] ** 2 for r in "abc"] == pytest.approx([max(pooled, v) for v in (1.0, 1.1, 0.9)])


def test_the_tolerance_is_the_t_quantile_of_its_welch_satterthwaite_df() -> None:
    """t(nu, 1 - alpha/2) * sqrt(s^2 (1/n + 1/k) + tau^2), nu = df (s^2 c + tau^2)^2 / (s^2 c)^2."""
    rule = decide.Rule(tau=0.75, alpha=0.01 / 24)
    sd, df, n, k = 0.73, 6.3, 3, 20
    c = 1 / n + 1 / k
    nu = df * (sd**2 * c + 0.75**2) ** 2 / (sd**2 * c) ** 2
    assert rule.tolerance(sd, df, n, k) == pytest.approx(stats.t.ppf(1 - 0.01 / 48, nu) * math.sqrt(sd**2 * c + 0.5625))
    assert rule.tolerance(sd, df, n, 20) < rule.tolerance(sd, df, n, 3)  # more counted seeds: a tighter tolerance
    assert rule.tolerance(sd, 2.0, n, k) > rule.tolerance(sd, 24.0, n, k)  # fewer df: a wider one


def test_a_batch_of_sets_is_moderated_set_by_set_as_moderated_spread_does() -> None:
    """moderated_variances over [worlds, metrics, run IDs] (uh oc's redrawn tables) moderates each set alone: the
    same spreads and df as moderated_spread on that set, a set with no excess, one with a zero variance and one
    all zero among them; and the rule's tolerance over the arrays is the tolerance of each element."""
    variances = np.random.default_rng(0).gamma(1.0, 1.0, (40, 3, 12))
    variances[0, 0] = 1.0  # no excess: pooled
    variances[1, 1, 4] = 0.0
    variances[2, 2] = 0.0
    moderated, df = decide.moderated_variances(variances, 2)
    rule = decide.Rule(tau=1.0, alpha=0.01 / 24)
    batch = rule.tolerance(np.sqrt(moderated), df[..., None], 3, 10)
    for i, j in np.ndindex(df.shape):
        spread = decide.moderated_spread({str(g): v for g, v in enumerate(variances[i, j])}, 2)
        assert df[i, j] == pytest.approx(spread.df, rel=1e-14)
        assert np.sqrt(moderated[i, j]) == pytest.approx(list(spread.sd.values()), rel=1e-14)
        assert batch[i, j] == pytest.approx(
            [rule.tolerance(sd, spread.df, 3, 10) for sd in spread.sd.values()], rel=1e-12
        )
    assert df[0, 0] == 24 and len(set(moderated[0, 0])) == 1


def test_replicated_judges_arrays_elementwise_and_numbers_as_a_bool() -> None:
    """uh oc judges millions of metrics at once with the checker's own rule: elementwise, the scalar's verdicts."""
    differences = np.array([[1.5, -1.5], [1.5001, -4.88], [1.5 + 1e-12, 0.0]])
    verdicts = replicated(differences, 1.5)
    assert verdicts.tolist() == [[replicated(float(d), 1.5) for d in row] for row in differences]
    assert verdicts.tolist() == [[True, True], [False, False], [True, True]]


def test_t_interval_is_scipys_and_needs_two_values() -> None:
    values = (1.0, 2.0, 3.0)
    ci = stats.ttest_1samp(values, 0).confidence_interval(0.95)
    assert t_interval(values) == pytest.approx((ci.low, ci.high))
    assert t_interval(values) == pytest.approx((2 - T_975_2DF / math.sqrt(3), 2 + T_975_2DF / math.sqrt(3)))
    assert t_interval((4.0,)) is None and t_interval((4.0, 4.0)) == (4.0, 4.0)
