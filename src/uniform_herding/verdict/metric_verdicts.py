"""Each metric's verdict (MetricCheck, check_metrics): the re-run's mean over the seeds it counts against the
expected mean and its tolerance.

A metric is REPLICATED when the re-run's mean over the seeds it counts (exactly the seeds the procedure asked of
its run ID: procedure.State.counted) is within the pre-registered tolerance of the expected mean, else NOT
REPLICATED; other seeds are shown, never counted. Whether the verdict is final is the state's (State.final):
a miss on a run ID that a look may still extend waits. The Welch interval and the equivalence test beside it
are information only. The rules themselves are decide.py's.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from uniform_herding.catalogue import RUNS
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict import decide
from uniform_herding.verdict.expected import Expected
from uniform_herding.verdict.procedure import State, rows
from uniform_herding.verdict.words import MetricKind, seeds_text, word


@dataclass(frozen=True)
class MetricCheck:
    """One run ID and metric: expected vs observed mean over the expected set's seeds (decide.py's rules).
    `uncounted`: the re-run's other seeds, shown and never counted; `gating`: whether it decides the verdict;
    `final`: whether its counted seeds are final (procedure.State.final), so that a miss decides."""

    run_id: str
    metric: str
    expected: tuple[float, ...]
    observed: tuple[float, ...]
    tolerance: float
    gating: bool = True
    uncounted: tuple[int, ...] = ()
    final: bool = True

    @property
    def n_expected(self) -> int:
        return len(self.expected)

    @property
    def n_observed(self) -> int:
        return len(self.observed)

    @cached_property  # read by kind, difference and the texts: uh oc asks for it millions of times
    def expected_mean(self) -> float | None:
        return float(np.mean(self.expected)) if self.expected else None

    @cached_property
    def observed_mean(self) -> float | None:
        return float(np.mean(self.observed)) if self.observed else None

    @cached_property
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
    def kind(self) -> MetricKind:
        if self.expected_mean is None:
            return MetricKind.NO_PAPER_VALUE if RUNS[self.run_id].beyond_paper else MetricKind.NO_EXPECTATION
        if self.n_observed < decide.MIN_SEEDS:  # one seed's luck decides nothing (edge: seed 1993 alone)
            return MetricKind.NOT_CHECKED
        if decide.replicated(self.difference, self.tolerance):  # type: ignore[arg-type]
            return MetricKind.REPLICATED
        return MetricKind.NOT_REPLICATED

    @property
    def verdict(self) -> str:
        if self.kind is not MetricKind.NOT_CHECKED:
            return word(self.kind)
        uncounted = f"; seeds {seeds_text(self.uncounted)} not counted" if self.uncounted else ""
        return word(self.kind, f"{self.n_observed} of the expected seeds; a metric needs {decide.MIN_SEEDS}{uncounted}")

    def welch_text(self) -> str:
        return "no interval" if self.welch95 is None else f"[{self.welch95[0]:+.2f}, {self.welch95[1]:+.2f}]"

    def equivalence_text(self) -> str:
        if self.equivalence is None or self.difference is None:
            return ""
        return self.equivalence.describe(self.n_expected, self.n_observed, self.difference, self.tolerance)

    def to_dict(self) -> dict[str, Any]:
        eq = self.equivalence
        return {
            "run_id": self.run_id,
            "metric": self.metric,
            "n_expected": self.n_expected,
            "n_observed": self.n_observed,
            "expected_mean": self.expected_mean,
            "observed_mean": self.observed_mean,
            "difference": self.difference,
            "tolerance": self.tolerance,
            "verdict": self.verdict,
            "gating": self.gating,
            "final": self.final,
            "uncounted_seeds": list(self.uncounted),
            "welch95": self.welch95,
            "equivalence": None if eq is None else asdict(eq) | {"text": self.equivalence_text()},
        }


def check_metrics(expected: Expected, observed: pd.DataFrame, state: State) -> list[MetricCheck]:
    """A MetricCheck for every run ID of the re-run (RUNS order) and every metric, on the seeds the procedure's
    `state` counts for it, in the registered order."""
    observed_rows = {(r, s): row for r, s, *row in rows(observed)}
    paper = {(r, s): row for r, s, *row in rows(expected.per_seed)}
    checks = []
    for run_id in (r for r in RUNS if r in state.have):
        counted = state.counted(run_id)
        exp = [row for (r, _), row in paper.items() if r == run_id]
        for k, metric in enumerate(METRICS):
            checks.append(
                MetricCheck(
                    run_id,
                    metric,
                    tuple(float(row[k]) for row in exp),
                    tuple(observed_rows[run_id, s][k] for s in counted),
                    expected.tolerance_for(run_id, metric, max(len(counted), 1)) if exp else 0.0,
                    metric in expected.gate,
                    state.uncounted(run_id),
                    state.final(run_id),
                )
            )
    return checks
