"""The claims' exact group-sequential boundaries as the verdict reads them: the registered design a set's levels were
derived by ([procedure.boundaries] in tolerances.toml: `Design`), and the share of each side's error it spends by
each look (`Design.spent`). The levels themselves are the set's ([procedure] alpha and contradicts, decide.Procedure);
design/boundaries.py derives them anew from this design (`uh oc --derive`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Design:
    """How a set's boundaries are derived ([procedure.boundaries]): each side's error, the share spent at look 1,
    the spending function's gamma, and the simulation that derives the levels (paths, seed)."""

    supports: float
    contradicts: float
    first_share: float
    gamma: float
    paths: int
    seed: int

    def __post_init__(self) -> None:
        if not (
            0 < self.contradicts <= self.supports / 2
            and self.supports <= 0.05
            and 0 < self.first_share < 1
            and self.gamma != 0
            and self.paths >= 10_000
        ):
            raise ValueError(
                "boundaries need 0 < contradicts <= supports / 2, supports <= 0.05, first_share in "
                "(0, 1), gamma != 0 and at least 10,000 paths"
            )

    def spent(self, total: float, looks: tuple[int, ...]) -> np.ndarray:
        """The error spent by each look, cumulative: `first_share` of `total` at look 1, then Hwang-Shih-DeCani."""
        info = (np.asarray(looks, float) - looks[0]) / (looks[-1] - looks[0]) if len(looks) > 1 else np.ones(1)
        rest = (1 - np.exp(-self.gamma * info)) / (1 - math.exp(-self.gamma))
        return total * (self.first_share + (1 - self.first_share) * rest)
