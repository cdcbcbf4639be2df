"""The one verdict of `uh check` and its exit code (EXIT_POLICY), from the metric verdicts and the claims.

In ACM's terms (artifact badges v1.1): on the paper profile NOT REPLICATED, INCOMPLETE (with the runs and seeds
missing), UNDECIDED (with the next look's runs and seeds), INCONCLUSIVE, EXPECTED SET MATCHED or RESULTS
REPLICATED, the badge, with the shipped paper set only; on other profiles a pipeline check. Findings C6-C8 and
variants never change it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd

from uniform_herding.method.config import PAPER_RUNS, RUNS
from uniform_herding.verdict import decide
from uniform_herding.verdict.claims import ClaimCheck
from uniform_herding.verdict.compare import MetricCheck
from uniform_herding.verdict.expected import Expected
from uniform_herding.verdict.words import (
    EXIT_FAILED,
    EXIT_INCOMPLETE,
    EXIT_INCONCLUSIVE,
    EXIT_MATCHED,
    EXIT_PASSED,
    EXIT_UNDECIDED,
    INCOMPLETE,
    INCONCLUSIVE,
    NOT_CHECKED,
    NOT_REPLICATED,
    NOT_SUPPORTED,
    PIPELINE_FAILED,
    PIPELINE_PASSED,
    REPLICATED,
    RESULTS_NOT_REPLICATED,
    RESULTS_REPLICATED,
    SET_MATCHED,
    UNDECIDED,
)


@dataclass(frozen=True)
class Verdict:
    """The one verdict: its word, why, its exit code (EXIT_POLICY), and where a look left a claim undecided,
    the next step: {"run_ids": [...], "seeds": [...]} (empty when nothing more would help)."""

    word: str
    why: tuple[str, ...]
    code: int
    next_step: dict[str, list[Any]]

    @property
    def line(self) -> str:
        return f"{self.word} ({'; '.join(self.why)})" if self.why else self.word


def _missing_runs(expected: Expected, observed: pd.DataFrame, claims: list[ClaimCheck]
                  ) -> tuple[list[str], dict[str, list[Any]]]:  # fmt: skip
    """What INCOMPLETE names, and its next_step: the paper run IDs lacking any of the expected seeds (those of
    the set and those the paper's claims compare), and the seeds they lack; and, where the re-run has them
    under other seeds, that those are shown and never counted."""
    have = set(zip(observed["run_id"], observed["seed"], strict=True))
    lacking: dict[str, list[int]] = {}
    needed = set(expected.per_seed["run_id"]) | {r for c in claims if c.verdict.startswith(NOT_CHECKED) for r in c.runs}
    for run_id in (r for r in PAPER_RUNS if r in needed):
        gaps = [s for s in expected.seeds if (run_id, s) not in have]
        if gaps:
            lacking[run_id] = gaps
    if not lacking:
        return [], {}
    runs = ", ".join(lacking) if len(lacking) < 6 else f"{len(lacking)} of {len(PAPER_RUNS)} paper run IDs"
    seeds = [s for s in expected.seeds if any(s in gaps for gaps in lacking.values())]
    text = f"seeds {', '.join(map(str, seeds))} missing for {runs}"
    others = sorted({s for r, s in have if r in lacking} - set(expected.seeds))
    if others:
        text += f" (their seeds {', '.join(map(str, others))} are shown, never counted for the badge)"
    return [text], {"run_ids": list(lacking), "seeds": seeds}


def _next_step(claims: list[ClaimCheck], observed: pd.DataFrame) -> dict[str, list[Any]]:
    """The runs of the earliest look that left a claim undecided, and that look's registered seeds."""
    pending = [c for c in claims if c.next_seeds]
    if not pending:
        return {}
    first = min(c.look or 0 for c in pending)
    pending = [c for c in pending if c.look == first]
    seeds = list(dict.fromkeys(s for c in pending for s in c.next_seeds))
    have = set(zip(observed["run_id"], observed["seed"], strict=True))
    runs = [r for r in RUNS if any(r in c.runs for c in pending) and any((r, s) not in have for s in seeds)]
    return {"run_ids": runs, "seeds": seeds}


def judge(expected: Expected, observed: pd.DataFrame, metrics: list[MetricCheck], claims: list[ClaimCheck]
          ) -> Verdict:  # fmt: skip
    """The verdict, in ACM's terms. On the paper profile: NOT REPLICATED when a gating metric misses its
    tolerance on its final seeds or (the set gating on claims) a claim is NOT SUPPORTED; else INCOMPLETE while
    runs of the expected seeds are missing; else UNDECIDED while a claim awaits its next look; else
    INCONCLUSIVE where the last look left a claim undecided; else RESULTS REPLICATED, with the shipped paper
    set only. Other profiles: a pipeline check.

    A metric's seeds are final unless the next look adds seeds to its run ID; until then a miss is shown and
    the next look decides it. So each metric is judged once, on the seeds it ends with, and the family's
    alpha holds over the whole procedure, not once per look (four looks would nearly quadruple it)."""
    paper_claims = [c for c in claims if not c.finding] if expected.gate_claims else []
    step = _next_step(paper_claims, observed) if expected.profile == "paper" else {}
    misses = [m for m in metrics if m.gating and m.verdict == NOT_REPLICATED]
    pending = [m for m in misses if m.run_id in step.get("run_ids", ())]
    failed = [f"{m.run_id} {m.metric} {m.verdict}" for m in misses if m not in pending]
    failed += [f"{c.claim_id} {NOT_SUPPORTED}" for c in paper_claims if c.verdict.startswith(NOT_SUPPORTED)]
    ended = [c for c in paper_claims if c.verdict.startswith(INCONCLUSIVE) and not c.next_seeds]
    if expected.profile != "paper":
        checked = [m for m in metrics if m.gating and m.verdict in (REPLICATED, NOT_REPLICATED)]
        failed += [f"{c.claim_id} {INCONCLUSIVE}" for c in ended]
        if failed:
            return Verdict(PIPELINE_FAILED, (f"profile {expected.profile}", *failed), EXIT_FAILED, {})
        if not checked:
            return Verdict(INCOMPLETE, (f"no metric has {decide.MIN_SEEDS} of the expected seeds "
                                        f"{', '.join(map(str, expected.seeds))}",), EXIT_INCOMPLETE, {})  # fmt: skip
        return Verdict(PIPELINE_PASSED, (f"profile {expected.profile}: not evidence about the paper",), EXIT_PASSED, {})
    if failed:
        return Verdict(RESULTS_NOT_REPLICATED, tuple(failed), EXIT_FAILED, {})
    missing, runs_missing = _missing_runs(expected, observed, paper_claims)
    unchecked = [f"{c.claim_id} {c.verdict}" for c in paper_claims if c.verdict.startswith(NOT_CHECKED)]
    if missing or unchecked:
        return Verdict(INCOMPLETE, tuple(missing or unchecked), EXIT_INCOMPLETE, runs_missing)
    if step:
        undecided = [f"{c.claim_id} {UNDECIDED} at look {c.look} of {c.looks}" for c in paper_claims if c.next_seeds]
        undecided += [f"{m.run_id} {m.metric} outside its tolerance on {m.n_observed} seeds, decided on the next "
                      f"look's seeds" for m in pending]  # fmt: skip
        todo = (f"next: seeds {', '.join(map(str, step['seeds']))} of {', '.join(step['run_ids'])}, "
                "then check again (./reproduce.sh next)")  # fmt: skip
        return Verdict(UNDECIDED, (*undecided, todo), EXIT_UNDECIDED, step)
    if ended:
        why = [f"{c.claim_id} {c.verdict}" for c in ended]
        below = [f"{c.claim_id} {label}" for c in ended for label in c.below_paper]
        tail = (f"no badge; the re-run's effect is below the paper's on {', '.join(below)}" if below
                else "no badge; the re-run's effects are consistent with the paper's, too noisy to decide")  # fmt: skip
        return Verdict(INCONCLUSIVE, (*why, tail), EXIT_INCONCLUSIVE, {})
    if not expected.shipped:
        return Verdict(SET_MATCHED, (f"against {expected.describe()}: no badge",), EXIT_MATCHED, {})
    return Verdict(RESULTS_REPLICATED, ("ACM v1.1",), EXIT_PASSED, {})

