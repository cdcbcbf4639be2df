"""`uh check`: does a re-run reproduce expected_results/? Per-metric verdicts and the paper's claims.

A metric is REPRODUCED when the re-run's mean is within the stated tolerance of the expected mean;
WITHIN NOISE when it is not, but the Welch 95% interval of the difference of means still contains 0
(the seeds cannot tell them apart); NOT REPRODUCED otherwise. The paper's qualitative claims are
decided from the re-run alone, on means of values paired by seed. Findings C6-C8 (the refresh
isolation, run IDs r1-r3, beyond the paper) are decided the same way and printed with a 95% t-interval
of the paired mean; the paper has no value for them, so they never change the exit code. Each variant
(`uh run --set`, `uh sweep`) is reported in the same form against its base run ID, measured and not judged.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd
from scipy import stats

from uniform_herding.aggregate import InputError, input_options, load_input, paired, paired_t_interval
from uniform_herding.config import PROFILES, RUNS
from uniform_herding.results import METRICS, ResultError, read_per_seed_csv, write_json_atomic
from uniform_herding.variants import base_of, describe, sort_key

REPRODUCED, WITHIN_NOISE, NOT_REPRODUCED = "REPRODUCED", "WITHIN NOISE", "NOT REPRODUCED"
NO_EXPECTATION = "NOT CHECKED (no expected values)"
NO_PAPER_VALUE = "NOT CHECKED (no paper value: beyond the paper)"
MEASURED = "MEASURED (no paper value)"
SUPPORTED, NOT_SUPPORTED = "SUPPORTED", "CLAIM NOT SUPPORTED"

EXIT_POLICY = (
    "Exit code: 0 when no metric is NOT REPRODUCED (WITHIN NOISE passes) and, where the expected "
    "set's tolerances.toml says [claims] gate_exit_code = true (paper: yes, smoke: no), no claim is "
    "CLAIM NOT SUPPORTED; 1 otherwise; 2 for unusable or mismatched inputs, or a JSON report that "
    "cannot be written (read-only or full disk). Claims NOT CHECKED (runs missing) never fail and never pass. "
    "Findings C6-C8 (beyond the paper) and variants (uh run --set, uh sweep) never change it."
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


def welch_interval(
    expected: np.ndarray, observed: np.ndarray, level: float = 0.95
) -> tuple[float, float] | None:
    """Welch interval of mean(observed) - mean(expected); None where it is undefined.

    Undefined when a side has fewer than 2 values (no variance estimate) or both sides have zero
    variance (zero standard error): such a difference can then not be called WITHIN NOISE.
    """
    n1, n2 = len(expected), len(observed)
    if n1 < 2 or n2 < 2:
        return None
    v1, v2 = np.var(expected, ddof=1) / n1, np.var(observed, ddof=1) / n2
    if v1 + v2 == 0:
        return None
    df = (v1 + v2) ** 2 / (v1**2 / (n1 - 1) + v2**2 / (n2 - 1))
    half = float(stats.t.ppf(0.5 + level / 2, df) * math.sqrt(v1 + v2))
    diff = float(np.mean(observed) - np.mean(expected))
    return diff - half, diff + half


@dataclass(frozen=True)
class MetricCheck:
    """One run ID and metric: expected vs observed mean over each side's seeds."""

    run_id: str
    metric: str
    n_expected: int
    n_observed: int
    expected_mean: float | None
    observed_mean: float
    tolerance: float
    welch95: tuple[float, float] | None

    @property
    def difference(self) -> float | None:
        return None if self.expected_mean is None else self.observed_mean - self.expected_mean

    @property
    def verdict(self) -> str:
        if self.difference is None:
            return NO_PAPER_VALUE if RUNS[self.run_id].beyond_paper else NO_EXPECTATION
        if abs(self.difference) <= self.tolerance:
            return REPRODUCED
        if self.welch95 is not None and self.welch95[0] <= 0 <= self.welch95[1]:
            return WITHIN_NOISE
        return NOT_REPRODUCED


