"""The words `uh check` prints and its exit codes, one per state (EXIT_POLICY, `uh check --help`'s epilog).

Grep for them; expected_results/README.md maps each to its rule and to ACM's terms. Imported by every other module
of the check (expected.py excepted), by oc.py and by report/.
"""

from __future__ import annotations

# The printed words (grep for them; expected_results/README.md maps each to its rule and to ACM's terms).
REPLICATED, NOT_REPLICATED = "REPLICATED", "NOT REPLICATED"
NO_EXPECTATION = "NOT CHECKED (no expected values)"
NO_PAPER_VALUE = "NOT CHECKED (no paper value: beyond the paper)"
MEASURED = "MEASURED (no paper value)"
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
NOT_EVIDENCE = "NOT EVIDENCE"
RESULTS_REPLICATED, RESULTS_NOT_REPLICATED = "RESULTS REPLICATED", "NOT REPLICATED"
# UNDECIDED: a look left a claim undecided, with looks to come (the verdict's word, and the claim's);
# INCONCLUSIVE: the procedure's last look left it undecided.
INCOMPLETE, UNDECIDED = "INCOMPLETE", "UNDECIDED"
SET_MATCHED = "EXPECTED SET MATCHED"  # every rule passed against a set other than the shipped paper set: no badge
PIPELINE_PASSED, PIPELINE_FAILED = "PIPELINE CHECK PASSED", "PIPELINE CHECK FAILED"
OUTCOME_VERDICT = {"supports": SUPPORTED, "contradicts": NOT_SUPPORTED, "undecided": INCONCLUSIVE}
NOT_CHECKED = "NOT CHECKED"

# The exit codes, one per state, so that a script can tell them apart.
EXIT_PASSED, EXIT_FAILED, EXIT_INPUT, EXIT_INCOMPLETE, EXIT_UNDECIDED, EXIT_INCONCLUSIVE = 0, 1, 2, 3, 4, 5
EXIT_MATCHED = 6
EXIT_POLICY = (
    "Exit code: 0 RESULTS REPLICATED (the shipped paper set only) or PIPELINE CHECK PASSED (other "
    "profiles); 1 NOT REPLICATED or PIPELINE CHECK FAILED (a gating metric beyond its tolerance, or, where the "
    "set gates on claims, a claim NOT SUPPORTED); 2 unusable or mismatched inputs, or a JSON report that "
    "cannot be written; 3 INCOMPLETE (nothing failed, but runs, or an expected set, are missing: next_step "
    "names the runs); 4 UNDECIDED (nothing failed, a claim needs the procedure's next look: run next_step, "
    "e.g. ./reproduce.sh next, and check again); 5 INCONCLUSIVE (nothing failed, the procedure's last look "
    "left a claim undecided: no badge); 6 EXPECTED SET MATCHED (every rule passed against a set of profile "
    "paper that is not the shipped one: no badge). Findings C6-C8 (beyond the paper) and variants (uh run "
    "--set, uh sweep) never change it."
)
