"""The one verdict of `uh check` and its exit code (EXIT_POLICY), from the procedure's state, the metric verdicts
and the claims: kinds and data only, never their words.

In ACM's terms (artifact badges v1.1): on the paper profile NOT REPLICATED, INCOMPLETE (with the runs and seeds
missing), UNDECIDED (with the next look's runs and seeds), INCONCLUSIVE, EXPECTED SET MATCHED or RESULTS
REPLICATED, the badge, with the shipped paper set and results made by this checkout's code only (never for a claim
alone or a subset of run IDs); on other profiles a pipeline check, INCOMPLETE like the paper's while run IDs of its
set are missing. Findings C6-C8 and variants never change it. `checked_now`: the same decision on a results dir as it
stands, for the commands that follow a re-run (uh status, the Slurm chain's controller).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pandas as pd

from uniform_herding.runs.provenance import Made
from uniform_herding.verdict import decide
from uniform_herding.verdict.aggregate import InputError, load_input
from uniform_herding.verdict.claim_verdicts import ClaimCheck, check_claims
from uniform_herding.verdict.claims import CLAIMS, PAPER_CLAIMS, Claim, not_evidence, paper_effects
from uniform_herding.verdict.expected import (
    Expected,
    ExpectedError,
    expected_dir_for,
    find_expected_root,
    load_expected,
)
from uniform_herding.verdict.metric_verdicts import MetricCheck, check_metrics
from uniform_herding.verdict.procedure import State, replay, single_look
from uniform_herding.verdict.words import ClaimKind, MetricKind, VerdictKind, run_ids_text, seeds_text


@dataclass(frozen=True)
class Cause:
    """One thing that decided a verdict short of a pass, as check_report.json's `causes` lists it and uh oc counts it
    (its text: "B3 acc NOT REPLICATED", "C1 INCONCLUSIVE"). `state`: a metric's or a claim's kind by name (MetricKind,
    ClaimKind: with `run_id` and `metric`, or `claim_id`), else what left the verdict short: SEEDS_MISSING (a run
    ID's `seeds` the pending look asks for), TOO_FEW_SEEDS, NO_EXPECTED_SET, CLAIM_ALONE, SUBSET (`run_ids`),
    NOT_SHIPPED_SET, NO_CODE_RECORDED (a per-seed CSV), NOT_THIS_CODE. `final`: a metric's, whether it is judged on
    the seeds it ends with (procedure.State.final; False: its miss waits for a look to come)."""

    state: str
    run_id: str | None = None
    metric: str | None = None
    claim_id: str | None = None
    seeds: tuple[int, ...] = ()
    run_ids: tuple[str, ...] = ()
    final: bool | None = None

    @classmethod
    def of_metric(cls, m: MetricCheck) -> Cause:
        return cls(m.kind.name, run_id=m.run_id, metric=m.metric, final=m.final)

    @classmethod
    def of_claim(cls, c: ClaimCheck) -> Cause:
        return cls(c.kind.name, claim_id=c.claim_id)

    def __str__(self) -> str:
        kinds = (
            MetricKind if self.metric else ClaimKind if self.claim_id and self.state in ClaimKind.__members__ else None
        )
        said = kinds[self.state].value if kinds else self.state
        return " ".join(str(part) for part in (self.claim_id, self.run_id, self.metric, said) if part)

    def to_dict(self) -> dict[str, Any]:
        """The fields that say something: check_report.json's verdict's `causes`."""
        return {
            name: list(value) if isinstance(value, tuple) else value
            for name, value in asdict(self).items()
            if value not in (None, ())
        }


@dataclass(frozen=True)
class Verdict:
    """The one verdict: its kind (and so its exit code), why, as printed, and where runs are missing or a look
    left a claim undecided, the next step: {"run_ids": [...], "seeds": [...]} (empty when nothing more would
    help). `causes`: what decided it short of a pass, one each (Cause); none for a pass."""

    kind: VerdictKind
    why: tuple[str, ...]
    next_step: dict[str, list[Any]]
    causes: tuple[Cause, ...] = ()

    @property
    def code(self) -> int:
        return self.kind.code

    @property
    def line(self) -> str:
        return f"{self.kind.value} ({'; '.join(self.why)})" if self.why else self.kind.value


def _waits(m: MetricCheck, state: State) -> str:
    """A gating metric's miss that is not final: what it waits for."""
    head = f"{m.run_id} {m.metric} outside its tolerance on {m.n_observed} seeds"
    missing = state.missing(m.run_id)
    if missing:  # look 1's seeds are all there (a metric needs 3): a later look asked for these
        return f"{head}, decided on the next look's seeds ({seeds_text(missing)})"
    return f"{head}, not final while {', '.join(state.waiting_on(m.run_id))} can ask for more of its seeds"


def _gaps(state: State) -> dict[str, tuple[int, ...]]:
    """Each run ID the pending look misses, with the seeds of that look it lacks."""
    look = state.pending_look
    return {r: tuple(s for s in state.missing(r) if state.look_of(s) == look) for r in state.next_step["run_ids"]}


def _missing_text(state: State) -> str:
    """What INCOMPLETE names: every run ID the pending look misses, those with none of look 1's seeds as missing run
    IDs, the others with the seeds they miss; and, where those run IDs have other seeds, that those are shown and
    never counted."""
    look = state.pending_look
    gaps: dict[tuple[int, ...], list[str]] = {}  # the seeds of the look a run ID misses -> those run IDs
    for run_id, seeds in _gaps(state).items():
        gaps.setdefault(seeds, []).append(run_id)
    text = "; ".join(
        f"{len(runs)} of {len(state.asked)} run IDs missing: {run_ids_text(runs)}"
        if look == 0 and seeds == state.procedure.seeds_at(0)
        else f"seeds {seeds_text(seeds)} missing for {run_ids_text(runs)}"
        for seeds, runs in gaps.items()
    )
    if look:
        text = f"look {look + 1} of {len(state.procedure.looks)} interrupted: {text}"
    others = sorted({s for r in state.next_step["run_ids"] for s in state.uncounted(r)})
    if others:
        text += f" (their seeds {seeds_text(others)} are shown, never counted for the badge)"
    return text


def _incomplete(state: State, head: tuple[str, ...], waits: list[MetricCheck]) -> Verdict:
    """INCOMPLETE while a look begun (look 1 always is) misses runs: each named, with the seeds it lacks."""
    missing = tuple(Cause("SEEDS_MISSING", run_id=r, seeds=seeds) for r, seeds in _gaps(state).items())
    why = (*head, _missing_text(state), *(_waits(m, state) for m in waits))
    return Verdict(VerdictKind.INCOMPLETE, why, state.next_step, (*missing, *(Cause.of_metric(m) for m in waits)))


def _scope(expected: Expected, alone: Claim | None, subset: tuple[str, ...]) -> str:
    """What a check asked for less than the whole set covered: one claim alone, or a subset of its run IDs."""
    if alone is not None:
        return f"{alone.claim_id} alone, on {', '.join(alone.runs)}"
    return f"subset {run_ids_text(subset)} of {len(expected.run_ids)} run IDs" if subset else ""


def _misses(metrics: list[MetricCheck]) -> list[MetricCheck]:
    """The gating metrics beyond their tolerance."""
    return [m for m in metrics if m.gating and m.kind is MetricKind.NOT_REPLICATED]


def _pipeline(
    expected: Expected, state: State, metrics: list[MetricCheck], claims: list[ClaimCheck], scope: str
) -> Verdict:
    """Profiles other than the paper's: a check of the pipeline, never evidence about the paper. It passes only with
    every run asked for there (every run ID of the set, or of the subset `scope` names, on the set's seeds): until
    then INCOMPLETE, naming them, with next_step. Where the set rehearses a procedure (check), its looks are
    followed as on the paper: INCOMPLETE or UNDECIDED with next_step."""
    head = f"profile {expected.profile}" + (f", {scope}" if scope else "")
    failed = [Cause.of_metric(m) for m in _misses(metrics)]
    failed += [Cause.of_claim(c) for c in claims if c.kind in (ClaimKind.NOT_SUPPORTED, ClaimKind.INCONCLUSIVE)]
    if failed:
        return Verdict(VerdictKind.PIPELINE_FAILED, (head, *map(str, failed)), {}, tuple(failed))
    step = state.next_step
    if step and state.interrupted:
        return _incomplete(state, (head,), [])
    if step:
        open_ = [(c, s) for c, s in state.claims.items() if not s.settled]
        waiting = [f"{c} undecided at look {s.reached} of {s.total}" for c, s in open_]
        todo = f"next: seeds {seeds_text(step['seeds'])} of {', '.join(step['run_ids'])}, then check again"
        why = (f"{head}, rehearsing the registered procedure", *waiting, f"{todo} (./reproduce.sh next)")
        return Verdict(VerdictKind.UNDECIDED, why, step, tuple(Cause("UNDECIDED", claim_id=c) for c, _ in open_))
    if not any(m.gating and m.kind in (MetricKind.REPLICATED, MetricKind.NOT_REPLICATED) for m in metrics):
        why = f"no metric has {decide.MIN_SEEDS} of the expected seeds {seeds_text(expected.seeds)}"
        return Verdict(VerdictKind.INCOMPLETE, (why,), {}, (Cause("TOO_FEW_SEEDS", seeds=expected.seeds),))
    return Verdict(VerdictKind.PIPELINE_PASSED, (f"{head}: not evidence about the paper",), {})


def _undecided(
    state: State, gating: list[ClaimCheck], waits: list[MetricCheck], alone: Claim | None, subset: tuple[str, ...]
) -> Verdict:
    """UNDECIDED: the claims a look left undecided, the misses that wait, and the next look's runs, with the command
    that checks them again (as this check was asked: a claim alone, a subset, or the whole set)."""
    step = state.next_step
    undecided = [c for c in gating if c.kind is ClaimKind.UNDECIDED]
    again = (
        f"uh check --claim {alone.claim_id}"
        if alone
        else f"uh check --run-ids {','.join(subset)}"
        if subset
        else "./reproduce.sh next"
    )
    todo = f"next: seeds {seeds_text(step['seeds'])} of {', '.join(step['run_ids'])}, then check again ({again})"
    why = (
        *(f"{c.claim_id} {c.kind.value} at look {c.look} of {c.looks}" for c in undecided),
        *(_waits(m, state) for m in waits),
    )
    causes = (*map(Cause.of_claim, undecided), *(Cause.of_metric(m) for m in waits))
    return Verdict(VerdictKind.UNDECIDED, (*why, todo), step, causes)


def _inconclusive(ended: list[ClaimCheck]) -> Verdict:
    """INCONCLUSIVE: the last look left claims undecided; whether the re-run's effect is below the paper's."""
    below = [f"{c.claim_id} {label}" for c in ended for label in c.below_paper]
    tail = (
        f"no badge; the re-run's effect is below the paper's on {', '.join(below)}"
        if below
        else "no badge; the re-run's effects are consistent with the paper's, too noisy to decide"
    )
    why = (*(f"{c.claim_id} {c.verdict}" for c in ended), tail)
    return Verdict(VerdictKind.INCONCLUSIVE, why, {}, tuple(map(Cause.of_claim, ended)))


def _badge(expected: Expected, alone: Claim | None, subset: tuple[str, ...], made: Made | None) -> Verdict:
    """Every rule passed: RESULTS REPLICATED with the shipped paper set, the whole set and results all made by this
    checkout's code; else EXPECTED SET MATCHED, naming what withheld the badge."""
    if scope := _scope(expected, alone, subset):
        cause = Cause("CLAIM_ALONE", claim_id=alone.claim_id) if alone else Cause("SUBSET", run_ids=subset)
        return Verdict(
            VerdictKind.SET_MATCHED, (f"{scope}: no badge, which needs every claim and run ID",), {}, (cause,)
        )
    withheld = [] if expected.shipped else [(f"against {expected.describe()}", Cause("NOT_SHIPPED_SET"))]
    if made is not None and (why := made.withheld()):
        withheld.append((why, Cause("NOT_THIS_CODE" if made.recorded else "NO_CODE_RECORDED")))
    if withheld:
        texts = [text for text, _ in withheld]
        why = (*texts[:-1], f"{texts[-1]}: no badge")
        return Verdict(VerdictKind.SET_MATCHED, why, {}, tuple(cause for _, cause in withheld))
    return Verdict(VerdictKind.RESULTS_REPLICATED, ("ACM v1.1",), {})


def judge(
    expected: Expected,
    state: State,
    metrics: list[MetricCheck],
    claims: list[ClaimCheck],
    alone: Claim | None = None,
    subset: tuple[str, ...] = (),
    made: Made | None = None,
) -> Verdict:
    """The verdict, in ACM's terms. On the paper profile: NOT REPLICATED when a gating metric misses its tolerance on
    seeds that are final, or (the set gating on claims) a claim is NOT SUPPORTED; else INCOMPLETE while runs the
    procedure asked for are missing (look 1's, or those of a look begun); else UNDECIDED while a claim awaits its
    next look; else INCONCLUSIVE where the last look left a claim undecided; else RESULTS REPLICATED, with the
    shipped paper set only and results all made by this checkout's code (`made`, where the input's code is known:
    None judges the numbers alone, as uh oc's simulated re-runs); else EXPECTED SET MATCHED, as for one claim `alone`
    or a `subset` of its run IDs. Other profiles: a pipeline check, INCOMPLETE too while run IDs are missing.

    A metric's miss is final only when its run ID has every seed asked of it and no comparison that reads it can
    still ask for more (procedure.State.final); until then it is shown and waits. So each metric is judged
    once, on the seeds it ends with, and the family's alpha holds over the whole procedure."""
    gating = [c for c in claims if not c.finding and c.claim_id in state.gating]
    if expected.profile != "paper":
        return _pipeline(expected, state, metrics, gating, _scope(expected, alone, subset))
    waits = [m for m in _misses(metrics) if not m.final]
    failed = [Cause.of_metric(m) for m in _misses(metrics) if m.final]
    failed += [Cause.of_claim(c) for c in gating if c.kind is ClaimKind.NOT_SUPPORTED]
    if failed:
        return Verdict(
            VerdictKind.NOT_REPLICATED, (*map(str, failed), *(_waits(m, state) for m in waits)), {}, tuple(failed)
        )
    if state.next_step and state.interrupted:
        return _incomplete(state, (), waits)
    if state.next_step:
        return _undecided(state, gating, waits, alone, subset)
    unchecked = [c for c in gating if c.kind is ClaimKind.NOT_CHECKED]
    if unchecked:  # a set of fewer seeds than a claim needs
        why = tuple(f"{c.claim_id} {c.verdict}" for c in unchecked)
        return Verdict(VerdictKind.INCOMPLETE, why, {}, tuple(map(Cause.of_claim, unchecked)))
    ended = [c for c in gating if c.kind is ClaimKind.INCONCLUSIVE]
    return _inconclusive(ended) if ended else _badge(expected, alone, subset, made)


@dataclass(frozen=True)
class Checked:
    """Everything `uh check` decides on a re-run against an expected set: the procedure's state, the metric
    verdicts, the claims and the one verdict."""

    state: State
    metrics: list[MetricCheck]
    claims: list[ClaimCheck]
    verdict: Verdict


def check(
    expected: Expected,
    observed: pd.DataFrame,
    explain: bool = True,
    claim: Claim | None = None,
    run_ids: tuple[str, ...] = (),
    made: Made | None = None,
) -> Checked:
    """The procedure's state replayed from `observed` (the set's [procedure], else one look at its own seeds), then
    the metrics on the seeds it counts, the claims off it, and the verdict. `claim`: one claim of the paper alone,
    on its run IDs alone (its own looks, never the other run IDs; no badge). `run_ids`: a subset of the set's run
    IDs alone: the set's others are left out of the re-run (run IDs it does not hold stay, judged by nothing), and
    only the claims within the subset are followed; no badge. `made`: which results this checkout's code did not
    make (none of them gets the badge). `explain=False` leaves the claims' evidence text out (uh oc judges thousands
    of re-runs; the verdicts are the same)."""
    plan = expected.procedure or single_look(expected.seeds)
    evidence = not_evidence(expected.profile, False) is None
    subset = claim.runs if claim else run_ids
    runs = subset or expected.run_ids
    if claim:
        observed = observed[observed["run_id"].isin(claim.runs)]
    elif run_ids:
        observed = observed[observed["run_id"].isin(run_ids) | ~observed["run_id"].isin(expected.per_seed["run_id"])]
    claims = (claim,) if claim else PAPER_CLAIMS
    within = tuple(c for c in claims if set(c.runs) <= set(runs))
    # A set of another profile that registers a procedure and gates on its claims rehearses the procedure: its looks
    # are followed for the claims whose run IDs the set holds, as a check of the pipeline (a cluster's chain, say);
    # those claims stay NOT EVIDENCE about the paper, and decide nothing but the looks.
    rehearsal = not evidence and expected.procedure is not None and expected.gate_claims
    followed = (within if subset else claims) if evidence else within if rehearsal else ()
    state = replay(observed, plan, runs, followed, gating=bool(followed) and expected.gate_claims)
    paper = paper_effects(expected.per_seed) if explain and evidence else None
    checks = check_claims(
        observed, expected.profile, state, expected.procedure is not None, explain, paper, claims if claim else CLAIMS
    )
    metrics = check_metrics(expected, observed, state)
    return Checked(state, metrics, checks, judge(expected, state, metrics, checks, claim, run_ids, made))


def checked_now(results_dir: Path) -> tuple[Expected, Checked]:
    """The expected set of the results' profile (found as uh check finds it) and uh check's decision on the results
    done so far; InputError (exit 2, as uh check) where either cannot be read."""
    observed, profile, made = load_input(results_dir, None)
    try:
        expected = load_expected(
            expected_dir_for(profile or "paper", find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
        )
    except ExpectedError as e:
        raise InputError(str(e)) from None
    return expected, check(expected, observed, explain=False, made=made)
