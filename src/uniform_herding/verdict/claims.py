"""The paper's claims as data: each a statement, its run IDs and its comparisons, each comparison a signed sum of
run IDs' metric paired by seed (aggregate.contrast) and the sign the paper claims for it.

C1-C4 compare two run IDs. C5, "the active-budget sweep moves ACC more than the retrieval sweep", is an
intersection-union test: (s2 - s1) - (k - l) > 0 for all six ordered pairs (k, l) of the retrieval sweep {s3,
B3, s4}, so that the budget sweep's rise beats every difference within the retrieval sweep. Each comparison is
a linear contrast of the seeds' values, so the paired t-test is exact under its null at the boundary; the
range of three noisy means, which C5 once compared, is biased upward under the null, and it read SUPPORTED
about 16-17% of the time where the ranges are equal. Findings C6-C8 (the refresh isolation, run IDs r1-r3)
are beyond the paper: decided alike on every seed their runs share, they never gate.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import permutations
from typing import Any

import pandas as pd

from uniform_herding.catalogue import PROFILES
from uniform_herding.verdict.aggregate import contrast, wide


@dataclass(frozen=True)
class Comparison:
    """One comparison of a claim: sum of weight x `metric` over `weights`' run IDs per seed, claimed > 0 (sign +1)
    or < 0 (sign -1)."""

    label: str
    metric: str
    weights: tuple[tuple[str, int], ...]
    sign: int

    @property
    def runs(self) -> tuple[str, ...]:
        return tuple(r for r, _ in self.weights)

    def deltas(self, table: Any) -> Any:
        """Its per-seed values on a `wide` table, or on procedure.replay's arrays (NaN where a run lacks the seed)."""
        return contrast(table, self.weights, self.metric)


def paired(run_id: str, other: str, metric: str, sign: int) -> Comparison:
    """(run_id - other)[metric], paired by seed, claimed > 0 (sign +1) or < 0 (sign -1)."""
    return Comparison(f"{run_id}-{other} {metric}", metric, ((run_id, 1), (other, -1)), sign)


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, or a finding beyond it (no paper value: decided alike, it never gates)."""

    claim_id: str
    statement: str
    runs: tuple[str, ...]
    comparisons: tuple[Comparison, ...]
    finding: bool = False

    def __post_init__(self) -> None:
        if {r for c in self.comparisons for r in c.runs} != set(self.runs):
            raise ValueError(f"{self.claim_id}: its run IDs must be exactly those its comparisons read")


BUDGET_SWEEP, RETRIEVAL_SWEEP = ("s1", "B3", "s2"), ("s3", "B3", "s4")

CLAIMS: tuple[Claim, ...] = (
    Claim(
        "C1",
        "Uniform Herding (B3) beats iCaRL (B1) and the static bank (B2) in ACC and forgets less",
        ("B3", "B1", "B2"),
        (
            paired("B3", "B1", "acc", +1),
            paired("B3", "B1", "forgetting", -1),
            paired("B3", "B2", "acc", +1),
            paired("B3", "B2", "forgetting", -1),
        ),
    ),
    Claim("C2", "NME beats head-logit readout in ACC (B3 > a2)", ("B3", "a2"), (paired("B3", "a2", "acc", +1),)),
    Claim("C3", "Herding beats random selection in ACC (B3 > a4)", ("B3", "a4"), (paired("B3", "a4", "acc", +1),)),
    Claim("C4", "Removing KD raises forgetting (a1 F > B3 F)", ("a1", "B3"), (paired("a1", "B3", "forgetting", +1),)),
    Claim(
        "C5",
        "The active-budget sweep moves ACC more than the retrieval sweep",
        ("s1", "B3", "s2", "s3", "s4"),
        tuple(
            Comparison(f"(s2-s1)-({hi}-{lo}) acc", "acc", (("s2", 1), ("s1", -1), (hi, -1), (lo, 1)), +1)
            for hi, lo in permutations(RETRIEVAL_SWEEP, 2)
        ),
    ),
    # Beyond the paper: the matched experiment that isolates refresh. No paper value.
    Claim(
        "C6",
        "Refresh helps at matched storage M: r2 (rho = 1) beats r1 (no refresh) in ACC and forgets less",
        ("r2", "r1"),
        (paired("r2", "r1", "acc", +1), paired("r2", "r1", "forgetting", -1)),
        finding=True,
    ),
    Claim(
        "C7",
        "Extra candidates help: B3 (rho = 3) beats r2 (rho = 1) in ACC",
        ("B3", "r2"),
        (paired("B3", "r2", "acc", +1),),
        finding=True,
    ),
    Claim(
        "C8",
        "Refresh helps under iCaRL's objective: r3 beats B1 in ACC",
        ("r3", "B1"),
        (paired("r3", "B1", "acc", +1),),
        finding=True,
    ),
)
PAPER_CLAIMS = tuple(c for c in CLAIMS if not c.finding)


def not_evidence(profile: str, finding: bool) -> str | None:
    """None where a claim is evidence at `profile`; else why it is not (NOT EVIDENCE's detail). The paper's claims
    are about its protocol (profile paper) only; findings beyond the paper are measurements of any real dataset."""
    if not finding and profile != "paper":
        return f"profile {profile}: the paper's claims are about its own protocol"
    if finding and PROFILES[profile].get("dataset") == "synthetic":
        return f"profile {profile}: synthetic data"
    return None


def paper_effects(paper: pd.DataFrame) -> dict[str, float]:
    """The paper's own mean of every comparison of every claim of the paper (its per-seed table, paired by seed)."""
    table = wide(paper)
    return {
        c.label: float(c.deltas(table).mean())
        for claim in PAPER_CLAIMS
        for c in claim.comparisons
        if set(c.runs) <= set(table.columns.get_level_values("run_id"))
    }
