"""The expected set: find it, load it and verify it (tolerances.toml and the per-seed CSV it names).

One `Expected` per set: its profile, per-seed values, the tolerances stated in advance or the rule deriving them,
the gating metrics and the claims' sequential procedure. Only the shipped paper set, checked by its SHA-256
(PAPER_SET_SHA256), can award the badge. A set that cannot be used is an ExpectedError, naming the file.
"""

from __future__ import annotations

import hashlib
import math
import tomllib
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any

import pandas as pd

from uniform_herding.catalogue import PROFILES, RUNS
from uniform_herding.method.metrics import METRICS
from uniform_herding.runs.jsonfiles import one_line
from uniform_herding.runs.results import read_per_seed_csv
from uniform_herding.verdict import decide
from uniform_herding.verdict.boundaries import Design
from uniform_herding.verdict.claims import PAPER_CLAIMS

# The SHA-256 of the shipped paper set (tolerances.toml, then its per-seed CSV): only that set, stated
# before any re-run, awards the badge; tests/verdict/test_check.py recomputes it, so a change to the set is a
# change to this line, in review.
PAPER_SET_SHA256 = "63b40c200eb668343ef23be9dcc6102a6bf7eea7af3c4f7273c7d4be8a5d4da6"


class ExpectedError(ValueError):
    """An expected set (tolerances.toml, its per-seed CSV) that cannot be used; the message names the file, on one
    line."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


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
                raise ExpectedError(
                    f"{self.directory}: a derived tolerance needs the same seeds (2 or more) for "
                    "every run ID of the set"
                )
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

    @cached_property
    def seeds(self) -> tuple[int, ...]:
        """The expected set's seeds, in the procedure's order where it registers one, else the CSV's."""
        own = [int(s) for s in dict.fromkeys(self.per_seed["seed"])]
        return tuple(sorted(own, key=self.registered.index)) if self.procedure else tuple(own)

    @cached_property
    def run_ids(self) -> tuple[str, ...]:
        """The run IDs a re-run must hold for the check to pass (`uh check --run-ids` names fewer): the set's run IDs
        of the paper, those `uh run all` runs; in a set of run IDs beyond the paper alone (cifar10-cpu-long: r1, r2),
        those. The smoke set's r1-r3, run by `uh run refresh`, are judged where they are there, never asked for."""
        held = tuple(dict.fromkeys(self.per_seed["run_id"]))
        return tuple(r for r in held if r in RUNS and not RUNS[r].beyond_paper) or held

    @property
    def registered(self) -> tuple[int, ...]:
        """Every seed a re-run may count, in order: the procedure's, else the set's own."""
        return self.procedure.seeds if self.procedure else tuple(dict.fromkeys(int(s) for s in self.per_seed["seed"]))

    @property
    def shipped(self) -> bool:
        """The paper set this artifact ships, known by its content (a byte-identical copy anywhere is it; one byte
        changed is another set): the only one that awards the badge."""
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
    raise ExpectedError("expected_results/ not found above the current directory or the package; pass --expected DIR")


def expected_dir_for(profile: str, root: Path) -> Path:
    """The paper's set is expected_results/ itself; any other profile's is expected_results/<profile>/."""
    return root if profile == "paper" else root / profile


def _is_tolerance(value: object) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and 0 <= value < math.inf


def _procedure(doc: dict[str, Any], seeds: tuple[int, ...], where: Path) -> decide.Procedure | None:
    """The [procedure] table: registered seeds (the set's own first, in its order), looks, the supporting level per
    look (alpha), and, for exact boundaries, how they were derived ([procedure.boundaries]) and the contradicting
    levels per claim size m ([procedure.contradicts]), one for each size of the paper's claims."""
    table = doc.get("procedure")
    if table is None:
        return None
    try:
        unknown = set(table) - {"seeds", "looks", "alpha", "contradicts", "boundaries"}
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(sorted(unknown))}")
        design = Design(**table["boundaries"]) if "boundaries" in table else None
        contradicts = (
            {int(m): tuple(levels) for m, levels in table["contradicts"].items()} if "contradicts" in table else None
        )
        procedure = decide.Procedure(
            tuple(table["seeds"]), tuple(table["looks"]), tuple(table["alpha"]), contradicts, design
        )
    except (TypeError, KeyError, ValueError, AttributeError) as e:
        raise ExpectedError(f"{where}: [procedure] needs seeds, looks and alpha ({e})") from None
    if set(procedure.seeds_at(0)) != set(seeds):
        raise ExpectedError(
            f"{where}: [procedure] seeds must begin with the set's own seeds {sorted(seeds)}, "
            "and its first look must count exactly them"
        )
    sizes = {len(c.comparisons) for c in PAPER_CLAIMS}
    if contradicts is not None and set(contradicts) != sizes:
        raise ExpectedError(
            f"{where}: [procedure.contradicts] must give levels for claims of exactly "
            f"{', '.join(map(str, sorted(sizes)))} comparisons"
        )
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
    raw, doc = _read_toml(toml_path)
    tolerance = _tolerance(doc, toml_path)
    gate_claims, gate = _gates(doc, toml_path)
    csv_path, csv = _per_seed_bytes(doc, directory, toml_path)
    per_seed = read_per_seed_csv(csv_path, csv)
    for metric, value in tolerance.items():
        if isinstance(value, dict) and set(value) != set(per_seed["run_id"]):
            raise ExpectedError(f"{toml_path}: [tolerance.{metric}] must set exactly the run IDs of {csv_path.name}")
    digest = hashlib.sha256(raw + csv).hexdigest()
    rule = _rule(doc, len(gate) * per_seed["run_id"].nunique(), toml_path)
    expected = Expected(directory, doc["profile"], per_seed, tolerance, gate_claims, gate, None, digest, rule)
    expected = replace(expected, procedure=_procedure(doc, expected.seeds, toml_path))
    if expected.rule is not None:
        expected.spreads  # noqa: B018 (refuse a set the rule cannot use now, not at the first metric)
    return expected


