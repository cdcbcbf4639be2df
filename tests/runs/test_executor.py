"""`uh run --jobs N` / `--executor local`: submitit local jobs give the one-at-a-time results, stop after a
failure, pass signals on, requeue and resume on submitit's interrupt, and never outlive a killed parent."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from uniform_herding.runs import executor
from uniform_herding.runs.executor import ExecutorError
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.run import result_path

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


def uh_run(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "uniform_herding", "run", *args, "--profile", "smoke"],
        env=ENV,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def assert_one_at_a_time_results(results: Path, seeds: tuple[int, ...], one_at_a_time) -> None:
    """B0's result of each seed is exactly the one-at-a-time run's of this machine: R and metrics, bit for bit."""
    for seed in seeds:
        result, reference = json.loads(result_path(results, "B0", seed).read_text()), one_at_a_time("B0", seed)
        assert result["environment"]["cpu_threads"] == 1
        assert (result["R"], result["metrics"]) == (reference["R"], reference["metrics"]), seed


def read_until(proc: subprocess.Popen, done) -> list[str]:
    """Lines of proc's output up to the first for which done(lines) holds."""
    lines: list[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        if done(lines):
            return lines
    raise AssertionError("".join(lines))


def jobs_of(results: Path) -> list[dict]:
    (record,) = (executor.submitit_folder(results) / "submissions").glob("local-*.json")
    return json.loads(record.read_text())["pairs"]


def children(pid: int) -> list[int]:
    """PIDs whose parent is pid (/proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                out.append(int(stat.parent.name))
        except (OSError, IndexError, ValueError):
            continue
    return out


def alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    try:
        return stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.trains
def test_two_seeds_at_once_give_the_one_at_a_time_results(tmp_path, one_at_a_time):
    """Two local submitit jobs at once give exactly what one run at a time gives on the same machine."""
    results = tmp_path / "results"
    proc = uh_run(
        "B0",
        "--seed",
        "1993",
        "--seed",
        "2023",
        "--jobs",
        "2",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
    )
    output, _ = proc.communicate()
    assert proc.returncode == 0, output
    for seed in (1993, 2023):
        assert f"B0 seed {seed}: ACC" in output
    assert "submitit INFO" not in output  # submitit's own lines stay in the logs
    assert_one_at_a_time_results(results, (1993, 2023), one_at_a_time)
    assert [p["job_id"] is not None for p in jobs_of(results)] == [True, True]


@pytest.mark.trains
def test_nothing_new_starts_after_a_failure(tmp_path):
    """Three pairs, one at a time: the first fails at once (a foreign result.json), so the others never start."""
    results = tmp_path / "results"
    foreign = result_path(results, "B0", 1)
    foreign.parent.mkdir(parents=True)
    foreign.write_text(json.dumps({"config_version": 0, "config": {}, "seed": 1}))
    tasks = [RunOptions("smoke", tmp_path / "data", results).pair("B0", s) for s in (1, 2, 3)]
    lines: list[str] = []
    assert executor.run_local(tasks, [None], results, lines.append) == 1
    assert any(line.startswith("Error: B0 seed 1: ") and f"{foreign} holds" in line for line in lines), lines
    assert [p["job_id"] is not None for p in jobs_of(results)] == [True, False, False]
    assert not result_path(results, "B0", 2).parent.exists()


@pytest.mark.trains
def test_sigterm_reaches_every_job_which_keeps_its_checkpoint(tmp_path):
    """Two smoke seeds at once, SIGTERM to `uh run` after both finished a task: exit 143, checkpoints kept."""
    results = tmp_path / "results"
    proc = uh_run(
        "B0",
        "--seed",
        "1",
        "--seed",
        "2",
        "--jobs",
        "2",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
    )
    read_until(proc, lambda lines: all(any(f"seed {s} task 1/" in line for line in lines) for s in (1, 2)))
    proc.send_signal(signal.SIGTERM)
    rest = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, rest
    for seed in (1, 2):
        folder = result_path(results, "B0", seed).parent
        assert (folder / "checkpoint.pt").exists() and not (folder / "result.json").exists()
    assert rest.count("stopped by SIGTERM") == 2, rest


@pytest.mark.trains
def test_a_killed_parent_leaves_no_orphan_run(tmp_path):
    """SIGKILL to `uh run --executor local`: its job stops by itself within seconds, keeping its checkpoint."""
    results = tmp_path / "results"
    proc = uh_run(
        "B0", "--seed", "3", "--executor", "local", "--data-dir", str(tmp_path / "data"), "--results-dir", str(results)
    )
    read_until(proc, lambda lines: "task 1/" in lines[-1])
    (entry,) = jobs_of(results)
    controller = int(entry["job_id"])
    (job,) = children(controller)
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while alive(job) or alive(controller):
        assert time.monotonic() < deadline, "the job outlived its killed parent"
        time.sleep(0.2)
    log = executor.submitit_folder(results) / Path(entry["folder"]).name / f"{controller}_0_log.out"
    assert "B0 seed 3 stopped by SIGTERM" in log.read_text()
    assert (result_path(results, "B0", 3).parent / "checkpoint.pt").exists()


@pytest.mark.trains
def test_submitit_interrupt_requeues_and_the_run_resumes_to_the_same_result(tmp_path, one_at_a_time):
    """submitit's pre-emption signal (USR2) to a local job after task 1: Job.checkpoint requeues it, the
    restarted job resumes from the per-task checkpoint and ends with the one-at-a-time result."""
    results = tmp_path / "results"
    proc = uh_run(
        "B0",
        "--seed",
        "1993",
        "--executor",
        "local",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(results),
    )
    read_until(proc, lambda lines: "task 1/" in lines[-1])
    (entry,) = jobs_of(results)
    (job,) = children(int(entry["job_id"]))
    os.kill(job, signal.SIGUSR2)
    output = proc.communicate(timeout=600)[0]
    assert proc.returncode == 0, output
    assert "B0 seed 1993: resuming after task" in output
    assert_one_at_a_time_results(results, (1993,), one_at_a_time)


def test_local_slots(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,5")
    assert executor.local_slots(None, cuda=True) == [2, 5]
    assert executor.local_slots(2, cuda=True) == [2, 2, 5, 5]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert executor.local_slots(3, cuda=True) == [None] * 3
    assert executor.local_slots(None, cuda=True) == [None] * len(os.sched_getaffinity(0))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f2a")
    with pytest.raises(ExecutorError, match="GPU indices"):
        executor.local_slots(None, cuda=True)


def test_runs_on_the_cpu_get_one_slot_per_core_where_gpus_are_visible(monkeypatch):
    """The smoke's runs are CPU runs on a GPU host too: one per core, not one per GPU."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert executor.local_slots(None, cuda=False) == [None] * len(os.sched_getaffinity(0))
    assert executor.local_slots(4, cuda=False) == [None] * 4


def test_slurm_settings_come_from_options_over_the_config_file(tmp_path):
    config = tmp_path / "slurm.toml"
    config.write_text('partition = "gpu"\ntime = 90\n[sbatch]\nqos = "low"\n')
    settings = executor.slurm_settings(config, {"time": 30, "sbatch": ("constraint=t4",), "account": None})
    assert settings["partition"] == "gpu" and settings["time"] == 30 and settings["gpus"] == 1
    assert executor.slurm_settings(config, {}, cuda=False)["gpus"] == 0  # the smoke asks a CPU-only cluster for none
    assert executor.slurm_settings(config, {"gpus": 2}, cuda=False)["gpus"] == 2
    assert settings["sbatch"] == {"qos": "low", "constraint": "t4"}
    config.write_text("partitoin = 'gpu'\n")
    with pytest.raises(ExecutorError, match="unknown keys partitoin"):
        executor.slurm_settings(config, {})
    with pytest.raises(ExecutorError, match="KEY=VALUE"):
        executor.slurm_settings(None, {"sbatch": ("qos",)})


def test_slurm_without_sbatch_is_one_line(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from uniform_herding.cli import main

    monkeypatch.setenv("PATH", str(tmp_path))  # no sbatch here
    out = CliRunner().invoke(
        main,
        [
            "run",
            "B0",
            "--seed",
            "1",
            "--profile",
            "smoke",
            "--executor",
            "slurm",
            "--data-dir",
            str(tmp_path / "data"),
            "--results-dir",
            str(tmp_path / "r"),
        ],
    )
    assert out.exit_code == 1 and "needs Slurm's sbatch on the PATH" in out.output, out.output
    assert not (tmp_path / "r").exists()


def test_a_job_trains_its_pair_as_its_command_and_a_restarted_one_never_forces(tmp_path, monkeypatch):
    """Issue 62: a job runs run_seed on its RunPair (the config resolved in the job's own process), with sys.argv the
    `uh run` its pair stands for (result.json's command); started again by Slurm (SLURM_RESTART_COUNT), --force is
    dropped, so that the checkpoint it resumes from is kept."""
    from uniform_herding.catalogue import resolve
    from uniform_herding.runs import run

    seen = []
    monkeypatch.setattr(sys, "argv", list(sys.argv))  # the job replaces it; restored after the test
    monkeypatch.setattr(run, "run_seed", lambda pair, cfg, echo: seen.append((pair, cfg, sys.argv)) or tmp_path)
    pair = RunOptions("smoke", tmp_path / "d", tmp_path / "r", force=True).pair("B3", 1)
    executor.Job(pair)()
    monkeypatch.setenv("SLURM_RESTART_COUNT", "1")
    executor.Job(pair)()
    assert [(p.run_id, p.seed, p.options.force) for p, _, _ in seen] == [("B3", 1, True), ("B3", 1, False)]
    assert all(cfg == resolve("B3", "smoke") for _, cfg, _ in seen)
    assert seen[0][2] == pair.command() and "--force" not in seen[0][2]
