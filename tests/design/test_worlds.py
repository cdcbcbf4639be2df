"""worlds.py: a batch of simulated worlds is the same as drawing them one by one, and the tolerances a batch of
redrawn paper tables derives are those each table's own expected set derives."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from uniform_herding.design.worlds import LAWS, NOT_ASSUMED, Model, World, law_nulls, models, redrawn, tolerances
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict.expected import load_expected

EXPECTED = load_expected(Path(__file__).resolve().parents[2] / "expected_results")
WORLD = World.of(EXPECTED)

MODELS = [
    Model("c", faithful="c"),
    Model("b", faithful="b", rho=0.0, tau=0.75),
    Model("a, heavy-tailed", faithful="a", law="heavy-tailed"),  # two laws in one world: drawn world by world
    Model("c, skewed, noisier", law="skewed", noise_scale=2.0),
    Model("shifted", shift=("B3", "acc", -4.0)),
    Model("null", nulls=(("B3", "B1", "acc"),)),
    Model("null C5", null_c5=True),
    Model("fixed", fixed=("a3", "acc", (35.5, 39.0, 40.5))),
]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_a_batch_of_worlds_is_the_same_worlds_drawn_one_by_one(model: Model) -> None:
    """Model.draws(n) takes the random stream world by world as n calls of Model.draw do (so every figure uh oc
    printed before the batch stays): the same values, and under (c) the same redrawn paper tables."""
    paper, values = model.draws(EXPECTED, WORLD, np.random.default_rng(7), 5)
    rng = np.random.default_rng(7)
    for i in range(5):
        judged_by, one = model.draw(EXPECTED, WORLD, rng)
        np.testing.assert_array_equal(values[i], one)
        if paper is None:
            assert judged_by is EXPECTED
        else:
            table = judged_by.per_seed[list(METRICS)].to_numpy()
            np.testing.assert_array_equal(table, paper[i].reshape(-1, len(METRICS)))


def test_one_draw_is_the_batch_of_one() -> None:
    """Model.draw is draws' n = 1 case: one world, its paper table redrawn as printed (2 decimals)."""
    model = Model("c", faithful="c")
    paper, values = model.draws(EXPECTED, WORLD, np.random.default_rng(3), 1)
    judged_by, one = model.draw(EXPECTED, WORLD, np.random.default_rng(3))
    assert paper.shape == (1, len(WORLD.runs), 3, len(METRICS))
    assert values.shape == (1, len(WORLD.runs), len(EXPECTED.registered), len(METRICS))
    np.testing.assert_array_equal(one, values[0])
    np.testing.assert_array_equal(paper, np.round(paper, 2))
    assert judged_by.tolerance_for("B3", "acc", 3) == redrawn(EXPECTED, WORLD, paper[0]).tolerance_for("B3", "acc", 3)


def test_the_batch_tolerances_are_those_each_redrawn_set_derives() -> None:
    """Over 300 worlds of (c), every run ID and metric at 3 and 10 counted seeds: the batch tolerance equals, world
    by world, the tolerance the redrawn expected set derives through uh check's own Expected.tolerance_for."""
    paper, _ = Model("c", faithful="c").draws(EXPECTED, WORLD, np.random.default_rng(11), 300)
    for k in (3, 10):
        batch = tolerances(EXPECTED, paper, k)
        sets = [redrawn(EXPECTED, WORLD, table) for table in paper]
        one_by_one = np.array([[[s.tolerance_for(r, m, k) for m in METRICS] for r in WORLD.runs] for s in sets])
        np.testing.assert_allclose(batch, one_by_one, rtol=0, atol=1e-9)


def test_each_law_the_rule_does_not_assume_has_mean_0_sd_1_and_the_mirror_is_skewed_the_other_way() -> None:
    """Issue 61: skewed noise one way errs on one side of a one-sided test, its mirror on the other, so uh oc draws
    both. Each law is scaled to mean 0 and SD 1 (the paper's SD then scales it), the chi-square's skewness is
    sqrt(8 / 4) = 1.41 and its mirror's -1.41, from the same stream negated."""
    for law in NOT_ASSUMED:
        z = LAWS[law](np.random.default_rng(5), (400_000,))
        assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.02, law
    skewed, mirrored = (LAWS[law](np.random.default_rng(5), (400_000,)) for law in ("skewed", "skewed, mirrored"))
    np.testing.assert_array_equal(mirrored, -skewed)
    assert stats.skew(skewed) == pytest.approx(math.sqrt(2), abs=0.05)


def test_the_law_nulls_are_c1s_null_under_each_law() -> None:
    """uh oc's nulls under the laws the rule does not assume: C1's B3 - B1 ACC without its true effect, one per law,
    all else as the normal-law null it prints among the misses."""
    null = next(m for m in models(EXPECTED) if m.nulls == (("B3", "B1", "acc"),))
    found = law_nulls(EXPECTED)
    assert [m.law for m in found] == list(NOT_ASSUMED)
    assert all(replace(m, name=null.name, law="normal") == null for m in found)
    assert [m.name for m in found] == [f"null C1: B3 acc = B1, {law}" for law in NOT_ASSUMED]
