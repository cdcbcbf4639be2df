"""boundaries.py: the shipped levels err at most what they may, every look counted, and are what their design
derives."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from uniform_herding.design import boundaries
from uniform_herding.verdict.expected import ExpectedError, load_expected

EXPECTED = Path(__file__).resolve().parents[2] / "expected_results"
PROCEDURE = load_expected(EXPECTED).procedure
PATHS = 2_000_000  # fresh null paths: the Monte Carlo error of a 5% share is 0.015 pp


def wilson(k: int, n: int, level: float = 0.999) -> tuple[float, float]:
    ci = stats.binomtest(int(k), n).proportion_ci(level, method="wilson")
    return float(ci.low), float(ci.high)


@pytest.fixture(scope="module")
def one_comparison() -> tuple[np.ndarray, np.ndarray]:
    """A null comparison of a claim of one comparison (C2-C4) through the shipped levels, per look."""
    return boundaries.errors(
        PROCEDURE.looks, PROCEDURE.alpha, PROCEDURE.contradicts[1], PATHS, np.random.default_rng(53)
    )


def test_a_null_comparison_supports_at_most_5_and_contradicts_at_most_2_5_percent(one_comparison) -> None:
    """On 2 million null paths, every look counted: each share's 99.9% interval lies below its bound and holds what
    the design spends (4.9%, 2.45%), so the levels spend what they may and no more."""
    design = PROCEDURE.design
    for ends, bound, spent in zip(one_comparison, (0.05, 0.025), (design.supports, design.contradicts), strict=True):
        low, high = wilson(ends.sum(), PATHS)
        assert high <= bound and low <= spent <= high, (ends.sum() / PATHS, low, high)


@pytest.mark.slow
@pytest.mark.parametrize("m", sorted(PROCEDURE.contradicts))
def test_every_look_spends_what_the_design_gives_it(m: int, one_comparison) -> None:
    """Per look, the paths first crossing each side's level (that side alone) are what the design spends there,
    within their 99.9% interval: a level mistyped at any look moves its look's share out of it."""
    design, looks = PROCEDURE.design, PROCEDURE.looks
    rng = np.random.default_rng(100 + m)
    for side, levels, total in (
        ("supports", PROCEDURE.alpha, design.supports),
        ("contradicts", PROCEDURE.contradicts[m], design.contradicts / m),
    ):
        if side == "supports" and m != 1:
            continue
        up, _ = boundaries.errors(looks, levels, (1e-300,) * len(looks), PATHS, rng)
        spent = np.diff(design.spent(total, looks), prepend=0.0)
        for k in range(len(looks)):
            low, high = wilson(up[k], PATHS)
            assert low <= spent[k] <= high, (side, m, k, up[k] / PATHS, spent[k])


@pytest.mark.slow
def test_uh_oc_derive_reproduces_the_shipped_levels_from_their_design() -> None:
    """The registered design (4 million paths from its seed) derives every shipped level to its 3 digits."""
    design, looks = PROCEDURE.design, PROCEDURE.looks
    supports, contradicts = boundaries.derive(design, looks, tuple(PROCEDURE.contradicts))
    assert supports == PROCEDURE.alpha and contradicts == PROCEDURE.contradicts


def test_look_1_spends_its_share_exactly_and_the_spending_ends_at_the_total() -> None:
    design, looks = PROCEDURE.design, PROCEDURE.looks
    spent = design.spent(0.049, looks)
    assert spent[0] == pytest.approx(0.049 * design.first_share) and spent[-1] == pytest.approx(0.049)
    assert np.all(np.diff(spent) > 0)
    assert PROCEDURE.alpha[0] == pytest.approx(0.049 * design.first_share)  # the t statistic's own law: no paths


@pytest.mark.parametrize(
    ("old", "new", "says"),
    [
        ("4 = [0.00123", "5 = [0.00123", "claims of exactly 1, 4, 6 comparisons"),
        ("gamma = -2.0", "gamma = 0.0", "gamma != 0"),
        ("alpha = [0.0098,", "alpha = [0.098,", "every level must be > 0 and at most 0.05"),
    ],
)
def test_a_set_whose_boundaries_cannot_be_used_is_refused_in_one_line(
    tmp_path: Path, old: str, new: str, says: str
) -> None:
    for name in ("tolerances.toml", "paper_per_seed.csv"):
        (tmp_path / name).write_bytes((EXPECTED / name).read_bytes())
    toml = tmp_path / "tolerances.toml"
    assert old in toml.read_text()
    toml.write_text(toml.read_text().replace(old, new))
    with pytest.raises(ExpectedError, match=says):
        load_expected(tmp_path)
