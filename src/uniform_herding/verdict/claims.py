"""The paper's claims under the procedure, the findings beyond the paper, and variants against their base.

The paper's claims C1-C5 are decided from the re-run alone by paired one-sided t-tests (decide.py), only at the
paper's protocol (elsewhere they are NOT EVIDENCE), and on the paper's set by its pre-registered sequential
procedure: where a look cannot decide, the claim is UNDECIDED and names the registered seeds of the next look.
Findings C6-C8 (the refresh isolation, run IDs r1-r3, beyond the paper) are decided on all shared seeds; each
variant (`uh run --set`, `uh sweep`) is measured against its base run ID, never judged. Each ClaimCheck carries
the per-seed evidence it was decided on, as text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from uniform_herding.method.config import PROFILES, RUNS
from uniform_herding.runs.results import METRICS
from uniform_herding.variants import base_of, describe, sort_key
from uniform_herding.verdict import decide
from uniform_herding.verdict.words import INCONCLUSIVE, MEASURED, NOT_EVIDENCE, OUTCOME_VERDICT, UNDECIDED


@dataclass(frozen=True)
class Comparison:
    """One comparison of a claim: what is compared, its per-seed deltas (indexed by seed), the claimed sign."""

    label: str
    deltas: pd.Series
    sign: int

    @property
    def test(self) -> decide.PairedTest:
        return decide.PairedTest(tuple(self.deltas.astype(float)), self.sign)


def wide(table: pd.DataFrame) -> pd.DataFrame:
    """The per-seed table as seed x (metric, run ID), seeds in the table's order: what comparisons read."""
    return table.pivot(index="seed", columns="run_id", values=list(METRICS)).reindex(table["seed"].unique())


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, decided on the seeds that all of its runs share (`comparisons` reads a `wide`
    table). A finding is a claim beyond the paper (no paper value): decided alike, it never gates the exit code."""

    claim_id: str
    statement: str
    runs: tuple[str, ...]
    comparisons: Callable[[pd.DataFrame], list[Comparison]]
    finding: bool = False


def _seeds(values: pd.Series, fmt: str) -> str:
    return ", ".join(f"{seed} {value:{fmt}}" for seed, value in values.items())


def _paired(*comparisons: tuple[str, str, str, int]) -> Callable[[pd.DataFrame], list[Comparison]]:
    """Claim that (run - other)[metric], paired by seed, is > 0 (sign +1) or < 0 (sign -1)."""

    def compare_all(table: pd.DataFrame) -> list[Comparison]:
        return [Comparison(f"{run_id}-{other} {metric}", (table[metric, run_id] - table[metric, other]).rename(metric),
                           sign) for run_id, other, metric, sign in comparisons]  # fmt: skip

    return compare_all


BUDGET_SWEEP, RETRIEVAL_SWEEP = ("s1", "B3", "s2"), ("s3", "B3", "s4")


def _sweep_ranges(table: pd.DataFrame) -> list[Comparison]:
    """C5, paired by seed: per seed, the range of ACC over {s1, B3, s2} minus its range over {s3, B3, s4}."""
    acc = table["acc"]
    ranges = {sweep: acc[list(sweep)].max(axis=1) - acc[list(sweep)].min(axis=1)
              for sweep in (BUDGET_SWEEP, RETRIEVAL_SWEEP)}  # fmt: skip
    return [Comparison("range of acc over s1, B3, s2 minus over s3, B3, s4",
                       (ranges[BUDGET_SWEEP] - ranges[RETRIEVAL_SWEEP]).rename("acc"), +1)]  # fmt: skip


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "C1",
        "Uniform Herding (B3) beats iCaRL (B1) and the static bank (B2) in ACC and forgets less",
        ("B3", "B1", "B2"),
        _paired(("B3", "B1", "acc", +1), ("B3", "B1", "forgetting", -1),
                ("B3", "B2", "acc", +1), ("B3", "B2", "forgetting", -1)),
    ),
    Claim("C2", "NME beats head-logit readout in ACC (B3 > a2)", ("B3", "a2"), _paired(("B3", "a2", "acc", +1))),
    Claim("C3", "Herding beats random selection in ACC (B3 > a4)", ("B3", "a4"), _paired(("B3", "a4", "acc", +1))),
    Claim("C4", "Removing KD raises forgetting (a1 F > B3 F)", ("a1", "B3"), _paired(("a1", "B3", "forgetting", +1))),
    Claim(
        "C5",
        "The active-budget sweep moves ACC more than the retrieval sweep",
        ("s1", "B3", "s2", "s3", "s4"),
        _sweep_ranges,
    ),
    # Beyond the paper: the matched experiment that isolates refresh. No paper value.
    Claim(
        "C6",
        "Refresh helps at matched storage M: r2 (rho = 1) beats r1 (no refresh) in ACC and forgets less",
        ("r2", "r1"),
        _paired(("r2", "r1", "acc", +1), ("r2", "r1", "forgetting", -1)),
        finding=True,
    ),
    Claim("C7", "Extra candidates help: B3 (rho = 3) beats r2 (rho = 1) in ACC", ("B3", "r2"),
          _paired(("B3", "r2", "acc", +1)), finding=True),
    Claim("C8", "Refresh helps under iCaRL's objective: r3 beats B1 in ACC", ("r3", "B1"),
          _paired(("r3", "B1", "acc", +1)), finding=True),
)


@dataclass(frozen=True)
class ClaimCheck:
    """A claim's verdict with the per-seed evidence it was decided on. Under a procedure: `look` (1-based)
    of `looks`, and `next_seeds`, the registered seeds of the next look where this one left it INCONCLUSIVE
    (empty when it is decided, or INCONCLUSIVE after the last look). `seeds_needed` (in all): where it is
    INCONCLUSIVE, the seeds that would decide it if its mean and spread stayed as they are (information)."""

    claim_id: str
    statement: str
    verdict: str
    evidence: list[str]
    finding: bool = False
    seeds_needed: int | None = None
    runs: tuple[str, ...] = ()
    look: int | None = None
    looks: int | None = None
    next_seeds: tuple[int, ...] = ()
    below_paper: tuple[str, ...] = ()  # after the last look: comparisons whose interval excludes the paper's effect


def _shared_seeds(table: pd.DataFrame, runs: tuple[str, ...]) -> tuple[str | None, pd.DataFrame]:
    """`runs` of a `wide` table on the seeds they all have; or why they cannot be compared (NOT CHECKED)."""
    have = set(table.columns.get_level_values("run_id"))
    missing = [r for r in runs if r not in have]
    if missing:
        return f"NOT CHECKED (missing: {', '.join(missing)})", pd.DataFrame()
    columns = [(m, r) for m in METRICS for r in runs]
    table = table[columns]
    table = table[table.notna().to_numpy().all(axis=1)]
    if table.empty:
        return f"NOT CHECKED (no seed shared by {', '.join(runs)})", table
    return None, table


def evidence_at(profile: str, finding: bool) -> str | None:
    """None where a claim is evidence at `profile`; else why it is not. The paper's claims are about its
    protocol (profile paper) only; findings beyond the paper are measurements of any real dataset."""
    if not finding and profile != "paper":
        return f"{NOT_EVIDENCE} (profile {profile}: the paper's claims are about its own protocol)"
    if finding and PROFILES[profile].get("dataset") == "synthetic":
        return f"{NOT_EVIDENCE} (profile {profile}: synthetic data)"
    return None


def _n_seeds(n: int) -> str:
    return f"{n} seed" if n == 1 else f"{n} seeds"


def _level(alpha: float) -> str:
    """The two-sided level whose interval excludes 0 exactly when a one-sided test at `alpha` decides."""
    return f"{100 * (1 - 2 * alpha):.4g}%"


def _interval_text(test: decide.PairedTest, alpha: float = decide.ALPHA) -> str:
    ci = test.interval(alpha)
    if ci is None:
        return f"no interval ({_n_seeds(test.n)} shared; a claim needs {decide.MIN_SEEDS})"
    return (f"{_level(alpha)} t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}] ({test.n - 1} df), "
            f"one-sided {decide.p_text(test.p_value(test.sign))}")  # type: ignore[arg-type]


def _evidence_line(c: Comparison, decided: bool, alpha: float = decide.ALPHA, against: float | None = None,
                   paper: float | None = None) -> str:  # fmt: skip
    """One comparison: its deltas, mean, interval at the look's level and outcome; where `paper` (the paper's own
    mean delta) is given, whether the interval holds it."""
    test = c.test
    line = (f"{c.label}: {_seeds(c.deltas, '+.2f')}; mean {test.mean:+.2f} (claimed {'>' if c.sign > 0 else '<'} 0); "
            f"{_interval_text(test, alpha)}")  # fmt: skip
    if not (decided and test.decidable):
        return line
    line = f"{line}: {test.outcome(alpha, against)}" + ("" if alpha == decide.ALPHA else f" at alpha {alpha:g}")
    if paper is not None:
        line += f"; the paper's effect {paper:+.2f} is {'outside' if _excludes(test, alpha, paper) else 'inside'} it"
    return line


def _excludes(test: decide.PairedTest, alpha: float, value: float) -> bool:
    ci = test.interval(alpha)
    return ci is not None and not ci[0] <= value <= ci[1]


def _ways(tests: list[decide.PairedTest], alpha: float = decide.ALPHA) -> str:
    """Which way a claim's undecided comparisons point: for it, against it, or some each way."""
    ways = {t.leaning for t in tests if t.outcome(alpha, decide.against(alpha, len(tests))) == "undecided"}
    return ways.pop() if len(ways) == 1 else "some for the claim and some against"


