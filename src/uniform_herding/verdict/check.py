"""`uh check`: does a re-run replicate expected_results/? Per-metric verdicts, the paper's claims, one verdict.

The words are ACM's (artifact badges v1.1): this artifact is an independent implementation, not the
authors' code, so a re-run that lands on the paper's numbers has "Results Replicated". The decision
rules are in decide.py; expected_results/README.md states them once for reviewers, with the mapping of
every printed word.

A metric is REPLICATED when the re-run's mean over the expected set's own seeds is within the
pre-registered tolerance of the expected mean, else NOT REPLICATED; other seeds are shown, never counted.
The Welch interval and the equivalence test beside it are information only. The paper's claims C1-C5 are
decided from the re-run alone by paired one-sided t-tests, only at the paper's protocol (elsewhere they
are NOT EVIDENCE), and on the paper's set by its pre-registered sequential procedure: where a look cannot
decide, the verdict is UNDECIDED and `next_step` names the run IDs and the registered seeds of the next
look. Findings C6-C8 (the refresh isolation, run IDs r1-r3, beyond the paper) are decided on all shared
seeds but never change the exit code; each variant (`uh run --set`, `uh sweep`) is measured against its
base run ID, never judged. Only the shipped paper set (checked by its SHA-256) can print the badge.

This module decides a check once (`check_report`, a CheckReport) and says it: the printed lines and the JSON
report both read that object (commands/check.py is the command). The pieces, each readable alone: words.py (the
printed words and exit codes), expected.py (loading and verifying an expected set), decide.py (the rules on plain
numbers), metric_verdicts.py (each metric's verdict), claim_verdicts.py (each claim's, finding's and variant's) and
judge.py (the one verdict, its causes and its exit code).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from uniform_herding.catalogue import RUNS, sort_key
from uniform_herding.errors import UhError
from uniform_herding.method.config import SEEDS
from uniform_herding.runs.provenance import Made, portable
from uniform_herding.runs.results import ResultError, write_json_atomic
from uniform_herding.runs.terminal import Column, fit_line, fit_table
from uniform_herding.verdict import decide
from uniform_herding.verdict.aggregate import InputError, load_input
from uniform_herding.verdict.claim_verdicts import ClaimCheck, check_variants
from uniform_herding.verdict.claims import PAPER_CLAIMS
from uniform_herding.verdict.expected import (
    Expected,
    ExpectedError,
    expected_dir_for,
    find_expected_root,
    load_expected,
)
from uniform_herding.verdict.judge import Cause, Checked, Verdict, check
from uniform_herding.verdict.metric_verdicts import MetricCheck
from uniform_herding.verdict.words import ClaimKind, MetricKind, VerdictKind, headword, run_ids_text


class UnwritableReport(UhError):
    """The JSON report cannot be written: exit 2, as the check did not complete (EXIT_POLICY)."""


def _num(x: float | None, fmt: str) -> str:
    """x to fmt's decimals, "-" for none; a value that rounds to zero prints as 0.00, never -0.00."""
    places = int(fmt.rsplit(".", 1)[1].rstrip("f")) if "." in fmt else 2
    return "-" if x is None else f"{round(x, places) + 0.0:{fmt}}"


def _beside(difference: float | None, tolerance: float) -> tuple[str, str]:
    """The difference and its tolerance, at 2 decimals, or at as many more (up to decide.DECIMALS) as it
    takes to show why the verdict is what it is: +2.60 never beside a tolerance of 2.60 it missed."""
    places = 2
    if difference is not None:
        while (
            places < decide.DECIMALS
            and round(abs(difference), decide.DECIMALS) != tolerance
            and f"{abs(difference):.{places}f}" == f"{tolerance:.{places}f}"
        ):
            places += 1
    return _num(difference, f"+.{places}f"), f"{tolerance:.{places}f}"


def fit_lines(lines: Iterable[str], width: int | None) -> list[str]:
    """Each line wrapped to `width` (terminal.fit_line; None: as they are), as one list of lines."""
    return [part for line in lines for part in fit_line(line, width).splitlines() or [""]]


