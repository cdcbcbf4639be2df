"""What code made a result: a content hash of the package, how it stands against git, and whether the code that ran
is the code that was hashed.

A git revision alone does not say what ran: a modified tree records the commit before the edit, an archive
without .git records nothing, and in the image the revision is a build argument anyone can set. The code hash
is computed from the files themselves (`code_files`: sorted relative paths and each file's SHA-256, line
endings normalised), so a clone, an unpacked `git archive` and the image give the same hash for the same code.
Where git is there, the tree is compared with its revision: a modified tree records the diff's SHA-256, and the
diff itself is kept beside the result.

One hash for all the code a process of uh can execute: every `*.py` of the package (cli.py, launch.py, chain.py,
method/, runs/, verdict/, report/ ...) and the installed constraints. result.json records it, check_report.json
and `uh --version` print it. What it leaves out, and why, is `EXCLUDED`. A hash of the files proves nothing about
what a process loaded: `unhashed_code` names each of the package's modules in this process that did not come from
those files (found outside the package, or run from bytecode that is not its source's), and a run records them.

Read back (`made_by`), the records say which results this checkout's code did not make: uh check names them, and
on the paper profile they never get the badge. Beside them, the settings besides the config that change a run's
numbers (precision, compile mode, threads, device: `NUMERIC`) where the results differ in them or leave the
profile's default: uh check names those too, and they cost nothing.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import marshal
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from uniform_herding.catalogue import PROFILE_DEVICE
from uniform_herding.method.config import NUMERIC_DEFAULTS

PACKAGE = Path(__file__).resolve().parents[1]  # src/uniform_herding
CHECKOUT = PACKAGE.parents[1]  # the repository root, /app in the image
CONSTRAINTS = "constraints.txt"  # at the checkout's root: the pins every install uses
DIFF_NAME = "code.diff"  # a modified tree's diff, kept beside the result it made

# What the code hash leaves out of the checkout, each for a stated reason (tests/runs/test_provenance.py lists it).
EXCLUDED: dict[str, str] = {
    "__pycache__/ and *.pyc": "bytecode, compiled from the hashed sources; bytecode that is not its source's is "
    "named at run time (unhashed_code)",
    "files of the package other than *.py": "Python imports only *.py (and their bytecode); the package has no "
    "other file",
    "everything outside src/uniform_herding/ but constraints.txt": "no process of uh imports it (tests, docs, "
    "scripts, reproduce.sh, the Dockerfile); the settings they pass that change numbers (UH_PRECISION, UH_COMPILE, "
    "UH_CPU_THREADS, ...) are recorded in result.json's environment, and uh check names them",
}


def _normalised(path: Path) -> bytes:
    """A file's bytes with CRLF and CR line endings as LF, so that a checkout on Windows hashes alike."""
    return path.read_bytes().replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def code_files(package: Path = PACKAGE, checkout: Path = CHECKOUT) -> dict[str, str]:
    """The hashed files, as {path relative to the checkout: SHA-256 of its normalised bytes}, sorted.

    Every `*.py` file of the package (never `__pycache__`: EXCLUDED), and the constraints file where it is (a missing
    one is recorded as missing, so that it changes the hash)."""
    files = {}
    for path in sorted(package.rglob("*.py")):
        if "__pycache__" not in path.relative_to(package).parts:
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


def code_hash(package: Path = PACKAGE, checkout: Path = CHECKOUT) -> str:
    """This checkout's (or installation's) code hash."""
    return manifest_hash(code_files(package, checkout))