def _leaning_text(tests: list[decide.PairedTest], needed: int | None) -> str:
    """Where more seeds would take an undecided claim if its means and spreads stayed (`needed` in all, from
    decide.claim_seeds_needed): and which way."""
    if needed is None:
        return f"no number of seeds up to {decide.MAX_SEEDS} would decide it at this mean and spread"
    more = needed - tests[0].n
    return f"at this mean and spread about {more} more seed{'' if more == 1 else 's'} would decide it, {_ways(tests)}"


def _single_look(claim: Claim, table: pd.DataFrame, profile: str) -> ClaimCheck:
    """A claim on every seed its runs share, at 5%: findings, and the claims of sets without a procedure."""
    comparisons = claim.comparisons(table)
    tests = [c.test for c in comparisons]
    not_evidence = evidence_at(profile, claim.finding)
    against = decide.against(decide.ALPHA, len(comparisons))
    evidence = [_evidence_line(c, not_evidence is None, against=against) for c in comparisons]
    needed = None
    if not_evidence:
        verdict = not_evidence
    elif tests[0].n < decide.MIN_SEEDS:
        verdict = f"NOT CHECKED ({_n_seeds(tests[0].n)} shared; a claim needs {decide.MIN_SEEDS})"
    else:
        verdict = OUTCOME_VERDICT[decide.claim_outcome(tests)]
        if verdict == INCONCLUSIVE:
            needed = decide.claim_seeds_needed(tests)
            verdict += f" ({_leaning_text(tests, needed)})"
    return ClaimCheck(claim.claim_id, claim.statement, verdict, evidence, claim.finding, needed, claim.runs)


