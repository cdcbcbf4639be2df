"""Metric verdicts: the re-run's mean over the expected seeds against the expected mean and its tolerance.

A metric is REPLICATED when the re-run's mean over the seeds it counts (counted_seeds: the registered seeds in
order, as far as the re-run has them) is within the pre-registered tolerance of the expected mean, else NOT
REPLICATED; other seeds are shown, never counted. The Welch interval and the equivalence test beside it are
information only. The rules themselves are decide.py's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import numpy as np
import pandas as pd

from uniform_herding.method.config import RUNS
from uniform_herding.runs.results import METRICS
from uniform_herding.verdict import decide
from uniform_herding.verdict.expected import Expected
from uniform_herding.verdict.words import NO_EXPECTATION, NO_PAPER_VALUE, NOT_REPLICATED, REPLICATED


@dataclass(frozen=True)
class MetricCheck:
    """One run ID and metric: expected vs observed mean over the expected set's seeds (decide.py's rules).
    `uncounted`: the re-run's other seeds, shown and never counted; `gating`: whether it decides the verdict."""

    run_id: str
    metric: str
    expected: tuple[float, ...]
    observed: tuple[float, ...]
    tolerance: float
    gating: bool = True
    uncounted: tuple[int, ...] = ()

    @property
    def n_expected(self) -> int:
        return len(self.expected)

    @property
    def n_observed(self) -> int:
        return len(self.observed)

    @property
    def expected_mean(self) -> float | None:
        return float(np.mean(self.expected)) if self.expected else None

    @property
    def observed_mean(self) -> float | None:
        return float(np.mean(self.observed)) if self.observed else None

    @property
    def difference(self) -> float | None:
        if self.expected_mean is None or self.observed_mean is None:
            return None
        return self.observed_mean - self.expected_mean

    @property
    def welch95(self) -> tuple[float, float] | None:
        return decide.welch_interval(self.expected, self.observed)

    @property
    def equivalence(self) -> decide.Equivalence | None:
        return None if self.difference is None else decide.equivalence(self.expected, self.observed, self.tolerance)

    @property
    def verdict(self) -> str:
        if self.expected_mean is None:
            return NO_PAPER_VALUE if RUNS[self.run_id].beyond_paper else NO_EXPECTATION
        if self.n_observed < decide.MIN_SEEDS:  # one seed's luck decides nothing (edge: seed 1993 alone)
            return (f"NOT CHECKED ({self.n_observed} of the expected seeds; a metric needs {decide.MIN_SEEDS}"
                    + (f"; seeds {', '.join(map(str, self.uncounted))} not counted)" if self.uncounted else ")"))
        return REPLICATED if decide.replicated(self.difference, self.tolerance) else NOT_REPLICATED  # type: ignore[arg-type]

    def welch_text(self) -> str:
        return "no interval" if self.welch95 is None else f"[{self.welch95[0]:+.2f}, {self.welch95[1]:+.2f}]"

    def equivalence_text(self) -> str:
        if self.equivalence is None or self.difference is None:
            return ""
        return self.equivalence.describe(self.n_expected, self.n_observed, self.difference, self.tolerance)

    def to_dict(self) -> dict[str, Any]:
        eq = self.equivalence
        return {"run_id": self.run_id, "metric": self.metric, "n_expected": self.n_expected,
                "n_observed": self.n_observed, "expected_mean": self.expected_mean,
                "observed_mean": self.observed_mean, "difference": self.difference, "tolerance": self.tolerance,
                "verdict": self.verdict, "gating": self.gating, "uncounted_seeds": list(self.uncounted),
                "welch95": self.welch95,
                "equivalence": None if eq is None else asdict(eq) | {"text": self.equivalence_text()}}  # fmt: skip


def counted_seeds(registered: tuple[int, ...], have: set[int]) -> tuple[int, ...]:
    """The seeds a metric counts: the registered seeds in their order, as far as the re-run has them without a
    gap. So every seed the procedure asked for counts, and no other: a metric can be neither diluted nor
    shopped for with other seeds, nor spared the seeds it ran."""
    counted = []
    for seed in registered:
        if seed not in have:
            break
        counted.append(seed)
    return tuple(counted)


def compare(expected: Expected, observed: pd.DataFrame) -> list[MetricCheck]:
    """A MetricCheck for every run ID of the re-run (RUNS order) and every metric, on its counted_seeds: the
    set's seeds first, then the procedure's, in order."""

    def by_run(table: pd.DataFrame) -> dict[str, list[tuple[Any, ...]]]:
        rows: dict[str, list[tuple[Any, ...]]] = {}
        for row in table[["run_id", "seed", *METRICS]].itertuples(index=False):
            rows.setdefault(row[0], []).append(row)
        return rows

    observed_by, expected_by = by_run(observed), by_run(expected.per_seed)
    checks = []
    for run_id in (r for r in RUNS if r in observed_by):
        by_seed = {int(row[1]): row for row in observed_by[run_id]}
        counted = counted_seeds(expected.registered, set(by_seed))
        uncounted = tuple(sorted(set(by_seed) - set(counted)))
        obs = [by_seed[seed] for seed in counted]
        exp = expected_by.get(run_id, [])
        for k, metric in enumerate(METRICS, start=2):
            checks.append(MetricCheck(run_id, metric, tuple(float(row[k]) for row in exp),
                                      tuple(float(row[k]) for row in obs),
                                      expected.tolerance_for(run_id, metric, max(len(obs), 1)) if exp else 0.0,
                                      metric in expected.gate,
                                      uncounted))  # fmt: skip
    return checks

