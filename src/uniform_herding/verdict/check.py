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

This module prints them and is the command; the pieces, each readable alone: words.py (the printed words and
exit codes), expected.py (loading and verifying an expected set), decide.py (the rules on plain numbers),
metric_verdicts.py (each metric's verdict), claim_verdicts.py (each claim's, finding's and variant's) and judge.py
(the one verdict and its exit code).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from uniform_herding.catalogue import PROFILES, RUNS, sort_key
from uniform_herding.method.config import SEEDS
from uniform_herding.runs.provenance import Made, portable
from uniform_herding.runs.results import ResultError, write_json_atomic
from uniform_herding.runs.terminal import Column, columns, fit_line, fit_table
from uniform_herding.verdict import decide
from uniform_herding.verdict.aggregate import InputError, input_options, load_input
from uniform_herding.verdict.claim_verdicts import ClaimCheck, check_variants
from uniform_herding.verdict.claims import PAPER_CLAIMS
from uniform_herding.verdict.expected import (
    Expected,
    ExpectedError,
    expected_dir_for,
    find_expected_root,
    load_expected,
)
from uniform_herding.verdict.judge import check
from uniform_herding.verdict.metric_verdicts import MetricCheck
from uniform_herding.verdict.words import EXIT_POLICY, ClaimKind, MetricKind, VerdictKind, headword, run_ids_text

BUNDLE_SOURCE = "uh.check.bundle"  # click's shared meta: the bundle a check's results were extracted from


class UnwritableReport(click.ClickException):
    """The JSON report cannot be written: exit 2, as the check did not complete (EXIT_POLICY)."""

    exit_code = 2


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


