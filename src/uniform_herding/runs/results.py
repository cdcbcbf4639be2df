"""Result files: atomic writes, reading and validating result.json, the per-seed table.

Every number downstream (aggregation, the check, the report) is read through this module, so a
malformed or mismatched file fails here with one line naming the file and what is wrong.
"""

from __future__ import annotations

import io
import json
import math
import os
import tempfile
from collections import Counter, defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import pandas as pd

from uniform_herding.catalogue import RUNS, ConfigError, check_id, is_variant, record, resolve
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.method.metrics import METRICS, PAPER, REPORTED
from uniform_herding.runs import schemas
from uniform_herding.runs.jsonfiles import ResultError, UnreadableJSON, check_schema, parse_json, read_json

PER_SEED_COLUMNS: tuple[str, ...] = ("run_id", "seed", *METRICS)
RERUN = "restore the result.json that uh run wrote, or re-run it (uh run --force)"
# How far below -forgetting a per-seed bwt may lie: each of the two rounded to 2 decimals, 0.005 apart at most.
BOUND_ROUNDING = 0.01 + 1e-9  # 1e-9: the float error of the sum


class StaleResult(ResultError):
    """A result of this very run (run ID, seed, profile) that is no longer valid: --force may replace it."""


def current_umask() -> int:
    """The process's umask (reading it means setting it: set it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: Path | str, fill: Callable[[BinaryIO], object], replace: bool = True) -> None:
    """Write what `fill` writes into the file it is handed so that `path` holds either its old content or all of
    the new one, never part (a large file, a bundle, is streamed rather than held in memory).

    The temp file is unique per process and fsynced before the rename, and the folder after it, so
    a kill, a crash or a full disk (ENOSPC at write or fsync) leaves the old file and no temp file.
    With replace=False an existing `path` is kept and FileExistsError raised (a hard link, not a rename).
    The file gets the mode a plain open() would give it (0666 less the umask), not mkstemp's 0600.
    A `path` that exists and is not a regular file (/dev/null, a FIFO: `--json-out /dev/null`) is written in place:
    a rename would put a file where the device was, which as root breaks every program that writes to it.
    """
    path = Path(path)
    if path.exists() and not path.is_file():
        with path.open("wb") as f:
            fill(f)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w+b") as f:
            os.fchmod(f.fileno(), 0o666 & ~current_umask())  # mkstemp makes 0600; others may need to read
            fill(f)
            f.flush()
            os.fsync(f.fileno())
        if replace:
            os.replace(tmp, path)
        else:
            os.link(tmp, path)
            Path(tmp).unlink()
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # makes the rename itself durable
    finally:
        os.close(folder)


def write_bytes_atomic(path: Path | str, data: bytes, replace: bool = True) -> None:
    """Atomic, durable write of `data` (see write_atomic)."""
    write_atomic(path, lambda f: f.write(data), replace)


def write_text_atomic(path: Path | str, text: str, replace: bool = True) -> None:
    """Atomic, durable write of UTF-8 text (see write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode("utf-8"), replace)


def write_json_atomic(path: Path | str, obj: Any, replace: bool = True) -> None:
    """Serialise first, then write atomically: an unserialisable object leaves `path` untouched."""
    write_text_atomic(path, json.dumps(obj, indent=2, allow_nan=False) + "\n", replace)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def result_path(results_dir: Path, run_id: str, seed: int) -> Path:
    return results_dir / run_id / f"seed-{seed}" / "result.json"


def validate_result(result: Any, path: Path) -> dict[str, Any]:
    """The one definition of a valid result, shared by run (is it done?), aggregate, check and report.

    A valid result has the types its schema gives (schemas.RESULT: every key the code reads), names a known run ID
    (or canonical variant ID, with its variant record), seed and profile, was written by this config version with
    exactly the config that ID has under that profile, and holds R in the form uh run writes (check_R) and finite
    metrics, each in its declared range (metrics.py) and equal to what R gives (check_metrics_of_R); every reader
    takes the metrics from R (per_seed_table), never these stored copies. Its code (`provenance`) is optional:
    results written before it was recorded still load (uh check names them: provenance.made_by).
    """
    check_schema(result, schemas.RESULT, path, RERUN)
    check_config(result, path)
    check_R(result["R"], result["config"]["n_tasks"], path)
    check_epoch_losses(result.get("tasks", []), result["config"]["epochs"], path)
    check_metric_ranges(result["metrics"], path)
    check_metrics_of_R(result, path)
    return result