def _git(*args: str, checkout: Path = CHECKOUT) -> str | None:
    """A git command's output in the checkout; None where there is no git or no repository."""
    if not (checkout / ".git").exists():
        return None
    try:
        out = subprocess.run(["git", *args], cwd=checkout, capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.decode(errors="replace") if out.returncode == 0 else None


def tree_diff(package: Path = PACKAGE, checkout: Path = CHECKOUT) -> str | None:
    """The hashed files against the git revision: tracked changes, staged or not, and untracked files, as one
    patch ("" for none); None without git. Only the package and the constraints: an edited README changes no result."""
    paths = [f"src/{package.name}", CONSTRAINTS]
    diff = _git("diff", "--no-color", "--no-ext-diff", "--binary", "HEAD", "--", *paths, checkout=checkout)
    if diff is None:
        return None
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", "--", *paths, checkout=checkout) or ""
    for name in sorted(n for n in untracked.split("\0") if n.endswith(".py") and "__pycache__" not in n):
        try:  # `git diff --no-index` exits 1 when the files differ, which they always do here
            out = subprocess.run(
                ["git", "diff", "--no-color", "--binary", "--no-index", "--", "/dev/null", name],
                cwd=checkout,
                capture_output=True,
                timeout=30,
            )
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


MODIFIED_WORDS = {True: "yes", False: "no", None: "unknown (no git to compare with)"}


def checkout_state(package: Path = PACKAGE, checkout: Path = CHECKOUT) -> str:
    """Which checkout this is, as uh --version and uh check name it: its code hash, revision and whether its hashed
    files differ from that revision."""
    diff = tree_diff(package, checkout)
    modified = None if diff is None else bool(diff)
    revision = git_revision(checkout) or "unknown"
    return f"code sha256 {code_hash(package, checkout)}, revision {revision}, modified: {MODIFIED_WORDS[modified]}"


def modified_notice(package: Path = PACKAGE, checkout: Path = CHECKOUT) -> str | None:
    """What uh run says once at its start where the tree differs from its revision (None where it does not)."""
    if not tree_diff(package, checkout):
        return None
    return (
        f"note: this tree differs from its revision {git_revision(checkout)} (git diff HEAD -- src/{package.name} "
        f"{CONSTRAINTS}): each result records it (provenance.tree_modified) and the diff goes to {DIFF_NAME} beside "
        "each result.json"
    )


def unhashed_code(modules: Mapping[str, ModuleType] | None = None, package: Path = PACKAGE) -> list[str]:
    """The package's modules in `modules` (this process's sys.modules) that did not come from the hashed files, each
    as "<module>: <why>", sorted; [] when every one did. The hash covers the files, not what ran: a module imported
    from elsewhere, or run from bytecode in __pycache__ whose code is not its source's (a stale or planted .pyc,
    which Python loads without reading the source when its header says it is current), is other code."""
    modules = sys.modules if modules is None else modules
    found = {}
    for key, module in list(modules.items()):
        name = getattr(getattr(module, "__spec__", None), "name", None) or key  # `python -m`: __main__'s is its own
        ours = name == package.name or name.startswith(f"{package.name}.")
        if ours and (why := _not_hashed(module, package)):
            found[name] = f"{name}: {why}"
    return [found[name] for name in sorted(found)]


def _not_hashed(module: ModuleType, package: Path) -> str | None:
    """Why a module of the package did not come from a hashed file, or None where it did."""
    file = getattr(module, "__file__", None)
    if not file:
        return "loaded from no file"
    path = Path(file)
    inside = path.resolve().is_relative_to(package.resolve()) and "__pycache__" not in path.parts
    if path.suffix != ".py" or not inside:  # its name only: a result records no path of the machine
        return f"loaded from {path.name} outside the package, not from its hashed files"
    pyc = Path(importlib.util.cache_from_source(file))
    return f"its bytecode {pyc.name} is not its source's" if _bytecode_differs(pyc, path) else None


def _bytecode_differs(pyc: Path, source: Path) -> bool:
    """Whether Python would run `pyc` in place of `source` (its header's rules, PEP 552: this Python's magic
    number, and the source's mtime and size, or its hash where the pyc is checked; an unchecked-hash pyc always)
    and its code is not what the source compiles to. Code objects compare without their file name."""
    try:
        data, code = pyc.read_bytes(), source.read_bytes()
    except OSError:  # no bytecode: the source was compiled
        return False
    if len(data) < 16 or data[:4] != importlib.util.MAGIC_NUMBER:
        return False  # another Python's: never loaded
    flags = int.from_bytes(data[4:8], "little")
    if flags & 0b01 == 0:  # timestamp-based: stale where the source's mtime or size moved on
        stat = source.stat()
        header = [int(stat.st_mtime) & 0xFFFFFFFF, stat.st_size & 0xFFFFFFFF]
        if data[8:16] != b"".join(n.to_bytes(4, "little") for n in header):
            return False
    elif flags & 0b10 and data[8:16] != importlib.util.source_hash(code):  # checked hash, stale: recompiled
        return False
    try:
        loaded = marshal.loads(data[16:])
    except (EOFError, ValueError, TypeError):
        return True
    return loaded != compile(code, str(source), "exec", dont_inherit=True)


def provenance(
    package: Path = PACKAGE, checkout: Path = CHECKOUT, modules: Mapping[str, ModuleType] | None = None
) -> tuple[dict, str | None]:
    """What a result records of the code that made it, and the diff to keep beside it (None when the tree is
    its revision or there is no git to compare with).

    `tree_modified` is True or False where git could compare the files with the revision, else None (an archive,
    the image): then the code hash alone says what ran, against the release's published hash; `git_revision`
    there is the image's build argument, claimed and not verified (`git_revision_verified` false).
    `unhashed_code`: the package's modules in `modules` (this process's) that did not come from the hashed files
    (empty when none did)."""
    diff = tree_diff(package, checkout)
    files = code_files(package, checkout)
    return {
        "code_sha256": manifest_hash(files),
        "code_files": len(files),
        "git_revision": git_revision(checkout),
        "git_revision_verified": diff is not None,
        "tree_modified": None if diff is None else bool(diff),
        "diff_sha256": _sha256(diff.encode()) if diff else None,
        "unhashed_code": unhashed_code(modules, package),
    }, diff or None


def portable(path: str | Path, base: Path) -> str:
    """A path as a result or a report records it, with no absolute path of the machine: relative to `base` (the
    results folder) where it is inside it, as given where it is relative, else ".../<its name>"."""
    path = Path(path)
    if path.resolve().is_relative_to(base.resolve()):
        return path.resolve().relative_to(base.resolve()).as_posix()
    return f".../{path.name}" if path.is_absolute() else path.as_posix()


def portable_command(argv: list[str], base: Path) -> str:
    """The command that made a result as result.json records it: the program by its name, each absolute path
    (an argument, or an option's value after "=") `portable` against `base` (the results folder)."""
    program, *args = argv or [""]
    shown = [Path(program).name]
    for arg in args:
        option, equals, value = arg.partition("=") if arg.startswith("--") and "=" in arg else ("", "", arg)
        shown.append(option + equals + (portable(value, base) if Path(value).is_absolute() else value))
    return " ".join(shown)


# --- read back: the results this checkout's code did not make ------------------------------------------------------

NO_CODE = "no code recorded (made before results recorded it)"
MODIFIED = "made from a modified tree"
MIXED = "tasks made under different code (a run resumed after an edit)"
UNHASHED = "made by code that is not the hashed files (provenance.unhashed_code)"

Pair = tuple[str, int]  # a result: its run ID and seed


def other_code(digest: object) -> str:
    """The why of results made from other code: one group per code hash, named by its first 12 digits."""
    return f"made from other code ({str(digest)[:12]}...)"


@dataclass(frozen=True)
class Made:
    """Which results of an input this checkout's code (`this`) did not make, grouped by why (a result may have more
    than one); `recorded` False for an input that records no code at all (a per-seed CSV). On the paper profile
    either keeps the badge from the input (verdict/judge.py). `read`: how many results the input held. `settings`:
    the settings that change numbers (NUMERIC) where the results differ in them or leave the profile's default, as
    {setting: (the profile's default, {value: results})}; named, never withheld. `causes`: each result that is not
    plainly this code's with all its causes (the whys' and the settings' it leaves at another value) as uh check
    prints them on one line."""

    this: str
    others: dict[str, tuple[Pair, ...]] = field(default_factory=dict)
    recorded: bool = True
    read: int = 0
    settings: dict[str, tuple[str, dict[str, tuple[Pair, ...]]]] = field(default_factory=dict)
    causes: dict[Pair, tuple[str, ...]] = field(default_factory=dict)

    @property
    def count(self) -> int:
        """How many results are named, each once."""
        return len({pair for pairs in self.others.values() for pair in pairs})

    def withheld(self) -> str | None:
        """Why the badge is withheld from the input, or None where this checkout's code made every result."""
        if not self.recorded:
            return "a per-seed CSV records no code"
        n = self.count
        return f"{n} result{'s' if n != 1 else ''} not plainly made by this checkout's code" if n else None

    def grouped(self) -> dict[tuple[str, ...], tuple[Pair, ...]]:
        """The results not plainly this code's, grouped by the same causes: {causes: results}."""
        groups: dict[tuple[str, ...], list[Pair]] = {}
        for pair, causes in sorted(self.causes.items()):
            groups.setdefault(causes, []).append(pair)
        return {causes: tuple(pairs) for causes, pairs in groups.items()}


def _whys(result: dict[str, Any], this: str, results_dir: Path | None) -> dict[str, str]:
    """Why a result is not this code's, as {why (Made.others' key): the cause as uh check prints it}."""
    code = result.get("provenance")
    if not isinstance(code, dict):
        return {NO_CODE: NO_CODE}
    tasks = [t for t in result.get("tasks") or [] if isinstance(t, dict)]
    whys = {}
    if code["code_sha256"] != this:
        theirs = str(code["code_sha256"])[:12]
        whys[other_code(theirs)] = f"other code (its code {theirs}... against the checking code's {this[:12]}...)"
    if code.get("tree_modified"):
        diff = None if results_dir is None else results_dir / result["run_id"] / f"seed-{result['seed']}" / DIFF_NAME
        kept = f"{DIFF_NAME} beside its result.json" if diff and diff.is_file() else f"no {DIFF_NAME} beside it"
        revision = f"of revision {str(code['git_revision'])[:12]}" if code.get("git_revision") else "no revision"
        whys[MODIFIED] = f"a modified tree ({revision}; {kept})"
    unhashed = [*(code.get("unhashed_code") or []), *(u for t in tasks for u in t.get("unhashed_code") or [])]
    if unhashed:
        whys[UNHASHED] = f"code that is not the hashed files ({'; '.join(dict.fromkeys(map(str, unhashed)))})"
    if {t.get("code_sha256") for t in tasks} - {code["code_sha256"]}:
        whys[MIXED] = MIXED
    return whys


def made_by(results: Iterable[dict[str, Any]], this: str | None = None, results_dir: Path | None = None) -> Made:
    """The results (load_results', of `results_dir` where given: then a modified tree's code.diff is looked for)
    not made by the code `this` (this checkout's by default): made from other code, from a modified tree, by
    loaded code that was not the hashed files (`unhashed_code`, of the result or of any task), with tasks made
    under different code (resumed after an edit; a task without a code hash, from before results recorded it,
    counts as other), or with no code recorded at all (results written before `provenance`). A tree that git could
    not compare (an archive, the image) is judged by its code hash alone. And the settings that change numbers
    where the results differ in them or leave their profile's default (`numeric_settings`)."""
    this = code_hash() if this is None else this
    results = list(results)
    others: dict[str, list[Pair]] = {}
    causes: dict[Pair, list[str]] = {}
    for result in results:
        pair, whys = (result["run_id"], result["seed"]), _whys(result, this, results_dir)
        for why, cause in whys.items():
            others.setdefault(why, []).append(pair)
            causes.setdefault(pair, []).append(cause)
    settings = numeric_settings(results)
    for name, (default, values) in settings.items():
        for value, pairs in values.items():
            for pair in pairs if value != default else ():
                causes.setdefault(pair, []).append(f"{name} {value} (the profile's default: {default})")
    rank = (MODIFIED, UNHASHED, MIXED, NO_CODE)
    order = sorted(others, key=lambda why: (rank.index(why) + 1 if why in rank else 0, why))
    whys = {why: tuple(sorted(others[why])) for why in order}
    causes_of = {pair: tuple(c) for pair, c in causes.items()}
    return Made(this, whys, read=len(results), settings=settings, causes=causes_of)


# What besides its config and seed changes a run's numbers (runs/run.py's numeric_settings), as result.json's
# environment records it: the device's type (the part of `device` before ":"), the thread count (a CPU run's only).
NUMERIC = ("device", "precision", "compile", "cpu_threads", "deterministic")


def numeric_setting(result: dict[str, Any], name: str) -> str | None:
    """One of a result's NUMERIC settings as text (JSON's), None where it records none or it does not apply."""
    env = result.get("environment") if isinstance(result.get("environment"), dict) else {}
    device = str(env.get("device") or "").partition(":")[0] or None
    value = device if name == "device" else None if name == "cpu_threads" and device != "cpu" else env.get(name)
    return None if value is None else _text(value)


def _text(value: object) -> str:
    """A setting's value as uh check prints it: a string as it is, anything else as JSON (1, false)."""
    return value if isinstance(value, str) else json.dumps(value)


def numeric_settings(results: list[dict[str, Any]]) -> dict[str, tuple[str, dict[str, tuple[tuple[str, int], ...]]]]:
    """Each NUMERIC setting in which the results differ, or leave their profile's default (a run there on its own
    device, as `uh run` does without options: method/config.py's NUMERIC_DEFAULTS), as {setting: (the default,
    {value: results})}, in NUMERIC's order; results that do not record it are left out."""
    profile = next((r.get("profile") for r in results if r.get("profile") in PROFILE_DEVICE), None)
    if profile is None:
        return {}
    device = PROFILE_DEVICE[profile]
    defaults = {**NUMERIC_DEFAULTS["cpu"], **NUMERIC_DEFAULTS[device], "device": device}  # threads: a CPU run's
    named = {}
    for name in NUMERIC:
        values: dict[str, list[tuple[str, int]]] = {}
        for result in results:
            if (value := numeric_setting(result, name)) is not None:
                values.setdefault(value, []).append((result["run_id"], result["seed"]))
        default = _text(defaults[name])
        if len(values) > 1 or (values and set(values) != {default}):
            named[name] = (default, {value: tuple(sorted(pairs)) for value, pairs in values.items()})
    return named
