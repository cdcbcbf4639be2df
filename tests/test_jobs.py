"""`uh run --jobs N`: pairs at once give the same results, stop after a failure, pass signals on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from uniform_herding.jobs import run_all
from uniform_herding.results import read_per_seed_csv
from uniform_herding.run import result_path

EXPECTED = Path(__file__).parents[1] / "expected_results" / "smoke" / "per_seed.csv"
ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def uh_run(*args: str, **popen: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "uniform_herding", "run", *args],
        env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, **popen,
    )  # fmt: skip


def test_two_seeds_at_once_give_the_committed_one_at_a_time_results(tmp_path):
    """The smoke expectations were made one run at a time; two concurrent processes give the same."""
    dirs = ["--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results")]
    proc = uh_run("B0", "--seed", "1993", "--seed", "2023", "--profile", "smoke", "--jobs", "2", *dirs)
    output, _ = proc.communicate()
    assert proc.returncode == 0, output
    expected = read_per_seed_csv(EXPECTED).set_index(["run_id", "seed"])
    for seed in (1993, 2023):
        assert f"B0 seed {seed}: ACC" in output
        result = json.loads(result_path(tmp_path / "results", "B0", seed).read_text())
        assert result["environment"]["cpu_threads"] == 1
        for metric, value in result["metrics"].items():
            assert round(value, 4) == expected.loc[("B0", seed), metric], (seed, metric)


def test_nothing_new_starts_after_a_failure():
    """Three commands, two at a time: the first two fail, so the third never starts."""
    fail = [sys.executable, "-c", "import sys; print('failing'); sys.exit(3)"]
    never = [sys.executable, "-c", "print('third ran')"]
    lines: list[str] = []
    assert run_all([fail, fail, never], jobs=2, echo=lines.append) == 3
    assert lines == ["failing", "failing"]


def test_a_signal_reaches_every_child_and_sets_the_exit_status(tmp_path):
    """SIGTERM to the parent: every running child stops (keeping its checkpoint), the parent exits 143."""
    ready = tmp_path / "ready"
    child = [sys.executable, "-c",
             "import pathlib, signal, sys, time\n"
             "signal.signal(signal.SIGTERM, lambda s, f: sys.exit(143))\n"
             f"pathlib.Path({str(ready)!r}).open('a').write('x')\n"
             "time.sleep(60)"]  # fmt: skip
    code = f"import sys; from uniform_herding.jobs import run_all; sys.exit(run_all({[child] * 3!r}, 2, print))"
    parent = subprocess.Popen([sys.executable, "-c", code], env=ENV, stdout=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while not (ready.exists() and len(ready.read_text()) == 2):
        assert time.monotonic() < deadline and parent.poll() is None, "the children did not start"
        time.sleep(0.1)
    tic = time.monotonic()
    parent.send_signal(signal.SIGTERM)
    assert parent.wait(timeout=30) == 128 + signal.SIGTERM
    assert time.monotonic() - tic < 30  # not the children's 60 s sleep: they were stopped
    assert len(ready.read_text()) == 2  # and the third never started


def test_a_concurrent_run_stopped_by_sigterm_keeps_its_checkpoints(tmp_path):
    """The real thing: two smoke seeds at once, SIGTERM after both finished a task."""
    results = tmp_path / "results"
    dirs = ["--data-dir", str(tmp_path / "data"), "--results-dir", str(results)]
    proc = uh_run("B0", "--seed", "1", "--seed", "2", "--profile", "smoke", "--jobs", "2", *dirs)
    done = set()
    assert proc.stdout is not None
    for line in proc.stdout:
        if "task 1/" in line:
            done.add(line.split()[2])
        if done == {"1", "2"}:
            break
    proc.send_signal(signal.SIGTERM)
    rest = proc.stdout.read()
    assert proc.wait(timeout=60) == 128 + signal.SIGTERM, rest
    for seed in (1, 2):
        folder = result_path(results, "B0", seed).parent
        assert (folder / "checkpoint.pt").exists() and not (folder / "result.json").exists()
    assert rest.count("stopped by SIGTERM") == 2, rest
