"""What code made a result: a content hash of the files that compute it, and how they stand against git.

A git revision alone does not say what ran: a modified tree records the commit before the edit, an archive
without .git records nothing, and in the image the revision is a build argument anyone can set. The code hash
is computed from the files themselves (`code_files`: sorted relative paths and each file's SHA-256, line
endings normalised, `__pycache__` and build metadata never read), so a clone, an unpacked `git archive` and
the image give the same hash for the same code. Where git is there, the tree is compared with its revision:
a modified tree records the diff's SHA-256, and the diff itself is kept beside the result.

Two hashes, one per role (`PARTS`): "run", the code that trains and records a run (data/, method/,
catalogue.py, runs/ and the installed constraints), which result.json records; "check", the checker's
(verdict/ and everything it builds on), which check_report.json records. The report and the docs are in
neither: they change no number.

Read back (`made_by`), the records say which results this checkout's code did not make: uh check names them, and
on the paper profile they never get the badge.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PACKAGE = Path(__file__).resolve().parents[1]  # src/uniform_herding
CHECKOUT = PACKAGE.parents[1]  # the repository root, /app in the image
CONSTRAINTS = "constraints.txt"  # at the checkout's root: the pins every install uses
DIFF_NAME = "code.diff"  # a modified tree's diff, kept beside the result it made

# Each role's files, relative to the package (a folder: its *.py files, recursively), and whether the constraints
# are part of it.
_RUN = ("__init__.py", "catalogue.py", "data", "method", "runs")
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


def code_hash(part: str = "run", package: Path = PACKAGE, checkout: Path = CHECKOUT) -> str:
    """This checkout's (or installation's) code hash of one role."""
    return manifest_hash(code_files(part, package, checkout))


def _git(*args: str, checkout: Path = CHECKOUT) -> str | None:
    """A git command's output in the checkout; None where there is no git or no repository."""
    if not (checkout / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", *args], cwd=checkout, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode(errors="replace") if out.returncode == 0 else None


def _paths(part: str, package: Path) -> list[str]:
    return [f"src/{package.name}/{name}" for name in PARTS[part]] + [CONSTRAINTS]


def tree_diff(part: str = "run", package: Path = PACKAGE, checkout: Path = CHECKOUT) -> str | None:
    """The role's files against the git revision: tracked changes, staged or not, and untracked files, as one
    patch ("" for none); None without git. Only the role's files: an edited README changes no result."""
    paths = _paths(part, package)
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


def provenance(part: str = "run", package: Path = PACKAGE, checkout: Path = CHECKOUT) -> tuple[dict, str | None]:
    """What a result records of the code that made it, and the diff to keep beside it (None when the tree is
    its revision or there is no git to compare with).

    `tree_modified` is True or False where git could compare the files with the revision, else None (an archive,
    the image): then the code hash alone says what ran, against the release's published hash; `git_revision`
    there is the image's build argument, claimed and not verified (`git_revision_verified` false)."""
    diff = tree_diff(part, package, checkout)
    files = code_files(part, package, checkout)
    return {
        "code_sha256": manifest_hash(files),
        "code_files": len(files),
        "git_revision": git_revision(checkout),
        "git_revision_verified": diff is not None,
        "tree_modified": None if diff is None else bool(diff),
        "diff_sha256": _sha256(diff.encode()) if diff else None,
    }, diff or None


# --- read back: the results this checkout's code did not make ------------------------------------------------------

NO_CODE = "no code recorded (made before results recorded it)"
MODIFIED = f"made from a modified tree ({DIFF_NAME} beside it)"
MIXED = "tasks made under different code (a run resumed after an edit)"


def other_code(digest: object) -> str:
    """The why of results made from other code: one group per code hash, named by its first 12 digits."""
    return f"made from other code ({str(digest)[:12]}...)"


@dataclass(frozen=True)
class Made:
    """Which results of an input this checkout's run code (`this`) did not make, grouped by why, each why as uh check
    prints it (a result may have more than one); `recorded` False for an input that records no code at all (a
    per-seed CSV). On the paper profile either keeps the badge from the input (verdict/judge.py). `read`: how many
    results the input held."""

    this: str
    others: dict[str, tuple[tuple[str, int], ...]] = field(default_factory=dict)
    recorded: bool = True
    read: int = 0

    @property
    def count(self) -> int:
        """How many results are named, each once."""
        return len({pair for pairs in self.others.values() for pair in pairs})

    def withheld(self) -> str | None:
        """Why the badge is withheld from the input, or None where this checkout's code made every result."""
        if not self.recorded:
            return "a per-seed CSV records no code"
        n = self.count
        return f"{n} result{'s' if n != 1 else ''} not made by this checkout's code" if n else None


def made_by(results: Iterable[dict[str, Any]], this: str | None = None) -> Made:
    """The results (load_results') not made by the run code `this` (this checkout's by default): made from other
    code, from a modified tree, with tasks made under different code (resumed after an edit; a task without a
    code hash, from before results recorded it, counts as other), or with no code recorded at all (results
    written before `provenance`). A tree that git could not compare (an archive, the image) is judged by its
    code hash alone."""
    this = code_hash("run") if this is None else this
    results = list(results)
    others: dict[str, list[tuple[str, int]]] = {}
    for result in results:
        pair, code = (result["run_id"], result["seed"]), result.get("provenance")
        if not isinstance(code, dict):
            others.setdefault(NO_CODE, []).append(pair)
            continue
        whys = [other_code(code["code_sha256"])] if code["code_sha256"] != this else []
        whys += [MODIFIED] if code.get("tree_modified") else []
        tasks = {t.get("code_sha256") for t in result.get("tasks") or [] if isinstance(t, dict)}
        whys += [MIXED] if tasks - {code["code_sha256"]} else []
        for why in whys:
            others.setdefault(why, []).append(pair)
    order = sorted(others, key=lambda why: (why == NO_CODE, why == MIXED, why == MODIFIED, why))
    return Made(this, {why: tuple(sorted(others[why])) for why in order}, read=len(results))
