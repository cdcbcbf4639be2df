"""oc.py: the tolerances' derivation, the models, and `uh oc` at a small number of draws."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from scipy import stats

from uniform_herding import oc
from uniform_herding.check import load_expected
from uniform_herding.cli import main

EXPECTED = Path(__file__).resolve().parents[1] / "expected_results"


def test_the_paper_tolerances_are_their_stated_derivation() -> None:
    """tolerances.toml's numbers, recomputed: z * sqrt(2 s^2 / 3 + tau^2) rounded up to 0.1 pp."""
    expected = load_expected(EXPECTED)
    derived = oc.derive_tolerances(expected.per_seed, len(expected.gate) * 12)
    assert derived == expected.tolerance
    s = float(np.std([43.64, 44.72, 43.65], ddof=1))  # B3 ACC by seed
    z = stats.norm.ppf(1 - 0.01 / 48)
    assert oc.z_for(24) == pytest.approx(z)
    assert expected.tolerance["acc"]["B3"] == math.ceil(10 * z * math.sqrt(2 * s**2 / 3 + 0.25)) / 10


def test_the_faithful_model_reproduces_the_papers_spread() -> None:
    """Draws of one seed's values scatter around the paper's means with the paper's sample SD."""
    expected = load_expected(EXPECTED)
    world = oc.World.of(expected)
    model = oc.Model("faithful", rho=0.0, kind="faithful")
    rng = np.random.default_rng(0)
    draws = np.stack([model.draw(world, rng, 1)[:, 0] for _ in range(4000)])  # [n, R, M]
    b3 = world.index("B3")
    residual = draws[:, b3, 0] - draws[:, b3, 0].mean()
    s = float(np.std([43.64, 44.72, 43.65], ddof=1))
    # a seed's spread around the truth (s) plus the truth's own spread (s^2/3 + tau^2)
    assert float(residual.std()) == pytest.approx(math.sqrt(s**2 + s**2 / 3 + 0.25), rel=0.08)


def test_a_claims_null_model_sets_the_true_effect_to_zero() -> None:
    expected = load_expected(EXPECTED)
    world = oc.World.of(expected)
    null = next(m for m in oc.models(expected) if m.name == "null C1: B3 acc = B1")
    truth = null.truth(world, np.random.default_rng(1))
    assert truth[world.index("B3"), 0] == truth[world.index("B1"), 0]


def test_uh_oc_prints_every_model_and_the_targets() -> None:
    """A small N: the numbers are rough, the a3 noisy miss is never REPLICATED, every target is printed."""
    res = CliRunner().invoke(main, ["oc", "-n", "10", "--only", "models", "--expected", str(EXPECTED)])
    assert res.exit_code == 0, res.output
    expected = load_expected(EXPECTED)
    for model in oc.models(expected):
        assert model.name in res.output
    a3 = next(line for line in res.output.splitlines() if line.startswith("a3 noisy miss"))
    assert a3.split()[9] == "0.0%", a3  # P(RR)
    assert "faithful, rho 0.5: NOT REPLICATED <= 5%" in res.output and "ceiling" in res.output
