"""runs/provenance.py: the code hash says which code ran, alike in a checkout, a clone and an unpacked archive; git
says whether the tree differs from its revision, and the diff is kept; uh check reads it back (made_by). Each test
builds its own git repository: a copy of this checkout's package, committed."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from uniform_herding.runs.provenance import (
    DIFF_NAME,
    MIXED,
    MODIFIED,
    NO_CODE,
    Made,
    code_files,
    code_hash,
    made_by,
    other_code,
    provenance,
)

ROOT = Path(__file__).resolve().parents[2]


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c",
                           "init.defaultBranch=main", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout  # fmt: skip


def make_checkout(where: Path) -> Path:
    """A git repository holding this checkout's package (no build output), constraints.txt, the README and the
    project's .gitignore, committed: a checkout whose state the test, not the developer, decides."""
    shutil.copytree(ROOT / "src" / "uniform_herding", where / "src" / "uniform_herding",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))  # fmt: skip
    for name in ("constraints.txt", ".gitignore", "README.md"):
        shutil.copy(ROOT / name, where / name)
    git(where, "init", "-q")
    git(where, "add", "-A")
    git(where, "commit", "-qm", "the code")
    return where


def package(checkout: Path) -> Path:
    return checkout / "src" / "uniform_herding"


def code_of(checkout: Path, part: str = "run") -> tuple[dict, str | None]:
    return provenance(part, package(checkout), checkout)


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
    here, head = code_hash("run"), git(repo, "rev-parse", "HEAD").strip()
    assert code_hash("run", package(repo), repo) == here
    git(tmp_path, "clone", "-q", str(repo), "clone")
    assert code_of(tmp_path / "clone") == ({
        "code_sha256": here, "code_files": len(code_files()), "git_revision": head, "git_revision_verified": True,
        "tree_modified": False, "diff_sha256": None}, None)  # fmt: skip
    archive = tmp_path / "archive"
    archive.mkdir()
    tar = subprocess.run(["git", "archive", "--format=tar", "HEAD"], cwd=repo, capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(archive)], input=tar, check=True)
    assert not (archive / ".git").exists()
    assert code_of(archive) == ({
        "code_sha256": here, "code_files": len(code_files()), "git_revision": None, "git_revision_verified": False,
        "tree_modified": None, "diff_sha256": None}, None)  # fmt: skip
    assert code_hash("check", package(archive), archive) == code_hash("check")
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
    assert code_hash("run", package(copy), copy) == clean["code_sha256"]


def test_a_comment_only_change_to_a_method_file_is_a_modified_tree_with_its_diff(repo: Path) -> None:
    """A comment changes no number, but it is other code: the hash changes, the tree is modified against the same
    revision, and the diff, whose SHA-256 is recorded, names the file; staged, alike."""
    clean, _ = code_of(repo)
    append(package(repo) / "method" / "memory.py", "# a comment, and other code\n")
    code, diff = code_of(repo)
    assert diff is not None and code["diff_sha256"] == hashlib.sha256(diff.encode()).hexdigest()
    assert (code["tree_modified"], code["git_revision"], code["git_revision_verified"]) == (
        True, clean["git_revision"], True)  # fmt: skip
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


