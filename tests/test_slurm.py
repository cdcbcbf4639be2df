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
from conftest import smoke_rehearsal
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


def uh(cluster: SlurmCluster, *args: str, cwd: Path | None = None) -> subprocess.Popen:
    env = {**cluster.env(), "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "uniform_herding", *args],
        env=env,
        text=True,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    STARTED.append(proc)
    return proc


def status(cluster: SlurmCluster, results: Path, cwd: Path | None = None) -> dict[str, str]:
    """`uh status --runs`' lines by what they start with ('B0 seed 1993' -> 'done', 'verdict now', 'ETA', a chain's
    'chain <id>'), and 'summary', its first line."""
    out, _ = uh(cluster, "status", "--runs", "--wide", "--results-dir", str(results), cwd=cwd).communicate(timeout=120)
    summary, *lines = out.strip().splitlines()
    return {**{line.split(": ")[0]: line.split(": ", 1)[1] for line in lines}, "summary": summary}


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
    proc = uh(
        slurm,
        "run",
        "B0",
        "--seed",
        "42",
        "--seed",
        "1993",
        "--seed",
        "2023",
        *SLURM_RUN,
        "--wait",
        "--data-dir",
        str(data),
        "--results-dir",
        str(results),
    )
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
        return subprocess.run(
            ["sacct", "-X", "-D", "-n", "-o", "JobID,State", "-j", job["1993"]],
            env=slurm.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()

    wait_for(lambda: starts()[-1] not in ("RUNNING", "COMPLETING"), "slurmdbd to record the end", 120)  # it lags
    assert (rows := starts()) == [job["1993"], "REQUEUED", job["1993"], "COMPLETED"], rows
    lines = status(slurm, results)
    assert lines["B0 seed 1993"] == "done" and lines["B0 seed 2023"] == "done"
    failed = lines["B0 seed 42"]
    assert failed.startswith(f"failed [Slurm job {job['42']}] FAILED: Error: B0 seed 42: "), failed
    assert "checkpoint.pt is damaged" in failed
    assert Path(failed.rsplit("log: ", 1)[1]).exists()
    assert lines["summary"] == "3 runs: 2 done, 0 running, 0 queued, 1 failed"
    for seed in (1993, 2023):  # exactly what one run at a time gives on this machine
        result, reference = json.loads(result_path(results, "B0", seed).read_text()), one_at_a_time("B0", seed)
        assert (result["R"], result["metrics"]) == (reference["R"], reference["metrics"]), seed


@pytest.mark.trains
def test_scancel_is_seen_and_the_run_keeps_its_checkpoint(slurm, tmp_path):
    results = tmp_path / "results"
    out, _ = uh(
        slurm,
        "run",
        "B0",
        "--seed",
        "7",
        *SLURM_RUN,
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
    ).communicate(timeout=120)
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
    proc = uh(
        slurm,
        "run",
        "B0",
        "--seed",
        "7",
        *SLURM_RUN,
        "--slurm-partition",
        "nosuchpartition",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
    )
    out, _ = proc.communicate(timeout=120)
    assert out.startswith("Error: sbatch refused the job array: ") and "invalid partition" in out.lower(), out
    assert out.count("\n") == 1


# --- the procedure as a chain of Slurm jobs (uh run --procedure; chain.py) ------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def b0_expected(where: Path) -> None:
    """An expected set of B0 alone (the smoke set's rows and tolerances) under where/expected_results, found from
    there as uh check finds it: look 1 asks B0 for seeds 1993, 2023 and 42."""
    root = where / "expected_results"
    (root / "smoke").mkdir(parents=True)
    (root / "tolerances.toml").write_text("")
    smoke = ROOT / "expected_results" / "smoke"
    rows = [r for r in (smoke / "per_seed.csv").read_text().splitlines() if r.startswith(("run_id,", "B0,"))]
    (root / "smoke" / "per_seed.csv").write_text("\n".join(rows) + "\n")
    (root / "smoke" / "tolerances.toml").write_text((smoke / "tolerances.toml").read_text())


def chain_state(results: Path) -> dict:
    return json.loads((results / "chain.json").read_text())


def submitted_pairs(results: Path) -> list[tuple[str, int]]:
    """Every (run ID, seed) that any submission recorded, once per submission."""
    records = (json.loads(p.read_text()) for p in (results / "submitit" / "submissions").glob("*.json"))
    return sorted((e["run_id"], e["seed"]) for r in records for e in r["pairs"])


def queued(cluster: SlurmCluster, job: str) -> str:
    out = subprocess.run(["squeue", "-h", "-j", job, "-o", "%T"], env=cluster.env(), capture_output=True, text=True)
    return out.stdout.strip()


def follow_chain(cluster: SlurmCluster, results: Path, cwd: Path, kill_controller: bool = False) -> list[str]:
    """`uh status` every few seconds until the chain has ended: the chain lines it showed. With kill_controller, the
    first controller gets SIGKILL as soon as it runs (scancel --signal=KILL)."""
    seen: list[str] = []

    def look() -> None:
        lines = status(cluster, results, cwd)
        seen.extend(f"{k}: {v}" for k, v in lines.items() if k.startswith("chain ") and f"{k}: {v}" not in seen)

    look()  # step 1's runs are queued or running: its controller waits for them
    killed = not kill_controller
    deadline = time.monotonic() + 900
    while time.monotonic() < deadline:
        if not killed:
            controller = chain_state(results)["steps"][0]["controller"]
            if queued(cluster, controller) == "RUNNING":
                subprocess.run(["scancel", "--signal=KILL", controller], env=cluster.env(), check=True)
                killed = True
                continue
            time.sleep(0.2)
            continue
        ended = chain_state(results)["ended"]  # read before the look: a chain that ends between the two is seen ended
        look()
        if ended:
            return seen
        assert "stalled" not in seen[-1], seen
        time.sleep(3)
    raise AssertionError(f"the chain did not end; uh status showed {seen}")


VERDICTS: dict[str, str] = {}  # each chain test's verdict, to compare


@pytest.mark.trains
@pytest.mark.parametrize("kill_controller", [False, True], ids=["as-is", "controller-killed"])
def test_one_command_reaches_a_decided_verdict_and_its_report(slurm, tmp_path, kill_controller):
    """Issue 48: one command, then nothing, on the smoke profile with a small registered procedure whose claim needs
    a second look (conftest.smoke_rehearsal: C2, B3 > a2, at alpha 0.0001 on three seeds, then at four): B3 and a2
    on the paper's seeds as an array and its controller; the controller finds C2 undecided and submits look 2 (seed
    1 of both) with the next controller; that one finds the verdict decided, runs uh check and uh report, and the
    chain ends. `uh status` shows each step while it runs. With the first controller killed (SIGKILL, no requeue) as
    soon as it runs, its rescue does its work: the same verdict, and no run submitted twice."""
    smoke_rehearsal(tmp_path / "expected_results" / "smoke")  # found from tmp_path, as uh check finds a set
    (tmp_path / "expected_results" / "tolerances.toml").write_text("")
    results = tmp_path / "results"
    out, _ = uh(
        slurm,
        "run",
        "B3",
        "a2",
        "--seed",
        "1993",
        "--seed",
        "2023",
        "--seed",
        "42",
        "--procedure",
        *SLURM_RUN,
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
        cwd=tmp_path,
    ).communicate(timeout=120)
    assert re.match(r"Submitted chain \S+: its runs as Slurm job \d+, then the controller, Slurm job \d+", out), out
    seen = follow_chain(slurm, results, tmp_path, kill_controller)

    state = chain_state(results)
    assert [s["step"] for s in state["steps"]] == [
        {"run_ids": ["B3", "a2"], "seeds": [1993, 2023, 42]},
        {"run_ids": ["B3", "a2"], "seeds": [1]},
    ]
    ended = state["ended"]
    assert ended["reason"] == f"verdict {ended['verdict']}; report written", ended
    assert (results / "report" / "summary.html").exists()
    report = json.loads((results / "check_report.json").read_text())
    assert report["verdict"]["line"].startswith(ended["verdict"]) and report["exit_code"] == ended["code"]
    assert submitted_pairs(results) == sorted((r, s) for r in ("B3", "a2") for s in (1, 42, 1993, 2023))  # each once
    chain_id = state["id"]
    assert any(line.startswith(f"chain {chain_id}: step 1 (B3, a2 on seeds 1993, 2023, 42") for line in seen), seen
    assert any(
        line.startswith(f"chain {chain_id}: step 2 (B3, a2 on seeds 1, asked by step 1's check: UNDECIDED")
        for line in seen
    ), seen
    assert seen[-1] == f"chain {chain_id}: ended: verdict {ended['verdict']}; report written", seen
    if kill_controller:
        first = state["steps"][0]
        rows = subprocess.run(
            ["sacct", "-X", "-n", "-P", "-o", "State", "-j", first["controller"]],
            env=slurm.env(),
            capture_output=True,
            text=True,
        ).stdout.split()
        assert rows and rows[0] != "COMPLETED", rows  # it was killed, not done
        rescue_log = results / "submitit" / "slurm" / f"{first['rescue']}_0_log.out"
        assert "step 2: B3, a2 on seeds 1: Slurm job array" in rescue_log.read_text()
    VERDICTS[str(kill_controller)] = ended["verdict"]
    assert len(set(VERDICTS.values())) == 1, VERDICTS


@pytest.mark.trains
def test_a_second_command_is_refused_while_the_chain_is_active_and_resumes_after_cancel(slurm, tmp_path):
    """Issue 48: the same command while the chain's jobs are queued or running prints their IDs and refuses (exit 1);
    --cancel ends the chain and its jobs; the same command then resumes from the results to a decided verdict."""
    b0_expected(tmp_path)
    results = tmp_path / "results"
    command = [
        "run",
        "B0",
        "--seed",
        "1993",
        "--seed",
        "2023",
        "--seed",
        "42",
        "--procedure",
        *SLURM_RUN,
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
    ]
    first, _ = uh(slurm, *command, cwd=tmp_path).communicate(timeout=120)
    assert first.startswith("Submitted chain"), first
    jobs = [chain_state(results)["steps"][0][k] for k in ("array", "controller", "rescue")]
    proc = uh(slurm, *command, cwd=tmp_path)
    again, _ = proc.communicate(timeout=120)
    assert proc.returncode == 1, again
    assert again == (
        f"Error: the chain {chain_state(results)['id']} in {results} is active (Slurm jobs "
        f"{' '.join(jobs)}): follow it with uh status --results-dir {results}; stop it with the same "
        "command and --cancel\n"
    )
    logs = (results / "submitit" / "slurm").glob
    wait_for(lambda: any("task 1/5" in log.read_text() for log in logs(f"{jobs[0]}_*_log.out")), "a first task")
    cancelled, _ = uh(slurm, *command, "--cancel", cwd=tmp_path).communicate(timeout=120)
    assert cancelled.startswith(f"Cancelled chain {chain_state(results)['id']} (Slurm jobs {' '.join(jobs)})")
    wait_for(lambda: not any(queued(slurm, j) for j in jobs), "the chain's jobs to leave the queue", 120)
    assert chain_state(results)["ended"]["reason"] == "cancelled (uh run --cancel)"
    assert status(slurm, results, tmp_path)[f"chain {chain_state(results)['id']}"] == (
        "ended: cancelled (uh run --cancel)"
    )

    # A seed may have finished before the cancel, or within Slurm's KillWait after it (a smoke task takes a second or
    # two): the same command says so of each and runs the rest, a seed with a checkpoint from after its last task.
    finished = [seed for seed in (1993, 2023, 42) if result_path(results, "B0", seed).exists()]
    checkpointed = [
        seed
        for seed in (1993, 2023, 42)
        if seed not in finished and result_path(results, "B0", seed).with_name("checkpoint.pt").exists()
    ]
    resumed, _ = uh(slurm, *command, cwd=tmp_path).communicate(timeout=120)
    lines = resumed.splitlines()
    done = [
        f"B0 seed {seed}: done already ({result_path(results, 'B0', seed)}); --force reruns it" for seed in finished
    ]
    assert lines[: len(done)] == done and lines[len(done)].startswith("Submitted chain"), resumed
    follow_chain(slurm, results, tmp_path)
    ended = chain_state(results)["ended"]
    assert ended["reason"] == f"verdict {ended['verdict']}; report written", ended
    array = chain_state(results)["steps"][0]["array"]
    logs = "".join(p.read_text() for p in (results / "submitit" / "slurm").glob(f"{array}_*_log.out"))
    for seed in checkpointed:
        assert re.search(rf"B0 seed {seed}: resuming after task [1-4]/5", logs), logs


@pytest.mark.trains
def test_a_run_that_fails_ends_the_chain_with_one_line_and_no_loop(slurm, tmp_path):
    """Issue 48: B0 seed 42 fails at once (its checkpoint.pt is garbage): the controller ends the chain with that run's
    uh status line, in its log and in uh status, and submits nothing more."""
    b0_expected(tmp_path)
    results = tmp_path / "results"
    garbage = result_path(results, "B0", 42).with_name("checkpoint.pt")
    garbage.parent.mkdir(parents=True)
    garbage.write_bytes(b"not a checkpoint")
    out, _ = uh(
        slurm,
        "run",
        "B0",
        "--seed",
        "42",
        "--procedure",
        *SLURM_RUN,
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
        cwd=tmp_path,
    ).communicate(timeout=120)
    assert out.startswith("Submitted chain"), out
    follow_chain(slurm, results, tmp_path)
    state = chain_state(results)
    reason = state["ended"]["reason"]
    assert reason.startswith(
        f"a run of step 1 did not finish: B0 seed 42: failed [Slurm job "
        f"{state['steps'][0]['array']}] FAILED: Error: B0 seed 42: "
    ), reason
    assert "checkpoint.pt is damaged" in reason and len(state["steps"]) == 1
    log = results / "submitit" / "slurm" / f"{state['steps'][0]['controller']}_0_log.out"
    assert f"Error: chain {state['id']} ended: {reason}" in log.read_text()
    assert status(slurm, results, tmp_path)[f"chain {state['id']}"] == f"ended: {reason}"
    wait_for(lambda: not any(queued(slurm, j) for j in (state["steps"][0]["rescue"],)), "the rescue's cancel", 60)


@pytest.mark.trains
def test_a_controller_timed_out_mid_report_is_requeued_by_its_checkpoint_and_carries_on(slurm, tmp_path):
    """Issue 52: Slurm's time-limit signal (USR2, `--signal=USR2@90`; `scancel --signal=USR2` sends it now, as
    submitit's own SlurmJob._interrupt(timeout=True) does) reaches the controller while it runs uh check and uh
    report. Its limit (`--slurm-time 10`, which the controller takes where shorter than its 30 minutes) makes
    submitit count any USR2 a time-out, and submitit requeues a timed-out job only through its checkpoint (a
    pre-emption it requeues with or without one). The same job starts again, finds its work in chain.json and ends
    the chain with its verdict and report: no run lost or submitted twice, its rescue never started."""
    b0_expected(tmp_path)
    results = tmp_path / "results"
    out, _ = uh(
        slurm,
        "run",
        "B0",
        "--seed",
        "1993",
        "--seed",
        "2023",
        "--seed",
        "42",
        "--procedure",
        *SLURM_RUN,
        "--slurm-time",
        "10",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
        cwd=tmp_path,
    ).communicate(timeout=120)
    assert out.startswith("Submitted chain"), out
    first = chain_state(results)["steps"][0]
    log = results / "submitit" / "slurm" / f"{first['controller']}_0_log.out"
    deadline = time.monotonic() + 900
    while not (log.exists() and "step 1: verdict now" in log.read_text()):  # then uh check and uh report, seconds
        assert time.monotonic() < deadline, "timed out waiting for the controller's check"
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=USR2", first["controller"]], env=slurm.env(), check=True)
    wait_for(lambda: chain_state(results)["ended"] is not None, "the chain to end", 600)

    state = chain_state(results)
    ended = state["ended"]
    assert ended["reason"] == f"verdict {ended['verdict']}; report written", ended
    assert (results / "report" / "summary.html").exists()
    assert len(state["steps"]) == 1 and submitted_pairs(results) == [("B0", s) for s in (42, 1993, 2023)]
    text = log.read_text()
    assert "this job is timed-out" in text and "Calling checkpoint method" in text, text
    assert text.count("step 1: verdict now") == 2, text  # its first start, then the requeued one

    def starts() -> list[str]:  # -D: one row per start
        return subprocess.run(
            ["sacct", "-X", "-D", "-n", "-o", "JobID,State", "-j", first["controller"]],
            env=slurm.env(),
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()

    wait_for(lambda: starts()[-1] not in ("RUNNING", "COMPLETING"), "slurmdbd to record the end", 120)  # it lags
    assert (rows := starts()) == [first["controller"], "REQUEUED", first["controller"], "COMPLETED"], rows

    def rescue() -> str:
        return subprocess.run(
            ["sacct", "-X", "-n", "-o", "State", "-j", first["rescue"]], env=slurm.env(), capture_output=True, text=True
        ).stdout.strip()

    wait_for(lambda: rescue().startswith("CANCELLED"), "the rescue's cancel", 60)
    assert not (log.parent / f"{first['rescue']}_0_log.out").exists()  # it never started