def compare(expected: Expected, observed: pd.DataFrame) -> list[MetricCheck]:
    """A MetricCheck for every run ID of the re-run (RUNS order) and every metric."""
    checks = []
    for run_id in (r for r in RUNS if r in set(observed["run_id"])):
        obs = observed[observed["run_id"] == run_id]
        exp = expected.per_seed[expected.per_seed["run_id"] == run_id]
        for metric in METRICS:
            o, e = obs[metric].to_numpy(float), exp[metric].to_numpy(float)
            checks.append(
                MetricCheck(
                    run_id=run_id,
                    metric=metric,
                    n_expected=len(e),
                    n_observed=len(o),
                    expected_mean=float(e.mean()) if len(e) else None,
                    observed_mean=float(o.mean()),
                    tolerance=expected.tolerance[metric],
                    welch95=welch_interval(e, o),
                )
            )
    return checks


# --- the paper's qualitative claims --------------------------------------------------------------


@dataclass(frozen=True)
class Claim:
    """A claim of the paper, decided on the seeds that all of its runs share. A finding is a claim
    beyond the paper (no paper value): decided and printed alike, it never gates the exit code."""

    claim_id: str
    statement: str
    runs: tuple[str, ...]
    decide: Callable[[pd.DataFrame], tuple[bool, list[str]]]
    finding: bool = False


def _seeds(values: pd.Series, fmt: str) -> str:
    return ", ".join(f"{seed} {value:{fmt}}" for seed, value in values.items())


def _paired_signs(
    *comparisons: tuple[str, str, str, int],
) -> Callable[[pd.DataFrame], tuple[bool, list[str]]]:
    """Claim that the mean over seeds of (run - other)[metric] is > 0 (sign +1) or < 0 (sign -1)."""

    def decide(table: pd.DataFrame) -> tuple[bool, list[str]]:
        holds, evidence = [], []
        for run_id, other, metric, sign in comparisons:
            deltas = paired(table, run_id, other, metric)
            holds.append(sign * deltas.mean() > 0)
            evidence.append(
                f"{run_id}-{other} {metric}: {_seeds(deltas, '+.2f')}; mean {deltas.mean():+.2f} "
                f"(needs {'>' if sign > 0 else '<'} 0)"
            )
        return all(holds), evidence

    return decide


def _interval(deltas: pd.Series) -> str:
    ci = paired_t_interval(deltas)
    if ci is None:
        return "95% t-interval undefined (fewer than 2 seeds)"
    return f"95% t-interval [{ci[0]:+.2f}, {ci[1]:+.2f}] ({len(deltas) - 1} df)"


def _paired_findings(
    *comparisons: tuple[str, str, str, int],
) -> Callable[[pd.DataFrame], tuple[bool, list[str]]]:
    """As _paired_signs (the mean paired delta decides), each delta also with its 95% t-interval."""
    signs = _paired_signs(*comparisons)

    def decide(table: pd.DataFrame) -> tuple[bool, list[str]]:
        holds, evidence = signs(table)
        intervals = [_interval(paired(table, run_id, other, metric)) for run_id, other, metric, _ in comparisons]
        return holds, [f"{line}; {ci}" for line, ci in zip(evidence, intervals, strict=True)]

    return decide


def _sweep_ranges(table: pd.DataFrame) -> tuple[bool, list[str]]:
    """C5: range of mean ACC over {s1, B3, s2} exceeds the range over {s3, B3, s4}."""
    acc = table.pivot(index="seed", columns="run_id", values="acc").reindex(table["seed"].unique())
    evidence = [
        f"{run_id} acc: {_seeds(acc[run_id], '.2f')}; mean {acc[run_id].mean():.2f}"
        for run_id in ("s1", "B3", "s2", "s3", "s4")
    ]
    ranges = {}
    for sweep, runs in (("active budget", ["s1", "B3", "s2"]), ("retrieval", ["s3", "B3", "s4"])):
        means = acc[runs].mean()
        ranges[sweep] = means.max() - means.min()
        evidence.append(f"{sweep} range of mean acc over {', '.join(runs)}: {ranges[sweep]:.2f}")
    return ranges["active budget"] > ranges["retrieval"], evidence


