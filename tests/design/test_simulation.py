"""simulation.py: the share and its interval, each gating metric judged alone as uh check judges it, and the figures
independent of how many processes ran them."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import stats

from uniform_herding.design import simulation, targets, worlds
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict import decide
from uniform_herding.verdict.expected import load_expected

EXPECTED = Path(__file__).resolve().parents[2] / "expected_results"


def test_share_is_scipys_wilson_interval() -> None:
    ci = stats.binomtest(7, 40).proportion_ci(0.95, method="wilson")
    assert simulation.share(7, 40) == pytest.approx((7 / 40, ci.low, ci.high))
    assert decide.ALPHA == 0.05


def test_gating_draws_count_false_fails_and_the_detectable_miss_on_hand_made_numbers() -> None:
    """Two metrics over four worlds, tolerance 1: the first fails in one world (|1.5| > 1), the second never. With
    four worlds, passing at most 5% means passing none: the first needs |1.5 - s| > 1 (s 2.6 in 0.1 pp steps; 2.5
    itself passes), the second |0.8 - s| > 1 (s 1.9)."""
    differences = np.array([[1.5, 0.0], [0.5, 0.8], [0.0, -0.2], [-0.5, 0.1]])
    draws = simulation.GatingDraws(0.5, [("B3", "acc"), ("B1", "acc")], differences, np.ones((4, 2)))
    assert list(draws.false_fails()) == [0.25, 0.0]
    assert list(draws.detectable_miss(targets.TARGET_MISS)) == [2.6, 1.9]


def test_gating_draws_are_judged_against_the_tolerance_each_redrawn_table_derives() -> None:
    """Under (c) each world's expected set is re-derived: the tolerances differ from world to world and from the
    shipped set's, and the differences are taken from the redrawn paper means."""
    expected = load_expected(EXPECTED)
    draws = simulation.gating_draws(expected, 0.5, 6, np.random.default_rng(0))
    assert len(draws.metrics) == 24 and draws.differences.shape == draws.tolerances.shape == (6, 24)
    j = draws.metrics.index(("B3", "acc"))
    assert len(set(draws.tolerances[:, j])) == 6 and expected.tolerance_for("B3", "acc", 3) not in draws.tolerances


@pytest.mark.slow
def test_gating_draws_in_chunks_are_each_world_judged_as_uh_check_judges_it(monkeypatch: pytest.MonkeyPatch) -> None:
    """300 worlds in chunks of 128 (the chunks' edges crossed): world by world, the difference of the re-run's mean
    on the paper's seeds from the redrawn paper mean, and the tolerance the redrawn set derives through
    Expected.tolerance_for, as Model.draw draws the same worlds one at a time."""
    monkeypatch.setattr(simulation, "GATING_CHUNK", 128)
    expected = load_expected(EXPECTED)
    draws = simulation.gating_draws(expected, 0.75, 300, np.random.default_rng(4))
    world, rng, model = worlds.World.of(expected), np.random.default_rng(4), worlds.Model("c", tau=0.75)
    for i in range(300):
        judged_by, values = model.draw(expected, world, rng)
        paper = judged_by.per_seed.groupby("run_id", sort=False)[list(METRICS)].mean()
        for j, (run_id, metric) in enumerate(draws.metrics):
            observed = values[world.index(run_id), :3, METRICS.index(metric)].mean()
            assert draws.differences[i, j] == pytest.approx(observed - paper.at[run_id, metric], abs=1e-12)
            assert draws.tolerances[i, j] == pytest.approx(judged_by.tolerance_for(run_id, metric, 3), abs=1e-9)


def test_the_figures_do_not_depend_on_how_many_processes_ran_them() -> None:
    """Each simulation draws from its own stream spawned from --seed, so one process and two give the same, and
    three identical simulations give three different draws."""
    expected = load_expected(EXPECTED)
    parts = {"gating": [simulation.simulation(simulation.gating_draws, expected, 0.5, 3)] * 3}
    one, two = ([d.differences.tolist() for d in simulation.run_calls(parts, 5, jobs)["gating"]] for jobs in (1, 2))
    assert one == two and one[0] != one[1] != one[2] != one[0]