def check_config(result: dict[str, Any], path: Path) -> None:
    """Refuse a result whose run ID is unknown (a run ID or a canonical variant ID), written by another config
    version, or whose config or variant record is not what that ID has under its profile."""
    try:
        check_id(result["run_id"])  # a run ID or a canonical variant ID
    except ConfigError as e:
        raise ResultError(f"{path}: {e}") from None
    if result["config_version"] != CONFIG_VERSION:
        raise ResultError(
            f"{path}: config_version {result['config_version']!r}, this code is {CONFIG_VERSION}; re-run it"
        )
    try:
        expected = resolve(result["run_id"], result["profile"]).to_dict()
    except ConfigError as e:  # a variant whose settings do not work together under this profile
        raise ResultError(f"{path}: {e}") from None
    config = result["config"]
    if config != expected:
        differs = sorted(k for k in expected if config.get(k) != expected[k])
        raise ResultError(
            f"{path}: config differs from {result['run_id']}'s under profile {result['profile']} "
            f"(in {', '.join(differs) or 'extra keys'}); re-run it"
        )
    if result.get("variant") != record(result["run_id"]).get("variant"):
        raise ResultError(
            f"{path}: records variant {result.get('variant')!r}, not {result['run_id']}'s "
            f"{record(result['run_id']).get('variant')!r}; re-run it"
        )


def check_metric_ranges(metrics: dict[str, Any], path: Path) -> None:
    """Refuse metrics that lack one of the paper's, or hold one that is not a finite number in the range it declares
    (metrics.py); a reported metric is optional (results written before it lack it)."""
    absent = [m for m in METRICS if m not in metrics]
    if absent:
        raise ResultError(f"{path}: metrics lack {', '.join(absent)}")
    given = {name: m for name, m in {**PAPER, **REPORTED}.items() if name in metrics}
    bad = [name for name in given if not _is_number(metrics[name])]
    if bad:
        raise ResultError(f"{path}: metric(s) {', '.join(bad)} not a finite number")
    out_of_range = [
        f"{name} {metrics[name]} (not in [{m.low:g}, {m.high:g}])"
        for name, m in given.items()
        if not m.low <= metrics[name] <= m.high
    ]
    if out_of_range:
        raise ResultError(f"{path}: metric(s) out of range: {', '.join(out_of_range)}")


def check_epoch_losses(tasks: list[dict[str, Any]], epochs: int, path: Path) -> None:
    """Refuse a task whose epoch_loss, where recorded, has not one entry per epoch, as train.fit_task records them:
    uh report stacks them into one array (tasks x epochs)."""
    for i, task in enumerate(tasks):
        if len(task.get("epoch_loss", [None] * epochs)) != epochs:
            raise ResultError(
                f"{path}: $.tasks[{i}].epoch_loss has {len(task['epoch_loss'])} entries, not one for each of the "
                f"config's {epochs} epochs; {RERUN}"
            )


def _R_problem(R: Any, n_tasks: int) -> str | None:
    """What keeps `R` from uh run's form (run.assemble: metrics.square of the recorded rows), or None."""
    if not isinstance(R, list) or not all(isinstance(row, list) for row in R):
        return "it is not a list of rows"
    if len(R) != n_tasks:
        return f"it has {len(R)} rows"
    for i, row in enumerate(R):
        if len(row) != n_tasks:
            return f"row {i} has length {len(row)}"
        for j, x in enumerate(row):
            if j <= i and not (_is_number(x) and 0 <= x <= 100):
                return f"row {i} entry {j} is {x!r}"
            if j > i and x is not None:
                return f"row {i} entry {j} is {x!r}, not null"
    return None


def check_R(R: Any, n_tasks: int, path: Path) -> None:
    """Refuse an R that is not n_tasks x n_tasks with row i's i + 1 accuracies then nulls, as uh run writes it.

    A short R gives metrics of fewer tasks than the config's (checked as the paper's all the same), and a ragged
    one cannot be a matrix (uh report's); refused here, every reader refuses it alike, in one line.
    """
    problem = _R_problem(R, n_tasks)
    if problem is not None:
        raise ResultError(
            f"{path}: R must be {n_tasks} x {n_tasks} (n_tasks), row i holding i + 1 accuracies in [0, 100] then "
            f"nulls, as uh run writes it, but {problem}; re-run it (uh run --force)"
        )


