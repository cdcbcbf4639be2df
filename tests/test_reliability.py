"""Fault injection: kills, signals, corrupt checkpoints, bad archives, full disks (docs/reliability.md).

Real kills run `python -m uniform_herding run` in subprocesses; the other faults run the CLI in
process with the fault patched in. All runs use the smoke profile on one CPU thread (results depend
on the thread count, see docs/reliability.md), and every resumed result is compared with one
uninterrupted run for R and metrics, exactly.
"""

from __future__ import annotations

import builtins
import errno
import json
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner, Result

from uniform_herding.catalogue import resolve
from uniform_herding.cli import main
from uniform_herding.data.archive import write_synthetic_archive
from uniform_herding.method import task
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.runs import durability, run
from uniform_herding.runs.results import write_bytes_atomic

SEED = 5
CFG = resolve("B3", "smoke")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def line(k: int) -> str:
    """The progress line printed after task k (from 1) is checkpointed."""
    return f"task {k}/{CFG.n_tasks}:"


class Uh:
    """`python -m uniform_herding run B3 --seed SEED` in a subprocess, its stdout read as it comes."""

    def __init__(self, data: Path, results: Path) -> None:
        self.stderr = tempfile.TemporaryFile("w+")  # noqa: SIM115 - a file, not a pipe, that never blocks it
        args = ["B3", "--seed", str(SEED), "--profile", "smoke", "--data-dir", str(data), "--results-dir", str(results)]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uniform_herding", "run", *args],
            env=ENV,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
        )

    def wait_for(self, text: str) -> None:
        """Read stdout until a line holds `text`."""
        assert self.proc.stdout is not None
        for out in self.proc.stdout:
            if text in out:
                return
        raise AssertionError(f"exit {self.proc.wait()} before {text!r}: {self.errors()}")

    def finish(self) -> int:
        """Wait for the exit status, draining stdout so that the process never blocks on it."""
        assert self.proc.stdout is not None
        for _ in self.proc.stdout:
            pass
        return self.proc.wait()

    def errors(self) -> list[str]:
        self.stderr.seek(0)
        return [e for e in self.stderr.read().splitlines() if e.startswith(("Error", "Traceback"))]


def result_of(results: Path) -> dict:
    return json.loads(run.result_path(results, "B3", SEED).read_text())


def same_result(a: dict, b: dict) -> bool:
    return a["R"] == b["R"] and a["metrics"] == b["metrics"]


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A data dir holding the smoke profile's synthetic archive."""
    folder = tmp_path_factory.mktemp("data")
    run.load_data(CFG, folder, None)
    return folder


