"""targets.py: the any-rule bound, and the settle round that simulates again a target its draws cannot place."""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from uniform_herding.design import simulation, targets, worlds
from uniform_herding.verdict.expected import load_expected

EXPECTED = Path(__file__).resolve().parents[2] / "expected_results"


def test_the_bound_is_the_one_sided_z_tests_power_at_the_weakest_comparison() -> None:
    """Under (b) at tau 0 the truth is the paper's means, so the bound at k seeds is Phi(d sqrt(k) / sigma -
    z_0.95) of the weakest comparison, B3 - B1 ACC: d its paper effect, sigma^2 = s_B3^2 + s_B1^2 - 2 rho s s."""
    expected = load_expected(EXPECTED)
    b3, b1 = [43.64, 44.72, 43.65], [40.88, 43.82, 42.29]
    d, s3, s1 = np.mean(b3) - np.mean(b1), np.std(b3, ddof=1), np.std(b1, ddof=1)
    sigma = math.sqrt(s3**2 + s1**2 - 2 * 0.5 * s3 * s1)
    by_hand = [stats.norm.cdf(d * math.sqrt(k) / sigma - stats.norm.ppf(0.95)) for k in (3, 10, 20)]
    bound = targets.Bound.of(expected, np.random.default_rng(0), worlds.Model("b", faithful="b", tau=0.0))
    assert [bound.at(k) for k in (3, 10, 20)] == pytest.approx(by_hand)
    assert bound.seeds_for(0.95) == next(
        k for k in range(3, 100) if stats.norm.cdf(d * math.sqrt(k) / sigma - stats.norm.ppf(0.95)) >= 0.95
    )


def test_the_bound_of_a_comparison_with_no_true_effect_or_the_wrong_sign_is_5_percent() -> None:
    bound = targets.Bound(effect=np.array([[-1.0], [0.0], [1.0]]), sigma=np.array([2.0]))
    one = stats.norm.cdf(1.0 * math.sqrt(10) / 2.0 - stats.norm.ppf(0.95))
    assert bound.at(10) == pytest.approx((0.05 + 0.05 + one) / 3)


def test_the_bound_under_a_rises_with_seeds_and_stays_below_one() -> None:
    bound = targets.Bound.of(load_expected(EXPECTED), np.random.default_rng(3), worlds.Model("a", faithful="a"))
    bounds = [bound.at(k) for k in (3, 10, 20, 1000)]
    assert bounds == sorted(bounds) and bounds[-1] < 0.99


def _counted_draws(expected: object, subject: object, n: int, rng: np.random.Generator) -> int:
    """A simulation that draws nothing: n re-runs counted in progress, and n returned."""
    return sum(1 for _ in simulation.counted(n))


def _close(at: tuple[str, int]) -> targets.Target:
    return targets.Target("close", (0.05, 0.01, 0.20), 0.05, True, at)


def test_the_settle_round_asks_no_more_draws_than_the_run_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 61: `uh oc -n 400` (1,200 re-runs) settled its close cells on 20,000 fresh draws each, more than the
    whole run and more the fewer it was asked for. Now the cells simulated again share at most the draws the run asked
    of the simulations its targets read: here 10 + 30, so the one close cell of 10 draws gets 40, not 1,000."""
    parts = {
        "p": [
            simulation.simulation(_counted_draws, None, None, 10),
            simulation.simulation(_counted_draws, None, None, 30),
        ]
    }
    found = [_close(("p", 0)), targets.Target("far", (0.5, 0.4, 0.6), 0.05, True, ("p", 1))]
    done, each = targets.settle(parts, {"p": [10, 30]}, found, 1000, 0, 1)
    assert (done, each) == ({"p": [40, 30]}, 40)
    both = [_close(("p", 0)), _close(("p", 1))]  # 40 between two cells: 20 each, so only the one of 10 draws again
    assert targets.settle(parts, {"p": [10, 30]}, both, 1000, 0, 1) == ({"p": [20, 30]}, 20)


def test_the_settle_round_says_what_it_does_and_counts_its_progress(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 61: after the first round's "done" uh oc was silent for more than 6 minutes while it settled close cells,
    on a pseudo-terminal with no width (`script`), where no bar is drawn. Now the settle round says what it draws and
    why, counts every re-run in its progress, and, where no bar is drawn, prints a line at least every 15 s."""
    made: list[simulation.Progress] = []

    class Recorded(simulation.Progress):
        def __post_init__(self) -> None:
            super().__post_init__()
            made.append(self)

    monkeypatch.setattr(simulation, "Progress", Recorded)
    parts = {
        "p": [
            simulation.simulation(_counted_draws, None, None, 10),
            simulation.simulation(_counted_draws, None, None, 30),
        ]
    }
    targets.settle(parts, {"p": [10, 30]}, [_close(("p", 0)), _close(("p", 1))], 1000, 0, 1)  # 20 each: p 0 again
    (progress,) = made
    assert (progress.total, progress.count) == (20, 20)
    assert progress.every is not None and progress.every <= 15
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        "uh oc: 1 simulation whose interval holds a target, again on 20 fresh draws each: 20 in all, at most the 40 "
        "the run asked of the simulations its targets read"
    )
    assert re.fullmatch(r"uh oc: done, 20 of 20 re-runs in \d+ s", err[-1])
