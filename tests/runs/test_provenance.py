"""runs/provenance.py: the code hash says which code ran, alike in a checkout, a clone and an unpacked archive; git
says whether the tree differs from its revision, and the diff is kept; uh check reads it back (made_by). Each test
builds its own git repository: a copy of this checkout's package, committed."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import py_compile
import shutil
import subprocess
import sys
import types
from pathlib import Path

import pytest
from click.testing import CliRunner

from uniform_herding.cli import main
from uniform_herding.runs.provenance import (
    DIFF_NAME,
    EXCLUDED,
    MIXED,
    MODIFIED,
    NO_CODE,
    UNHASHED,
    Made,
    checkout_state,
    code_files,
    code_hash,
    made_by,
    modified_notice,
    other_code,
    portable_command,
    provenance,
    unhashed_code,
)

ROOT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "init.defaultBranch=main", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def make_checkout(where: Path) -> Path:
    """A git repository holding this checkout's package (no build output), constraints.txt, the README and the
    project's .gitignore, committed: a checkout whose state the test, not the developer, decides."""
    shutil.copytree(
        ROOT / "src" / "uniform_herding",
        where / "src" / "uniform_herding",
        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
    )
    for name in ("constraints.txt", ".gitignore", "README.md"):
        shutil.copy(ROOT / name, where / name)
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "the code")
    return where


def package(checkout: Path) -> Path:
    return checkout / "src" / "uniform_herding"


def code_of(checkout: Path) -> tuple[dict, str | None]:
    """The provenance of a copy's code, as a process that loaded none of its modules records it."""
    return provenance(package(checkout), checkout, modules={})


def append(path: Path, text: str) -> None:
    path.write_text(path.read_text() + text)


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("UH_GIT_REVISION", raising=False)
    return make_checkout(tmp_path / "repo")


def test_the_code_hash_is_the_same_here_in_a_clone_and_in_an_unpacked_archive(
    tmp_path: Path, repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A clone is its revision, unmodified; an archive has no .git, so git cannot compare it (tree_modified None) and
    its revision is the image's claim (UH_GIT_REVISION) or none: the code hash alone says what ran, and it is this
    checkout's."""
    here, head = code_hash(), git(repo, "rev-parse", "HEAD").strip()
    assert code_hash(package(repo), repo) == here
    git(tmp_path, "clone", "-q", str(repo), "clone")
    assert code_of(tmp_path / "clone") == (
        {
            "code_sha256": here,
            "code_files": len(code_files()),
            "git_revision": head,
            "git_revision_verified": True,
            "tree_modified": False,
            "diff_sha256": None,
            "unhashed_code": [],
        },
        None,
    )
    archive = tmp_path / "archive"
    archive.mkdir()
    tar = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=repo, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(archive)], input=tar, check=True)
    assert not (archive / ".git").exists()
    assert code_of(archive) == (
        {
            "code_sha256": here,
            "code_files": len(code_files()),
            "git_revision": None,
            "git_revision_verified": False,
            "tree_modified": None,
            "diff_sha256": None,
            "unhashed_code": [],
        },
        None,
    )
    monkeypatch.setenv("UH_GIT_REVISION", head)  # the image's build argument: claimed, never verified
    code, _ = code_of(archive)
    assert (code["git_revision"], code["git_revision_verified"], code["code_sha256"]) == (head, False, here)


def test_crlf_line_endings_and_build_output_change_nothing(tmp_path: Path, repo: Path) -> None:
    """A Windows clone (core.autocrlf: CRLF in every file) hashes alike and is unmodified; so is a tree holding
    __pycache__, stray *.pyc and egg-info; and CRLF written into a copy without git changes no hash."""
    clean, _ = code_of(repo)
    method = package(repo) / "method"
    (method / "__pycache__").mkdir(exist_ok=True)
    (method / "__pycache__" / "task.cpython-311.pyc").write_bytes(b"\x00compiled")
    (method / "task.pyc").write_bytes(b"\x00compiled")
    (repo / "src" / "uniform_herding.egg-info").mkdir()
    (repo / "src" / "uniform_herding.egg-info" / "SOURCES.txt").write_text("src/uniform_herding/method/task.py\n")
    assert code_of(repo) == (clean, None)
    git(tmp_path, "clone", "-q", "-c", "core.autocrlf=true", str(repo), "windows")
    windows = tmp_path / "windows"
    assert b"\r\n" in (package(windows) / "method" / "task.py").read_bytes()
    assert code_of(windows) == (clean, None)
    copy = tmp_path / "copy"
    shutil.copytree(repo, copy, ignore=shutil.ignore_patterns(".git"))
    for path in (package(copy) / "method").glob("*.py"):
        path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))
    assert code_hash(package(copy), copy) == clean["code_sha256"]