def _sequential(claim: Claim, table: pd.DataFrame, procedure: decide.Procedure, explain: bool = True,
                paper_effects: dict[str, float] | None = None) -> ClaimCheck:  # fmt: skip
    """A claim of the paper under the pre-registered procedure: looks in order on the registered seeds,
    each at its own alpha; seeds outside the list, or past the last look reached, are shown, never counted."""
    shared = set(table.index)
    reached = [k for k in range(len(procedure.looks)) if set(procedure.seeds_at(k)) <= shared]
    total = len(procedure.looks)
    if not reached:
        missing = [s for s in procedure.seeds_at(0) if s not in shared]
        return ClaimCheck(claim.claim_id, claim.statement,
                          f"NOT CHECKED (seeds {', '.join(map(str, missing))} missing for {', '.join(claim.runs)})",
                          [], runs=claim.runs, looks=total)  # fmt: skip
    comparisons = [claim.comparisons(table.loc[list(procedure.seeds_at(k))]) for k in reached]
    per_look = [[c.test for c in look_comparisons] for look_comparisons in comparisons]
    outcome, look = decide.sequential_outcome(per_look, procedure)
    seeds, alpha = procedure.seeds_at(look), procedure.alpha[look]
    last = outcome == "undecided" and look + 1 == len(procedure.looks)
    paper = paper_effects or {}
    below = tuple(c.label for c in comparisons[look]
                  if last and c.label in paper and _excludes(c.test, alpha, paper[c.label]))  # fmt: skip
    against = decide.against(alpha, len(comparisons[look]))
    evidence = [_evidence_line(c, True, alpha, against, paper.get(c.label) if last else None)
                for c in comparisons[look]] if explain else []  # fmt: skip
    uncounted = sorted(shared - set(seeds))
    if uncounted and explain:
        evidence.append(f"seeds {', '.join(map(str, uncounted))} shown nowhere above and not counted "
                        f"(the procedure counts its registered seeds in order, look by look)")  # fmt: skip
    where = f"look {look + 1} of {total}, {_n_seeds(len(seeds))}, one-sided alpha {alpha:g}"
    word = OUTCOME_VERDICT[outcome]
    next_seeds: tuple[int, ...] = ()
    if outcome == "undecided" and not last:
        word, next_seeds = UNDECIDED, procedure.seeds_at(look + 1)[len(seeds):]
        where += (f": the next look adds seeds {', '.join(map(str, next_seeds))} for {', '.join(claim.runs)}; "
                  f"its undecided comparisons point {_ways(per_look[look], alpha)}")
    elif last:
        where = f"after the last look, {where}: the re-run neither supports nor contradicts it" + (
            f"; the {_level(alpha)} interval of {', '.join(below)} excludes the paper's effect" if below else
            (f"; every {_level(alpha)} interval holds the paper's effect" if paper else ""))  # fmt: skip
    return ClaimCheck(claim.claim_id, claim.statement, f"{word} ({where})", evidence, False, None, claim.runs,
                      look + 1, total, next_seeds, below)  # fmt: skip