CLAIMS: tuple[Claim, ...] = (
    Claim(
        "C1",
        "Uniform Herding (B3) beats iCaRL (B1) and the static bank (B2) in ACC and forgets less",
        ("B3", "B1", "B2"),
        _paired_signs(
            ("B3", "B1", "acc", +1),
            ("B3", "B1", "forgetting", -1),
            ("B3", "B2", "acc", +1),
            ("B3", "B2", "forgetting", -1),
        ),
    ),
    Claim(
        "C2",
        "NME beats head-logit readout in ACC (B3 > a2)",
        ("B3", "a2"),
        _paired_signs(("B3", "a2", "acc", +1)),
    ),
    Claim(
        "C3",
        "Herding beats random selection in ACC (B3 > a4)",
        ("B3", "a4"),
        _paired_signs(("B3", "a4", "acc", +1)),
    ),
    Claim(
        "C4",
        "Removing KD raises forgetting (a1 F > B3 F)",
        ("a1", "B3"),
        _paired_signs(("a1", "B3", "forgetting", +1)),
    ),
    Claim(
        "C5",
        "The active-budget sweep moves ACC more than the retrieval sweep",
        ("s1", "B3", "s2", "s3", "s4"),
        _sweep_ranges,
    ),
    # Beyond the paper (issue 17): the matched experiment that isolates refresh. No paper value.
    Claim(
        "C6",
        "Refresh helps at matched storage M: r2 (rho = 1) beats r1 (no refresh) in ACC and forgets less",
        ("r2", "r1"),
        _paired_findings(("r2", "r1", "acc", +1), ("r2", "r1", "forgetting", -1)),
        finding=True,
    ),
    Claim(
        "C7",
        "Extra candidates help: B3 (rho = 3) beats r2 (rho = 1) in ACC",
        ("B3", "r2"),
        _paired_findings(("B3", "r2", "acc", +1)),
        finding=True,
    ),
    Claim(
        "C8",
        "Refresh helps under iCaRL's objective: r3 beats B1 in ACC",
        ("r3", "B1"),
        _paired_findings(("r3", "B1", "acc", +1)),
        finding=True,
    ),
)


@dataclass(frozen=True)
class ClaimCheck:
    """A claim's verdict with the per-seed evidence it was decided on."""

    claim_id: str
    statement: str
    verdict: str
    evidence: list[str]
    finding: bool = False


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


def check_claims(observed: pd.DataFrame) -> list[ClaimCheck]:
    """Every claim from the re-run alone; one whose runs or shared seeds are missing is NOT CHECKED."""
    checks = []
    for claim in CLAIMS:
        verdict, table = _shared_seeds(observed, claim.runs)
        evidence: list[str] = []
        if verdict is None:
            holds, evidence = claim.decide(table)
            verdict = SUPPORTED if holds else NOT_SUPPORTED
        checks.append(ClaimCheck(claim.claim_id, claim.statement, verdict, evidence, claim.finding))
    return checks


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
                                f"{_interval(deltas)}")  # fmt: skip
        statement = f"{run_id} against {base} ({describe(run_id)})"
        checks.append(ClaimCheck(run_id, statement, verdict or MEASURED, evidence, finding=True))
    return checks


def exit_code(metrics: list[MetricCheck], claims: list[ClaimCheck], gate_claims: bool) -> int:
    """0 when the re-run passes (see EXIT_POLICY), 1 otherwise."""
    failed = any(m.verdict == NOT_REPRODUCED for m in metrics)
    failed |= gate_claims and any(c.verdict == NOT_SUPPORTED and not c.finding for c in claims)
    return int(failed)


# --- printing and the command ------------------------------------------------------------------


