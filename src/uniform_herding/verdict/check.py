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
"""

from __future__ import annotations

import hashlib
import math
import tomllib
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import click
import numpy as np
import pandas as pd

from uniform_herding.method.config import PAPER_RUNS, PROFILES, RUNS
from uniform_herding.method.variants import base_of, describe, sort_key
from uniform_herding.runs.results import METRICS, ResultError, read_per_seed_csv, write_json_atomic
from uniform_herding.verdict import decide
from uniform_herding.verdict.aggregate import InputError, input_options, load_input

# The printed words (grep for them; expected_results/README.md maps each to its rule and to ACM's terms).
REPLICATED, NOT_REPLICATED = "REPLICATED", "NOT REPLICATED"
NO_EXPECTATION = "NOT CHECKED (no expected values)"
NO_PAPER_VALUE = "NOT CHECKED (no paper value: beyond the paper)"
MEASURED = "MEASURED (no paper value)"
SUPPORTED, NOT_SUPPORTED, INCONCLUSIVE = "SUPPORTED", "NOT SUPPORTED", "INCONCLUSIVE"
PENDING = "UNDECIDED"  # a claim a look left undecided, with looks to come (INCONCLUSIVE is after the last)
NOT_EVIDENCE = "NOT EVIDENCE"
RESULTS_REPLICATED, RESULTS_NOT_REPLICATED = "RESULTS REPLICATED", "NOT REPLICATED"
INCOMPLETE, UNDECIDED = "INCOMPLETE", "UNDECIDED"  # and INCONCLUSIVE: the procedure ended, a claim undecided
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

# The SHA-256 of the shipped paper set (tolerances.toml, then its per-seed CSV): only that set, stated
# before any re-run, awards the badge; tests/verdict/test_check.py recomputes it, so a change to the set is a
# change to this line, in review.
PAPER_SET_SHA256 = "d74a521e202d4313ee3501842e901e625199ecc31b50a6e659c160dcae662678"


class UnwritableReport(click.ClickException):
    """The JSON report cannot be written: exit 2, as the check did not complete (EXIT_POLICY)."""

    exit_code = 2


class ExpectedError(ValueError):
    """An expected set (tolerances.toml, its per-seed CSV) that cannot be used."""


# --- the expected set --------------------------------------------------------------------------


@dataclass(frozen=True)
class Expected:
    """One expected set: a profile, its per-seed values and the tolerances stated in advance (one per metric,
    or one per metric and run ID, or a `rule` deriving each from the per-seed values and the seeds counted),
    the metrics that gate, and the claims' sequential procedure if any."""

    directory: Path
    profile: str
    per_seed: pd.DataFrame
    tolerance: dict[str, float | dict[str, float]]
    gate_claims: bool
    gate: tuple[str, ...] = tuple(METRICS)
    procedure: decide.Procedure | None = None
    sha256: str = ""
    rule: decide.Rule | None = None

    @cached_property
    def spreads(self) -> dict[str, decide.Spread]:
        """Per metric, the run IDs' spreads moderated across the set (decide.moderated_spread): what `rule` uses."""
        out = {}
        for metric in METRICS:
            groups = self.per_seed.groupby("run_id", sort=False)[metric]
            d = {len(v) for _, v in groups}
            if len(d) != 1 or d.pop() < 2:
                raise ExpectedError(f"{self.directory}: a derived tolerance needs the same seeds (2 or more) for "
                                    "every run ID of the set")  # fmt: skip
            out[metric] = decide.moderated_spread(groups.var(ddof=1).to_dict(), len(self.seeds) - 1)
        return out

    def tolerance_for(self, run_id: str, metric: str, k: int | None = None) -> float:
        """The tolerance with k counted re-run seeds (default: as many as the set has)."""
        if self.rule is None:
            tol = self.tolerance[metric]
            return float(tol[run_id] if isinstance(tol, dict) else tol)
        n = len(self.seeds)
        key = (run_id, metric, k or n)
        if key not in self._derived:  # a t quantile per call: uh oc asks for the same ones thousands of times
            spread = self.spreads[metric]
            self._derived[key] = self.rule.tolerance(spread.sd[run_id], spread.df, n, k or n)
        return self._derived[key]

    @cached_property
    def _derived(self) -> dict[tuple[str, str, int], float]:
        return {}

    @property
    def seeds(self) -> tuple[int, ...]:
        """The expected set's seeds, in the procedure's order where it registers one, else the CSV's."""
        own = [int(s) for s in dict.fromkeys(self.per_seed["seed"])]
        return tuple(sorted(own, key=self.registered.index)) if self.procedure else tuple(own)

    @property
    def registered(self) -> tuple[int, ...]:
        """Every seed a re-run may count, in order: the procedure's, else the set's own."""
        return self.procedure.seeds if self.procedure else tuple(dict.fromkeys(int(s) for s in self.per_seed["seed"]))

    @property
    def shipped(self) -> bool:
        """The paper set this artifact ships, byte for byte: the only one that awards the badge."""
        return self.profile == "paper" and self.sha256 == PAPER_SET_SHA256

    def describe(self) -> str:
        """Its folder; for profile paper, whether it is the shipped set (only that one awards the badge)."""
        if self.profile != "paper":
            return str(self.directory)
        kind = "the shipped paper set" if self.shipped else f"not the shipped paper set (sha256 {self.sha256[:12]})"
        return f"{self.directory}, {kind}"


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


