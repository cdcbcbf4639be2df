"""Each claim's verdict with the per-seed evidence it was decided on (ClaimCheck), and each variant against its base.

The paper's claims C1-C5 are read off the procedure's state (procedure.py): decided by paired one-sided t-tests
(decide.py) look by look, only at the paper's protocol (elsewhere they are NOT EVIDENCE). Findings C6-C8 are
decided at 5% on every seed their runs share; each variant (`uh run --set`, `uh sweep`) is measured against its
base run ID, never judged.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cache
from typing import Any

import pandas as pd

from uniform_herding.catalogue import RUNS, base_of, describe, sort_key
from uniform_herding.method.metrics import METRICS
from uniform_herding.verdict import decide
from uniform_herding.verdict.aggregate import paired, wide
from uniform_herding.verdict.claims import CLAIMS, Claim, Comparison, not_evidence
from uniform_herding.verdict.procedure import ClaimState, ComparisonState, State, seeds_by_run
from uniform_herding.verdict.words import ClaimKind, seeds_text, word

DECIDED = {
    decide.Decision.SUPPORTS: ClaimKind.SUPPORTED,
    decide.Decision.CONTRADICTS: ClaimKind.NOT_SUPPORTED,
    decide.Decision.UNDECIDED: ClaimKind.INCONCLUSIVE,
}


@dataclass(frozen=True)
class ClaimCheck:
    """A claim's kind and its detail, with the per-seed evidence it was decided on. Under a procedure: `look`
    (1-based) of `looks`, and `next_seeds`, the registered seeds of the next look where this one left it
    UNDECIDED. `seeds_needed` (in all): where a finding is INCONCLUSIVE, the seeds that would decide it if its
    mean and spread stayed as they are (information). `below_paper`: after the last look, the comparisons whose
    interval excludes the paper's effect."""

    claim_id: str
    statement: str
    kind: ClaimKind
    detail: str
    evidence: list[str]
    finding: bool = False
    seeds_needed: int | None = None
    runs: tuple[str, ...] = ()
    look: int | None = None
    looks: int | None = None
    next_seeds: tuple[int, ...] = ()
    below_paper: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return word(self.kind, self.detail)

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim_id": self.claim_id,
            "statement": self.statement,
            "verdict": self.verdict,
            "evidence": self.evidence,
            "finding": self.finding,
            "seeds_needed": self.seeds_needed,
            "runs": list(self.runs),
            "look": self.look,
            "looks": self.looks,
            "next_seeds": list(self.next_seeds),
            "below_paper": list(self.below_paper),
        }


def _seeds(values: pd.Series, fmt: str) -> str:
    return ", ".join(f"{seed} {value:{fmt}}" for seed, value in values.items())


def _n_seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _level(alpha: float) -> str:
    """The two-sided level whose interval excludes 0 exactly when a one-sided test at `alpha` decides."""
    return f"{100 * (1 - 2 * alpha):.4g}%"


def _interval_text(test: decide.PairedTest, alpha: float = decide.ALPHA) -> str:
    ci = test.interval(alpha)
    if ci is None:
        return f"no interval ({_n_seeds(test.n)} shared; a claim needs {decide.MIN_SEEDS})"
    return (
        f"{_level(alpha)} t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}] ({test.n - 1} df), "
        f"one-sided {decide.p_text(test.p_value(test.sign))}"
    )  # type: ignore[arg-type]


def _excludes(test: decide.PairedTest, alpha: float, value: float) -> bool:
    ci = test.interval(alpha)
    return ci is not None and not ci[0] <= value <= ci[1]


def _evidence_line(
    c: Comparison,
    deltas: pd.Series,
    test: decide.PairedTest,
    decided: bool,
    alpha: float = decide.ALPHA,
    against: float | None = None,
    paper: float | None = None,
) -> str:
    """One comparison: its deltas, mean, interval at the look's level and decision (contradicting at `against`);
    where `paper` (the paper's own mean) is given, whether the interval holds it."""
    line = (
        f"{c.label}: {_seeds(deltas, '+.2f')}; mean {test.mean:+.2f} (claimed {'>' if c.sign > 0 else '<'} 0); "
        f"{_interval_text(test, alpha)}"
    )
    if not (decided and test.decidable):
        return line
    line = f"{line}: {test.outcome(alpha, against)}" + ("" if alpha == decide.ALPHA else f" at alpha {alpha:g}")
    if paper is not None:
        line += f"; the paper's effect {paper:+.2f} is {'outside' if _excludes(test, alpha, paper) else 'inside'} it"
    return line