def decimals(value: float) -> int:
    """How many decimals `value` is written with in JSON (its shortest repr): 44.63 has 2, 50 and 50.0 none."""
    mantissa, _, exponent = repr(float(value)).partition("e")
    digits = len(mantissa.partition(".")[2].rstrip("0"))
    return max(0, digits - int(exponent or 0))


def check_metrics_of_R(result: dict[str, Any], path: Path) -> None:
    """Refuse metrics that R does not give: each stored metric (the paper's and every reported one present) must
    equal the one computed from R (check_R's form), up to the rounding of the decimals it is stored with (half a
    unit of its last decimal; a value uh run wrote is R's to the last bit). Anything else is a file whose numbers
    were edited or mixed up. Downstream, R's own values are used (per_seed_table), not the rounded copies."""
    for name, metric in {**PAPER, **REPORTED}.items():
        if name not in result["metrics"]:
            continue
        stored, recomputed = float(result["metrics"][name]), metric.of(result["R"])
        places = decimals(stored)
        if abs(stored - recomputed) > 0.5 * 10.0**-places + 1e-9:  # 1e-9: the float error of a mean of <= 100
            raise ResultError(
                f"{path}: {result['run_id']} seed {result['seed']}: stored {name} {stored:.{min(places, 4)}f} is "
                f"not what its R gives ({recomputed:.4f}); the metrics were not computed from this R, "
                f"so re-run it (uh run --force) or restore the result.json that uh run wrote"
            )


def load_result(path: Path | str) -> dict[str, Any]:
    """Read one result.json and validate it (validate_result)."""
    path = Path(path)
    return validate_result(parse_json(path, RERUN), path)


def is_finished(out: Path, run_id: str, seed: int, profile: str) -> bool:
    """Whether `out` holds the valid result of this run ID, seed and profile (`uh run` skips it).

    Anything else at that path is refused, never skipped and never silently replaced: --force is
    offered only for a stale copy of this very run (same run ID, seed and profile; old config,
    damaged metrics).
    """
    if not out.exists():
        return False
    try:
        found = parse_json(out, RERUN)
    except UnreadableJSON as e:
        raise ResultError(f"{out} is unreadable ({e.why}); move it away and run again") from None
    same_run = isinstance(found, dict) and (found.get("run_id"), found.get("seed"), found.get("profile")) == (
        run_id,
        seed,
        profile,
    )
    if not same_run:
        names = ("run_id", "seed", "profile")
        holds = ", ".join(f"{k} {found.get(k)!r}" for k in names) if isinstance(found, dict) else "no object"
        raise ResultError(
            f"{out} holds a result of another run ({holds}), not {run_id} seed {seed} of profile "
            f"{profile}; move it away, or choose another --results-dir"
        )
    try:
        validate_result(found, out)
    except ResultError as e:
        raise StaleResult(f"{e}: a stale copy of this run; rerun with --force to replace it") from None
    return True


def done_already(out: Path, run_id: str, seed: int, profile: str, force: bool, echo: Callable[[str], None]) -> bool:
    """Whether `uh run` skips the run, saying so with `echo`: its valid result is at `out` and --force is not given.
    The one test, for uh run's pairs before any job starts and for the run itself under its lock. Anything else at
    `out` is refused (is_finished); --force replaces a stale copy of this very run, nothing else."""
    try:
        done = is_finished(out, run_id, seed, profile) and not force
    except StaleResult:
        if not force:
            raise
        done = False
    if done:
        echo(f"{run_id} seed {seed}: done already ({out}); --force reruns it")
    return done


# --- a results dir belongs to one profile ------------------------------------------------------

PROFILE_FILE = "profile.json"


def dir_profile(results_dir: Path) -> str | None:
    """The profile recorded in `results_dir/profile.json`; None when there is none (a new or old dir)."""
    marker = results_dir / PROFILE_FILE
    if not marker.exists():
        return None
    remedy = 'write {"profile": NAME} in it, or remove it: uh run records the profile again'
    return read_json(marker, schemas.PROFILE, remedy)["profile"]


def _profiles_found(results_dir: Path) -> dict[str, list[Path]]:
    """result.json files under `results_dir` by the profile they name (those that name none left out: load_result
    names what is wrong with them)."""
    found: dict[str, list[Path]] = {}
    for path in sorted(results_dir.glob("*/seed-*/result.json")):
        try:
            result = parse_json(path, RERUN)
        except ResultError:
            continue
        profile = result.get("profile") if isinstance(result, dict) else None
        if isinstance(profile, str):
            found.setdefault(profile, []).append(path)
    return found