def _is_tolerance(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value < math.inf


def _procedure(doc: dict[str, Any], seeds: tuple[int, ...], where: Path) -> decide.Procedure | None:
    """The [procedure] table: registered seeds (the set's own first, in its order), looks, alpha per look."""
    table = doc.get("procedure")
    if table is None:
        return None
    try:
        procedure = decide.Procedure(tuple(table["seeds"]), tuple(table["looks"]), tuple(table["alpha"]))
    except (TypeError, KeyError, ValueError) as e:
        raise ExpectedError(f"{where}: [procedure] needs seeds, looks and alpha ({e})") from None
    if set(procedure.seeds_at(0)) != set(seeds):
        raise ExpectedError(f"{where}: [procedure] seeds must begin with the set's own seeds {sorted(seeds)}, "
                            "and its first look must count exactly them")  # fmt: skip
    return procedure


def _rule(doc: dict[str, Any], n_gating: int, where: Path) -> decide.Rule | None:
    """[derive]: tau (pp) and the family's alpha, split over the gating metrics; None where the set states
    its tolerances as numbers ([tolerance])."""
    table = doc.get("derive")
    if table is None:
        return None
    tau, alpha = table.get("tau"), table.get("family_alpha") if isinstance(table, dict) else None
    if not (_is_tolerance(tau) and _is_tolerance(alpha) and 0 < alpha < 1) or set(table) != {"tau", "family_alpha"}:
        raise ExpectedError(f"{where}: [derive] needs exactly tau (pp, >= 0) and family_alpha (in (0, 1))")
    return decide.Rule(float(tau), float(alpha) / n_gating)


def load_expected(directory: Path) -> Expected:
    """Read and validate `directory/tolerances.toml` and the per-seed CSV it names."""
    toml_path = directory / "tolerances.toml"
    try:
        raw = toml_path.read_bytes()
        doc = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ExpectedError(f"{toml_path}: cannot read TOML ({e})") from None
    unknown = set(doc) - {"profile", "per_seed", "tolerance", "derive", "claims", "gate", "procedure"}
    if unknown:
        raise ExpectedError(f"{toml_path}: unknown key(s) {', '.join(sorted(unknown))}")
    if doc.get("profile") not in PROFILES:
        raise ExpectedError(
            f"{toml_path}: profile must be one of {', '.join(PROFILES)}, got {doc.get('profile')!r}"
        )
    if ("tolerance" in doc) == ("derive" in doc):
        raise ExpectedError(f"{toml_path}: give either [tolerance] (the numbers) or [derive] (the rule), not both")
    tolerance = doc.get("tolerance", dict.fromkeys(METRICS, 0.0))
    if not isinstance(tolerance, dict) or set(tolerance) != set(METRICS):
        raise ExpectedError(f"{toml_path}: [tolerance] must set exactly {', '.join(METRICS)}")
    for metric, value in tolerance.items():
        values = value.values() if isinstance(value, dict) else [value]
        if not values or not all(_is_tolerance(v) for v in values):
            raise ExpectedError(f"{toml_path}: tolerance {metric} must be a number >= 0, or a table of them "
                                f"by run ID, got {value!r}")  # fmt: skip
    gate_claims = doc.get("claims", {}).get("gate_exit_code") if isinstance(doc.get("claims"), dict) else None
    if not isinstance(gate_claims, bool):
        raise ExpectedError(f"{toml_path}: [claims] gate_exit_code must be true or false")
    gate = doc.get("gate", list(METRICS))
    if not isinstance(gate, list) or not gate or not set(gate) <= set(METRICS):
        raise ExpectedError(f"{toml_path}: gate must list metrics among {', '.join(METRICS)}")
    if not isinstance(doc.get("per_seed", ""), str):
        raise ExpectedError(f"{toml_path}: per_seed must be a file name")
    csv_path = directory / doc.get("per_seed", "per_seed.csv")
    if not csv_path.is_file():
        raise ExpectedError(
            f"{csv_path} not found; produce it with "
            f"`uh aggregate --results-dir results --per-seed-out {csv_path}`"
        )
    try:
        csv = csv_path.read_bytes()  # read once: the bytes hashed are the bytes parsed
    except OSError as e:
        raise ExpectedError(f"{csv_path}: cannot read ({e.strerror or e})") from None
    per_seed = read_per_seed_csv(csv_path, csv)
    for metric, value in tolerance.items():
        if isinstance(value, dict) and set(value) != set(per_seed["run_id"]):
            raise ExpectedError(f"{toml_path}: [tolerance.{metric}] must set exactly the run IDs of {csv_path.name}")
    digest = hashlib.sha256(raw + csv).hexdigest()
    expected = Expected(directory, doc["profile"], per_seed, dict(tolerance), gate_claims, tuple(gate), None, digest,
                        _rule(doc, len(gate) * per_seed["run_id"].nunique(), toml_path))  # fmt: skip
    expected = replace(expected, procedure=_procedure(doc, expected.seeds, toml_path))
    if expected.rule is not None:
        expected.spreads  # noqa: B018 (refuse a set the rule cannot use now, not at the first metric)
    return expected


# --- per-metric verdicts -----------------------------------------------------------------------


@dataclass(frozen=True)
class MetricCheck:
    """One run ID and metric: expected vs observed mean over the expected set's seeds (decide.py's rules).
    `uncounted`: the re-run's other seeds, shown and never counted; `gating`: whether it decides the verdict."""

    run_id: str
    metric: str
    expected: tuple[float, ...]
    observed: tuple[float, ...]
    tolerance: float
    gating: bool = True
    uncounted: tuple[int, ...] = ()

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
    def observed_mean(self) -> float | None:
        return float(np.mean(self.observed)) if self.observed else None

    @property
    def difference(self) -> float | None:
        if self.expected_mean is None or self.observed_mean is None:
            return None
        return self.observed_mean - self.expected_mean

    @property
    def welch95(self) -> tuple[float, float] | None:
        return decide.welch_interval(self.expected, self.observed)

    @property
    def equivalence(self) -> decide.Equivalence | None:
        return None if self.difference is None else decide.equivalence(self.expected, self.observed, self.tolerance)

    @property
    def verdict(self) -> str:
        if self.expected_mean is None:
            return NO_PAPER_VALUE if RUNS[self.run_id].beyond_paper else NO_EXPECTATION
        if self.n_observed < decide.MIN_SEEDS:  # one seed's luck decides nothing (edge: seed 1993 alone)
            return (f"NOT CHECKED ({self.n_observed} of the expected seeds; a metric needs {decide.MIN_SEEDS}"
                    + (f"; seeds {', '.join(map(str, self.uncounted))} not counted)" if self.uncounted else ")"))
        return REPLICATED if decide.replicated(self.difference, self.tolerance) else NOT_REPLICATED  # type: ignore[arg-type]

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
                "verdict": self.verdict, "gating": self.gating, "uncounted_seeds": list(self.uncounted),
                "welch95": self.welch95,
                "equivalence": None if eq is None else asdict(eq) | {"text": self.equivalence_text()}}  # fmt: skip