def _ways(undecided: list[decide.PairedTest]) -> str:
    """Which way a claim's undecided comparisons point: for it, against it, or some each way."""
    ways = {t.leaning for t in undecided}
    return ways.pop() if len(ways) == 1 else "some for the claim and some against"


def _leaning_text(tests: Sequence[decide.PairedTest], needed: int | None) -> str:
    """Where more seeds would take an undecided claim if its means and spreads stayed (`needed` in all, from
    decide.claim_seeds_needed): and which way."""
    if needed is None:
        return f"no number of seeds up to {decide.MAX_SEEDS} would decide it at this mean and spread"
    more, against = needed - tests[0].n, decide.against(decide.ALPHA, len(tests))
    ways = _ways([t for t in tests if t.outcome(decide.ALPHA, against) is decide.Decision.UNDECIDED])
    return f"at this mean and spread about {more} more seed{'' if more == 1 else 's'} would decide it, {ways}"


def _shared(claim: Claim, table: pd.DataFrame) -> pd.DataFrame:
    """A claim's runs of a `wide` table, on the seeds they all have."""
    table = table[[(m, r) for m in METRICS for r in claim.runs]]
    return table[table.notna().to_numpy().all(axis=1)]


def _on_shared_seeds(claim: Claim, table: pd.DataFrame, profile: str) -> ClaimCheck:
    """A claim on every seed its runs share, at 5%: findings, and the paper's claims where they are not evidence
    (shown, never decided)."""
    why_not = not_evidence(profile, claim.finding)
    deltas = [c.deltas(table) for c in claim.comparisons]
    tests = tuple(
        decide.PairedTest(tuple(d.astype(float)), c.sign) for d, c in zip(deltas, claim.comparisons, strict=True)
    )
    against = decide.against(decide.ALPHA, len(tests))
    evidence = [
        _evidence_line(c, d, t, why_not is None, against=against)
        for c, d, t in zip(claim.comparisons, deltas, tests, strict=True)
    ]
    needed = None
    if why_not:
        kind, detail = ClaimKind.NOT_EVIDENCE, why_not
    elif tests[0].n < decide.MIN_SEEDS:
        kind, detail = ClaimKind.NOT_CHECKED, f"{_n_seeds(tests[0].n)} shared; a claim needs {decide.MIN_SEEDS}"
    else:
        kind, detail = DECIDED[decide.claim_outcome(tests)], ""
        if kind is ClaimKind.INCONCLUSIVE:
            needed = decide.claim_seeds_needed(tests)
            detail = _leaning_text(tests, needed)
    return ClaimCheck(claim.claim_id, claim.statement, kind, detail, evidence, claim.finding, needed, claim.runs)


def _lacks(state: State, cs: ComparisonState, look: int) -> str:
    """What a comparison that has not had a look waits for: the look's seeds its runs lack."""
    gaps: dict[tuple[int, ...], list[str]] = {}
    for run_id in cs.comparison.runs:
        missing = tuple(s for s in state.procedure.seeds_at(look) if s not in state.have.get(run_id, frozenset()))
        if missing:
            gaps.setdefault(missing, []).append(run_id)
    return "; ".join(f"seeds {seeds_text(seeds)} missing for {', '.join(runs)}" for seeds, runs in gaps.items())


def _under_procedure(
    state: State,
    claim_id: str,
    table: Callable[[], pd.DataFrame],
    registered: bool,
    explain: bool,
    paper: dict[str, float],
) -> ClaimCheck:
    """A claim of the paper read off its state: where a set registers a procedure, the look that decided it (or
    left it undecided) and what comes next; a set without one has one look, at 5%, on its own seeds. A comparison
    whose runs lack the look's seeds waits for them, and the claim with it (unless another has contradicted it)."""
    s = state.claims[claim_id]
    if not s.reached:
        return _not_reached(state, s, registered)
    look = s.reached - 1
    last = s.decision is decide.Decision.UNDECIDED and s.settled
    evidence, below = _look_evidence(state, s, table, explain, paper if last else {})
    if registered:
        return _at_look(state, s, look, evidence, below, bool(paper))
    return _one_look(state, s, look, evidence)


def _not_reached(state: State, s: ClaimState, registered: bool) -> ClaimCheck:
    """A claim no look has tested: NOT CHECKED, naming the seeds of look 1 its runs do not all have."""
    claim = s.claim
    shared = frozenset.intersection(*(state.have.get(r, frozenset()) for r in claim.runs))
    missing = [seed for seed in state.procedure.seeds_at(0) if seed not in shared]
    detail = f"seeds {seeds_text(missing)} missing for {', '.join(claim.runs)}"
    looks = len(state.procedure.looks) if registered else None
    return ClaimCheck(claim.claim_id, claim.statement, ClaimKind.NOT_CHECKED, detail, [], runs=claim.runs, looks=looks)