@click.command("check", epilog=EXIT_POLICY)
@input_options
@click.option(
    "--expected",
    "expected_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Expected set: a dir with tolerances.toml and the per-seed CSV it names [default: by profile].",
)
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    help="Profile of the re-run; a per-seed CSV is taken to be of it [default: the results', else paper].",
)
@click.option(
    "--json-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON report [default: <results-dir>/check_report.json; ./check_report.json for --per-seed or --bundle].",
)
@click.option(
    "--claim",
    "claim_id",
    type=click.Choice([c.claim_id for c in PAPER_CLAIMS]),
    help="One claim of the paper alone, on its run IDs alone: its verdict and, while undecided, its own next "
    "look (next_step never names the other run IDs). Never the badge: EXPECTED SET MATCHED at best.",
)
@click.option(
    "--run-ids",
    "run_ids_option",
    metavar="IDS",
    help="Only these run IDs of the expected set, comma-separated (B0,B3): the verdict names the subset; "
    "never the badge. Without it every run ID of the set is asked for: one missing is INCOMPLETE.",
)
@click.option(
    "--bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A zip uh bundle wrote, instead of a results dir: every file verified against its SHA-256, the "
    "provenance printed, then its results checked (evidence/verify.py).",
)
@click.option(
    "--recompute",
    is_flag=True,
    help="With --bundle: evaluate R's last row of each run again on the CPU from its final state "
    "(uh bundle --with-weights); exit 2 naming any run whose recorded row differs.",
)
@click.option(
    "--data-dir",
    type=click.Path(path_type=Path),
    envvar="UH_DATA_DIR",
    default="data",
    show_default=True,
    help="With --recompute: where the runs' archive is, as for uh run. Env: UH_DATA_DIR.",
)
@click.option(
    "--wide",
    is_flag=True,
    help="Every column and line whole, however wide (else the output fits COLUMNS, "
    "120 where unset: the TOST text left out first, then the Welch interval under its row, long lines "
    "wrapped). The JSON report holds every field either way.",
)
def check_command(
    results_dir: Path | None,
    per_seed: Path | None,
    expected_dir: Path | None,
    profile: str | None,
    json_out: Path | None,
    claim_id: str | None,
    run_ids_option: str | None,
    bundle: Path | None = None,
    recompute: bool = False,
    data_dir: Path = Path("data"),
    wide: bool = False,
) -> None:
    """Compare a re-run with expected_results/ metric by metric, then check the paper's claims C1-C5
    and the findings C6-C8 beyond the paper (r1-r3; reported, never gating); variants against their base."""
    if run_ids_option is not None and claim_id is not None:
        raise InputError("give --run-ids or --claim, not both: --claim checks its claim's run IDs alone")
    if bundle is not None or recompute:
        from uniform_herding.evidence.verify import check_bundle

        ctx = click.get_current_context()
        if bundle is None:
            raise click.UsageError("--recompute goes with --bundle: uh check --bundle FILE.zip --recompute")
        given = [
            f"--{k.replace('_', '-')}"
            for k in ("results_dir", "per_seed")
            if ctx.params.get(k) is not None and ctx.get_parameter_source(k) != ParameterSource.ENVIRONMENT
        ]
        if given:
            raise click.UsageError(f"give --bundle or {given[0]}, not both")
        ctx.meta[BUNDLE_SOURCE] = f"--bundle {bundle}"  # the source the check names, not the temporary directory
        recomputed = named_run_ids(run_ids_option) if recompute else ()
        check_bundle(
            bundle,
            recompute,
            data_dir,
            recomputed,
            columns(wide),
            lambda results: ctx.invoke(
                check_command,
                results_dir=results,
                expected_dir=expected_dir,
                profile=profile,
                json_out=json_out or Path("check_report.json"),
                claim_id=claim_id,
                run_ids_option=run_ids_option,
                wide=wide,
            ),
            click.echo,
        )
        return  # the check exits with its verdict's code; a bundle's never goes on to ./results
    width = columns(wide)

    def echo(*lines: str) -> None:
        click.echo("\n".join(fit_lines(lines, width)))

    observed, run_profile, made = load_input(results_dir, per_seed)
    if profile and run_profile and profile != run_profile:
        raise InputError(f"the results are from profile {run_profile!r}, not --profile {profile!r}")
    given = profile or run_profile  # what the user or the results say, if anything
    profile = given or "paper"
    source = click.get_current_context().meta.get(BUNDLE_SOURCE) or (
        f"--per-seed {per_seed}" if per_seed else f"--results-dir {results_dir or Path('results')}"
    )
    json_out = json_out or (
        Path("check_report.json") if per_seed else (results_dir or Path("results")) / "check_report.json"
    )
    try:
        if expected_dir is None:
            root = find_expected_root([Path.cwd(), Path(__file__).resolve().parent])
            expected_dir = expected_dir_for(profile, root)
            if not (expected_dir / "tolerances.toml").is_file():  # a state to report, not an error
                line = (
                    f"{VerdictKind.INCOMPLETE.value} (no expected set for profile {profile}: "
                    f"{expected_dir / 'tolerances.toml'} does not exist; uh aggregate and uh report show the "
                    "numbers)"
                )
                code = VerdictKind.INCOMPLETE.code
                echo(f"re-run {source} (profile {profile})", f"verdict: {line} -> exit {code}")
                incomplete = {"source": _recorded(source), "profile": profile, "verdict": line, "exit_code": code}
                _write_report(json_out, incomplete, code)
                click.get_current_context().exit(code)
        expected = load_expected(expected_dir)
    except (ExpectedError, ResultError) as e:
        raise InputError(str(e)) from None
    if given and given != expected.profile:
        raise InputError(f"re-run profile {profile!r} but {expected_dir} holds profile {expected.profile!r}")
    claim = next((c for c in PAPER_CLAIMS if c.claim_id == claim_id), None)
    run_ids = subset(run_ids_option, expected)
    checked = check(expected, observed, claim=claim, run_ids=run_ids, made=made)
    metrics, claims, verdict = checked.metrics, checked.claims, checked.verdict
    if metrics and all(m.kind is MetricKind.NO_EXPECTATION for m in metrics):
        raise InputError(f"no run ID of the re-run has expected values in {expected_dir}")
    variants = [] if claim else check_variants(observed)

    paper_claims, findings = [c for c in claims if not c.finding], [c for c in claims if c.finding]
    echo(f"re-run {source} (profile {expected.profile}) vs expected {expected.describe()}")
    gating = ", ".join(expected.gate)
    click.echo(
        "\n".join(
            [*format_metrics(metrics, width), "", *format_claims(claims, width), *format_variants(variants, width), ""]
        )
    )
    echo(
        f"metrics: {tally(m.kind for m in metrics)} ({gating} gate); "
        f"claims: {tally(c.kind for c in paper_claims)} "
        f"({'gate' if expected.gate_claims else 'do not gate'} the exit code); "
        f"findings beyond the paper: {tally(c.kind for c in findings)} (never gate)"
        + (
            f"; variants: {sum(c.kind is ClaimKind.MEASURED for c in variants)} measured, "
            f"{sum(c.kind is not ClaimKind.MEASURED for c in variants)} not checked (never gate)"
            if variants
            else ""
        )
    )
    if made.causes:
        click.echo("\n".join(format_made(made, expected.profile, width)))
    echo(f"verdict: {verdict.line} -> exit {verdict.code}")

    report: dict[str, Any] = {  # no absolute path of the machine: a bundle carries the report
        "source": _recorded(source),
        "profile": expected.profile,
        "expected_dir": portable(expected_dir, Path.cwd()),
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
        "claim": claim_id,
        "run_ids": list(run_ids) or None,
        "verdict": verdict.line,
        "next_step": verdict.next_step,
        "state": checked.state.to_dict(),
        "metrics": [m.to_dict() for m in metrics],
        "claims": [c.to_dict() for c in claims],
        "variants": [c.to_dict() for c in variants],
        "exit_code": verdict.code,
    }
    _write_report(json_out, report, verdict.code)
    echo(f"wrote {json_out}")
    click.get_current_context().exit(verdict.code)


def _recorded(source: str) -> str:
    """The checked input as the JSON report records it: its path `portable` against the working folder (a bundle
    carries its sender's report)."""
    option, _, path = source.partition(" ")
    return f"{option} {portable(path, Path.cwd())}"


def _write_report(path: Path, report: dict[str, Any], code: int) -> None:
    try:
        write_json_atomic(path, report)
    except OSError as e:
        raise UnwritableReport(
            f"cannot write {path} ({e.strerror or e}); the verdicts above stand (exit {code}) but are not "
            "saved; pass a writable --json-out"
        ) from None