def format_metrics(checks: list[MetricCheck], width: int | None = None) -> list[str]:
    """One row per metric, no wider than `width` where the kept columns allow (None: every column): the TOST
    equivalence text goes first, then the Welch interval moves under its row; both are information only."""
    verdicts = [c.verdict if c.gating or c.expected_mean is None else f"{c.verdict} (not gating)" for c in checks]
    verdicts = [
        f"{v} (not final: waits)" if c.kind is MetricKind.NOT_REPLICATED and not c.final else v
        for c, v in zip(checks, verdicts, strict=True)
    ]
    beside = [_beside(c.difference, c.tolerance) for c in checks]
    table = [
        Column("run", [c.run_id for c in checks], "<", width=3),
        Column("metric", [c.metric for c in checks], "<", width=10),
        Column("expected", [_num(c.expected_mean, "8.2f") for c in checks], width=8),
        Column("observed", [_num(c.observed_mean, "8.2f") for c in checks], width=8),
        Column("diff", [difference for difference, _ in beside], width=7),
        Column("tol", [tolerance for _, tolerance in beside], width=5),
        Column("verdict", verdicts, "<", gap=2, width=27),  # a long NOT CHECKED (...) widens the column
        Column("seeds", [f"{c.n_expected:>2}/{c.n_observed:<2}" for c in checks], width=5),
        Column(
            "Welch 95% CI of diff",
            ["" if c.difference is None else c.welch_text() for c in checks],
            "<",
            fit="wrap",
            gap=2,
            width=21,
        ),
        Column(
            "equivalence at the tolerance (TOST, information)", [c.equivalence_text() for c in checks], "<", fit="drop"
        ),
    ]
    lines = fit_table(table, width)
    uncounted = sorted({(c.run_id, s) for c in checks for s in c.uncounted})
    if uncounted:
        lines += fit_lines(
            ["not counted (not asked for by the procedure): " + ", ".join(f"{r} seed {s}" for r, s in uncounted)], width
        )
    return lines


def format_variants(checks: list[ClaimCheck], width: int | None = None) -> list[str]:
    if not checks:
        return []
    lines = ["variants against their base (no paper value: measured, not judged; they never change the exit code):"]
    for c in checks:
        lines.append(f"{c.statement}: {c.verdict}")
        lines.extend(f"     {e}" for e in c.evidence)
    return fit_lines(lines, width)


CLAIMS_HEADER = (
    f"claims of the paper, from the re-run alone (paired by seed; one-sided paired t-tests, 5% in "
    f"all, at least {decide.MIN_SEEDS} shared seeds):"
)
FINDINGS_HEADER = "findings beyond the paper (no paper value; decided alike; they never change the exit code):"


def format_claims(checks: list[ClaimCheck], width: int | None = None) -> list[str]:
    lines = [CLAIMS_HEADER]
    for c in checks:
        if c.finding and FINDINGS_HEADER not in lines:
            lines.append(FINDINGS_HEADER)
        lines.append(f"{c.claim_id} {c.verdict}: {c.statement}")
        lines.extend(f"     {e}" for e in c.evidence)
    return fit_lines(lines, width)


def format_made(made: Made, profile: str, width: int | None = None) -> list[str]:
    """Provenance in one voice: one line per result, or group of results with the same causes, that is not plainly
    this checkout's code's, with all its causes (other code, a modified tree, code not hashed, tasks under other
    code, a setting that changes numbers left at another value), each run ID's seeds together in the paper's order,
    or "all N results"; then one line saying what that means on `profile`."""
    if not made.causes:
        return []
    lines = [f"provenance: results not plainly made by the checking code ({made.this[:12]}...), with every cause:"]
    groups = sorted(made.grouped().items(), key=lambda group: min(map(_paper_order, group[1])))
    lines += [f"  {_pairs_text(pairs, made.read)}: {'; '.join(causes)}" for causes, pairs in groups]
    return fit_lines([*lines, f"  {made_meaning(made, profile)}"], width)


