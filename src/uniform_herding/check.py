"""`uh check`: does a re-run replicate expected_results/? Per-metric verdicts, the paper's claims, one verdict.

The words are ACM's (artifact badges v1.1): this artifact is an independent implementation, not the
authors' code, so a re-run that lands on the paper's numbers has "Results Replicated". The decision
rules are in decide.py; expected_results/README.md states them once for reviewers, with the mapping of
every printed word.

A metric is REPLICATED when the re-run's mean is within the pre-registered tolerance of the expected
mean, else NOT REPLICATED; the Welch interval and the equivalence test beside it are information only.
The paper's claims C1-C5 are decided from the re-run alone by paired one-sided t-tests over the seeds
its runs share, and only at the paper's protocol: at any other profile they are NOT EVIDENCE. Findings
C6-C8 (the refresh isolation, run IDs r1-r3, beyond the paper) are decided alike but never change the
exit code; each variant (`uh run --set`, `uh sweep`) is measured against its base run ID, never judged.
"""

from __future__ import annotations

import math
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from uniform_herding import decide
from uniform_herding.aggregate import InputError, input_options, load_input, paired
from uniform_herding.config import PAPER_RUNS, PROFILES, RUNS
from uniform_herding.results import METRICS, ResultError, read_per_seed_csv, write_json_atomic
from uniform_herding.variants import base_of, describe, sort_key

# The printed words (grep for them; expected_results/README.md maps each to its rule and to ACM's terms).
REPLICATED, NOT_REPLICATED = "REPLICATED", "NOT REPLICATED"
NO_EXPECTATION = "NOT CHECKED (no expected values)"
NO_PAPER_VALUE = "NOT CHECKED (no paper value: beyond the paper)"
MEASURED = "MEASURED (no paper value)"
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
NOT_EVIDENCE = "NOT EVIDENCE"
RESULTS_REPLICATED, RESULTS_NOT_REPLICATED, INCOMPLETE = "RESULTS REPLICATED", "NOT REPLICATED", "INCOMPLETE"
PIPELINE_PASSED, PIPELINE_FAILED = "PIPELINE CHECK PASSED", "PIPELINE CHECK FAILED"
OUTCOME_VERDICT = {"supports": SUPPORTED, "contradicts": NOT_SUPPORTED, "undecided": INCONCLUSIVE}

EXIT_POLICY = (
    "Exit code: 0 when no metric is NOT REPLICATED and, where the expected set's tolerances.toml says "
    "[claims] gate_exit_code = true (paper: yes, other profiles: no), every claim C1-C5 that could be "
    "checked is SUPPORTED; 1 otherwise; 2 for unusable or mismatched inputs, or a JSON report that cannot "
    "be written (read-only or full disk). Claims NOT CHECKED (runs or seeds missing) never fail and never "
    "pass. Findings C6-C8 (beyond the paper) and variants (uh run --set, uh sweep) never change it."
)


class UnwritableReport(click.ClickException):
    """The JSON report cannot be written: exit 2, as the check did not complete (EXIT_POLICY)."""

    exit_code = 2


class ExpectedError(ValueError):
    """An expected set (tolerances.toml, its per-seed CSV) that cannot be used."""


# --- the expected set --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """One expected set: a profile, its per-seed values and the tolerances stated in advance."""

    directory: Path
    profile: str
    per_seed: pd.DataFrame
    tolerance: dict[str, float]
    gate_claims: bool


def find_expected_root(starts: Iterable[Path]) -> Path:
    """The first `expected_results/` (holding tolerances.toml) in or above any start directory."""
    for start in starts:
        for directory in (start, *start.parents):
            candidate = directory / "expected_results"
            if (candidate / "tolerances.toml").is_file():
                return candidate
    raise ExpectedError(
        "expected_results/ not found above the current directory or the package; pass --expected DIR"
    )


def expected_dir_for(profile: str, root: Path) -> Path:
    """The paper's set is expected_results/ itself; any other profile's is expected_results/<profile>/."""
    return root if profile == "paper" else root / profile