def _num(x: float | None, fmt: str) -> str:
    return "-" if x is None else f"{x:{fmt}}"


def format_metrics(checks: list[MetricCheck]) -> list[str]:
    lines = [
        f"{'run':3} {'metric':10} {'expected':>8} {'observed':>8} {'diff':>7} {'tol':>5}  "
        f"{'Welch 95% CI of diff':21} {'seeds':>5}  verdict"
    ]
    for c in checks:
        ci = "undefined" if c.welch95 is None else f"[{c.welch95[0]:+.2f}, {c.welch95[1]:+.2f}]"
        lines.append(
            f"{c.run_id:3} {c.metric:10} {_num(c.expected_mean, '8.2f'):>8} {c.observed_mean:8.2f} "
            f"{_num(c.difference, '+7.2f'):>7} {c.tolerance:5.2f}  {ci:21} "
            f"{c.n_expected:>2}/{c.n_observed:<2}  {c.verdict}"
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


def format_claims(checks: list[ClaimCheck]) -> list[str]:
    lines = ["claims, from the re-run alone (paired by seed):"]
    findings_header = "findings beyond the paper (no paper value; they never change the exit code):"
    for c in checks:
        if c.finding and findings_header not in lines:
            lines.append(findings_header)
        lines.append(f"{c.claim_id} {c.verdict}: {c.statement}")
        lines.extend(f"     {e}" for e in c.evidence)
    return lines


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
    if all(m.verdict == NO_EXPECTATION for m in metrics):
        raise InputError(f"no run ID of the re-run has expected values in {expected_dir}")
    claims, variants = check_claims(observed), check_variants(observed)
    code = exit_code(metrics, claims, expected.gate_claims)

    source = f"--per-seed {per_seed}" if per_seed else f"--results-dir {results_dir or Path('results')}"
    counts = {v: sum(m.verdict == v for m in metrics) for v in (REPRODUCED, WITHIN_NOISE, NOT_REPRODUCED)}
    n_claims = {v: sum(c.verdict == v for c in claims if not c.finding) for v in (SUPPORTED, NOT_SUPPORTED)}
    n_findings = {v: sum(c.verdict == v for c in claims if c.finding) for v in (SUPPORTED, NOT_SUPPORTED)}
    click.echo(f"re-run {source} (profile {expected.profile}) vs expected {expected_dir}")
    click.echo("\n".join([*format_metrics(metrics), "", *format_claims(claims), *format_variants(variants), ""]))
    click.echo(
        f"metrics: {', '.join(f'{n} {v}' for v, n in counts.items())}; "
        f"claims: {n_claims[SUPPORTED]} supported, {n_claims[NOT_SUPPORTED]} not supported, "
        f"{sum(not c.finding for c in claims) - sum(n_claims.values())} not checked "
        f"(claims {'gate' if expected.gate_claims else 'do not gate'} the exit code); "
        f"findings beyond the paper: {n_findings[SUPPORTED]} supported, {n_findings[NOT_SUPPORTED]} not supported, "
        f"{sum(c.finding for c in claims) - sum(n_findings.values())} not checked (never gate)"
        + (f"; variants: {sum(c.verdict == MEASURED for c in variants)} measured, "
           f"{sum(c.verdict != MEASURED for c in variants)} not checked (never gate)" if variants else "")
        + f" -> exit {code}"
    )

    json_out = json_out or (
        Path("check_report.json") if per_seed else (results_dir or Path("results")) / "check_report.json"
    )
    report: dict[str, Any] = {
        "source": source,
        "profile": expected.profile,
        "expected_dir": str(expected_dir),
        "tolerance": expected.tolerance,
        "claims_gate_exit_code": expected.gate_claims,
        "metrics": [asdict(m) | {"difference": m.difference, "verdict": m.verdict} for m in metrics],
        "claims": [asdict(c) for c in claims],
        "variants": [asdict(c) for c in variants],
        "counts": counts | n_claims,
        "finding_counts": n_findings,
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
