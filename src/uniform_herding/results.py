"""Result files: atomic writes, reading and validating result.json, the per-seed table.

Every number downstream (aggregation, the check, the report) is read through this module, so a
malformed or mismatched file fails here with one line naming the file and what is wrong.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from uniform_herding.config import CONFIG_VERSION, PROFILES, RUNS

METRICS: tuple[str, ...] = ("acc", "forgetting", "bwt")
PER_SEED_COLUMNS: tuple[str, ...] = ("run_id", "seed", *METRICS)


class ResultError(ValueError):
    """A result file or per-seed table that cannot be used; the message names the file."""


def write_bytes_atomic(path: Path | str, data: bytes) -> None:
    """Write `data` so that `path` holds either its old content or all of the new one, never part.

    The temp file is unique per process and fsynced before the rename, and the folder after it, so
    a kill, a crash or a full disk (ENOSPC at write or fsync) leaves the old file and no temp file.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    folder = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(folder)  # makes the rename itself durable
    finally:
        os.close(folder)


def write_text_atomic(path: Path | str, text: str) -> None:
    """Atomic, durable write of UTF-8 text (see write_bytes_atomic)."""
    write_bytes_atomic(path, text.encode("utf-8"))


def write_json_atomic(path: Path | str, obj: Any) -> None:
    """Serialise first, then write atomically: an unserialisable object leaves `path` untouched."""
    write_text_atomic(path, json.dumps(obj, indent=2, allow_nan=False) + "\n")


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def load_result(path: Path | str) -> dict[str, Any]:
    """Read one result.json and check the keys that aggregation and the check rely on."""
    path = Path(path)
    try:
        result = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ResultError(f"{path}: cannot read JSON ({e})") from None
    if not isinstance(result, dict):
        raise ResultError(f"{path}: expected a JSON object")
    missing = [k for k in ("run_id", "seed", "profile", "config_version", "metrics", "R") if k not in result]
    if missing:
        raise ResultError(f"{path}: missing key(s) {', '.join(missing)}")
    if result["run_id"] not in RUNS:
        raise ResultError(f"{path}: unknown run ID {result['run_id']!r}; known: {', '.join(RUNS)}")
    if not isinstance(result["seed"], int) or isinstance(result["seed"], bool):
        raise ResultError(f"{path}: seed must be an integer, got {result['seed']!r}")
    if result["profile"] not in PROFILES:
        raise ResultError(f"{path}: unknown profile {result['profile']!r}; known: {', '.join(PROFILES)}")
    if result["config_version"] != CONFIG_VERSION:
        raise ResultError(
            f"{path}: config_version {result['config_version']!r}, this code is {CONFIG_VERSION}; re-run it"
        )
    metrics = result["metrics"]
    if not isinstance(metrics, dict):
        raise ResultError(f"{path}: metrics must be an object")
    absent = [m for m in METRICS if m not in metrics]
    if absent:
        raise ResultError(f"{path}: metrics lack {', '.join(absent)}")
    bad = [m for m in METRICS if not _is_number(metrics[m])]
    if bad:
        raise ResultError(f"{path}: metric(s) {', '.join(bad)} not a finite number")
    if not isinstance(result["R"], list) or not all(isinstance(row, list) for row in result["R"]):
        raise ResultError(f"{path}: R must be a list of rows")
    return result


def load_results(results_dir: Path | str) -> list[dict[str, Any]]:
    """Every `<RUN>/seed-<SEED>/result.json` under `results_dir`, checked against its location."""
    results_dir = Path(results_dir)
    if not results_dir.is_dir():
        raise ResultError(f"{results_dir}: no such results directory")
    results = []
    for path in sorted(results_dir.glob("*/seed-*/result.json")):
        result = load_result(path)
        where = (path.parent.parent.name, path.parent.name)
        if where != (result["run_id"], f"seed-{result['seed']}"):
            raise ResultError(
                f"{path}: holds {result['run_id']} seed {result['seed']}, not {'/'.join(where)}"
            )
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


def per_seed_table(results: list[dict[str, Any]]) -> pd.DataFrame:
    """One row per run ID and seed (columns PER_SEED_COLUMNS), from results of a single profile."""
    results_profile(results)
    rows = [(r["run_id"], r["seed"], *(float(r["metrics"][m]) for m in METRICS)) for r in results]
    return pd.DataFrame(rows, columns=list(PER_SEED_COLUMNS))


def read_per_seed_csv(path: Path | str) -> pd.DataFrame:
    """Read a per-seed CSV (the paper's, an expected set, a saved re-run) and validate it."""
    path = Path(path)
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False)
    except (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError) as e:
        raise ResultError(f"{path}: cannot read CSV ({str(e).splitlines()[0]})") from None
    if tuple(df.columns) != PER_SEED_COLUMNS:
        raise ResultError(f"{path}: columns {','.join(df.columns)}; expected {','.join(PER_SEED_COLUMNS)}")
    if df.empty:
        raise ResultError(f"{path}: no rows")
    unknown = sorted(set(df["run_id"]) - set(RUNS))
    if unknown:
        raise ResultError(f"{path}: unknown run ID(s) {', '.join(unknown)}; known: {', '.join(RUNS)}")
    for column in PER_SEED_COLUMNS[1:]:
        values = pd.to_numeric(df[column], errors="coerce").astype(float)
        bad = df.loc[~np.isfinite(values), column]
        if not bad.empty:
            raise ResultError(f"{path}: non-numeric {column} {bad.iloc[0]!r} (line {bad.index[0] + 2})")
        df[column] = values
    if not (df["seed"] == df["seed"].round()).all():
        raise ResultError(f"{path}: seeds must be integers")
    df["seed"] = df["seed"].astype(int)
    duplicated = df[df.duplicated(["run_id", "seed"])]
    if not duplicated.empty:
        run_id, seed = duplicated.iloc[0][["run_id", "seed"]]
        raise ResultError(f"{path}: duplicate row for {run_id} seed {seed}")
    return df


def write_per_seed_csv(path: Path | str, per_seed: pd.DataFrame) -> None:
    """Write the per-seed table atomically, in the column order every reader expects.

    Four decimals: a test-set accuracy is a ratio of image counts, so more digits are float noise.
    """
    write_text_atomic(path, per_seed[list(PER_SEED_COLUMNS)].to_csv(index=False, float_format="%.4f"))