def test_a_comment_only_change_to_a_method_file_is_a_modified_tree_with_its_diff(repo: Path) -> None:
    """A comment changes no number, but it is other code: the hash changes, the tree is modified against the same
    revision, and the diff, whose SHA-256 is recorded, names the file; staged, alike."""
    clean, _ = code_of(repo)
    append(package(repo) / "method" / "memory.py", "# a comment, and other code\n")
    code, diff = code_of(repo)
    assert diff is not None and code["diff_sha256"] == hashlib.sha256(diff.encode()).hexdigest()
    assert (code["tree_modified"], code["git_revision"], code["git_revision_verified"]) == (
        True,
        clean["git_revision"],
        True,
    )
    assert code["code_sha256"] not in (clean["code_sha256"], None)
    assert "diff --git a/src/uniform_herding/method/memory.py b/src/uniform_herding/method/memory.py" in diff
    assert "+# a comment, and other code" in diff
    git(repo, "add", "-A")
    assert code_of(repo) == (code, diff)


def test_an_untracked_module_under_method_counts(repo: Path) -> None:
    """A new .py that git does not track yet is code that runs: hashed and in the diff; a text file beside it is not."""
    clean, _ = code_of(repo)
    (package(repo) / "method" / "extra.py").write_text("EXTRA = 1\n")
    (package(repo) / "method" / "notes.txt").write_text("not code\n")
    code, diff = code_of(repo)
    assert code["tree_modified"] is True and code["code_sha256"] != clean["code_sha256"]
    assert code["code_files"] == clean["code_files"] + 1
    assert diff is not None and "b/src/uniform_herding/method/extra.py" in diff and "+EXTRA = 1" in diff
    assert "notes.txt" not in diff


