"""Exact group-sequential boundaries for one comparison's paired t statistic at the procedure's looks.

A comparison is tested at every look until one decides it, so a level per look that sums to the error it may make
(Bonferroni) spends less than it may: the looks' t statistics are correlated (each look's seeds include the last
one's). Here each side's error is spent look by look, and each look's nominal one-sided level is the one at which
the paths of null deltas that no earlier look decided cross it exactly as often as that look may spend:
  - the supporting side spends `supports` in all: `first_share` of it at look 1, the rest by Hwang-Shih-DeCani's
    function with parameter `gamma` over the looks after it (information: seeds beyond look 1's, over the last
    look's); the contradicting side spends `contradicts / m` in the same shape, for a claim of m comparisons (a
    union of m chances: Bonferroni), so its levels are derived per m;
  - each side is derived as if the other did not stop a path; stopping on the other side only removes paths, so
    each side errs at most what it spends, and the procedure as run (tests/design/test_boundaries.py) a little
    less; `supports` and `contradicts` sit below 5% and 2.5% by the Monte Carlo error and the levels' rounding;
  - the t statistic of normal deltas has the same law whatever their SD, so paths of N(0, 1) deltas (`paths` of
    them, from `seed`) stand for every comparison; the levels are rounded to 3 significant figures.
"""

from __future__ import annotations

import numpy as np
from scipy import special

from uniform_herding.verdict.boundaries import Design

CHUNK = 250_000  # paths drawn at once: 20 looks' deltas of a chunk in 40 MB


def null_t(looks: tuple[int, ...], paths: int, rng: np.random.Generator) -> np.ndarray:
    """[paths, looks]: the paired t statistic of N(0, 1) deltas at each look, every look's seeds the last one's and
    more (float32: the quantiles need no more)."""
    out = np.empty((paths, len(looks)), np.float32)
    n = np.asarray(looks)
    for start in range(0, paths, CHUNK):
        z = rng.standard_normal((min(CHUNK, paths - start), looks[-1]))
        total, squares = np.cumsum(z, 1)[:, n - 1], np.cumsum(z * z, 1)[:, n - 1]
        variance = (squares - total**2 / n) / (n - 1)
        out[start : start + len(z)] = total / n / np.sqrt(variance / n)
    return out


def calibrate(t: np.ndarray, looks: tuple[int, ...], spent: np.ndarray) -> tuple[float, ...]:
    """The nominal one-sided level of each look at which the paths `t` ([paths, looks]) that no earlier look decided
    cross it as often as that look may spend (`spent`, cumulative), rounded to 3 significant figures; look 1's is
    what it spends, exactly."""
    alive, levels = np.ones(len(t), bool), [float(f"{spent[0]:.3g}")]  # look 1's t has its exact law: no paths
    alive &= t[:, 0] <= -special.stdtrit(looks[0] - 1, spent[0])
    for k, n in enumerate(looks[1:], 1):
        crossing = round((spent[k] - spent[k - 1]) * len(t))
        ordered = np.sort(t[alive, k])[::-1]
        bound = float(ordered[crossing - 1] + ordered[crossing]) / 2  # between the last path in and the first out
        levels.append(float(f"{special.stdtr(n - 1, -bound):.3g}"))
        alive &= t[:, k] <= bound
    return tuple(levels)


Levels = tuple[float, ...]  # a side's nominal one-sided level at each look


def derive(design: Design, looks: tuple[int, ...], ms: tuple[int, ...]) -> tuple[Levels, dict[int, Levels]]:
    """The supporting levels per look, and per claim size m the contradicting levels, from `design.paths` null paths
    (the contradicting side reads the same paths mirrored: the t statistic's law is symmetric)."""
    t = null_t(looks, design.paths, np.random.default_rng(design.seed))
    supports = calibrate(t, looks, design.spent(design.supports, looks))
    np.negative(t, out=t)
    return supports, {m: calibrate(t, looks, design.spent(design.contradicts / m, looks)) for m in ms}


def errors(
    looks: tuple[int, ...],
    supports: tuple[float, ...],
    contradicts: tuple[float, ...],
    paths: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """One null comparison through the procedure's rule on `paths` fresh paths: stopped at the first look whose
    supporting level its one-sided p-value is below (supports), else whose contradicting level the other way's is
    (contradicts), as decide.PairedTest.outcome tests them. Per look, how many paths end there each way."""
    t = null_t(looks, paths, rng).astype(float)
    alive, up, down = np.ones(paths, bool), np.zeros(len(looks), int), np.zeros(len(looks), int)
    for k, n in enumerate(looks):
        ups = alive & (special.stdtr(n - 1, -t[:, k]) < supports[k])
        downs = alive & ~ups & (special.stdtr(n - 1, t[:, k]) < contradicts[k])
        up[k], down[k] = ups.sum(), downs.sum()
        alive &= ~(ups | downs)
    return up, down


def derive_lines(
    design: Design, looks: tuple[int, ...], supports: tuple[float, ...], contradicts: dict[int, tuple[float, ...]]
) -> list[str]:
    """What `uh oc --derive` prints of a set's boundaries: each side's levels as registered and as derived anew from
    the design, look by look, and whether they agree to the 3 significant figures they are given in."""
    derived_supports, derived = derive(design, looks, tuple(contradicts))
    rows = [("supports", supports, derived_supports)]
    rows += [(f"contradicts, m = {m}", contradicts[m], derived[m]) for m in sorted(contradicts)]
    lines = [
        f"\nboundaries: {design.supports:g} supporting, {design.contradicts:g} / m contradicting, "
        f"{design.first_share:g} of each at look 1, then Hwang-Shih-DeCani gamma {design.gamma:g}; "
        f"{design.paths:,} null paths, seed {design.seed}",
        f"  {'side':22} " + " ".join(f"{f'look {k + 1} ({n})':>21}" for k, n in enumerate(looks)),
    ]
    for side, registered, anew in rows:
        pairs = zip(registered, anew, strict=True)
        lines.append(f"  {side:22} " + " ".join(f"{f'{r:.3g} / {a:.3g}':>21}" for r, a in pairs))
    same = all(r == a for _, registered, anew in rows for r, a in zip(registered, anew, strict=True))
    lines.append(
        "  (registered / derived anew: "
        + ("the same)" if same else "they differ: the set's levels are not what its design derives)")
    )
    return lines