def made_meaning(made: Made, profile: str) -> str:
    """What the results' provenance means for the verdict on `profile` (judge.py decides it; this says it)."""
    if profile != "paper":
        return f"on profile {profile}: this changes no verdict (only the paper profile has a badge)"
    costs = "; the settings that change numbers cost nothing" if made.settings else ""
    if why := made.withheld():
        return f"on the paper profile: no badge ({why}){costs}"
    return "on the paper profile: the settings that change numbers cost nothing: the badge is decided as for the rest"


def _paper_order(pair: tuple[str, int]) -> tuple[Any, ...]:
    """A result's place in the order the paper lists run IDs and seeds."""
    return sort_key(pair[0]), SEEDS.index(pair[1]) if pair[1] in SEEDS else len(SEEDS), pair[1]


def _pairs_text(pairs: Iterable[tuple[str, int]], read: int) -> str:
    """Results as uh check names them: each run ID's seeds together, in the order the paper lists them, or "all N
    results" where they are all `read` of the input's."""

    pairs = sorted(pairs, key=_paper_order)
    if len(pairs) == read > 1:
        return f"all {read} results"
    seeds: dict[str, list[int]] = {}
    for run_id, seed in pairs:
        seeds.setdefault(run_id, []).append(seed)
    return "; ".join(f"{r} seed{'s' if len(s) > 1 else ''} {', '.join(map(str, s))}" for r, s in seeds.items())


def tally(kinds: Iterable[MetricKind | ClaimKind]) -> str:
    """'35 REPLICATED, 1 NOT REPLICATED': each kind's word with its count, in first-seen order."""
    counts = Counter(map(headword, kinds))
    return ", ".join(f"{n} {word}" for word, n in counts.items()) or "none"


def named_run_ids(option: str | None) -> tuple[str, ...]:
    """--run-ids as known run IDs, in RUNS order (() without it); InputError for none or an unknown one."""
    if option is None:
        return ()
    named = [r.strip() for r in option.split(",") if r.strip()]
    if not named:
        raise InputError(f"--run-ids {option!r} names no run ID; give them comma-separated, e.g. --run-ids B0,B3")
    unknown = [r for r in named if r not in RUNS]
    if unknown:
        raise InputError(f"--run-ids: unknown run ID {unknown[0]!r}; known: {', '.join(RUNS)} (see `uh list`)")
    return tuple(r for r in RUNS if r in named)


def subset(option: str | None, expected: Expected) -> tuple[str, ...]:
    """--run-ids as run IDs of the expected set (named_run_ids); InputError for one it does not hold."""
    named = named_run_ids(option)
    outside = [r for r in named if r not in set(expected.per_seed["run_id"])]
    if outside:
        raise InputError(
            f"--run-ids: {', '.join(outside)} not in the expected set {expected.directory}, which holds "
            f"{run_ids_text(dict.fromkeys(expected.per_seed['run_id']))}"
        )
    return named


@dataclass(frozen=True)
class CheckReport:
    """Everything `uh check` says of one input, decided once: the printer (`report_lines`) and the JSON report
    (`report_json`) both read it. `source`: the input as the user named it (--per-seed, --results-dir, --bundle);
    `expected` None where the profile has no expected set (`expected_dir` is where it was looked for: INCOMPLETE);
    `checked`: the procedure's state, the metric table, the claims and the verdict; `variants`: each variant against
    its base (none for one claim alone)."""

    source: str
    profile: str
    made: Made
    expected_dir: Path
    verdict: Verdict
    expected: Expected | None = None
    checked: Checked | None = None
    variants: list[ClaimCheck] = field(default_factory=list)
    claim_id: str | None = None
    run_ids: tuple[str, ...] = ()

    @property
    def metrics(self) -> list[MetricCheck]:
        return self.checked.metrics if self.checked else []

    @property
    def claims(self) -> list[ClaimCheck]:
        return self.checked.claims if self.checked else []


