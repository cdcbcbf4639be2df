"""What code made a result: a content hash of the files that compute it, and how they stand against git.

A git revision alone does not say what ran: a modified tree records the commit before the edit, an archive
without .git records nothing, and in the image the revision is a build argument anyone can set. The code hash
is computed from the files themselves (`code_files`: sorted relative paths and each file's SHA-256, line
endings normalised, `__pycache__` and build metadata never read), so a clone, an unpacked `git archive` and
the image give the same hash for the same code. Where git is there, the tree is compared with its revision:
a modified tree records the diff's SHA-256, and the diff itself is kept beside the result.

Two hashes, one per role (`PARTS`): "run", the code that trains and records a run (data/, method/,
variants.py, runs/ and the installed constraints), which result.json records; "check", the checker's
(verdict/ and everything it builds on), which check_report.json records. The report and the docs are in
neither: they change no number.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]  # src/uniform_herding
CHECKOUT = PACKAGE.parents[1]  # the repository root, /app in the image
CONSTRAINTS = "constraints.txt"  # at the checkout's root: the pins every install uses
DIFF_NAME = "code.diff"  # a modified tree's diff, kept beside the result it made

# Each role's files, relative to the package (a folder: its *.py files, recursively), and whether the constraints
# are part of it.
_RUN = ("__init__.py", "data", "method", "runs", "variants.py")
PARTS: dict[str, tuple[str, ...]] = {"run": _RUN, "check": (*_RUN, "verdict")}


def _normalised(path: Path) -> bytes:
    """A file's bytes with CRLF and CR line endings as LF, so that a checkout on Windows hashes alike."""
    return path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_files(part: str = "run", package: Path = PACKAGE, checkout: Path = CHECKOUT) -> dict[str, str]:
    """The files of one role, as {path relative to the checkout: SHA-256 of its normalised bytes}, sorted.

    Only `*.py` files under the role's folders (never `__pycache__`, `*.egg-info` or other build output), and the
    constraints file where it is (a missing one is recorded as missing, so that it changes the hash)."""
    files: dict[str, str] = {}
    for name in PARTS[part]:
        where = package / name
        paths = sorted(where.rglob("*.py")) if where.is_dir() else [where]
        for path in paths:
            if "__pycache__" not in path.parts:
                files[f"src/{package.name}/{path.relative_to(package).as_posix()}"] = _sha256(_normalised(path))
    constraints = checkout / CONSTRAINTS
    files[CONSTRAINTS] = _sha256(_normalised(constraints)) if constraints.is_file() else "missing"
    return dict(sorted(files.items()))


def sha256sum(files: dict[str, str]) -> str:
    """A file list {path: SHA-256} as `sha256sum` prints it ("<hash>  <path>" a line), sorted by path."""
    return "".join(f"{digest}  {path}\n" for path, digest in sorted(files.items()))


def manifest_hash(files: dict[str, str]) -> str:
    """One SHA-256 over a file list, as `sha256sum` prints it: anyone can recompute it."""
    return _sha256(sha256sum(files).encode())


def code_hash(part: str = "run") -> str:
    """This checkout's (or installation's) code hash of one role."""
    return manifest_hash(code_files(part))


def _git(*args: str, checkout: Path = CHECKOUT) -> str | None:
    """A git command's output in the checkout; None where there is no git or no repository."""
    if not (checkout / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", *args], cwd=checkout, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode(errors="replace") if out.returncode == 0 else None


def _paths(part: str) -> list[str]:
    return [f"src/{PACKAGE.name}/{name}" for name in PARTS[part]] + [CONSTRAINTS]


def tree_diff(part: str = "run", checkout: Path = CHECKOUT) -> str | None:
    """The role's files against the git revision: tracked changes, staged or not, and untracked files, as one
    patch ("" for none); None without git. Only the role's files: an edited README changes no result."""
    paths = _paths(part)
    diff = _git("diff", "--no-color", "--no-ext-diff", "--binary", "HEAD", "--", *paths, checkout=checkout)
    if diff is None:
        return None
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", "--", *paths, checkout=checkout) or ""
    for name in sorted(n for n in untracked.split("\0") if n.endswith(".py") and "__pycache__" not in n):
        try:  # `git diff --no-index` exits 1 when the files differ, which they always do here
            out = subprocess.run(["git", "diff", "--no-color", "--binary", "--no-index", "--", "/dev/null", name],
                                 cwd=checkout, capture_output=True, timeout=30)  # fmt: skip
        except (OSError, subprocess.TimeoutExpired):
            return None
        diff += out.stdout.decode(errors="replace")
    return diff


def git_revision(checkout: Path = CHECKOUT) -> str | None:
    """The checkout's commit; else the image's build argument (UH_GIT_REVISION: claimed, not verified); else None."""
    rev = _git("rev-parse", "HEAD", checkout=checkout)
    if rev:
        return rev.strip()
    return os.environ.get("UH_GIT_REVISION") or None


def provenance(part: str = "run") -> tuple[dict, str | None]:
    """What a result records of the code that made it, and the diff to keep beside it (None when the tree is
    its revision or there is no git to compare with).

    `tree_modified` is True or False where git could compare the files with the revision, else None (an archive,
    the image): then the code hash alone says what ran, against the release's published hash; `git_revision`
    there is the image's build argument, claimed and not verified (`git_revision_verified` false)."""
    diff = tree_diff(part)
    files = code_files(part)
    return {
        "code_sha256": manifest_hash(files),
        "code_files": len(files),
        "git_revision": git_revision(),
        "git_revision_verified": diff is not None,
        "tree_modified": None if diff is None else bool(diff),
        "diff_sha256": _sha256(diff.encode()) if diff else None,
    }, diff or None
