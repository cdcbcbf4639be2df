"""The procedure's state, replayed look by look from the results alone (`replay`): check, judge, next_step and
uh oc all read it, and nothing of it is stored, so no interruption, file order or extra seed can change it.

The pre-registered procedure (tolerances.toml's [procedure]) takes the registered seeds in order and looks at
fixed counts of them, each look at its own alpha. Look 1 asks every run ID of the expected set (and every run ID
of a gating claim) for the set's seeds. Each comparison of a claim is decided at the first look whose seeds its
own runs have and that decides it, whatever the claim's other run IDs lack; a claim moves to its next look once
every comparison it leaves open has had this one, and one it leaves undecided asks the runs of its open
comparisons for the next look's seeds. So what each look asks follows from the looks before it:
  - a run ID's counted seeds are exactly the seeds asked of it, up to the last look that asked for it; fewer is a
    look still to run or interrupted (next_step names the rest), more are shown and never counted;
  - a run ID's seeds are final when it has every seed asked of it and no comparison that reads it can still ask
    for more; a metric's miss is final only then (so each metric is judged once, on the seeds it ends with, and
    the family's alpha holds over the whole procedure);
  - next_step: the missing runs of the earliest look that misses any.
A set that registers no procedure has one look: its own seeds, at decide.ALPHA.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from uniform_herding.catalogue import RUNS
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict import decide
from uniform_herding.verdict.claims import Claim, Comparison


@dataclass(frozen=True)
class ComparisonState:
    """One comparison of a claim replayed: its tests at each look it used, in order, and its decision at the last."""

    comparison: Comparison
    tests: tuple[decide.PairedTest, ...]
    decision: decide.Decision
    total: int

    @property
    def reached(self) -> int:
        return len(self.tests)

    @property
    def settled(self) -> bool:
        """Decided, or undecided after the last look: it asks for nothing more."""
        return self.decision is not decide.Decision.UNDECIDED or self.reached == self.total


@dataclass(frozen=True)
class ClaimState:
    """One claim replayed, comparison by comparison: each is decided at the first look whose seeds its own runs have
    and that decides it, and extended no further; the claim is SUPPORTED when all are, NOT SUPPORTED when one is
    contradicted (at the look's contradicting level, Procedure.against), and undecided otherwise. `total`: the
    procedure's looks."""

    claim: Claim
    comparisons: tuple[ComparisonState, ...]
    total: int

    @cached_property  # read for every metric of every run ID the claim includes (State.final)
    def decision(self) -> decide.Decision:
        return decide.combined([c.decision for c in self.comparisons])

    @property
    def reached(self) -> int:
        """The looks it has used: its last comparison's."""
        return max((c.reached for c in self.comparisons), default=0)

    @cached_property
    def settled(self) -> bool:
        """Decided (a contradicted comparison settles it at once), or every comparison settled: it asks for nothing
        beyond the look it stands at."""
        return self.decision is not decide.Decision.UNDECIDED or (
            bool(self.comparisons) and all(c.settled for c in self.comparisons)
        )

    @cached_property
    def look(self) -> int:
        """The (0-based) look whose seeds its open comparisons ask for: the earliest look one of them has not had;
        once settled, the look that settled it (one it left untested there asks for that look's seeds, which the
        completed look would count)."""
        if self.settled:
            return self.reached - 1
        return min(c.reached for c in self.comparisons if not c.settled)

    def waiting(self) -> tuple[ComparisonState, ...]:
        """Its open comparisons that have not had the look it stands at (their runs lack its seeds); while the claim
        is undecided, the others have had it."""
        return tuple(c for c in self.comparisons if not c.settled and c.reached == self.look)

    def asks(self, run_id: str) -> int | None:
        """The (0-based) look whose seeds it asks of a run ID: the last look of its settled comparisons that read
        it, the claim's look for its open ones; None if no comparison reads it."""
        looks = [c.reached - 1 if c.settled else self.look for c in self.comparisons if run_id in c.comparison.runs]
        return max(looks) if looks else None


@dataclass(frozen=True)
class State:
    """The procedure replayed on a re-run's (run ID, seed) pairs: each claim's state, and per run ID the seeds
    asked of it, in the registered order. `gating`: the claims whose undecided looks ask for seeds."""

    procedure: decide.Procedure
    claims: dict[str, ClaimState]
    gating: tuple[str, ...]
    asked: dict[str, tuple[int, ...]]
    have: dict[str, frozenset[int]]

    def asked_of(self, run_id: str) -> tuple[int, ...]:
        """The seeds asked of a run ID: look 1's for one no look asked (a run beyond the set: shown, not judged)."""
        return self.asked.get(run_id, self.procedure.seeds_at(0))

    def counted(self, run_id: str) -> tuple[int, ...]:
        """The seeds a run ID's metrics count: those asked of it that it has, in the registered order."""
        have = self.have.get(run_id, frozenset())
        return tuple(s for s in self.asked_of(run_id) if s in have)

    def uncounted(self, run_id: str) -> tuple[int, ...]:
        """Its seeds that no look asked for: shown, never counted."""
        return tuple(sorted(self.have.get(run_id, frozenset()) - set(self.asked_of(run_id))))

    def missing(self, run_id: str) -> tuple[int, ...]:
        have = self.have.get(run_id, frozenset())
        return tuple(s for s in self.asked.get(run_id, ()) if s not in have)

    def waiting_on(self, run_id: str) -> tuple[str, ...]:
        """The gating claims with an open comparison that reads a run ID and may ask it for the next look's seeds."""
        return tuple(
            c
            for c in self.gating
            if not self.claims[c].settled
            and any(run_id in s.comparison.runs and not s.settled for s in self.claims[c].comparisons)
        )

    def final(self, run_id: str) -> bool:
        """Whether a run ID's counted seeds can still change: no (final) once it has every seed asked of it and no
        comparison that reads it can still ask for more."""
        return not self.missing(run_id) and not self.waiting_on(run_id)

    def look_of(self, seed: int) -> int:
        """The (0-based) look that first counts a registered seed."""
        position = self.procedure.seeds.index(seed)
        return next(k for k, n in enumerate(self.procedure.looks) if position < n)

    @cached_property
    def pending_look(self) -> int | None:
        """The earliest look some asked run misses: the one next_step runs. None when nothing asked is missing."""
        looks = [self.look_of(s) for r in self.asked for s in self.missing(r)]
        return min(looks) if looks else None

    @property
    def next_step(self) -> dict[str, list[Any]]:
        """The runs of the pending look that are missing, as run IDs x seeds (each pair asked; uh run skips the pairs
        it has): {"run_ids": [...], "seeds": [...]}, or {} when nothing asked is missing."""
        look = self.pending_look
        if look is None:
            return {}
        missing = {r: [s for s in self.missing(r) if self.look_of(s) == look] for r in self.asked}
        runs = [r for r in self.asked if missing[r]]
        seeds = [s for s in self.procedure.seeds if any(s in missing[r] for r in runs)]
        return {"run_ids": runs, "seeds": seeds}

    @property
    def interrupted(self) -> bool:
        """Whether the pending look has begun (look 1 always has): some of the runs it asks anew are there."""
        look = self.pending_look
        if look is None:
            return False
        if look == 0:
            return True
        new = self.procedure.seeds_at(look)[self.procedure.looks[look - 1] :]
        return any(s in self.have.get(r, ()) for r in self.asked if set(new) <= set(self.asked[r]) for s in new)

    def to_dict(self) -> dict[str, Any]:
        """What uh check's JSON records of the state: per look, its seeds and alpha, the claims it decided, the run
        IDs it asks for and those it misses."""
        looks = []
        for k, n in enumerate(self.procedure.looks):
            asks = [r for r, seeds in self.asked.items() if len(seeds) >= n]
            if not asks:
                break
            seeds = self.procedure.seeds_at(k)
            looks.append(
                {
                    "look": k + 1,
                    "seeds": list(seeds),
                    "alpha": self.procedure.alpha[k],
                    "run_ids": asks,
                    "decided": {
                        c: s.decision
                        for c, s in self.claims.items()
                        if s.reached == k + 1 and s.decision is not decide.Decision.UNDECIDED
                    },
                    "missing": {
                        r: [s for s in seeds if s in self.missing(r)]
                        for r in asks
                        if any(s in self.missing(r) for s in seeds)
                    },
                }
            )
        return {"looks": looks, "gating_claims": list(self.gating)}


def single_look(seeds: tuple[int, ...]) -> decide.Procedure:
    """The procedure of a set that registers none: one look at its own seeds, at decide.ALPHA."""
    return decide.Procedure(seeds, (len(seeds),), (decide.ALPHA,))


Grid = dict[tuple[str, str], np.ndarray]  # (metric, run ID) -> values over the registered seeds, NaN where absent


def rows(table: pd.DataFrame) -> list[tuple[str, int, float, float, float]]:
    """A per-seed table's rows as (run ID, seed, *METRICS), plain Python values (columns to lists, without astype's
    copies: pandas' row iterators, and astype, cost more than the rules they feed)."""
    columns = [
        list(map(str, table["run_id"].tolist())),
        table["seed"].to_numpy(dtype=int).tolist(),
        *(table[m].to_numpy(dtype=float).tolist() for m in METRICS),
    ]
    return list(zip(*columns, strict=True))


def seeds_by_run(table: pd.DataFrame) -> dict[str, frozenset[int]]:
    """Each run ID of a per-seed table and the seeds it has."""
    have: dict[str, set[int]] = {}
    for run_id, seed, *_ in rows(table):
        have.setdefault(run_id, set()).add(seed)
    return {r: frozenset(seeds) for r, seeds in have.items()}


def grid(observed: pd.DataFrame, seeds: tuple[int, ...]) -> Grid:
    """The per-seed table as one array per (metric, run ID) over `seeds`, in their order."""
    column = {s: i for i, s in enumerate(seeds)}
    out: Grid = {}
    for run_id, seed, *values in rows(observed):
        if seed in column:
            for metric, value in zip(METRICS, values, strict=True):
                if (metric, run_id) not in out:  # not setdefault: it would build an array for every value
                    out[metric, run_id] = np.full(len(seeds), np.nan)
                out[metric, run_id][column[seed]] = value
    return out


def claim_state(claim: Claim, values: Grid, procedure: decide.Procedure) -> ClaimState:
    """A claim on the registered seeds' values, look by look: each open comparison whose runs have the look's seeds
    is tested on exactly those at the look's level (contradicting at Procedure.against's), whatever the claim's
    other run IDs lack; the claim goes on to the next look only once every open comparison has had this one, and
    stops once settled. A comparison decided stays decided, and its runs are asked for nothing more by it."""
    m, last = len(claim.comparisons), len(procedure.looks) - 1
    deltas = [c.deltas(values) if all(("acc", r) in values for r in c.runs) else None for c in claim.comparisons]
    tests: list[list[decide.PairedTest]] = [[] for _ in range(m)]
    decisions = [decide.Decision.UNDECIDED] * m
    for k, n in enumerate(procedure.looks):
        open_ = [i for i in range(m) if decisions[i] is decide.Decision.UNDECIDED]
        ready = [i for i in open_ if deltas[i] is not None and not np.isnan(deltas[i][:n]).any()]  # type: ignore[index]
        for i in ready:
            tests[i].append(decide.PairedTest(tuple(deltas[i][:n]), claim.comparisons[i].sign))  # type: ignore[index]
            decisions[i] = tests[i][-1].outcome(procedure.alpha[k], procedure.against(k, m))
        if (
            len(ready) < len(open_)
            or decide.Decision.CONTRADICTS in decisions
            or k == last
            or decide.Decision.UNDECIDED not in decisions
        ):
            break
    return ClaimState(
        claim,
        tuple(
            ComparisonState(c, tuple(t), d, len(procedure.looks))
            for c, t, d in zip(claim.comparisons, tests, decisions, strict=True)
        ),
        len(procedure.looks),
    )


def replay(
    observed: pd.DataFrame,
    procedure: decide.Procedure,
    set_runs: tuple[str, ...],
    claims: tuple[Claim, ...],
    gating: bool,
) -> State:
    """The procedure's state on a per-seed table: `claims` (the paper's, where they are evidence) replayed look by
    look; look 1 asks `set_runs` and the claims' run IDs, and where `gating`, each claim that waits asks its
    run IDs for its next look's seeds. Only the set of (run ID, seed) pairs matters, never their order."""
    have = seeds_by_run(observed)
    values = grid(observed, procedure.seeds)
    states = {c.claim_id: claim_state(c, values, procedure) for c in claims}
    look_of = dict.fromkeys(set_runs, 0)
    for state in states.values():
        for run_id in state.claim.runs:
            look_of[run_id] = max(look_of.get(run_id, 0), (state.asks(run_id) or 0) if gating else 0)
    order = [r for r in RUNS if r in look_of] + sorted(r for r in look_of if r not in RUNS)
    asked = {r: procedure.seeds_at(look_of[r]) for r in order}
    return State(procedure, states, tuple(states) if gating else (), asked, have)
