"""`uh status` without Slurm: done, running (from the lock and checkpoint), queued, failed, stopped, a summary.

Slurm's states (queued, requeued, failed, cancelled) are exercised against a real cluster in test_slurm.py.
"""

from __future__ import annotations

import fcntl
import io
import json
import os
import subprocess
import sys

import pytest
import torch
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.runs.durability import seal
from uniform_herding.runs.executor import record_submission, submitit_folder


def seed_dir(results, run_id, seed):
    folder = results / run_id / f"seed-{seed}"
    folder.mkdir(parents=True)
    return folder


def checkpoint(folder, task, n_tasks=5):
    """A checkpoint as durability.Checkpoint writes it: the torch payload behind its sha256 header."""
    buffer = io.BytesIO()
    torch.save({"task": task, "config": {"n_tasks": n_tasks}, "learner": {}}, buffer)
    (folder / "checkpoint.pt").write_bytes(seal(buffer.getvalue()))


def entry(run_id, seed, job_id, folder, uh_pid, executor="local"):
    return {
        "run_id": run_id,
        "seed": seed,
        "profile": "smoke",
        "executor": executor,
        "job_id": job_id,
        "folder": str(folder),
        "uh_pid": uh_pid,
        "host": os.uname().nodename,
    }


def status(results):
    """`uh status --runs`: its lines of one run each, then its summary of them (which it prints first)."""
    out = CliRunner().invoke(main, ["status", "--runs", "--wide", "--results-dir", str(results)])
    assert out.exit_code == 0, out.output
    summary, *lines = out.output.splitlines()
    return [line for line in lines if " seed " in line.split(": ")[0]] + [summary]


def test_every_state_without_slurm(tmp_path):
    results = tmp_path / "results"
    done = {"run_id": "B0", "seed": 1, "profile": "smoke", "config_version": 0, "config": {}, "metrics": {}, "R": []}
    (seed_dir(results, "B0", 1) / "result.json").write_text(json.dumps(done))  # what uh status reads of one
    running = seed_dir(results, "B0", 2)  # a plain `uh run` holding the lock, two tasks in its checkpoint
    checkpoint(running, task=1)
    lock = (running / ".lock").open("w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    checkpoint(seed_dir(results, "B1", 1), task=2)  # interrupted earlier, nothing recorded: resumable

    folder = submitit_folder(results) / "local-x"
    folder.mkdir(parents=True)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = dead.stdout.strip()  # a process that has ended: its job is over
    (folder / f"{dead_pid}_0_log.out").write_text("B2 seed 1 task 1/5: accuracy 20%\n")
    (folder / f"{dead_pid}_0_log.err").write_text("Traceback ...\nError: B2 seed 1: disk on fire\nmore\n")
    record_submission(
        results,
        "local-x",
        [
            entry("B2", 1, dead_pid, folder, os.getpid()),  # failed
            entry("B2", 2, None, folder, os.getpid()),  # queued behind it by a uh run that is alive
        ],
    )
    lines = status(results)
    fcntl.flock(lock, fcntl.LOCK_UN)
    lock.close()

    assert lines[0] == "B0 seed 1: done"
    assert lines[1] == "B0 seed 2: running (task 3 of 5, from the checkpoint)"
    assert lines[2] == "B1 seed 1: stopped (checkpoint after task 3 of 5; run it again to resume)"
    assert lines[3].startswith(f"B2 seed 1: failed [local job {dead_pid}]: Error: B2 seed 1: disk on fire; log: ")
    assert lines[3].endswith(f"{folder / dead_pid}_0_log.err")
    assert lines[4] == "B2 seed 2: queued"
    assert lines[5] == "5 runs: 1 done, 1 running, 1 queued, 1 failed, 1 stopped"


def test_the_lock_of_an_ended_run_is_not_running_and_a_later_record_wins(tmp_path):
    results = tmp_path / "results"
    folder = seed_dir(results, "B0", 1)
    (folder / ".lock").write_text("")  # left behind by a run that has ended: no process holds it
    gone = 2**22 + 17  # above pid_max's default: no such process
    record_submission(results, "old", [entry("B0", 1, None, folder, gone)])
    assert status(results)[0] == "B0 seed 1: not started (its uh run has ended)"
    path = record_submission(results, "new", [entry("B0", 1, None, folder, os.getpid())])
    data = json.loads(path.read_text())
    data["written"] += 1
    path.write_text(json.dumps(data))
    assert status(results) == ["B0 seed 1: queued", "1 run: 0 done, 0 running, 1 queued, 0 failed"]


@pytest.mark.parametrize(
    ("record", "field"),
    [("{", "cannot read JSON"), ('{"pairs": [{"run_id": "B0", "seed": "1", "executor": "local"}]}', "$.pairs[0].seed")],
)
def test_a_job_record_that_uh_did_not_write_is_one_line_exit_2(tmp_path, record, field):
    """Issue 62: the job records (record_submission's) were read with json.loads, unbounded, and one that is not JSON
    was skipped in silence; now read as every JSON file uh wrote is (jsonfiles.read_json), one that is not what uh run
    writes is one line naming the file and what is wrong, exit 2."""
    results = tmp_path / "results"
    path = submitit_folder(results) / "submissions" / "local-x.json"
    path.parent.mkdir(parents=True)
    path.write_text(record)
    out = CliRunner().invoke(main, ["status", "--results-dir", str(results)])
    assert out.exit_code == 2 and out.output.count("\n") == 1, out.output
    assert out.output.startswith(f"Error: {path}: ") and field in out.output, out.output


def test_a_missing_results_dir_is_one_line(tmp_path):
    out = CliRunner().invoke(main, ["status", "--results-dir", str(tmp_path / "nope")])
    assert out.exit_code == 2 and "is not a directory" in out.output


@pytest.mark.trains
def test_a_sweep_is_listed_by_its_ids_with_its_local_jobs(smoke_sweep, tmp_path):
    """Variants are pairs like any other: the sweep's three runs (r2, B3, B3+rho=5) done, and a variant stopped
    mid-run shows its checkpoint, under its own ID."""
    _, results, _ = smoke_sweep
    assert status(results) == [
        "B3 seed 1993: done",
        "B3+rho=5 seed 1993: done",
        "r2 seed 1993: done",
        "3 runs: 3 done, 0 running, 0 queued, 0 failed",
    ]
    jobs = json.loads(next((submitit_folder(results) / "submissions").glob("local-*.json")).read_text())["pairs"]
    assert sorted(j["run_id"] for j in jobs) == ["B3", "B3+rho=5", "r2"] and all(j["job_id"] for j in jobs)
    checkpoint(seed_dir(tmp_path, "B3+M=1000+rho=5", 42), task=1)
    stopped = "B3+M=1000+rho=5 seed 42: stopped (checkpoint after task 2 of 5; run it again to resume)"
    assert status(tmp_path)[0] == stopped