def load_expected(directory: Path) -> Expected:
    """Read and validate `directory/tolerances.toml` and the per-seed CSV it names."""
    toml_path = directory / "tolerances.toml"
    try:
        doc = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ExpectedError(f"{toml_path}: cannot read TOML ({e})") from None
    unknown = set(doc) - {"profile", "per_seed", "tolerance", "claims"}
    if unknown:
        raise ExpectedError(f"{toml_path}: unknown key(s) {', '.join(sorted(unknown))}")
    if doc.get("profile") not in PROFILES:
        raise ExpectedError(
            f"{toml_path}: profile must be one of {', '.join(PROFILES)}, got {doc.get('profile')!r}"
        )
    tolerance = doc.get("tolerance")
    if not isinstance(tolerance, dict) or set(tolerance) != set(METRICS):
        raise ExpectedError(f"{toml_path}: [tolerance] must set exactly {', '.join(METRICS)}")
    for metric, value in tolerance.items():
        if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value < math.inf:
            raise ExpectedError(f"{toml_path}: tolerance {metric} must be a number >= 0, got {value!r}")
    gate = doc.get("claims", {}).get("gate_exit_code") if isinstance(doc.get("claims"), dict) else None
    if not isinstance(gate, bool):
        raise ExpectedError(f"{toml_path}: [claims] gate_exit_code must be true or false")
    if not isinstance(doc.get("per_seed", ""), str):
        raise ExpectedError(f"{toml_path}: per_seed must be a file name")
    csv_path = directory / doc.get("per_seed", "per_seed.csv")
    if not csv_path.is_file():
        raise ExpectedError(
            f"{csv_path} not found; produce it with "
            f"`uh aggregate --results-dir results --per-seed-out {csv_path}`"
        )
    return Expected(directory, doc["profile"], read_per_seed_csv(csv_path), dict(tolerance), gate)


# --- per-metric verdicts -----------------------------------------------------------------------


@dataclass(frozen=True)
class MetricCheck:
    """One run ID and metric: expected vs observed mean over each side's seeds (decide.py's rules)."""

    run_id: str
    metric: str
    expected: tuple[float, ...]
    observed: tuple[float, ...]
    tolerance: float

    @property
    def n_expected(self) -> int:
        return len(self.expected)

    @property
    def n_observed(self) -> int:
        return len(self.observed)

    @property
    def expected_mean(self) -> float | None:
        return float(np.mean(self.expected)) if self.expected else None

    @property
    def observed_mean(self) -> float:
        return float(np.mean(self.observed))

    @property
    def difference(self) -> float | None:
        return None if self.expected_mean is None else self.observed_mean - self.expected_mean

    @property
    def welch95(self) -> tuple[float, float] | None:
        return decide.welch_interval(self.expected, self.observed)

    @property
    def equivalence(self) -> decide.Equivalence | None:
        return None if self.difference is None else decide.equivalence(self.expected, self.observed, self.tolerance)

    @property
    def verdict(self) -> str:
        if self.difference is None:
            return NO_PAPER_VALUE if RUNS[self.run_id].beyond_paper else NO_EXPECTATION
        return REPLICATED if decide.replicated(self.difference, self.tolerance) else NOT_REPLICATED

    def welch_text(self) -> str:
        return "no interval" if self.welch95 is None else f"[{self.welch95[0]:+.2f}, {self.welch95[1]:+.2f}]"

    def equivalence_text(self) -> str:
        if self.equivalence is None or self.difference is None:
            return ""
        return self.equivalence.describe(self.n_expected, self.n_observed, self.difference, self.tolerance)

    def to_dict(self) -> dict[str, Any]:
        eq = self.equivalence
        return {"run_id": self.run_id, "metric": self.metric, "n_expected": self.n_expected,
                "n_observed": self.n_observed, "expected_mean": self.expected_mean,
                "observed_mean": self.observed_mean, "difference": self.difference, "tolerance": self.tolerance,
                "verdict": self.verdict, "welch95": self.welch95,
                "equivalence": None if eq is None else asdict(eq) | {"text": self.equivalence_text()}}  # fmt: skip


def compare(expected: Expected, observed: pd.DataFrame) -> list[MetricCheck]:
    """A MetricCheck for every run ID of the re-run (RUNS order) and every metric."""
    checks = []
    for run_id in (r for r in RUNS if r in set(observed["run_id"])):
        obs = observed[observed["run_id"] == run_id]
        exp = expected.per_seed[expected.per_seed["run_id"] == run_id]
        for metric in METRICS:
            checks.append(MetricCheck(run_id, metric, tuple(exp[metric].astype(float)),
                                      tuple(obs[metric].astype(float)), expected.tolerance[metric]))  # fmt: skip
    return checks