@pytest.fixture(scope="module")
def reference(data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict:
    """The result of one uninterrupted run (in process, on one thread like the subprocesses)."""
    results = tmp_path_factory.mktemp("reference")
    with threads(1):
        assert smoke_run(data, results).exit_code == 0
    return result_of(results)


@contextmanager
def threads(n: int) -> Iterator[None]:
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture
def one_thread() -> Iterator[None]:
    with threads(1):
        yield


def uh_run(*args: str) -> Result:
    return CliRunner().invoke(main, ["run", *args])


def smoke_run(data: Path, results: Path, *extra: str) -> Result:
    return uh_run(
        "B3", "--seed", str(SEED), "--profile", "smoke", "--data-dir", str(data), "--results-dir", str(results), *extra
    )


def one_error_line(result: Result) -> str:
    """The CLI failed with exactly one `Error:` line and no traceback; returns it."""
    errors = [e for e in result.output.splitlines() if e.startswith("Error")]
    assert len(errors) == 1 and "Traceback" not in result.output, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    return errors[0]


def files(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` with its bytes: what a refused command must leave as it was."""
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# --- two processes, SIGKILL, resume -----------------------------------------------------------------------


@pytest.mark.trains
def test_a_run_killed_at_any_moment_resumes_to_the_uninterrupted_result(reference, data, tmp_path) -> None:
    first = Uh(data, tmp_path)
    first.wait_for(line(1))
    busy = smoke_run(data, tmp_path)  # a second process on the same run and seed, while the first trains
    assert busy.exit_code == 1
    assert "is busy: another process is running this run and seed" in one_error_line(busy)
    assert first.proc.poll() is None, "the first process goes on undisturbed"

    delay = random.uniform(0.0, 2.0)  # in task 2, in a checkpoint write, or later
    time.sleep(delay)
    first.proc.kill()
    assert first.finish() == -signal.SIGKILL
    second = Uh(data, tmp_path)
    second.wait_for("resuming after task")
    assert second.finish() == 0, second.errors()
    assert sorted(p.name for p in (tmp_path / "B3" / f"seed-{SEED}").iterdir()) == [".lock", "final.pt", "result.json"]
    assert same_result(result_of(tmp_path), reference), f"SIGKILL {delay:.2f} s after task 1"


# --- in process: a full disk, SIGTERM, SIGINT, then resume ---------------------------------------------


def full_disk(monkeypatch: pytest.MonkeyPatch, name: str, after: int = 0) -> None:
    """fsync of the temp file for `name` fails with ENOSPC, after `after` successful ones."""
    real, done = os.fsync, []

    def fsync(fd: int) -> None:
        if Path(os.readlink(f"/proc/self/fd/{fd}")).name.startswith(f".{name}."):
            done.append(fd)
            if len(done) > after:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)


def signalling(signum: int, f: Callable) -> Callable:
    """`f`, sending this process `signum` first: the signal arrives at that point of the run."""

    def wrapped(*args: object) -> object:
        os.kill(os.getpid(), signum)
        return f(*args)

    return wrapped


def test_sigint_before_any_task_writes_nothing(data, tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(run, "TaskStream", signalling(signal.SIGINT, run.TaskStream))
    result = smoke_run(data, tmp_path)
    assert result.exit_code == 128 + signal.SIGINT
    assert "stopped by SIGINT; run the same command again to resume" in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


SIGNAL_AT_IMPORT = """
import builtins, os, signal, sys
real, sent = builtins.__import__, []
def at_import(name, *args, **kwargs):
    if name.split(".")[0] == sys.argv[1] and not sent:
        sent.append(os.kill(os.getpid(), getattr(signal, sys.argv[2])))
    return real(name, *args, **kwargs)
builtins.__import__ = at_import
from uniform_herding.cli import main
main(sys.argv[3:])
"""


@pytest.mark.slow
@pytest.mark.parametrize("module, signame", [("pandas", "SIGINT"), ("torch", "SIGTERM"), ("lightning", "SIGINT")])
def test_a_signal_during_start_up_exits_like_one_during_a_task(module, signame, data, tmp_path) -> None:
    """Issue 14.8: Ctrl-C in the first seconds exited 1 ("Aborted!"), SIGTERM 143 with no message."""
    args = [
        "run",
        "B3",
        "--seed",
        str(SEED),
        "--profile",
        "smoke",
        "--data-dir",
        str(data),
        "--results-dir",
        str(tmp_path),
    ]
    done = subprocess.run(
        [sys.executable, "-c", SIGNAL_AT_IMPORT, module, signame, *args],
        env=ENV,
        capture_output=True,
        text=True,
        timeout=300,
    )
    signum = getattr(signal, signame)
    assert done.returncode == 128 + signum, (done.returncode, done.stderr[-2000:])
    errors = [e for e in done.stderr.splitlines() if e.strip()]
    assert errors == [f"Error: stopped by {signame}; run the same command again to resume"], done.stderr[-2000:]


def test_a_finished_run_is_found_done_without_importing_torch(data, tmp_path) -> None:
    """Issue 14.8: a run found done spent 7-9 s importing Lightning before saying so."""
    path = run.result_path(tmp_path, "B3", SEED)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(finished()))
    code = (
        "import sys\nfrom uniform_herding.cli import main\ntry:\n    main(sys.argv[1:])\nexcept SystemExit as e:\n"
        "    print('exit', e.code, sorted({'torch', 'lightning'} & set(sys.modules)))"
    )
    args = [
        "run",
        "B3",
        "--seed",
        str(SEED),
        "--profile",
        "smoke",
        "--data-dir",
        str(data),
        "--results-dir",
        str(tmp_path),
    ]
    done = subprocess.run([sys.executable, "-c", code, *args], env=ENV, capture_output=True, text=True, timeout=300)
    assert "done already" in done.stdout and done.stdout.splitlines()[-1] == "exit 0 []", done.stdout + done.stderr


@pytest.mark.trains
def test_a_full_disk_or_sigterm_costs_no_finished_task(reference, data, tmp_path, monkeypatch, one_thread) -> None:
    checkpoint = tmp_path / "B3" / f"seed-{SEED}" / "checkpoint.pt"
    with monkeypatch.context() as m:  # the disk fills up while the checkpoint after task 2 is written
        full_disk(m, "checkpoint.pt", after=1)
        result = smoke_run(data, tmp_path)
    assert result.exit_code == 1
    error = one_error_line(result)
    assert "No space left on device" in error and f"holds tasks 1-1 of {CFG.n_tasks}" in error, error
    assert sorted(p.name for p in checkpoint.parent.iterdir()) == [".lock", "checkpoint.pt"]  # no temp files

    with monkeypatch.context() as m:  # SIGTERM (pre-emption) while task 2 trains
        m.setattr(task, "fit_task", signalling(signal.SIGTERM, task.fit_task))
        result = smoke_run(data, tmp_path)
    assert result.exit_code == 128 + signal.SIGTERM
    assert f"stopped by SIGTERM; {checkpoint} holds tasks 1-1 of" in one_error_line(result)

    with monkeypatch.context() as m:  # all tasks train, then the disk is full for result.json
        full_disk(m, "result.json")
        result = smoke_run(data, tmp_path)
    assert result.exit_code == 1
    assert f"holds tasks 1-{CFG.n_tasks} of {CFG.n_tasks}" in one_error_line(result)
    assert not run.result_path(tmp_path, "B3", SEED).exists()

    result = smoke_run(data, tmp_path)  # space again: the result is written from the checkpoint alone
    assert result.exit_code == 0 and "resuming after task" in result.output and line(1) not in result.output
    assert same_result(result_of(tmp_path), reference)


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path, monkeypatch) -> None:
    target = tmp_path / "checkpoint.pt"
    target.write_bytes(b"old")
    full_disk(monkeypatch, "checkpoint.pt")
    with pytest.raises(OSError, match="No space left"):
        write_bytes_atomic(target, b"new" * 1000)
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.pt"] and target.read_bytes() == b"old"


# --- checkpoints -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fault, message",
    [("truncated", "is damaged"), ("garbage", "is damaged"), ("another seed", "was written with another seed")],
)
def test_a_bad_checkpoint_is_refused_and_kept(fault, message, data, fresh, tmp_path, one_thread) -> None:
    """Refuse, do not restart: the file may be the only copy of hours of work (--force starts over)."""
    path = tmp_path / "B3" / f"seed-{SEED}" / "checkpoint.pt"
    learner, memory, gens = fresh(CFG, 0)
    learner.head.grow(CFG.classes_per_task)
    md5 = run.load_data(CFG, data, None).md5
    seed = SEED + 1 if fault == "another seed" else SEED
    with threads(1):
        settings = run.numeric_settings(torch.device("cpu"), "32-true")
    checkpoint = durability.Checkpoint(path, CFG, seed, md5, torch.device("cpu"), settings)
    checkpoint.save(0, learner, memory, gens, {"rows": [[1.0]]})
    if fault == "truncated":
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    elif fault == "garbage":
        path.write_bytes(b"not a checkpoint")
    kept = path.read_bytes()
    result = smoke_run(data, tmp_path)
    assert result.exit_code == 1
    error = one_error_line(result)
    assert f"checkpoint {path} {message}" in error and "--force" in error, error
    assert path.read_bytes() == kept and not run.result_path(tmp_path, "B3", SEED).exists()


@pytest.mark.slow
def test_a_checkpoint_resumes_only_under_the_settings_that_fix_the_numbers(data, fresh, tmp_path, monkeypatch) -> None:
    """Issue 14.3: a 1-thread start resumed with UH_CPU_THREADS=2 gave a result matching neither run."""
    path = tmp_path / "B3" / f"seed-{SEED}" / "checkpoint.pt"
    learner, memory, gens = fresh(CFG, 0)
    learner.head.grow(CFG.classes_per_task)
    md5 = run.load_data(CFG, data, None).md5
    with threads(1):
        settings = run.numeric_settings(torch.device("cpu"), "32-true")
    assert set(settings) == {"device", "cpu_threads", "precision", "compile", "deterministic"}
    durability.Checkpoint(path, CFG, SEED, md5, torch.device("cpu"), settings).save(0, learner, memory, gens, {})
    kept = path.read_bytes()
    for env, hint in [
        ("UH_CPU_THREADS", "UH_CPU_THREADS=1"),
        ("UH_COMPILE", "UH_COMPILE=0"),
        ("UH_DETERMINISTIC", "no --deterministic"),
    ]:
        with monkeypatch.context() as m, threads(1):
            m.setenv(env, "2" if env == "UH_CPU_THREADS" else "1")
            try:
                result = smoke_run(data, tmp_path)
            finally:
                torch.use_deterministic_algorithms(False)
        error = one_error_line(result)
        assert result.exit_code == 1 and f"checkpoint {path} was written with" in error, error
        assert f"to resume it, run with {hint}" in error and "--force to start this seed over" in error, error
        assert path.read_bytes() == kept


# --- bad input: one line, non-zero, nothing written --------------------------------------------------


@pytest.mark.parametrize(
    "args, message",
    [
        (["B9", "--profile", "smoke"], "unknown run ID 'B9'"),
        (["B3", "--profile", "huge"], "'huge' is not one of"),
        (["B3", "--profile", "smoke", "--seed", "abc"], "'abc' is not a valid integer"),
        (["B3", "--profile", "smoke", "--seed", "-1"], "-1 is not in the range"),
    ],
)
def test_bad_arguments_exit_2(args, message, tmp_path) -> None:
    result = uh_run(*args, "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path / "results"))
    assert result.exit_code == 2 and message in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
def test_a_bad_thread_count_is_one_line_naming_the_variable(value, data, tmp_path, monkeypatch) -> None:
    """Issue 14.14: UH_CPU_THREADS=0, -1 or abc gave a traceback or a line that did not name it."""
    monkeypatch.setenv("UH_CPU_THREADS", value)
    with threads(1):
        result = smoke_run(data, tmp_path / "results")
    error = one_error_line(result)
    assert result.exit_code == 1 and f"UH_CPU_THREADS={value!r} is not a thread count" in error, error
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("fault", ["truncated", "wrong checksum"])
def test_a_bad_archive_is_refused(fault, tmp_path) -> None:
    archive = write_synthetic_archive("cifar100", tmp_path / "archive", train_per_class=8, test_per_class=3)
    data = archive.read_bytes()
    archive.write_bytes(data[: len(data) // 2] if fault == "truncated" else data[:-1] + bytes([data[-1] ^ 1]))
    before = files(tmp_path)
    result = smoke_run(tmp_path / "data", tmp_path / "results", "--archive", str(archive))
    assert result.exit_code == 1 and "it is corrupt, truncated or not CIFAR-100" in one_error_line(result)
    assert files(tmp_path) == before


@pytest.mark.slow
def test_the_smoke_archive_advice_regenerates_what_the_profile_needs(tmp_path) -> None:
    """Issue 14.4: `uh data synth` as advised wrote the default 500x100 archive, which the smoke run took."""
    data = tmp_path / "data"
    archive = run.prepare_archive(CFG, data, None)[1]
    made = archive.read_bytes()
    archive.write_bytes(made[:-1] + bytes([made[-1] ^ 1]))  # damaged
    result = smoke_run(data, tmp_path / "results")
    error = one_error_line(result)
    command = error[error.index("`uh data synth") + 1 : error.rindex("`")]
    assert result.exit_code == 1 and "--train-per-class 150 --test-per-class 20" in command, error

    assert CliRunner().invoke(main, ["data", "synth", "--out", str(archive.parent)]).exit_code == 0  # the default
    result = smoke_run(data, tmp_path / "results")
    error = one_error_line(result)
    assert result.exit_code == 1 and "holds 500 training and 100 test images per class" in error, error
    assert command in error and not (tmp_path / "results").exists()

    assert CliRunner().invoke(main, command.split()[1:]).exit_code == 0  # the advice, followed
    assert archive.read_bytes() == made


def deny_writes(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Creating anything under `folder` fails with EACCES, as on a read-only mount.

    Patched rather than chmod-ed: root (as in CI containers) ignores permission bits.
    """

    def check(path: str | Path | int) -> None:
        if not isinstance(path, int) and Path(path).absolute().is_relative_to(folder):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))

    real_open, real_os_open, real_mkdir = builtins.open, os.open, os.mkdir

    def open_(file, mode="r", *args, **kwargs):
        if set(mode) & set("wax+"):
            check(file)
        return real_open(file, mode, *args, **kwargs)

    def os_open(path, flags, *args, **kwargs):
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            check(path)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", open_)
    monkeypatch.setattr(os, "open", os_open)
    monkeypatch.setattr(os, "mkdir", lambda path, *args, **kwargs: (check(path), real_mkdir(path, *args, **kwargs)))


def test_a_data_dir_that_is_not_writable_is_refused(tmp_path, monkeypatch) -> None:
    deny_writes(monkeypatch, tmp_path / "data")
    result = smoke_run(tmp_path / "data", tmp_path / "results")
    assert result.exit_code == 1 and "Permission denied" in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def test_a_results_dir_that_is_not_writable_is_refused(data, tmp_path, monkeypatch) -> None:
    deny_writes(monkeypatch, tmp_path)
    result = smoke_run(data, tmp_path / "results")
    assert result.exit_code == 1 and "Permission denied); choose a writable --results-dir" in one_error_line(result)
    assert list(tmp_path.iterdir()) == []


def finished(**changes: object) -> dict:
    """A valid result.json of smoke B3, seed SEED (what `uh run` skips as done)."""
    R = [[50.0] * (i + 1) + [None] * (CFG.n_tasks - i - 1) for i in range(CFG.n_tasks)]
    return {
        "config_version": CONFIG_VERSION,
        "run_id": "B3",
        "seed": SEED,
        "profile": "smoke",
        "config": CFG.to_dict(),
        "R": R,
        "metrics": {"acc": 50.0, "forgetting": 0.0, "bwt": 0.0},
    } | changes


@pytest.mark.parametrize(
    "text, message",
    [
        (json.dumps(finished(config_version=0)), f"config_version 0, this code is {CONFIG_VERSION}"),
        (json.dumps(finished(config=CFG.to_dict() | {"epochs": 1})), "config differs from B3's under profile smoke"),
        (json.dumps({k: v for k, v in finished().items() if k != "metrics"}), "$ lacks key(s) metrics"),
    ],
)
def test_a_stale_copy_of_the_run_is_refused_not_skipped(text, message, data, tmp_path) -> None:
    path = run.result_path(tmp_path, "B3", SEED)
    path.parent.mkdir(parents=True)
    path.write_text(text)
    before = files(tmp_path)
    result = smoke_run(data, tmp_path)
    assert result.exit_code == 1
    error = one_error_line(result)
    assert message in error and "stale copy of this run; rerun with --force" in error, error
    assert files(tmp_path) == before


def test_an_unreadable_result_is_refused_without_advising_force(data, tmp_path) -> None:
    path = run.result_path(tmp_path, "B3", SEED)
    path.parent.mkdir(parents=True)
    path.write_text('{"config_version": 1, "R": [[')
    result = smoke_run(data, tmp_path)
    error = one_error_line(result)
    assert result.exit_code == 1 and "is unreadable" in error and "--force" not in error, error


def test_a_finished_result_is_skipped(data, tmp_path) -> None:
    path = run.result_path(tmp_path, "B3", SEED)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(finished()))
    result = smoke_run(data, tmp_path)
    assert result.exit_code == 0 and "done already" in result.output


def test_a_run_finished_by_another_process_while_waiting_for_the_lock_is_not_redone(
    data, tmp_path, monkeypatch
) -> None:
    """Issue 14.5: a process past the "done?" check took the lock after another finished, and retrained."""
    out = run.result_path(tmp_path, "B3", SEED)
    real_lock = run.run_lock

    @contextmanager
    def lock_after_another_finished(path: Path) -> Iterator[None]:
        with real_lock(path):
            out.write_text(json.dumps(finished()))  # the other process's result, written just before
            yield

    monkeypatch.setattr(run, "run_lock", lock_after_another_finished)
    monkeypatch.setattr(run, "learn_task", lambda *args: pytest.fail("trained a finished run again"))
    result = smoke_run(data, tmp_path)
    assert result.exit_code == 0 and "done already" in result.output, result.output
    assert json.loads(out.read_text()) == finished()


# --- a results dir holds one profile -------------------------------------------------------------------


def paper_result(run_id: str, seed: int) -> dict:
    return finished(run_id=run_id, seed=seed, profile="paper", config=resolve(run_id).to_dict())


@pytest.mark.parametrize("marked", [True, False], ids=["recorded", "old dir without profile.json"])
@pytest.mark.parametrize("run_id", ["B3", "a1"])
def test_a_results_dir_of_another_profile_is_refused_even_with_force(run_id, marked, data, tmp_path) -> None:
    """Issue 14.1: --force once replaced a paper result with a smoke one; other run IDs went in unnoticed."""
    path = run.result_path(tmp_path, "B3", 1993)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(paper_result("B3", 1993)))
    if marked:
        (tmp_path / "profile.json").write_text('{"profile": "paper"}')
    before = files(tmp_path)
    for extra in ([], ["--force"]):
        result = uh_run(
            run_id,
            "--seed",
            "1993",
            "--profile",
            "smoke",
            "--data-dir",
            str(data),
            "--results-dir",
            str(tmp_path),
            *extra,
        )
        error = one_error_line(result)
        assert result.exit_code == 1 and "profile 'paper'" in error and "not 'smoke'" in error, error
        assert "choose another --results-dir" in error and "--force" not in error, error
        assert files(tmp_path) == before


def test_the_first_run_records_the_profile(data, tmp_path) -> None:
    from uniform_herding.runs.results import claim_dir, dir_profile

    claim_dir(tmp_path / "results", "smoke")
    assert dir_profile(tmp_path / "results") == "smoke"
    claim_dir(tmp_path / "results", "smoke")  # the same profile again: fine
    with pytest.raises(ValueError, match="holds results of profile 'smoke'"):
        claim_dir(tmp_path / "results", "paper")


# --- the fault table and what the docs promise -----------------------------------------------------------

DOC = Path(__file__).parents[1] / "docs" / "reliability.md"


def test_every_row_of_the_fault_table_names_a_test_that_exists() -> None:
    """Issue 14, done when: the fault table lists each fault with the test that shows it."""
    rows = [r for r in DOC.read_text().split("## Fault table")[1].split("\n\n")[2].splitlines() if r.startswith("|")]
    assert len(rows) > 30
    for row in rows[2:]:
        cell = row.rstrip(" |").rsplit("|", 1)[1]
        tokens = re.findall(r"`([^`]+)`", cell)  # test, ::test, tests/file.py, tests/file.py::test
        assert tokens or cell.strip() == "same test", row
        module = "test_reliability.py"
        for token in tokens:
            file, _, name = token.removeprefix("tests/").rpartition("::") if "::" in token else ("", "", token)
            if token.startswith("tests/") and "::" not in token:
                file, name = token.removeprefix("tests/"), ""
            module = file or module
            source = (Path(__file__).parent / module).read_text()
            assert not name or f"def {name}(" in source, (module, name)


@pytest.mark.slow
def test_uh_cpu_threads_not_omp_num_threads_fixes_the_count() -> None:
    """Issue 14.15: the docs said OMP_NUM_THREADS pins the count; UH_CPU_THREADS (default 1) overrides it."""
    code = "import torch, uniform_herding.runs.devices as d; d.select('cpu', 'smoke'); print(torch.get_num_threads())"
    env = {**ENV, "OMP_NUM_THREADS": "2"}
    env.pop("UH_CPU_THREADS", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[-1] == "1"
    text = " ".join(DOC.read_text().split())
    assert "which overrides `OMP_NUM_THREADS`" in text and "to pin it across machines" not in text