def _look_evidence(
    state: State, s: ClaimState, table: Callable[[], pd.DataFrame], explain: bool, paper: dict[str, float]
) -> tuple[list[str], list[str]]:
    """Each comparison at the look that decided it, or the last it used (what it waits for where it has had none),
    and the seeds its runs share that no look counted; with `paper` (after the last look left the claim
    undecided), the comparisons whose interval excludes the paper's effect. `explain=False`: those alone."""
    procedure, m, look = state.procedure, len(s.comparisons), s.reached - 1
    evidence, below = [], []
    for cs in s.comparisons:
        c = cs.comparison
        if not cs.tests:
            evidence += [f"{c.label}: not tested yet: {_lacks(state, cs, look)}"] if explain else []
            continue
        t, k = cs.tests[-1], cs.reached - 1
        below += [c.label] if c.label in paper and _excludes(t, procedure.alpha[k], paper[c.label]) else []
        if explain:
            deltas = c.deltas(table()).reindex(list(procedure.seeds_at(k)))
            evidence.append(
                _evidence_line(c, deltas, t, True, procedure.alpha[k], procedure.against(k, m), paper.get(c.label))
            )
    shared = frozenset.intersection(*(state.have.get(r, frozenset()) for r in s.claim.runs))
    uncounted = sorted(shared - set(procedure.seeds_at(look)))
    if uncounted and explain:
        evidence.append(
            f"seeds {seeds_text(uncounted)} shown nowhere above and not counted "
            f"(the procedure counts the seeds each look asks for)"
        )
    return evidence, below


def _waiting(s: ClaimState, look: int) -> tuple[ComparisonState, ...]:
    """The comparisons whose runs lack the seeds of `look`, which is not over for them."""
    return s.waiting() if not s.settled and s.look == look else ()


def _one_look(state: State, s: ClaimState, look: int, evidence: list[str]) -> ClaimCheck:
    """A set without a registered procedure: one look, at 5%, on its own seeds; NOT CHECKED where a comparison's
    runs lack them or the set has fewer seeds than a claim needs."""
    claim, waiting = s.claim, _waiting(s, look)
    tests = [cs.tests[-1] for cs in s.comparisons if cs.tests]
    if waiting or not tests[0].decidable:
        detail = (
            "; ".join(f"{cs.comparison.label}: {_lacks(state, cs, look)}" for cs in waiting)
            if waiting
            else f"{_n_seeds(tests[0].n)} shared; a claim needs {decide.MIN_SEEDS}"
        )
        return ClaimCheck(claim.claim_id, claim.statement, ClaimKind.NOT_CHECKED, detail, evidence, runs=claim.runs)
    kind = DECIDED[s.decision]
    needed = decide.claim_seeds_needed(tests) if kind is ClaimKind.INCONCLUSIVE else None
    detail = _leaning_text(tests, needed) if kind is ClaimKind.INCONCLUSIVE else ""
    return ClaimCheck(claim.claim_id, claim.statement, kind, detail, evidence, False, needed, claim.runs)


def _after_last(where: str, alpha: float, below: list[str], paper: bool) -> str:
    """A claim the last look left undecided: neither supported nor contradicted, and whether each interval holds
    the paper's effect (`paper`: it is known; `below`: the comparisons whose interval excludes it)."""
    return f"after the last look, {where}: the re-run neither supports nor contradicts it" + (
        f"; the {_level(alpha)} interval of {', '.join(below)} excludes the paper's effect"
        if below
        else (f"; every {_level(alpha)} interval holds the paper's effect" if paper else "")
    )