def _names(results_dir: Path, paths: list[Path], most: int = 4) -> str:
    shown = ", ".join(str(p.relative_to(results_dir)) for p in paths[:most])
    return shown + (f" and {len(paths) - most} more" if len(paths) > most else "")


def _mismatch(results_dir: Path, found: str, profile: str, where: str) -> ResultError:
    return ResultError(
        f"{results_dir} holds results of profile {found!r} ({where}), not {profile!r}: a results dir "
        f"holds one profile; choose another --results-dir for profile {profile!r}"
    )


def check_dir_profile(results_dir: Path, profile: str) -> bool:
    """Refuse a results dir of another profile, before anything is written; True if it is recorded."""
    found = dir_profile(results_dir)
    if found is None:
        others = {p: paths for p, paths in _profiles_found(results_dir).items() if p != profile}
        if others:
            p, paths = next(iter(others.items()))
            raise _mismatch(results_dir, p, profile, _names(results_dir, paths))
        return False
    if found != profile:
        raise _mismatch(results_dir, found, profile, f"recorded in {results_dir / PROFILE_FILE}")
    return True


def claim_dir(results_dir: Path, profile: str) -> None:
    """Record `profile` as the results dir's (first run), or refuse a dir of another profile.

    The marker is created exclusively, so of two first runs with different profiles one is refused.
    """
    if check_dir_profile(results_dir, profile):
        return
    try:
        write_json_atomic(results_dir / PROFILE_FILE, {"profile": profile}, replace=False)
    except FileExistsError:
        pass
    except OSError as e:
        raise ResultError(f"cannot write to {results_dir} ({e.strerror}); choose a writable --results-dir") from None
    check_dir_profile(results_dir, profile)