def paper_effects(paper: pd.DataFrame) -> dict[str, float]:
    """The paper's own mean delta of every comparison of every claim (its per-seed table, paired by seed)."""
    table = wide(paper)
    shared = {claim: _shared_seeds(table, claim.runs) for claim in CLAIMS if not claim.finding}
    return {c.label: c.test.mean for claim, (why, table) in shared.items() if why is None
            for c in claim.comparisons(table)}  # fmt: skip


def check_claims(observed: pd.DataFrame, profile: str = "paper", procedure: decide.Procedure | None = None,
                 explain: bool = True, paper: dict[str, float] | None = None) -> list[ClaimCheck]:  # fmt: skip
    """Every claim from the re-run alone (decide.py's paired tests), as evidence where `profile` allows;
    the paper's claims under `procedure` where the expected set registers one (`paper`: the paper's effects,
    printed beside the interval where the last look leaves a claim undecided). A claim whose runs are
    missing, or that shares fewer than decide.MIN_SEEDS seeds, is NOT CHECKED. `explain=False` leaves the
    procedure's evidence text out (uh oc judges thousands of re-runs; the verdicts are the same)."""
    checks = []
    observed = wide(observed)
    for claim in CLAIMS:
        verdict, table = _shared_seeds(observed, claim.runs)
        if verdict is not None:
            checks.append(ClaimCheck(claim.claim_id, claim.statement, verdict, [], claim.finding, runs=claim.runs))
        elif procedure is not None and not claim.finding and evidence_at(profile, False) is None:
            checks.append(_sequential(claim, table, procedure, explain, paper))
        else:
            checks.append(_single_look(claim, table, profile))
    return checks


def _t_interval_text(deltas: pd.Series) -> str:
    ci = decide.t_interval(tuple(deltas))
    if ci is None:
        return "95% t-interval undefined (fewer than 2 seeds)"
    return f"95% t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}] ({len(deltas) - 1} df)"


def check_variants(observed: pd.DataFrame) -> list[ClaimCheck]:
    """Each variant of the re-run (uh run --set, uh sweep) as a finding against its base: per-seed paired
    deltas of ACC and F, their mean and 95% t-interval. Measured, not judged: there is no paper value."""
    checks = []
    observed_wide = wide(observed)
    for run_id in sorted(set(observed["run_id"]) - set(RUNS), key=sort_key):
        base = base_of(run_id)
        verdict, table = _shared_seeds(observed_wide, (run_id, base))
        evidence = []
        if verdict is None:
            for metric in ("acc", "forgetting"):
                deltas = table[metric, run_id] - table[metric, base]
                evidence.append(f"{run_id} - {base} {metric}: {_seeds(deltas, '+.2f')}; mean {deltas.mean():+.2f}; "
                                f"{_t_interval_text(deltas)}")  # fmt: skip
        statement = f"{run_id} against {base} ({describe(run_id)})"
        checks.append(ClaimCheck(run_id, statement, verdict or MEASURED, evidence, finding=True))
    return checks