def _at_look(state: State, s: ClaimState, look: int, evidence: list[str], below: list[str], paper: bool) -> ClaimCheck:
    """Under the registered procedure: the claim at `look` (1-based in its detail) with its level; UNDECIDED while a
    comparison waits for its runs or the next look is to come (naming its seeds and which way the open comparisons
    point); after the last look, undecided, whether the intervals hold the paper's effect (`paper`: it is known)."""
    procedure, claim = state.procedure, s.claim
    total, seeds, alpha = len(procedure.looks), procedure.seeds_at(look), procedure.alpha[look]
    where = f"look {look + 1} of {total}, {_n_seeds(len(seeds))}, one-sided alpha {alpha:g}"
    kind, next_seeds = DECIDED[s.decision], ()
    if waiting := _waiting(s, look):
        kind = ClaimKind.UNDECIDED
        where += ": " + "; ".join(
            f"{cs.comparison.label} waits for its runs ({_lacks(state, cs, look)})" for cs in waiting
        )
    elif not s.settled:
        open_ = [cs for cs in s.comparisons if not cs.settled]
        runs = [r for r in claim.runs if any(r in cs.comparison.runs for cs in open_)]
        kind, next_seeds = ClaimKind.UNDECIDED, procedure.seeds_at(look + 1)[len(seeds) :]
        where += (
            f": the next look adds seeds {seeds_text(next_seeds)} for {', '.join(runs)}; "
            f"its undecided comparisons point {_ways([cs.tests[-1] for cs in open_])}"
        )
    elif s.decision is decide.Decision.UNDECIDED:  # settled: after the last look
        where = _after_last(where, alpha, below, paper)
    return ClaimCheck(
        claim.claim_id,
        claim.statement,
        kind,
        where,
        evidence,
        False,
        None,
        claim.runs,
        look + 1,
        total,
        next_seeds,
        tuple(below),
    )


def check_claims(
    observed: pd.DataFrame,
    profile: str = "paper",
    state: State | None = None,
    registered: bool = True,
    explain: bool = True,
    paper: dict[str, float] | None = None,
    claims: tuple[Claim, ...] = CLAIMS,
) -> list[ClaimCheck]:
    """Every claim from the re-run alone, as evidence where `profile` allows: the paper's claims off the procedure's
    `state` (`registered`: whether the set registers the procedure, or has one look of its own seeds; `paper`: the
    paper's effects, printed beside the interval where the last look leaves a claim undecided); without a state (no
    expected set), and for findings, on every seed their runs share. A claim whose runs are missing, or that shares
    no seed, is NOT CHECKED. `explain=False` leaves the procedure's evidence text out (uh oc judges thousands of
    re-runs; the verdicts are the same)."""
    have = state.have if state is not None else seeds_by_run(observed)
    table = cache(lambda: wide(observed))  # pandas only where text is written or a finding decided
    checks = []
    for claim in claims:
        missing = [r for r in claim.runs if r not in have]
        tested = state is not None and claim.claim_id in state.claims and state.claims[claim.claim_id].reached
        if not tested and (missing or not frozenset.intersection(*(have[r] for r in claim.runs))):
            why = f"missing: {', '.join(missing)}" if missing else f"no seed shared by {', '.join(claim.runs)}"
            checks.append(
                ClaimCheck(
                    claim.claim_id, claim.statement, ClaimKind.NOT_CHECKED, why, [], claim.finding, runs=claim.runs
                )
            )
        elif state is not None and claim.claim_id in state.claims:
            check = _under_procedure(state, claim.claim_id, table, registered, explain, paper or {})
            why_not = not_evidence(profile, claim.finding)  # a procedure rehearsed off the paper profile (judge.check)
            detail = f"{why_not}; {word(check.kind, check.detail)}"
            checks.append(replace(check, kind=ClaimKind.NOT_EVIDENCE, detail=detail) if why_not else check)
        else:
            checks.append(_on_shared_seeds(claim, _shared(claim, table()), profile))
    return checks


def _t_interval_text(deltas: pd.Series) -> str:
    ci = decide.t_interval(tuple(deltas))
    if ci is None:
        return "95% t-interval undefined (fewer than 2 seeds)"
    return f"95% t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}] ({len(deltas) - 1} df)"


def check_variants(observed: pd.DataFrame) -> list[ClaimCheck]:
    """Each variant of the re-run (uh run --set, uh sweep) as a finding against its base: per-seed paired deltas of
    ACC and F, their mean and 95% t-interval. Measured, not judged: there is no paper value."""
    checks = []
    for run_id in sorted(set(observed["run_id"]) - set(RUNS), key=sort_key):
        base = base_of(run_id)
        evidence = []
        for metric in ("acc", "forgetting"):
            deltas = paired(observed, run_id, base, metric)
            if deltas.empty:
                break
            evidence.append(
                f"{run_id} - {base} {metric}: {_seeds(deltas, '+.2f')}; mean {deltas.mean():+.2f}; "
                f"{_t_interval_text(deltas)}"
            )
        why = (
            None
            if evidence
            else (f"missing: {base}" if base not in set(observed["run_id"]) else f"no seed shared by {run_id}, {base}")
        )
        kind = ClaimKind.MEASURED if why is None else ClaimKind.NOT_CHECKED
        checks.append(
            ClaimCheck(
                run_id,
                f"{run_id} against {base} ({describe(run_id)})",
                kind,
                "" if why is None else why,
                evidence,
                finding=True,
            )
        )
    return checks