def check_report(
    results_dir: Path | None,
    per_seed: Path | None,
    expected_dir: Path | None = None,
    profile: str | None = None,
    claim_id: str | None = None,
    run_ids_option: str | None = None,
    source: str | None = None,
) -> CheckReport:
    """`uh check` on a results dir or a per-seed CSV (`source` names it where it came from elsewhere: a bundle)
    against `expected_dir` (default: the set of the results' profile, else `profile`, else the paper's); `claim_id`
    one claim alone, `run_ids_option` a subset of the set's run IDs. InputError for inputs that cannot be used."""
    observed, run_profile, made = load_input(results_dir, per_seed)
    if profile and run_profile and profile != run_profile:
        raise InputError(f"the results are from profile {run_profile!r}, not --profile {profile!r}")
    given = profile or run_profile  # what the user or the results say, if anything
    profile = given or "paper"
    source = source or (f"--per-seed {per_seed}" if per_seed else f"--results-dir {results_dir or Path('results')}")
    if expected_dir is None:
        expected_dir = _default_set(profile)
        if not (expected_dir / "tolerances.toml").is_file():  # a state to report, not an error
            return CheckReport(source, profile, made, expected_dir, _no_set(profile, expected_dir))
    expected = _expected(expected_dir)
    if given and given != expected.profile:
        raise InputError(f"re-run profile {profile!r} but {expected_dir} holds profile {expected.profile!r}")
    claim = next((c for c in PAPER_CLAIMS if c.claim_id == claim_id), None)
    run_ids = subset(run_ids_option, expected)
    checked = check(expected, observed, claim=claim, run_ids=run_ids, made=made)
    if checked.metrics and all(m.kind is MetricKind.NO_EXPECTATION for m in checked.metrics):
        raise InputError(f"no run ID of the re-run has expected values in {expected_dir}")
    variants = [] if claim else check_variants(observed)
    return CheckReport(
        source, expected.profile, made, expected_dir, checked.verdict, expected, checked, variants, claim_id, run_ids
    )