def counted_seeds(registered: tuple[int, ...], have: set[int]) -> tuple[int, ...]:
    """The seeds a metric counts: the registered seeds in their order, as far as the re-run has them without a
    gap. So every seed the procedure asked for counts, and no other: a metric can be neither diluted nor
    shopped for with other seeds, nor spared the seeds it ran."""
    counted = []
    for seed in registered:
        if seed not in have:
            break
        counted.append(seed)
    return tuple(counted)


def compare(expected: Expected, observed: pd.DataFrame) -> list[MetricCheck]:
    """A MetricCheck for every run ID of the re-run (RUNS order) and every metric, on its counted_seeds: the
    set's seeds first, then the procedure's, in order."""

    def by_run(table: pd.DataFrame) -> dict[str, list[tuple[Any, ...]]]:
        rows: dict[str, list[tuple[Any, ...]]] = {}
        for row in table[["run_id", "seed", *METRICS]].itertuples(index=False):
            rows.setdefault(row[0], []).append(row)
        return rows

    observed_by, expected_by = by_run(observed), by_run(expected.per_seed)
    checks = []
    for run_id in (r for r in RUNS if r in observed_by):
        by_seed = {int(row[1]): row for row in observed_by[run_id]}
        counted = counted_seeds(expected.registered, set(by_seed))
        uncounted = tuple(sorted(set(by_seed) - set(counted)))
        obs = [by_seed[seed] for seed in counted]
        exp = expected_by.get(run_id, [])
        for k, metric in enumerate(METRICS, start=2):
            checks.append(MetricCheck(run_id, metric, tuple(float(row[k]) for row in exp),
                                      tuple(float(row[k]) for row in obs),
                                      expected.tolerance_for(run_id, metric, max(len(obs), 1)) if exp else 0.0,
                                      metric in expected.gate,
                                      uncounted))  # fmt: skip
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
    ways = {t.leaning for t in tests if t.outcome(alpha, alpha / len(tests)) == "undecided"}
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
    evidence = [_evidence_line(c, not_evidence is None, against=decide.ALPHA / len(comparisons)) for c in comparisons]
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
    evidence = [_evidence_line(c, True, alpha, alpha / len(comparisons[look]), paper.get(c.label) if last else None)
                for c in comparisons[look]] if explain else []  # fmt: skip
    uncounted = sorted(shared - set(seeds))
    if uncounted and explain:
        evidence.append(f"seeds {', '.join(map(str, uncounted))} shown nowhere above and not counted "
                        f"(the procedure counts its registered seeds in order, look by look)")  # fmt: skip
    where = f"look {look + 1} of {total}, {_n_seeds(len(seeds))}, one-sided alpha {alpha:g}"
    word = OUTCOME_VERDICT[outcome]
    next_seeds: tuple[int, ...] = ()
    if outcome == "undecided" and not last:
        word, next_seeds = PENDING, procedure.seeds_at(look + 1)[len(seeds):]
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
    shared = {claim: _shared_seeds(wide(paper), claim.runs) for claim in CLAIMS if not claim.finding}
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
    tolerance or (the set gating on claims) a claim is NOT SUPPORTED; else INCOMPLETE while runs of the
    expected seeds are missing; else UNDECIDED while a claim awaits its next look; else INCONCLUSIVE where the
    last look left a claim undecided; else RESULTS REPLICATED, with the shipped paper set only. Other
    profiles: a pipeline check."""
    failed = [f"{m.run_id} {m.metric} {m.verdict}" for m in metrics if m.gating and m.verdict == NOT_REPLICATED]
    paper_claims = [c for c in claims if not c.finding] if expected.gate_claims else []
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
    missing, step = _missing_runs(expected, observed, paper_claims)
    unchecked = [f"{c.claim_id} {c.verdict}" for c in paper_claims if c.verdict.startswith(NOT_CHECKED)]
    if missing or unchecked:
        return Verdict(INCOMPLETE, tuple(missing or unchecked), EXIT_INCOMPLETE, step)
    step = _next_step(paper_claims, observed)
    if step:
        undecided = [f"{c.claim_id} {PENDING} at look {c.look} of {c.looks}" for c in paper_claims if c.next_seeds]
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


# --- printing and the command ------------------------------------------------------------------


def _num(x: float | None, fmt: str) -> str:
    """x to fmt's decimals, "-" for none; a value that rounds to zero prints as 0.00, never -0.00."""
    places = int(fmt.rsplit(".", 1)[1].rstrip("f")) if "." in fmt else 2
    return "-" if x is None else f"{round(x, places) + 0.0:{fmt}}"