# --- the paper's qualitative claims --------------------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One comparison of a claim: what is compared, its per-seed deltas (indexed by seed), the claimed sign."""

    label: str
    deltas: pd.Series
    sign: int

    @property
    def test(self) -> decide.PairedTest:
        return decide.PairedTest(tuple(self.deltas.astype(float)), self.sign)


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, decided on the seeds that all of its runs share. A finding is a claim
    beyond the paper (no paper value): decided and printed alike, it never gates the exit code."""

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
        return [Comparison(f"{run_id}-{other} {metric}", paired(table, run_id, other, metric), sign)
                for run_id, other, metric, sign in comparisons]  # fmt: skip

    return compare_all


BUDGET_SWEEP, RETRIEVAL_SWEEP = ("s1", "B3", "s2"), ("s3", "B3", "s4")


def _sweep_ranges(table: pd.DataFrame) -> list[Comparison]:
    """C5, paired by seed: per seed, the range of ACC over {s1, B3, s2} minus its range over {s3, B3, s4}."""
    acc = table.pivot(index="seed", columns="run_id", values="acc").reindex(table["seed"].unique())
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
    """A claim's verdict with the per-seed evidence it was decided on; `seeds_needed` (in all) where it is
    INCONCLUSIVE and more seeds at this spread would decide it."""

    claim_id: str
    statement: str
    verdict: str
    evidence: list[str]
    finding: bool = False
    seeds_needed: int | None = None


def _shared_seeds(observed: pd.DataFrame, runs: tuple[str, ...]) -> tuple[str | None, pd.DataFrame]:
    """The rows of `runs` on the seeds they all have; or why they cannot be compared (a NOT CHECKED verdict)."""
    missing = [r for r in runs if r not in set(observed["run_id"])]
    table = observed[observed["run_id"].isin(runs)]
    shared = set.intersection(*(set(table.loc[table["run_id"] == r, "seed"]) for r in runs))
    if missing:
        return f"NOT CHECKED (missing: {', '.join(missing)})", table
    if not shared:
        return f"NOT CHECKED (no seed shared by {', '.join(runs)})", table
    return None, table[table["seed"].isin(shared)]


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


def _interval_text(test: decide.PairedTest) -> str:
    ci = test.interval()
    if ci is None:
        return f"no interval ({_n_seeds(test.n)} shared; a claim needs {decide.MIN_SEEDS})"
    return (f"90% t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}] ({test.n - 1} df), "
            f"one-sided {decide.p_text(test.p_value(test.sign))}")  # type: ignore[arg-type]


def _evidence_line(c: Comparison, decided: bool) -> str:
    test = c.test
    line = (f"{c.label}: {_seeds(c.deltas, '+.2f')}; mean {test.mean:+.2f} (claimed {'>' if c.sign > 0 else '<'} 0); "
            f"{_interval_text(test)}")  # fmt: skip
    return f"{line}: {test.outcome}" if decided and test.decidable else line


def check_claims(observed: pd.DataFrame, profile: str = "paper") -> list[ClaimCheck]:
    """Every claim from the re-run alone (decide.py's paired tests), as evidence where `profile` allows;
    one whose runs are missing, or that shares fewer than decide.MIN_SEEDS seeds, is NOT CHECKED."""
    checks = []
    for claim in CLAIMS:
        verdict, table = _shared_seeds(observed, claim.runs)
        evidence: list[str] = []
        needed = None
        if verdict is None:
            comparisons = claim.comparisons(table)
            tests = [c.test for c in comparisons]
            not_evidence = evidence_at(profile, claim.finding)
            evidence = [_evidence_line(c, decided=not_evidence is None) for c in comparisons]
            if not_evidence:
                verdict = not_evidence
            elif tests[0].n < decide.MIN_SEEDS:
                verdict = f"NOT CHECKED ({_n_seeds(tests[0].n)} shared; a claim needs {decide.MIN_SEEDS})"
            else:
                verdict = OUTCOME_VERDICT[decide.claim_outcome(tests)]
                if verdict == INCONCLUSIVE:
                    needed = decide.claim_seeds_needed(tests)
                    verdict += (f" (about {needed - tests[0].n} more seeds would decide it at this spread)" if needed
                                else f" (no number of seeds up to {decide.MAX_SEEDS} would at this mean and spread)")
        checks.append(ClaimCheck(claim.claim_id, claim.statement, verdict, evidence, claim.finding, needed))
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
    for run_id in sorted(set(observed["run_id"]) - set(RUNS), key=sort_key):
        base = base_of(run_id)
        verdict, table = _shared_seeds(observed, (run_id, base))
        evidence = []
        if verdict is None:
            for metric in ("acc", "forgetting"):
                deltas = paired(table, run_id, base, metric)
                evidence.append(f"{run_id} - {base} {metric}: {_seeds(deltas, '+.2f')}; mean {deltas.mean():+.2f}; "
                                f"{_t_interval_text(deltas)}")  # fmt: skip
        statement = f"{run_id} against {base} ({describe(run_id)})"
        checks.append(ClaimCheck(run_id, statement, verdict or MEASURED, evidence, finding=True))
    return checks


def exit_code(metrics: list[MetricCheck], claims: list[ClaimCheck], gate_claims: bool) -> int:
    """0 when the re-run passes (see EXIT_POLICY), 1 otherwise: a claim that was checked passes only SUPPORTED."""
    failed = any(m.verdict == NOT_REPLICATED for m in metrics)
    checked = [c for c in claims if not c.finding and not c.verdict.startswith(("NOT CHECKED", NOT_EVIDENCE))]
    failed |= gate_claims and any(c.verdict != SUPPORTED for c in checked)
    return int(failed)


def overall(expected: Expected, observed: pd.DataFrame, metrics: list[MetricCheck], claims: list[ClaimCheck],
            code: int) -> str:  # fmt: skip
    """The one verdict line, in ACM's terms. RESULTS REPLICATED needs every paper run ID and seed of the
    expected set, every metric REPLICATED and every claim C1-C5 SUPPORTED; a failure is NOT REPLICATED;
    anything short of both is INCOMPLETE, saying why. Other profiles are a pipeline check, not evidence."""
    if expected.profile != "paper":
        word = PIPELINE_FAILED if code else PIPELINE_PASSED
        return f"{word} (profile {expected.profile}: not evidence about the paper)"
    if code:
        failed = [f"{m.run_id} {m.metric} {m.verdict}" for m in metrics if m.verdict == NOT_REPLICATED]
        failed += [f"{c.claim_id} {c.verdict.split(' (')[0]}" for c in claims
                   if not c.finding and c.verdict.startswith((NOT_SUPPORTED, INCONCLUSIVE))]  # fmt: skip
        return f"{RESULTS_NOT_REPLICATED} ({'; '.join(failed)})"
    want = {(r, s) for r, s in zip(expected.per_seed["run_id"], expected.per_seed["seed"], strict=True)
            if r in PAPER_RUNS}  # fmt: skip
    have = set(zip(observed["run_id"], observed["seed"], strict=True))
    short = []
    if want - have:
        short.append(f"{len(want - have)} of {len(want)} paper runs missing")
    unchecked = [c.claim_id for c in claims if not c.finding and c.verdict != SUPPORTED]
    if unchecked:
        short.append(f"claims not decided: {', '.join(unchecked)}")
    return f"{INCOMPLETE} ({'; '.join(short)})" if short else f"{RESULTS_REPLICATED} (ACM v1.1)"


# --- printing and the command ------------------------------------------------------------------


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else f"{x:{fmt}}"


def format_metrics(checks: list[MetricCheck]) -> list[str]:
    lines = [
        f"{'run':3} {'metric':10} {'expected':>8} {'observed':>8} {'diff':>7} {'tol':>5}  {'verdict':14} "
        f"{'seeds':>5}  {'Welch 95% CI of diff':21} equivalence at the tolerance (TOST, information)"
    ]
    for c in checks:
        ci = "" if c.difference is None else c.welch_text()
        lines.append(
            f"{c.run_id:3} {c.metric:10} {_num(c.expected_mean, '8.2f'):>8} {c.observed_mean:8.2f} "
            f"{_num(c.difference, '+7.2f'):>7} {c.tolerance:5.2f}  {c.verdict:14} "
            f"{c.n_expected:>2}/{c.n_observed:<2}  {ci:21} {c.equivalence_text()}".rstrip()
        )
    return lines


def format_variants(checks: list[ClaimCheck]) -> list[str]:
    if not checks:
        return []
    lines = ["variants against their base (no paper value: measured, not judged; they never change the exit code):"]
    for c in checks:
        lines.append(f"{c.statement}: {c.verdict}")
        lines.extend(f"     {e}" for e in c.evidence)
    return lines


CLAIMS_HEADER = (f"claims of the paper, from the re-run alone (paired by seed; one-sided paired t-test at 5%, "
                 f"at least {decide.MIN_SEEDS} shared seeds):")  # fmt: skip
FINDINGS_HEADER = "findings beyond the paper (no paper value; decided alike; they never change the exit code):"


def format_claims(checks: list[ClaimCheck]) -> list[str]:
    lines = [CLAIMS_HEADER]
    for c in checks:
        if c.finding and FINDINGS_HEADER not in lines:
            lines.append(FINDINGS_HEADER)
        lines.append(f"{c.claim_id} {c.verdict}: {c.statement}")
        lines.extend(f"     {e}" for e in c.evidence)
    return lines


def tally(verdicts: Iterable[str]) -> str:
    """'35 REPLICATED, 1 NOT REPLICATED': each printed word with its count, in first-seen order."""
    counts = Counter(v.split(" (")[0] for v in verdicts)
    return ", ".join(f"{n} {word}" for word, n in counts.items()) or "none"


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
    help="JSON report [default: <results-dir>/check_report.json; ./check_report.json for --per-seed].",
)
def check_command(
    results_dir: Path | None,
    per_seed: Path | None,
    expected_dir: Path | None,
    profile: str | None,
    json_out: Path | None,
) -> None:
    """Compare a re-run with expected_results/ metric by metric, then check the paper's claims C1-C5
    and the findings C6-C8 beyond the paper (r1-r3; reported, never gating); variants against their base."""
    observed, run_profile = load_input(results_dir, per_seed)
    if profile and run_profile and profile != run_profile:
        raise InputError(f"the results are from profile {run_profile!r}, not --profile {profile!r}")
    profile = profile or run_profile
    try:
        if expected_dir is None:
            root = find_expected_root([Path.cwd(), Path(__file__).resolve().parent])
            expected_dir = expected_dir_for(profile or "paper", root)
        expected = load_expected(expected_dir)
    except (ExpectedError, ResultError) as e:
        raise InputError(str(e)) from None
    if profile and profile != expected.profile:
        raise InputError(f"re-run profile {profile!r} but {expected_dir} holds profile {expected.profile!r}")
    metrics = compare(expected, observed)
    if metrics and all(m.verdict == NO_EXPECTATION for m in metrics):
        raise InputError(f"no run ID of the re-run has expected values in {expected_dir}")
    claims, variants = check_claims(observed, expected.profile), check_variants(observed)
    code = exit_code(metrics, claims, expected.gate_claims)
    verdict = overall(expected, observed, metrics, claims, code)

    source = f"--per-seed {per_seed}" if per_seed else f"--results-dir {results_dir or Path('results')}"
    paper_claims, findings = [c for c in claims if not c.finding], [c for c in claims if c.finding]
    click.echo(f"re-run {source} (profile {expected.profile}) vs expected {expected_dir}")
    click.echo("\n".join([*format_metrics(metrics), "", *format_claims(claims), *format_variants(variants), ""]))
    click.echo(
        f"metrics: {tally(m.verdict for m in metrics)}; claims: {tally(c.verdict for c in paper_claims)} "
        f"({'gate' if expected.gate_claims else 'do not gate'} the exit code); "
        f"findings beyond the paper: {tally(c.verdict for c in findings)} (never gate)"
        + (f"; variants: {sum(c.verdict == MEASURED for c in variants)} measured, "
           f"{sum(c.verdict != MEASURED for c in variants)} not checked (never gate)" if variants else "")
    )
    click.echo(f"verdict: {verdict} -> exit {code}")

    json_out = json_out or (
        Path("check_report.json") if per_seed else (results_dir or Path("results")) / "check_report.json"
    )
    report: dict[str, Any] = {
        "source": source,
        "profile": expected.profile,
        "expected_dir": str(expected_dir),
        "tolerance": expected.tolerance,
        "claims_gate_exit_code": expected.gate_claims,
        "verdict": verdict,
        "metrics": [m.to_dict() for m in metrics],
        "claims": [asdict(c) for c in claims],
        "variants": [asdict(c) for c in variants],
        "exit_code": code,
    }
    try:
        write_json_atomic(json_out, report)
    except OSError as e:
        raise UnwritableReport(
            f"cannot write {json_out} ({e.strerror or e}); the verdicts above stand (exit {code}) but are not "
            "saved; pass a writable --json-out"
        ) from None
    click.echo(f"wrote {json_out}")
    click.get_current_context().exit(code)