def _default_set(profile: str) -> Path:
    """Where `profile`'s expected set is, under the first expected_results/ above the working folder or the
    package."""
    try:
        return expected_dir_for(profile, find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
    except ExpectedError as e:
        raise InputError(str(e)) from None


def _expected(directory: Path) -> Expected:
    """The expected set in `directory`, verified (expected.load_expected); InputError where it cannot be used."""
    try:
        return load_expected(directory)
    except (ExpectedError, ResultError) as e:
        raise InputError(str(e)) from None


def _no_set(profile: str, directory: Path) -> Verdict:
    """INCOMPLETE: `profile` has no expected set, so nothing can be checked; the numbers are still shown elsewhere."""
    why = (
        f"no expected set for profile {profile}: {directory / 'tolerances.toml'} does not exist; uh aggregate and "
        "uh report show the numbers"
    )
    return Verdict(VerdictKind.INCOMPLETE, (why,), {}, (Cause("NO_EXPECTED_SET"),))


def report_lines(report: CheckReport, width: int | None = None) -> list[str]:
    """What `uh check` prints, no wider than `width` where the kept columns allow (None: every column whole): the
    input against its set, the metric table, the claims, the variants, the tally, the provenance, the verdict."""
    verdict = f"verdict: {report.verdict.line} -> exit {report.verdict.code}"
    expected = report.expected
    if expected is None:
        return fit_lines([f"re-run {report.source} (profile {report.profile})", verdict], width)
    checks = report.claims
    return [
        *fit_lines([f"re-run {report.source} (profile {expected.profile}) vs expected {expected.describe()}"], width),
        *format_metrics(report.metrics, width),
        "",
        *format_claims(checks, width),
        *format_variants(report.variants, width),
        "",
        *fit_lines([_tally_line(report, expected)], width),
        *format_made(report.made, expected.profile, width),
        *fit_lines([verdict], width),
    ]


def _tally_line(report: CheckReport, expected: Expected) -> str:
    """How many metrics, claims, findings and variants came out each way, and which of them gate the exit code."""
    paper_claims = [c for c in report.claims if not c.finding]
    findings = [c for c in report.claims if c.finding]
    variants = report.variants
    measured = sum(c.kind is ClaimKind.MEASURED for c in variants)
    return (
        f"metrics: {tally(m.kind for m in report.metrics)} ({', '.join(expected.gate)} gate); "
        f"claims: {tally(c.kind for c in paper_claims)} "
        f"({'gate' if expected.gate_claims else 'do not gate'} the exit code); "
        f"findings beyond the paper: {tally(c.kind for c in findings)} (never gate)"
        + (f"; variants: {measured} measured, {len(variants) - measured} not checked (never gate)" if variants else "")
    )


def report_json(report: CheckReport) -> dict[str, Any]:
    """check_report.json: no absolute path of the machine, as a bundle carries the report. The verdict is one
    object: its `line` as printed, its `kind` (VerdictKind's name) and `causes` (judge.Cause: what decided it short
    of a pass)."""
    verdict = report.verdict
    decided = {
        "verdict": {
            "line": verdict.line,
            "kind": verdict.kind.name,
            "causes": [cause.to_dict() for cause in verdict.causes],
        }
    }
    head = {"source": _recorded(report.source), "profile": report.profile}
    expected, checked = report.expected, report.checked
    if expected is None or checked is None:
        return head | decided | {"exit_code": verdict.code}
    return (
        head
        | _set_fields(expected, report)
        | {"claim": report.claim_id, "run_ids": list(report.run_ids) or None}
        | decided
        | {
            "next_step": verdict.next_step,
            "state": checked.state.to_dict(),
            "metrics": [m.to_dict() for m in checked.metrics],
            "claims": [c.to_dict() for c in checked.claims],
            "variants": [c.to_dict() for c in report.variants],
            "exit_code": verdict.code,
        }
    )


def _set_fields(expected: Expected, report: CheckReport) -> dict[str, Any]:
    """What the report records of the expected set and of the code that made and checked the results."""
    made = report.made
    return {
        "expected_dir": portable(report.expected_dir, Path.cwd()),
        "expected_sha256": expected.sha256,
        "code_sha256": made.this,  # this checkout's: the checker's own, and the one its results are held to
        # the results this checkout's code did not make, by why; null for a per-seed CSV, which records no code
        "not_made_by_this_code": (
            {why: list(map(list, pairs)) for why, pairs in made.others.items()} if made.recorded else None
        ),
        # each group of results not plainly this code's with all its causes, and what that means on this profile
        "provenance": [
            {"results": list(map(list, pairs)), "causes": list(causes)} for causes, pairs in made.grouped().items()
        ],
        "provenance_meaning": made_meaning(made, expected.profile) if made.causes else None,
        # the settings that change numbers where the results differ in them or leave the profile's default
        "settings_named": {
            name: {"default": default, "values": {v: list(map(list, p)) for v, p in values.items()}}
            for name, (default, values) in made.settings.items()
        },
        "shipped_paper_set": expected.shipped,
        "tolerance": expected.tolerance if expected.rule is None else {"derive": asdict(expected.rule)},
        "gate": list(expected.gate),
        "claims_gate_exit_code": expected.gate_claims,
        "procedure": None if expected.procedure is None else asdict(expected.procedure),
    }


def _recorded(source: str) -> str:
    """The checked input as the JSON report records it: its path `portable` against the working folder (a bundle
    carries its sender's report)."""
    option, _, path = source.partition(" ")
    return f"{option} {portable(path, Path.cwd())}"


def write_report(path: Path, report: CheckReport) -> None:
    """check_report.json at `path`, atomically; UnwritableReport (exit 2) where it cannot be written."""
    code = report.verdict.code
    try:
        write_json_atomic(path, report_json(report))
    except OSError as e:
        raise UnwritableReport(
            f"cannot write {path} ({e.strerror or e}); the verdicts above stand (exit {code}) but are not "
            "saved; pass a writable --json-out"
        ) from None