def _beside(difference: float | None, tolerance: float) -> tuple[str, str]:
    """The difference and its tolerance, at 2 decimals, or at as many more (up to decide.DECIMALS) as it
    takes to show why the verdict is what it is: +2.60 never beside a tolerance of 2.60 it missed."""
    places = 2
    if difference is not None:
        while (places < decide.DECIMALS and round(abs(difference), decide.DECIMALS) != tolerance
               and f"{abs(difference):.{places}f}" == f"{tolerance:.{places}f}"):  # fmt: skip
            places += 1
    return _num(difference, f"+.{places}f"), f"{tolerance:.{places}f}"


def format_metrics(checks: list[MetricCheck]) -> list[str]:
    verdicts = [c.verdict if c.gating or c.expected_mean is None else f"{c.verdict} (not gating)" for c in checks]
    width = max([27, *map(len, verdicts)])  # a long NOT CHECKED (...) widens the column, not the row
    lines = [
        f"{'run':3} {'metric':10} {'expected':>8} {'observed':>8} {'diff':>7} {'tol':>5}  {'verdict':{width}} "
        f"{'seeds':>5}  {'Welch 95% CI of diff':21} equivalence at the tolerance (TOST, information)"
    ]
    for c, verdict in zip(checks, verdicts, strict=True):
        ci = "" if c.difference is None else c.welch_text()
        difference, tolerance = _beside(c.difference, c.tolerance)
        lines.append(
            f"{c.run_id:3} {c.metric:10} {_num(c.expected_mean, '8.2f'):>8} {_num(c.observed_mean, '8.2f'):>8} "
            f"{difference:>7} {tolerance:>5}  {verdict:{width}} "
            f"{c.n_expected:>2}/{c.n_observed:<2}  {ci:21} {c.equivalence_text()}".rstrip()
        )
    uncounted = sorted({(c.run_id, s) for c in checks for s in c.uncounted})
    if uncounted:
        lines.append("not counted (not among the expected set's seeds): "
                     + ", ".join(f"{r} seed {s}" for r, s in uncounted))  # fmt: skip
    return lines


