"""`uh run --executor slurm` and `uh status` against a real single-node Slurm (tests/slurm_cluster.py).

It starts munged, mariadbd, slurmdbd, slurmctld and slurmd as root, so it is a `system` test: it runs only
with UH_SYSTEM_TESTS=1 (.ci/run), and is skipped, never passed, where Slurm's packages or root are missing
(.ci/slurm installs them).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from slurm_cluster import SlurmCluster, available  # tests/ is on the path (pytest rootdir)

from uniform_herding.runs.run import result_path

pytestmark = pytest.mark.system

# No --slurm-gpus: a smoke run asks for no GPU by itself, and this cluster has none (sbatch would refuse).
SLURM_RUN = ["--profile", "smoke", "--executor", "slurm", "--slurm-cpus", "1"]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    """A private Slurm cluster for this module's tests, stopped by PID afterwards."""
    why = available()
    if why:
        pytest.skip(why)
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm")).start()
    yield cluster
    cluster.stop()


STARTED: list[subprocess.Popen] = []


@pytest.fixture(autouse=True)
def no_leftover_uh():
    """A failed test leaves no `uh run --wait` behind, following a cluster that is gone."""
    yield
    while STARTED:
        STARTED.pop().kill()


def uh(cluster: SlurmCluster, *args: str) -> subprocess.Popen:
    env = {**cluster.env(), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen([sys.executable, "-m", "uniform_herding", *args], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    STARTED.append(proc)
    return proc


def status(cluster: SlurmCluster, results: Path) -> dict[str, str]:
    """`uh status`'s lines by pair ('B0 seed 1993' -> 'done'), and 'summary'."""
    out, _ = uh(cluster, "status", "--results-dir", str(results)).communicate(timeout=120)
    *lines, summary = out.strip().splitlines()
    return {**{line.split(":")[0]: line.split(": ", 1)[1] for line in lines}, "summary": summary}


def wait_for(condition, what: str, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(2)


@pytest.mark.trains
def test_an_array_survives_a_requeue_reports_a_failing_task_and_gives_the_local_results(slurm, tmp_path, one_at_a_time):
    """Three pairs as one array: B0 seed 42 fails at once (its checkpoint.pt is garbage), 1993 is
    requeued by `scontrol requeue` after its first task, 2023 runs through. 1993 resumes from its
    checkpoint; both give the one-at-a-time results; `uh status` names the failure and its log."""
    results, data = tmp_path / "results", tmp_path / "data"
    garbage = result_path(results, "B0", 42).with_name("checkpoint.pt")
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"not a checkpoint")
    proc = uh(slurm, "run", "B0", "--seed", "42", "--seed", "1993", "--seed", "2023", *SLURM_RUN, "--wait",
              "--data-dir", str(data), "--results-dir", str(results))  # fmt: skip
    assert proc.stdout is not None
    output, job = [], {}
    for line in proc.stdout:  # --wait follows the jobs' logs
        output.append(line)
        if m := re.match(r"B0 seed (\d+): Slurm job (\d+_\d+)$", line.strip()):
            job[m[1]] = m[2]
        if line.startswith("B0 seed 1993 task 1/5"):
            break
    subprocess.run(["scontrol", "requeue", job["1993"]], env=slurm.env(), check=True)  # as a pre-emption does
    assert "Submitted Slurm job array" in "".join(output)
    rest, _ = proc.communicate(timeout=600)
    output = "".join(output) + rest
    assert proc.returncode == 1, output  # one pair failed

    assert re.search(r"B0 seed 1993: resuming after task [1-4]/5", output), output

    def starts() -> list[str]:  # -D: one row per start
        return subprocess.run(["sacct", "-X", "-D", "-n", "-o", "JobID,State", "-j", job["1993"]], env=slurm.env(),
                              capture_output=True, text=True, check=True).stdout.split()  # fmt: skip

    wait_for(lambda: starts()[-1] not in ("RUNNING", "COMPLETING"), "slurmdbd to record the end", 120)  # it lags
    assert (rows := starts()) == [job["1993"], "REQUEUED", job["1993"], "COMPLETED"], rows
    lines = status(slurm, results)
    assert lines["B0 seed 1993"] == "done" and lines["B0 seed 2023"] == "done"
    failed = lines["B0 seed 42"]
    assert failed.startswith(f"failed [Slurm job {job['42']}] FAILED: Error: B0 seed 42: "), failed
    assert "checkpoint.pt is damaged" in failed
    assert Path(failed.rsplit("log: ", 1)[1]).exists()
    assert lines["summary"] == "3 runs: 2 done, 1 failed"
    for seed in (1993, 2023):  # exactly what one run at a time gives on this machine
        result, reference = json.loads(result_path(results, "B0", seed).read_text()), one_at_a_time("B0", seed)
        assert (result["R"], result["metrics"]) == (reference["R"], reference["metrics"]), seed


@pytest.mark.trains
def test_scancel_is_seen_and_the_run_keeps_its_checkpoint(slurm, tmp_path):
    results = tmp_path / "results"
    out, _ = uh(slurm, "run", "B0", "--seed", "7", *SLURM_RUN, "--data-dir", str(tmp_path / "data"),
                "--results-dir", str(results)).communicate(timeout=120)  # fmt: skip
    job = re.search(r"B0 seed 7: Slurm job (\S+)", out)[1]
    log = results / "submitit" / "slurm" / f"{job}_0_log.out"
    wait_for(lambda: log.exists() and "task 1/5" in log.read_text(), "the first task")
    subprocess.run(["scontrol", "suspend", job], env=slurm.env(), check=True)  # held mid-run while we look
    line = status(slurm, results)["B0 seed 7"]
    assert re.fullmatch(rf"running \(task [2-5] of 5, from the checkpoint\) \[Slurm job {job}\]", line), line
    subprocess.run(["scontrol", "resume", job], env=slurm.env(), check=True)
    subprocess.run(["scancel", job], env=slurm.env(), check=True)
    wait_for(lambda: status(slurm, results)["B0 seed 7"].startswith("cancelled"), "uh status to see the scancel")
    line = status(slurm, results)["B0 seed 7"]
    assert re.match(rf"cancelled \[Slurm job {job}\] \(checkpoint after task [1-4] of 5\); log: ", line), line
    assert (result_path(results, "B0", 7).parent / "checkpoint.pt").exists()
    assert not os.path.exists(result_path(results, "B0", 7))


def test_a_setting_that_sbatch_refuses_is_one_line(slurm, tmp_path):
    results = tmp_path / "results"
    proc = uh(slurm, "run", "B0", "--seed", "7", *SLURM_RUN, "--slurm-partition", "nosuchpartition",
              "--data-dir", str(tmp_path / "data"), "--results-dir", str(results))  # fmt: skip
    out, _ = proc.communicate(timeout=120)
    assert out.startswith("Error: sbatch refused the job array: ") and "invalid partition" in out.lower(), out
    assert out.count("\n") == 1