def load_results(results_dir: Path | str) -> list[dict[str, Any]]:
    """Every `<RUN>/seed-<SEED>/result.json` under `results_dir`, all of one profile, each validated."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ResultError(f"{results_dir}: no such results directory")
    recorded = dir_profile(results_dir)
    by_profile = _profiles_found(results_dir)
    if recorded is not None and set(by_profile) - {recorded}:
        foreign = [p for name, paths in by_profile.items() if name != recorded for p in paths]
        raise ResultError(
            f"{results_dir} belongs to profile {recorded!r} ({PROFILE_FILE}) but holds results of another "
            f"profile: {_names(results_dir, foreign)}; move them to a results dir of their own"
        )
    if len(by_profile) > 1:
        listed = "; ".join(f"{p}: {_names(results_dir, paths)}" for p, paths in sorted(by_profile.items()))
        raise ResultError(f"{results_dir} mixes profiles ({listed}); move one profile's results to another results dir")
    results = []
    for path in sorted(results_dir.glob("*/seed-*/result.json")):
        result = load_result(path)
        where = (path.parent.parent.name, path.parent.name)
        if where != (result["run_id"], f"seed-{result['seed']}"):
            raise ResultError(f"{path}: holds {result['run_id']} seed {result['seed']}, not {'/'.join(where)}")
        results.append(result)
    if not results:
        raise ResultError(f"{results_dir}: no <RUN>/seed-<SEED>/result.json found")
    return results


def results_profile(results: list[dict[str, Any]]) -> str:
    """The one profile all `results` were run under; a mix cannot be compared or averaged."""
    profiles = sorted({r["profile"] for r in results})
    if len(profiles) != 1:
        raise ResultError(f"results mix profiles {', '.join(profiles)}; keep one profile per results dir")
    return profiles[0]


STACK_LABEL = "{device}, torch {torch}, python {python}, {precision}, compile {compile}, step {step}"  # result.json


def stack_labels(results: list[dict[str, Any]]) -> Counter[str]:
    """Each stack `results` ran on as one label ("cuda: Tesla T4, torch 2.11.0+cu128, python 3.11.9, 16-mixed,
    compile off, step graph") and its number of runs, in the order first met: uh stacks and uh check --bundle name
    stacks so. A field a result does not record is "?" (`step`: results made before the CUDA-graph step)."""
    return Counter(STACK_LABEL.format_map(defaultdict(lambda: "?", r.get("environment") or {})) for r in results)


def per_seed_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run ID and seed (PER_SEED_COLUMNS, then the REPORTED metrics), from results of a single
    profile. Each metric is computed from the result's R, never read from its stored copy: that copy may be
    rounded (check_metrics_of_R lets 46 stand for 46.5), and one written before a reported metric lacks it."""
    results_profile(results)
    rows = [(r["run_id"], r["seed"], *(float(m.of(r["R"])) for m in {**PAPER, **REPORTED}.values())) for r in results]
    return pd.DataFrame(rows, columns=[*PER_SEED_COLUMNS, *REPORTED])


def read_per_seed_csv(path: Path | str, data: bytes | None = None) -> pd.DataFrame:
    """Read a per-seed CSV (the paper's, an expected set, a saved re-run) and validate it; from `data`, the
    file's bytes already read, where given (a caller that hashes them parses the same bytes)."""
    path = Path(path)
    try:
        df = pd.read_csv(path if data is None else io.BytesIO(data), dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ResultError(f"{path}: cannot read CSV ({str(e).splitlines()[0]})") from None
    if tuple(df.columns) != PER_SEED_COLUMNS:
        raise ResultError(f"{path}: columns {','.join(df.columns)}; expected {','.join(PER_SEED_COLUMNS)}")
    if df.empty:
        raise ResultError(f"{path}: no rows")
    _check_run_ids(df, path)
    _to_numbers(df, path)
    _check_rows(df, path)
    return df


def _check_run_ids(df: pd.DataFrame, path: Path) -> None:
    """Refuse a row of an unknown run ID, or of a variant ID that is not canonical."""
    unknown = sorted(r for r in set(df["run_id"]) if r not in RUNS and not is_variant(r))
    if unknown:
        raise ResultError(f"{path}: unknown run ID(s) {', '.join(unknown)}; known: {', '.join(RUNS)}")
    for run_id in sorted(set(df["run_id"]) - set(RUNS)):
        try:
            check_id(run_id)
        except ConfigError as e:
            raise ResultError(f"{path}: {e}") from None


def _to_numbers(df: pd.DataFrame, path: Path) -> None:
    """The seed and metric columns, read as text, made numbers in place: finite, integer seeds, each in its range
    (numpy's seeds; the range each metric declares)."""
    for column in PER_SEED_COLUMNS[1:]:
        values = pd.to_numeric(df[column], errors="coerce").astype(float)
        bad = df.loc[~np.isfinite(values), column]
        if not bad.empty:
            raise ResultError(f"{path}: non-numeric {column} {bad.iloc[0]!r} (line {bad.index[0] + 2})")
        df[column] = values
    if not (df["seed"] == df["seed"].round()).all():
        raise ResultError(f"{path}: seeds must be integers")
    df["seed"] = df["seed"].astype(int)
    for column, (low, high) in {"seed": (0, 2**32 - 1), **{m: (PAPER[m].low, PAPER[m].high) for m in METRICS}}.items():
        bad = df.loc[~df[column].between(low, high), column]
        if not bad.empty:
            raise ResultError(
                f"{path}: {column} {bad.iloc[0]} out of range {low:.10g}..{high:.10g} (line {bad.index[0] + 2})"
            )


def _check_rows(df: pd.DataFrame, path: Path) -> None:
    """Refuse a row that no R gives (bwt below -forgetting: BWT >= -F for every R, metrics.py) and a run ID and seed
    given twice."""
    below = df[df["bwt"] < -df["forgetting"] - BOUND_ROUNDING]
    if not below.empty:
        row = below.iloc[0]
        raise ResultError(
            f"{path}: {row['run_id']} seed {row['seed']} (line {below.index[0] + 2}): bwt {row['bwt']:.2f} is below "
            f"-forgetting {-row['forgetting']:.2f}, which no R gives (BWT >= -F); correct the row or write the table "
            f"again (uh aggregate --per-seed-out)"
        )
    duplicated = df[df.duplicated(["run_id", "seed"])]
    if not duplicated.empty:
        run_id, seed = duplicated.iloc[0][["run_id", "seed"]]
        raise ResultError(f"{path}: duplicate row for {run_id} seed {seed}")


def write_per_seed_csv(path: Path | str, per_seed: pd.DataFrame) -> None:
    """Write the per-seed table atomically, in the column order every reader expects.

    Four decimals: a test-set accuracy is a ratio of image counts, so more digits are float noise.
    """
    write_text_atomic(path, per_seed[list(PER_SEED_COLUMNS)].to_csv(index=False, float_format="%.4f"))