def test_docs_change_no_hash_and_the_checker_changes_the_check_hash_only(repo: Path) -> None:
    """The README, the docs and the report change no number: neither hash moves, and the tree is not modified for
    either. An edit of verdict/ is the checker's: the check hash moves, the run hash does not."""
    run, check = code_of(repo, "run"), code_of(repo, "check")
    append(repo / "README.md", "An edited sentence.\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "notes.md").write_text("# notes\n")
    append(package(repo) / "report" / "tables.py", "# a comment in the report\n")
    assert (code_of(repo, "run"), code_of(repo, "check")) == (run, check)
    append(package(repo) / "verdict" / "judge.py", "# a comment in the checker\n")
    assert code_of(repo, "run") == run
    code, diff = code_of(repo, "check")
    assert code["tree_modified"] is True and code["code_sha256"] != check[0]["code_sha256"]
    assert diff is not None and "src/uniform_herding/verdict/judge.py" in diff and "tables.py" not in diff


def test_made_by_names_each_result_under_each_why_and_counts_it_once() -> None:
    """What uh check names: other code, a modified tree, tasks under other code (a task without a code hash, from
    a checkpoint written before results recorded it, is other code), no code recorded; a result of this code from
    a tree git could not compare (an archive, the image) is this code's."""
    this, other = "aa" * 32, "bb" * 32
    results = [
        {"run_id": "B3", "seed": 1993, "provenance": {"code_sha256": this, "tree_modified": False},
         "tasks": [{"code_sha256": this}, {"code_sha256": this}]},
        {"run_id": "B3", "seed": 2023, "provenance": {"code_sha256": this, "tree_modified": None}},
        {"run_id": "B1", "seed": 42, "provenance": {"code_sha256": other, "tree_modified": True},
         "tasks": [{"code_sha256": other}]},
        {"run_id": "a1", "seed": 1993, "provenance": {"code_sha256": this, "tree_modified": False},
         "tasks": [{"task": 0}, {"code_sha256": this}]},
        {"run_id": "B0", "seed": 1993},
    ]  # fmt: skip
    made = made_by(results, this)
    assert made.others == {other_code(other): (("B1", 42),), MODIFIED: (("B1", 42),), MIXED: (("a1", 1993),),
                           NO_CODE: (("B0", 1993),)}  # fmt: skip
    assert made.count == 3 and made.withheld() == "3 results not made by this checkout's code"
    assert made_by(results[:2], this) == Made(this, read=2) and Made(this).withheld() is None
    assert made_by(results[:1], other).withheld() == "1 result not made by this checkout's code"
    assert Made(this, recorded=False).withheld() == "a per-seed CSV records no code"
    assert made_by([]).this == code_hash("run")


@pytest.mark.trains
def test_a_smoke_run_from_a_modified_tree_says_so_and_keeps_its_diff(tmp_path: Path, repo: Path) -> None:
    """`uh run B0 --profile smoke` from a copy of the package with a comment-only change: result.json's provenance
    says modified, and code.diff beside it has the recorded SHA-256; every task records the code. Run again from the
    clean tree (--force): not modified, and the stale code.diff is gone."""
    append(package(repo) / "method" / "memory.py", "# a comment-only change\n")
    results = tmp_path / "results"
    env = {k: v for k, v in os.environ.items() if k not in ("UH_GIT_REVISION", "UH_RESULTS_DIR", "UH_DATA_DIR")}

    def uh_run(*extra: str) -> tuple[dict, Path]:
        subprocess.run([sys.executable, "-m", "uniform_herding", "run", "B0", "--profile", "smoke", "--seed", "1993",
                        "--data-dir", str(tmp_path / "data"), "--results-dir", str(results), *extra], cwd=repo,
                       env=env | {"PYTHONPATH": str(repo / "src")}, capture_output=True, text=True, check=True,
                       timeout=600)  # fmt: skip
        out = results / "B0" / "seed-1993"
        return json.loads((out / "result.json").read_text()), out / DIFF_NAME

    result, diff = uh_run()
    code = result["provenance"]
    assert code["tree_modified"] is True and code["git_revision"] == git(repo, "rev-parse", "HEAD").strip()
    assert code["code_sha256"] == code_hash("run", package(repo), repo) != code_hash("run")
    assert hashlib.sha256(diff.read_bytes()).hexdigest() == code["diff_sha256"]
    assert "+# a comment-only change" in diff.read_text()
    assert {t["code_sha256"] for t in result["tasks"]} == {code["code_sha256"]}
    git(repo, "checkout", "--", ".")
    result, diff = uh_run("--force")
    assert (result["provenance"]["tree_modified"], result["provenance"]["diff_sha256"]) == (False, None)
    assert result["provenance"]["code_sha256"] == code_hash("run") and not diff.exists()
