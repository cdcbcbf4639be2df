"""The verdicts as types, the words `uh check` prints for them and its exit codes (EXIT_POLICY).

Every decision reads a kind (an Enum below) and the data beside it; only this module turns them into words, so
rewording a message can never change a verdict or an exit code. Grep for the words; expected_results/README.md
maps each to its rule and to ACM's terms.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from enum import Enum


class MetricKind(Enum):
    """One run ID's metric against its expected mean."""

    REPLICATED = "REPLICATED"
    NOT_REPLICATED = "NOT REPLICATED"
    NOT_CHECKED = "NOT CHECKED"  # fewer than decide.MIN_SEEDS counted seeds
    NO_EXPECTATION = "NOT CHECKED (no expected values)"
    NO_PAPER_VALUE = "NOT CHECKED (no paper value: beyond the paper)"


class ClaimKind(Enum):
    """A claim of the paper, a finding beyond it, or a variant against its base."""

    SUPPORTED = "SUPPORTED"
    NOT_SUPPORTED = "NOT SUPPORTED"
    UNDECIDED = "UNDECIDED"  # a look left it undecided, with looks to come
    INCONCLUSIVE = "INCONCLUSIVE"  # undecided after the procedure's last look (or the one look of a finding)
    NOT_CHECKED = "NOT CHECKED"  # its runs or seeds are missing
    NOT_EVIDENCE = "NOT EVIDENCE"  # not about the paper's protocol at this profile
    MEASURED = "MEASURED (no paper value)"  # a variant: measured, never judged


class VerdictKind(Enum):
    """The one verdict of `uh check`; its value is the word printed, `code` the exit code."""

    RESULTS_REPLICATED = "RESULTS REPLICATED"
    NOT_REPLICATED = "NOT REPLICATED"
    INCOMPLETE = "INCOMPLETE"
    UNDECIDED = "UNDECIDED"
    INCONCLUSIVE = "INCONCLUSIVE"
    SET_MATCHED = "EXPECTED SET MATCHED"  # every rule passed against a set other than the shipped paper set
    PIPELINE_PASSED = "PIPELINE CHECK PASSED"
    PIPELINE_FAILED = "PIPELINE CHECK FAILED"

    @property
    def code(self) -> int:
        return EXIT_CODES[self]

    @property
    def final(self) -> bool:
        """Whether more runs could change it: INCOMPLETE and UNDECIDED name the runs that would."""
        return self not in (VerdictKind.INCOMPLETE, VerdictKind.UNDECIDED)


EXIT_PASSED, EXIT_FAILED, EXIT_INPUT, EXIT_INCOMPLETE, EXIT_UNDECIDED, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4, 5
EXIT_MATCHED = 6
EXIT_CODES = {
    VerdictKind.RESULTS_REPLICATED: EXIT_PASSED,
    VerdictKind.PIPELINE_PASSED: EXIT_PASSED,
    VerdictKind.NOT_REPLICATED: EXIT_FAILED,
    VerdictKind.PIPELINE_FAILED: EXIT_FAILED,
    VerdictKind.INCOMPLETE: EXIT_INCOMPLETE,
    VerdictKind.UNDECIDED: EXIT_UNDECIDED,
    VerdictKind.INCONCLUSIVE: EXIT_INCONCLUSIVE,
    VerdictKind.SET_MATCHED: EXIT_MATCHED,
}
EXIT_POLICY = (
    "Exit code: 0 RESULTS REPLICATED (the shipped paper set only, on results made by this checkout's code) or "
    "PIPELINE CHECK PASSED (other profiles: every run ID of the set present, or of the subset --run-ids names, "
    "and every gating metric REPLICATED); 1 NOT REPLICATED or PIPELINE CHECK FAILED (a gating metric beyond its "
    "tolerance, or, where the set gates on claims, a claim NOT SUPPORTED); 2 unusable or mismatched inputs, or a "
    "JSON report that cannot be written; 3 INCOMPLETE (nothing failed, but runs, or an expected set, are missing, "
    "on any profile: the verdict names the run IDs, next_step the runs); 4 UNDECIDED (nothing failed, a claim "
    "needs the procedure's next look: run next_step, e.g. ./reproduce.sh next, and check again); 5 INCONCLUSIVE "
    "(nothing failed, the procedure's last look left a claim undecided: no badge); 6 EXPECTED SET MATCHED (every "
    "rule passed against a set of profile paper that is not the shipped one, on results not all made by this "
    "checkout's code or on a per-seed CSV, or for one claim alone, uh check --claim, or for a subset of run IDs, "
    "uh check --run-ids: no badge). Findings C6-C8 (beyond the paper) and variants (uh run --set, uh sweep) never "
    "change it."
)


def word(kind: MetricKind | ClaimKind | VerdictKind, detail: str = "") -> str:
    """A kind as printed: its word, then its detail in parentheses where there is one."""
    return f"{kind.value} ({detail})" if detail else kind.value


def headword(kind: MetricKind | ClaimKind | VerdictKind) -> str:
    """A kind's word without its standing detail: NOT CHECKED for NOT CHECKED (no expected values)."""
    return kind.value.split(" (")[0]


def seeds_text(seeds: tuple[int, ...] | list[int]) -> str:
    return ", ".join(map(str, seeds))


_NUMBERED = re.compile(r"([A-Za-z]+)(\d+)")


def run_ids_text(run_ids: Iterable[str]) -> str:
    """Run IDs in their order, each stretch of three or more that count up in one family as a range, so that every
    one is named in a short line: B0-B2, a1-a4, s1-s4, r2."""
    stretches: list[list[str]] = []
    for run_id in run_ids:
        last = _NUMBERED.fullmatch(stretches[-1][-1]) if stretches else None
        this = _NUMBERED.fullmatch(run_id)
        if last and this and last[1] == this[1] and int(this[2]) == int(last[2]) + 1:
            stretches[-1].append(run_id)
        else:
            stretches.append([run_id])
    return ", ".join(f"{s[0]}-{s[-1]}" if len(s) > 2 else ", ".join(s) for s in stretches)
