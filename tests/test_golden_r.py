"""The golden R: one smoke run's accuracy matrix (B3, seed 1993, fp32, one CPU thread), every task after every
task, pinned bit for bit in tests/golden/B3-smoke-1993.json, so that a change to R is a decision, not an accident.

R depends on the kind of CPU (the CPU, the instruction set ATen's kernels use, ONEDNN_MAX_CPU_ISA:
docs/testing.md), so the file holds one R per kind; on a kind it does not hold the test is skipped, naming the
command that adds it. `UH_GOLDEN_R=derive` re-derives this kind's R deliberately (docs/testing.md): the run's R,
its settings and the code that made it (result.json's provenance) replace the entry, atomically.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from uniform_herding.runs.results import write_json_atomic

GOLDEN = Path(__file__).parent / "golden" / "B3-smoke-1993.json"
RUN = ["run", "B3", "--seed", "1993", "--profile", "smoke", "--precision", "32-true", "--device", "cpu"]
THREADS = {"UH_CPU_THREADS": "1", "OMP_NUM_THREADS": "1"}
DERIVE = "UH_GOLDEN_R=derive .venv/bin/python -m pytest tests/test_golden_r.py"


def smoke_run(results: Path) -> dict:
    """result.json of `uh run B3 --seed 1993 --profile smoke --precision 32-true --device cpu` in a process of its
    own, one thread, no other UH_ setting (UH_COMPILE, UH_STEP would change R); the CPU caps pass through."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("UH_")} | THREADS
    command = [sys.executable, "-m", "uniform_herding", *RUN, "--data-dir", str(results / "data")]
    done = subprocess.run([*command, "--results-dir", str(results)], env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr
    return json.loads((results / "B3" / "seed-1993" / "result.json").read_text())


def cpu_kind(result: dict) -> str:
    """The CPU, the instruction set ATen's kernels used and oneDNN's cap where one is set, as result.json's
    environment.cpu records them (runs/run.py's cpu_name): each changes R on its own."""
    return result["environment"]["cpu"]


def exact(R: list[list[float | None]]) -> list[list[str | None]]:
    """R's entries as float.hex: equal lists are bitwise equal (0.0 and -0.0 too differ)."""
    return [[None if v is None else float(v).hex() for v in row] for row in R]


def entry(result: dict) -> dict:
    """What the golden file keeps of a run: R (as written and as hex), the settings and stack that fix its
    numbers, the data, and the code it was derived at."""
    env, provenance = result["environment"], result["provenance"]
    return {
        "R": result["R"],
        "R_hex": exact(result["R"]),
        "settings": {k: env[k] for k in ("cpu_threads", "precision", "compile", "deterministic")},
        "stack": {k: env[k] for k in ("python", "torch", "lightning")},
        "data_md5": env["data_md5"],
        "derived_at": {k: provenance[k] for k in ("git_revision", "tree_modified", "code_sha256")},
        "finished": result["finished"],
    }


def derive(result: dict) -> None:
    """Add or replace this kind's entry in the golden file (UH_GOLDEN_R=derive)."""
    golden = json.loads(GOLDEN.read_text()) if GOLDEN.exists() else {}
    kinds = golden.get("kinds", {}) | {cpu_kind(result): entry(result)}
    about = "R of one smoke run by CPU kind, compared bit for bit by tests/test_golden_r.py (docs/testing.md)"
    command = " ".join(["uh", *RUN]) + ", with " + " ".join(f"{k}={v}" for k, v in THREADS.items())
    write_json_atomic(
        GOLDEN, {"about": about, "command": command, "derive": DERIVE, "kinds": dict(sorted(kinds.items()))}
    )


@pytest.mark.trains
def test_the_smoke_runs_R_is_the_golden_R_bit_for_bit(tmp_path):
    """B3's smoke run, seed 1993, fp32, one thread, on this CPU kind: R equals the stored R bit for bit. A change
    to the training code that changes R fails here until R is re-derived, deliberately, with the smoke set."""
    asked = os.environ.get("UH_GOLDEN_R")
    if asked not in (None, "", "derive"):
        pytest.fail(f"UH_GOLDEN_R={asked!r}: set UH_GOLDEN_R=derive to re-derive the golden R, or unset it", False)
    result = smoke_run(tmp_path)
    if asked == "derive":
        derive(result)
    kinds, kind = json.loads(GOLDEN.read_text())["kinds"], cpu_kind(result)
    if kind not in kinds:
        pytest.skip(f"no golden R for the CPU kind {kind!r} (it holds {sorted(kinds)}); add it with `{DERIVE}`")
    golden, made = kinds[kind], entry(result)
    assert made["settings"] == golden["settings"]
    # data_md5 is the synthetic archive's bytes, which differ between Python 3.11 and 3.12 (the R they give does not:
    # CI's 3.12 run against the golden derived under 3.11): recorded beside R, named when R differs
    assert made["R_hex"] == golden["R_hex"], (
        f"R changed on {kind!r}: {made['R']}, not the golden {golden['R']} (derived at {golden['derived_at']}, "
        f"{golden['stack']}, archive md5 {golden['data_md5']}; this run {made['stack']}, archive md5 "
        f"{made['data_md5']}). If deliberate, re-derive it (`{DERIVE}`) together with the smoke set "
        "(expected_results/README.md)"
    )