def test_docs_change_no_hash_but_every_module_of_the_package_does(repo: Path) -> None:
    """Issue 59: the hash covers all the code a process of uh can execute. The README and the docs change no number
    and no hash; an edit of any module of the package (launch.py, which `uh run` imports, the checker, the report)
    is other code, named in the diff."""
    clean, _ = code_of(repo)
    append(repo / "README.md", "An edited sentence.\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "notes.md").write_text("# notes\n")
    assert code_of(repo) == (clean, None)
    hashes = {clean["code_sha256"]}
    for name in ("launch.py", "cli.py", "chain.py", "verdict/judge.py", "report/tables.py"):
        append(package(repo) / name, "# a comment\n")
        code, diff = code_of(repo)
        assert code["tree_modified"] is True and code["code_sha256"] not in hashes
        assert diff is not None and f"src/uniform_herding/{name}" in diff
        hashes.add(code["code_sha256"])


def test_what_the_hash_leaves_out_is_listed_with_why() -> None:
    """Issue 59: the exclusions, in one place, each with its reason; and what they say holds here: the package's
    files are its *.py, all hashed, and their bytecode."""
    assert list(EXCLUDED) == [
        "__pycache__/ and *.pyc",
        "files of the package other than *.py",
        "everything outside src/uniform_herding/ but constraints.txt",
    ]
    assert all(len(why) > 40 for why in EXCLUDED.values())
    pkg = ROOT / "src" / "uniform_herding"
    files = [p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in p.relative_to(pkg).parts]
    assert sorted(f"src/uniform_herding/{p.relative_to(pkg).as_posix()}" for p in files) == sorted(
        set(code_files()) - {"constraints.txt"}
    )


def compile_pyc(source: Path, mode: py_compile.PycInvalidationMode) -> None:
    py_compile.compile(
        str(source), cfile=importlib.util.cache_from_source(str(source)), invalidation_mode=mode, doraise=True
    )


def loaded_code(checkout: Path, module: str) -> tuple[list[str], str]:
    """What a process that imports `module` from the copy names as unhashed code, and what the module's PLANTED is."""
    code = (
        f"import json, {module} as m\nfrom uniform_herding.runs.provenance import unhashed_code\n"
        "print(json.dumps([unhashed_code(), getattr(m, 'PLANTED', 'source')]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        cwd=checkout,
        env=os.environ | {"PYTHONPATH": str(checkout / "src")},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    named, planted = json.loads(out)
    return named, planted


@pytest.mark.slow
def test_bytecode_that_is_not_its_source_is_named_and_bytecode_python_ignores_is_not(repo: Path) -> None:
    """Issue 59: a stale unchecked-hash .pyc (made from a changed source, the source restored) runs in place of its
    source, and the hash of the files cannot see it: the process names the module. Bytecode Python would not run
    (a stale timestamp or checked-hash pyc: it compiles the source) and bytecode of the source itself are not
    named, nor is the tree modified: __pycache__ is git's to ignore."""
    source = package(repo) / "method" / "memory.py"
    original = source.read_text()
    source.write_text(original + "PLANTED = 'bytecode'\n")
    compile_pyc(source, py_compile.PycInvalidationMode.UNCHECKED_HASH)
    source.write_text(original)
    named, planted = loaded_code(repo, "uniform_herding.method.memory")
    pyc = Path(importlib.util.cache_from_source(str(source))).name  # its name: a result records no path
    assert (named, planted) == ([f"uniform_herding.method.memory: its bytecode {pyc} is not its source's"], "bytecode")
    assert code_of(repo)[0]["tree_modified"] is False
    for mode in (py_compile.PycInvalidationMode.TIMESTAMP, py_compile.PycInvalidationMode.CHECKED_HASH):
        source.write_text(original + "PLANTED = 'bytecode'\n")
        compile_pyc(source, mode)
        source.write_text(original + "\n")  # the source moves on: Python compiles it, and ignores the pyc
        assert loaded_code(repo, "uniform_herding.method.memory") == ([], "source")
    compile_pyc(source, py_compile.PycInvalidationMode.UNCHECKED_HASH)  # the source's own bytecode
    assert loaded_code(repo, "uniform_herding.method.memory") == ([], "source")


def test_a_module_of_the_package_found_outside_it_is_named(tmp_path: Path) -> None:
    """Issue 59: a module of the package whose file is not one of the hashed files (elsewhere, or bytecode without
    its source) is named; modules of other packages are not the hash's, and are left alone."""
    outside = types.ModuleType("uniform_herding.method.memory")
    outside.__file__ = str(tmp_path / "memory.py")
    sourceless = types.ModuleType("uniform_herding.method.task")
    sourceless.__file__ = str(ROOT / "src" / "uniform_herding" / "method" / "task.pyc")
    modules = {
        "uniform_herding.method.memory": outside,
        "uniform_herding.method.task": sourceless,
        "uniform_herding.catalogue": sys.modules["uniform_herding.catalogue"],
        "json": json,
        "uniform_herdingx": types.ModuleType("uniform_herdingx"),
    }
    assert unhashed_code(modules) == [  # by file name: a result records no path of the machine
        "uniform_herding.method.memory: loaded from memory.py outside the package, not from its hashed files",
        "uniform_herding.method.task: loaded from task.pyc outside the package, not from its hashed files",
    ]
    assert unhashed_code({"uniform_herding.catalogue": sys.modules["uniform_herding.catalogue"]}) == []


def test_made_by_names_each_result_under_each_why_and_counts_it_once() -> None:
    """What uh check names: other code, a modified tree, code loaded from elsewhere than the hashed files (issue 59:
    the result's or a task's unhashed_code), tasks under other code (a task without a code hash, from a checkpoint
    written before results recorded it, is other code), no code recorded; a result of this code from a tree git could
    not compare (an archive, the image) is this code's."""
    this, other = "aa" * 32, "bb" * 32
    results = [
        {
            "run_id": "B3",
            "seed": 1993,
            "provenance": {"code_sha256": this, "tree_modified": False, "unhashed_code": []},
            "tasks": [{"code_sha256": this, "unhashed_code": []}, {"code_sha256": this}],
        },
        {"run_id": "B3", "seed": 2023, "provenance": {"code_sha256": this, "tree_modified": None}},
        {
            "run_id": "B1",
            "seed": 42,
            "provenance": {"code_sha256": other, "tree_modified": True},
            "tasks": [{"code_sha256": other}],
        },
        {
            "run_id": "a1",
            "seed": 1993,
            "provenance": {"code_sha256": this, "tree_modified": False},
            "tasks": [{"task": 0}, {"code_sha256": this}],
        },
        {"run_id": "B0", "seed": 1993},
        {
            "run_id": "B2",
            "seed": 1993,
            "provenance": {
                "code_sha256": this,
                "tree_modified": False,
                "unhashed_code": ["uniform_herding.launch: its bytecode ..."],
            },
        },
        {
            "run_id": "B2",
            "seed": 42,
            "provenance": {"code_sha256": this, "tree_modified": False, "unhashed_code": []},
            "tasks": [{"code_sha256": this, "unhashed_code": ["uniform_herding.launch: its bytecode ..."]}],
        },
    ]
    made = made_by(results, this)
    assert made.others == {
        other_code(other): (("B1", 42),),
        MODIFIED: (("B1", 42),),
        UNHASHED: (("B2", 42), ("B2", 1993)),
        MIXED: (("a1", 1993),),
        NO_CODE: (("B0", 1993),),
    }
    assert made.count == 5 and made.withheld() == "5 results not plainly made by this checkout's code"
    assert made.grouped() == {
        (
            f"other code (its code {other[:12]}... against the checking code's {this[:12]}...)",
            "a modified tree (no revision; no code.diff beside it)",
        ): (("B1", 42),),
        ("code that is not the hashed files (uniform_herding.launch: its bytecode ...)",): (("B2", 42), ("B2", 1993)),
        (MIXED,): (("a1", 1993),),
        (NO_CODE,): (("B0", 1993),),
    }
    assert made_by(results[:2], this) == Made(this, read=2) and Made(this).withheld() is None
    assert made_by(results[:1], other).withheld() == "1 result not plainly made by this checkout's code"
    assert Made(this, recorded=False).withheld() == "a per-seed CSV records no code"
    assert made_by([]).this == code_hash()


def test_settings_that_change_numbers_are_named_where_results_differ_or_leave_the_default() -> None:
    """Issue 59: precision, compile mode, threads, device type and deterministic algorithms change numbers; where the
    results differ in one, or all leave the profile's default, it is named with who has which value; where all have
    the default, or a result records none, nothing is. Threads are a CPU run's only."""

    def result(seed: int, run_id: str = "B3", profile: str = "smoke", **env: object) -> dict:
        base = {
            "device": "cpu: a CPU (AVX2)",
            "cpu_threads": 1,
            "precision": "32-true",
            "compile": "off",
            "deterministic": False,
        }
        return {"run_id": run_id, "seed": seed, "profile": profile, "environment": base | env}

    assert made_by([result(1993), result(42, "B0")]).settings == {}
    assert made_by([result(1993), {"run_id": "B0", "seed": 42, "profile": "smoke"}]).settings == {}
    assert made_by([result(1993, precision="16-mixed"), result(2023)]).settings == {
        "precision": ("32-true", {"16-mixed": (("B3", 1993),), "32-true": (("B3", 2023),)})
    }
    assert made_by([result(1993, cpu_threads=4, compile="default"), result(42, cpu_threads=4)]).settings == {
        "compile": ("off", {"default": (("B3", 1993),), "off": (("B3", 42),)}),
        "cpu_threads": ("1", {"4": (("B3", 42), ("B3", 1993))}),
    }
    gpu = {"device": "cuda: a GPU", "cpu_threads": 8, "precision": "16-mixed"}
    assert made_by([result(1993, profile="paper", **gpu), result(42, profile="paper", **gpu)]).settings == {}
    assert made_by([result(1993, profile="paper", **gpu), result(42, profile="paper")]).settings == {
        "device": ("cuda", {"cuda": (("B3", 1993),), "cpu": (("B3", 42),)}),
        "precision": ("16-mixed", {"16-mixed": (("B3", 1993),), "32-true": (("B3", 42),)}),
    }
    assert made_by([result(1993, deterministic=True)]).settings == {
        "deterministic": ("false", {"true": (("B3", 1993),)})
    }


@pytest.mark.trains
def test_a_smoke_run_from_a_modified_tree_says_so_and_keeps_its_diff(tmp_path: Path, repo: Path) -> None:
    """`uh run B0 --profile smoke` from a copy of the package with a comment-only change: result.json's provenance
    says modified, and code.diff beside it has the recorded SHA-256; every task records the code. Run again from the
    clean tree (--force): not modified, and the stale code.diff is gone."""
    append(package(repo) / "method" / "memory.py", "# a comment-only change\n")
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("UH_GIT_REVISION", "UH_RESULTS_DIR", "UH_DATA_DIR")}

    said = []

    def uh_run(*extra: str) -> tuple[dict, Path]:
        args = ["run", "B0", "--profile", "smoke", "--seed", "1993", "--data-dir", str(tmp_path / "data")]
        command = [sys.executable, "-m", "uniform_herding", *args, "--results-dir", str(results), *extra]
        pythonpath = {"PYTHONPATH": str(repo / "src")}
        ran = subprocess.run(
            command, cwd=repo, env=env | pythonpath, capture_output=True, text=True, check=True, timeout=600
        )
        said.append(ran.stdout)
        out = results / "B0" / "seed-1993"
        return json.loads((out / "result.json").read_text()), out / DIFF_NAME

    result, diff = uh_run()
    assert said[0].splitlines()[0] == modified_notice(package(repo), repo) and said[0].count("note: this tree") == 1
    code = result["provenance"]
    assert code["tree_modified"] is True and code["git_revision"] == git(repo, "rev-parse", "HEAD").strip()
    assert code["code_sha256"] == code_hash(package(repo), repo) != code_hash()
    assert hashlib.sha256(diff.read_bytes()).hexdigest() == code["diff_sha256"]
    assert "+# a comment-only change" in diff.read_text()
    assert {t["code_sha256"] for t in result["tasks"]} == {code["code_sha256"]}
    git(repo, "checkout", "--", ".")
    result, diff = uh_run("--force")
    assert (result["provenance"]["tree_modified"], result["provenance"]["diff_sha256"]) == (False, None)
    assert result["provenance"]["code_sha256"] == code_hash() and not diff.exists()
    assert "note: this tree" not in said[1]


def test_uh_run_and_uh_version_say_whether_the_tree_differs_from_its_revision(repo: Path) -> None:
    """Issue 61: a clean clone is `modified: no` beside its hash and revision, and uh run says nothing of it; an edit
    makes it `modified: yes`, and uh run says once, at its start, where the diff goes."""
    head = git(repo, "rev-parse", "HEAD").strip()
    assert checkout_state(package(repo), repo) == f"code sha256 {code_hash()}, revision {head}, modified: no"
    assert modified_notice(package(repo), repo) is None
    append(package(repo) / "method" / "memory.py", "# a comment-only change\n")
    state = checkout_state(package(repo), repo)
    assert state == f"code sha256 {code_hash(package(repo), repo)}, revision {head}, modified: yes"
    notice = modified_notice(package(repo), repo)
    assert notice is not None and f"differs from its revision {head}" in notice and "code.diff beside" in notice


def test_a_result_records_its_command_with_no_absolute_path(tmp_path: Path) -> None:
    """Issue 61: result.json's command names paths inside the results folder relative to it and any other absolute
    path by its name alone (a bundle carries it to others); relative paths stay as given."""
    results = tmp_path / "results"
    program, data, archive = tmp_path / ".venv" / "bin" / "uh", tmp_path / "data", tmp_path / "x.tar.gz"
    argv = [str(program), "run", "B3", "--data-dir", str(data), "--results-dir", str(results), f"--archive={archive}"]
    command = portable_command([*argv, "--slurm-config", "slurm.toml", str(results / "B3")], results)
    expected = "uh run B3 --data-dir .../data --results-dir . --archive=.../x.tar.gz --slurm-config slurm.toml B3"
    assert command == expected
    assert str(tmp_path) not in command


HALVED_LR = """
# planted by tests/runs/test_provenance.py: SGD's learning rate halved, outside the method's files
import uniform_herding.method.train as _train

_sgd = _train.sgd
_train.sgd = lambda cfg, params, fused: _sgd(dataclasses.replace(cfg, lr=cfg.lr / 2), params, fused)
"""

# `uh run` in a process that then lists the files of the package's modules it loaded.
UH_RUN = """import json, sys
from uniform_herding.cli import main
try:
    main(sys.argv[2:])
except SystemExit as e:
    code = e.code
loaded = [m.__file__ for n, m in list(sys.modules.items()) if n.startswith("uniform_herding") and m.__file__]
open(sys.argv[1], "w").write(json.dumps(loaded))
sys.exit(code)
"""


@pytest.mark.trains
def test_a_training_change_outside_method_or_only_in_bytecode_costs_the_badge(tmp_path: Path, repo: Path) -> None:
    """Issue 59: B3 smoke from a copy whose launch.py halves SGD's learning rate records a code hash that is not this
    checkout's, and `uh check --run-ids B3` names the result. The same change shipped only as a stale unchecked-hash
    .pyc (the source restored, so the files hash as this checkout's and the tree is not modified) is named by the
    run (provenance.unhashed_code, and each task's) and by uh check, and it ran: R is the first run's. Every module of
    the package a `uh run` process loaded is a hashed file."""
    launch = package(repo) / "launch.py"
    original = launch.read_text()
    append(launch, HALVED_LR)
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("UH_GIT_REVISION", "UH_RESULTS_DIR", "UH_DATA_DIR")}

    def uh_run(*extra: str) -> tuple[dict, list[str]]:
        loaded = tmp_path / "loaded.json"
        args = ("B3", "--profile", "smoke", "--seed", "1993", "--data-dir", str(tmp_path / "data"))
        command = [sys.executable, "-c", UH_RUN, str(loaded), "run", *args, "--results-dir", str(results), *extra]
        subprocess.run(command, cwd=repo, env=env | {"PYTHONPATH": str(repo / "src")}, check=True, timeout=900)
        return json.loads((results / "B3" / "seed-1993" / "result.json").read_text()), json.loads(loaded.read_text())

    def named_by_check() -> str:
        res = CliRunner().invoke(main, ["check", "--results-dir", str(results), "--run-ids", "B3", "--wide"])
        assert res.exit_code != 2 and isinstance(res.exception, SystemExit | None), res.output
        return res.output

    edited, loaded = uh_run()
    assert edited["provenance"]["code_sha256"] == code_hash(package(repo), repo) != code_hash()
    assert edited["provenance"]["tree_modified"] is True and edited["provenance"]["unhashed_code"] == []
    hashed = {str(repo / path) for path in code_files(package(repo), repo)}
    assert {str(launch), str(package(repo) / "runs" / "run.py")} <= set(loaded) <= hashed
    out = named_by_check()
    revision = git(repo, "rev-parse", "HEAD").strip()
    theirs, ours = edited["provenance"]["code_sha256"][:12], code_hash()[:12]
    assert (
        f"  B3 seed 1993: other code (its code {theirs}... against the checking code's {ours}...); a modified tree "
        f"(of revision {revision[:12]}; code.diff beside its result.json)"
    ) in out.splitlines()

    compile_pyc(launch, py_compile.PycInvalidationMode.UNCHECKED_HASH)
    launch.write_text(original)
    stale, _ = uh_run("--force")
    code = stale["provenance"]
    pyc = Path(importlib.util.cache_from_source(str(launch))).name
    assert (code["code_sha256"], code["tree_modified"]) == (code_hash(), False)
    assert code["unhashed_code"] == [f"uniform_herding.launch: its bytecode {pyc} is not its source's"]
    assert {tuple(t["unhashed_code"]) for t in stale["tasks"]} == {tuple(code["unhashed_code"])}
    assert stale["R"] == edited["R"]
    out = named_by_check()
    assert f"  B3 seed 1993: code that is not the hashed files ({code['unhashed_code'][0]})" in out.splitlines()