def _read_toml(toml_path: Path) -> tuple[bytes, dict[str, Any]]:
    """tolerances.toml's bytes (hashed with the CSV's) and its tables, of the keys a set may have and a known
    profile."""
    try:
        raw = toml_path.read_bytes()
        doc = tomllib.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ExpectedError(f"{toml_path}: cannot read TOML ({e})") from None
    unknown = set(doc) - {"profile", "per_seed", "tolerance", "derive", "claims", "gate", "procedure"}
    if unknown:
        raise ExpectedError(f"{toml_path}: unknown key(s) {', '.join(sorted(unknown))}")
    if doc.get("profile") not in PROFILES:
        raise ExpectedError(f"{toml_path}: profile must be one of {', '.join(PROFILES)}, got {doc.get('profile')!r}")
    return raw, doc


def _tolerance(doc: dict[str, Any], toml_path: Path) -> dict[str, Any]:
    """[tolerance]: a number >= 0, or a table of them by run ID, for each metric; zeros where the set gives
    [derive] instead (the rule), never both."""
    if ("tolerance" in doc) == ("derive" in doc):
        raise ExpectedError(f"{toml_path}: give either [tolerance] (the numbers) or [derive] (the rule), not both")
    tolerance = doc.get("tolerance", dict.fromkeys(METRICS, 0.0))
    if not isinstance(tolerance, dict) or set(tolerance) != set(METRICS):
        raise ExpectedError(f"{toml_path}: [tolerance] must set exactly {', '.join(METRICS)}")
    for metric, value in tolerance.items():
        values = value.values() if isinstance(value, dict) else [value]
        if not values or not all(_is_tolerance(v) for v in values):
            raise ExpectedError(
                f"{toml_path}: tolerance {metric} must be a number >= 0, or a table of them by run ID, got {value!r}"
            )
    return dict(tolerance)


def _gates(doc: dict[str, Any], toml_path: Path) -> tuple[bool, tuple[str, ...]]:
    """Whether the claims gate the exit code ([claims] gate_exit_code), and the metrics that do (gate)."""
    gate_claims = doc.get("claims", {}).get("gate_exit_code") if isinstance(doc.get("claims"), dict) else None
    if not isinstance(gate_claims, bool):
        raise ExpectedError(f"{toml_path}: [claims] gate_exit_code must be true or false")
    gate = doc.get("gate", list(METRICS))
    if not isinstance(gate, list) or not gate or not set(gate) <= set(METRICS):
        raise ExpectedError(f"{toml_path}: gate must list metrics among {', '.join(METRICS)}")
    return gate_claims, tuple(gate)


def _per_seed_bytes(doc: dict[str, Any], directory: Path, toml_path: Path) -> tuple[Path, bytes]:
    """The per-seed CSV the set names (per_seed.csv by default) and its bytes, read once: the bytes hashed are the
    bytes parsed."""
    if not isinstance(doc.get("per_seed", ""), str):
        raise ExpectedError(f"{toml_path}: per_seed must be a file name")
    csv_path = directory / doc.get("per_seed", "per_seed.csv")
    if not csv_path.is_file():
        raise ExpectedError(
            f"{csv_path} not found; produce it with `uh aggregate --results-dir results --per-seed-out {csv_path}`"
        )
    try:
        return csv_path, csv_path.read_bytes()
    except OSError as e:
        raise ExpectedError(f"{csv_path}: cannot read ({e.strerror or e})") from None