def format_variants(checks: list[ClaimCheck]) -> list[str]:
    if not checks:
        return []
    lines = ["variants against their base (no paper value: measured, not judged; they never change the exit code):"]
    for c in checks:
        lines.append(f"{c.statement}: {c.verdict}")
        lines.extend(f"     {e}" for e in c.evidence)
    return lines


CLAIMS_HEADER = (f"claims of the paper, from the re-run alone (paired by seed; one-sided paired t-tests, 5% in "
                 f"all, at least {decide.MIN_SEEDS} shared seeds):")  # fmt: skip
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
    given = profile or run_profile  # what the user or the results say, if anything
    profile = given or "paper"
    source = f"--per-seed {per_seed}" if per_seed else f"--results-dir {results_dir or Path('results')}"
    json_out = json_out or (
        Path("check_report.json") if per_seed else (results_dir or Path("results")) / "check_report.json"
    )
    try:
        if expected_dir is None:
            root = find_expected_root([Path.cwd(), Path(__file__).resolve().parent])
            expected_dir = expected_dir_for(profile, root)
            if not (expected_dir / "tolerances.toml").is_file():  # a state to report, not an error
                line = (f"{INCOMPLETE} (no expected set for profile {profile}: {expected_dir / 'tolerances.toml'} "
                        "does not exist; uh aggregate and uh report show the numbers)")  # fmt: skip
                click.echo(f"re-run {source} (profile {profile})\nverdict: {line} -> exit {EXIT_INCOMPLETE}")
                _write_report(json_out, {"source": source, "profile": profile, "verdict": line,
                                         "exit_code": EXIT_INCOMPLETE}, EXIT_INCOMPLETE)  # fmt: skip
                click.get_current_context().exit(EXIT_INCOMPLETE)
        expected = load_expected(expected_dir)
    except (ExpectedError, ResultError) as e:
        raise InputError(str(e)) from None
    if given and given != expected.profile:
        raise InputError(f"re-run profile {profile!r} but {expected_dir} holds profile {expected.profile!r}")
    metrics = compare(expected, observed)
    if metrics and all(m.verdict == NO_EXPECTATION for m in metrics):
        raise InputError(f"no run ID of the re-run has expected values in {expected_dir}")
    claims = check_claims(observed, expected.profile, expected.procedure,
                          paper=paper_effects(expected.per_seed) if expected.profile == "paper" else None)
    variants = check_variants(observed)
    verdict = judge(expected, observed, metrics, claims)

    paper_claims, findings = [c for c in claims if not c.finding], [c for c in claims if c.finding]
    click.echo(f"re-run {source} (profile {expected.profile}) vs expected {expected.describe()}")
    gating = ", ".join(expected.gate)
    click.echo("\n".join([*format_metrics(metrics), "", *format_claims(claims), *format_variants(variants), ""]))
    click.echo(
        f"metrics: {tally(m.verdict for m in metrics)} ({gating} gate); "
        f"claims: {tally(c.verdict for c in paper_claims)} "
        f"({'gate' if expected.gate_claims else 'do not gate'} the exit code); "
        f"findings beyond the paper: {tally(c.verdict for c in findings)} (never gate)"
        + (f"; variants: {sum(c.verdict == MEASURED for c in variants)} measured, "
           f"{sum(c.verdict != MEASURED for c in variants)} not checked (never gate)" if variants else "")
    )
    click.echo(f"verdict: {verdict.line} -> exit {verdict.code}")

    report: dict[str, Any] = {
        "source": source,
        "profile": expected.profile,
        "expected_dir": str(expected_dir),
        "expected_sha256": expected.sha256,
        "shipped_paper_set": expected.shipped,
        "tolerance": expected.tolerance if expected.rule is None else {"derive": asdict(expected.rule)},
        "gate": list(expected.gate),
        "claims_gate_exit_code": expected.gate_claims,
        "procedure": None if expected.procedure is None else asdict(expected.procedure),
        "verdict": verdict.line,
        "next_step": verdict.next_step,
        "metrics": [m.to_dict() for m in metrics],
        "claims": [asdict(c) for c in claims],
        "variants": [asdict(c) for c in variants],
        "exit_code": verdict.code,
    }
    _write_report(json_out, report, verdict.code)
    click.echo(f"wrote {json_out}")
    click.get_current_context().exit(verdict.code)


def _write_report(path: Path, report: dict[str, Any], code: int) -> None:
    try:
        write_json_atomic(path, report)
    except OSError as e:
        raise UnwritableReport(
            f"cannot write {path} ({e.strerror or e}); the verdicts above stand (exit {code}) but are not "
            "saved; pass a writable --json-out"
        ) from None
