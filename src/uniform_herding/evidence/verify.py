"""`uh check --bundle`: a bundle (evidence/bundle.py) verified where it lands, then checked as a results dir.

A bundle is untrusted input: `opened` reads only a regular file, refuses a hostile zip (`MAX_*`) on what its
directory declares before it writes anything and on the bytes it really reads and writes as it extracts, extracts
into a temporary directory only, and hands back the results folder only once every file matches the manifest and the
crate lists exactly the files there are. `check_bundle` prints what was verified and what cannot be (the receiver's
page), recomputes R's last rows where asked (evidence/recompute.py), then checks the bundled results.
"""

from __future__ import annotations

import io
import os
import re
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from rocrate.rocrate import ROCrate

from uniform_herding.errors import UhError
from uniform_herding.evidence.bundle import (
    MANIFEST,
    METADATA,
    PROCESS_RUN_CRATE,
    RESULTS,
    BundleError,
    copy_hashed,
)
from uniform_herding.runs import schemas
from uniform_herding.runs.jsonfiles import read_json
from uniform_herding.runs.provenance import checkout_state, made_by
from uniform_herding.runs.results import ResultError, load_results, stack_labels
from uniform_herding.runs.terminal import fit_line

# What `opened` accepts of a zip: checked on its directory before anything is extracted, then each file's ratio on
# the bytes extracting really reads of the zip (`members`, `extract`). At the paper's size a bundle with weights of
# 20 seeds of the 15 run IDs is about 14 GB (final.pt ~45 MB) in under 2,000 files.
MAX_MEMBERS = 10_000
MAX_MEMBER_BYTES = 1 << 30  # 1 GiB uncompressed per file
MAX_TOTAL_BYTES = 16 << 30  # 16 GiB uncompressed in all
MAX_RATIO = 100  # uncompressed / compressed, of each file over RATIO_FROM bytes and of the whole zip
RATIO_FROM = 1 << 20


@dataclass(frozen=True)
class OpenedBundle:
    """A verified bundle: the zip, its results folder (extracted into a temporary directory) and its crate."""

    path: Path
    results_dir: Path
    crate: ROCrate


def _unsafe(name: str) -> str | None:
    """Why a member's name could write outside the folder it is extracted into, or None."""
    if name.startswith("/") or re.match(r"[A-Za-z]:", name) or "\\" in name:
        return "is an absolute path"
    if any(part in ("", ".", "..") for part in name.removesuffix("/").split("/")) or "\0" in name:
        return "has a '..', '.' or empty part"
    return None


class _Counted(io.FileIO):
    """The zip's file, counting the bytes read from it: what extracting a member really took of the zip, whatever
    its directory declares."""

    taken = 0

    def read(self, size: int = -1) -> bytes:
        data = super().read(size)
        self.taken += len(data)
        return data


def _regular(path: Path) -> _Counted:
    """`path` opened for reading, once it is known to be a regular file: a device (/dev/zero reads until memory runs
    out), a FIFO (it waits for a writer for ever) or a folder is refused before a byte is read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens at once, writer or not
    except OSError as e:
        raise BundleError(f"{path} cannot be opened ({e.strerror}); give the zip uh bundle wrote") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise BundleError(f"{path} is not a regular file (a device, a FIFO or a folder); give the zip uh bundle wrote")
    os.set_blocking(fd, True)
    return _Counted(fd, "r")


def members(zf: zipfile.ZipFile, path: Path, size: int) -> list[zipfile.ZipInfo]:
    """The zip's files, once none is hostile (`MAX_*`) by what the directory declares; BundleError naming the first
    that is. Their compressed sizes must fit in the zip's `size` bytes, so the whole zip's declared ratio is one of
    its real bytes (extracting then writes no file past its declared size, `extract`)."""
    infos = zf.infolist()
    if len(infos) > MAX_MEMBERS:
        raise BundleError(f"{path} holds {len(infos)} members, more than the {MAX_MEMBERS} a bundle may hold; refused")
    names, files, total, packed = set(), [], 0, 0
    for info in infos:
        name, mode = info.filename, info.external_attr >> 16
        refuse = "" if not (problem := _unsafe(name)) else problem
        if not refuse and name in names:
            refuse = "appears twice"
        if not refuse and stat.S_IFMT(mode) not in (0, stat.S_IFREG, stat.S_IFDIR):  # 0: a zip that records none
            refuse = "is a symbolic link or another non-regular file"
        if not refuse and info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            refuse = f"is compressed by method {info.compress_type}, not stored or deflated as uh bundle writes"
        if not refuse and info.file_size > MAX_MEMBER_BYTES:
            refuse = f"is {info.file_size} bytes uncompressed, more than {MAX_MEMBER_BYTES}"
        if not refuse and info.file_size > RATIO_FROM and info.file_size > MAX_RATIO * max(info.compress_size, 1):
            refuse = f"compresses {info.file_size // max(info.compress_size, 1)}:1, more than {MAX_RATIO}:1"
        if refuse:
            raise BundleError(f"{path}: member {name!r} {refuse}; refused, nothing extracted")
        names.add(name)
        if not info.is_dir():
            files.append(info)
            total, packed = total + info.file_size, packed + info.compress_size
    if packed > size:
        raise BundleError(
            f"{path}: its directory declares {packed} compressed bytes in a zip of {size}: it lies about its sizes; "
            "refused, nothing extracted"
        )
    if total > MAX_TOTAL_BYTES or (total > RATIO_FROM and total > MAX_RATIO * max(packed, 1)):
        raise BundleError(
            f"{path} holds {total} bytes uncompressed from {packed} ({total // max(packed, 1)}:1), more "
            f"than {MAX_TOTAL_BYTES} or {MAX_RATIO}:1; refused, nothing extracted"
        )
    return files


def _within(info: zipfile.ZipInfo, zip_file: _Counted, path: Path) -> Callable[[int], None]:
    """The limits on one member as it is extracted, on the bytes it really gives and really reads of the zip from
    now on (its compressed size as declared may be a lie): no more than its declared size, and no more than
    MAX_RATIO:1 past RATIO_FROM bytes."""
    start = zip_file.taken

    def check(written: int) -> None:
        if written > info.file_size:
            raise zipfile.BadZipFile("more bytes than its header says")
        read = zip_file.taken - start
        if written > RATIO_FROM and written > MAX_RATIO * read:
            raise BundleError(
                f"{path}: member {info.filename!r} gave {written} bytes from {read} read of the zip "
                f"({written // max(read, 1)}:1), more than {MAX_RATIO}:1 whatever its directory declares; refused, "
                "what was extracted removed"
            )

    return check


def extract(zf: zipfile.ZipFile, zip_file: _Counted, into: Path, path: Path) -> dict[str, str]:
    """Each file of `zf` (read from `zip_file`) written under `into` once `members` accepts them, stopped at the
    limits of `_within`, hashed as it is read: {name: SHA-256}."""
    hashes = {}
    for info in members(zf, path, os.fstat(zip_file.fileno()).st_size):
        target = into / info.filename
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            limit = _within(info, zip_file, path)
            with zf.open(info) as src, target.open("xb") as dst:
                hashes[info.filename], _ = copy_hashed(src, dst, limit)
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, RuntimeError, NotImplementedError) as e:
            raise BundleError(f"{path}: member {info.filename!r} cannot be extracted ({e}); refused") from None
    return hashes


def verify_manifest(hashes: dict[str, str], into: Path, path: Path) -> None:
    """Every file but the manifest is in it with the SHA-256 it has, and nothing else is."""
    if MANIFEST not in hashes:
        raise BundleError(f"{path} has no {MANIFEST}: not a bundle uh bundle wrote")
    listed: dict[str, str] = {}
    try:
        lines = (into / MANIFEST).read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        lines = ["?"]
    for n, line in enumerate(lines, 1):
        entry = re.fullmatch(r"([0-9a-f]{64})  (.+)", line)
        if not entry or entry[2] in listed:
            raise BundleError(f"{path}: {MANIFEST} line {n} is not '<sha256>  <file>' of a file not listed before")
        listed[entry[2]] = entry[1]
    present = set(hashes) - {MANIFEST}
    if missing := sorted(set(listed) - present):
        raise BundleError(f"{path}: {MANIFEST} lists {missing[0]}, which the bundle lacks")
    if extra := sorted(present - set(listed)):
        raise BundleError(f"{path}: {extra[0]} is not in {MANIFEST}: a file was added")
    if changed := sorted(n for n in present if hashes[n] != listed[n]):
        raise BundleError(f"{path}: {changed[0]} has changed: its SHA-256 is not the one {MANIFEST} records")


def _ids(value: Any) -> list[str]:
    """The @ids an entity's property refers to (an entity, a list of them, or nothing)."""
    values = value if isinstance(value, list) else [value]
    return [unquote(v if isinstance(v, str) else v.id) for v in values if v is not None]


def verify_crate(into: Path, hashes: dict[str, str], path: Path) -> ROCrate:
    """The crate lists exactly the files there are, each with its SHA-256, conforms to the Process Run Crate profile,
    and holds one CreateAction per result.json. Its metadata is read as every JSON file uh reads back (read_json:
    bounded, then checked against schemas.CRATE), before rocrate parses it."""
    try:
        read_json(into / METADATA, schemas.CRATE, "not a bundle uh bundle wrote")
    except ResultError as e:
        raise BundleError(f"{path}: {e}") from None
    try:
        crate = ROCrate(into)  # a folder: rocrate extracts nothing itself
    except Exception as e:  # rocrate raises what its parsing meets: KeyError, ValueError, JSON errors, ...
        raise BundleError(f"{path}: not an RO-Crate ({type(e).__name__}: {e})") from None
    if PROCESS_RUN_CRATE not in _ids(crate.root_dataset.get("conformsTo")):
        raise BundleError(f"{path}: the crate does not conform to {PROCESS_RUN_CRATE}: not a bundle uh bundle wrote")
    entities = {unquote(e.id): e for e in crate.data_entities}
    files = set(hashes) - {METADATA}
    if unlisted := sorted(files - set(entities)):
        raise BundleError(f"{path}: {unlisted[0]} is not listed in the crate ({METADATA})")
    if absent := sorted(set(entities) - files):
        raise BundleError(f"{path}: the crate lists {absent[0]}, which the bundle lacks")
    if wrong := sorted(n for n, e in entities.items() if n != MANIFEST and e.get("sha256") != hashes[n]):
        raise BundleError(f"{path}: the crate records another SHA-256 for {wrong[0]} than it has")
    made = [n for a in crate.get_by_type("CreateAction") for n in _ids(a.get("result")) if n.endswith("/result.json")]
    for name in sorted(n for n in files if n.endswith("/result.json")):
        if made.count(name) != 1:
            raise BundleError(f"{path}: {made.count(name)} CreateActions have {name} as their result, not one")
    if len(made) != len(crate.get_by_type("CreateAction")):
        raise BundleError(f"{path}: a CreateAction of the crate has no result.json of the bundle as its result")
    return crate


@contextmanager
def opened(path: Path) -> Iterator[OpenedBundle]:
    """The bundle at `path`, a regular file, verified (`extract`, `verify_manifest`, `verify_crate`) and extracted
    into a temporary directory that is removed on exit, however it exits; BundleError (exit 2, one line) for any
    failure."""
    with _regular(path) as zip_file, tempfile.TemporaryDirectory(prefix="uh-bundle-") as tmp:
        into = Path(tmp)
        try:
            with zipfile.ZipFile(zip_file) as zf:
                hashes = extract(zf, zip_file, into, path)
        except (zipfile.BadZipFile, OSError) as e:
            raise BundleError(f"{path} cannot be read as a zip ({e}); give the bundle uh bundle wrote") from None
        verify_manifest(hashes, into, path)
        crate = verify_crate(into, hashes, path)
        if not (into / RESULTS).is_dir():
            raise BundleError(f"{path} has no {RESULTS}/ folder: not a bundle uh bundle wrote")
        yield OpenedBundle(path, into / RESULTS, crate)


def receivers_page(results: list[dict], recompute: bool) -> list[str]:
    """What uh check --bundle verified and what it cannot, and by which checkout: the receiver's page. Which results
    the checking code did not plainly make, with every cause, is uh check's provenance block below it."""
    made = made_by(results)
    plain = made.read - len(made.causes)
    rows = (
        "R's last rows: evaluated again below from each run's final.pt (--recompute)"
        if recompute
        else "R's rows: taken as recorded, not recomputed (uh check --bundle --recompute evaluates the last ones again)"
    )
    return [
        f"checked by this checkout: {checkout_state()}",
        f"verified: every file's SHA-256 ({MANIFEST}); the crate lists exactly the zip's files; the verdict below is "
        "derived again from the bundled result.json files (the bundled check_report.json is not read)",
        rows,
        "not verifiable: who made the files: the hashes prove their integrity, not their authorship (anyone can "
        "make a bundle whose hashes agree)",
        f"results: {plain} of {made.read} made plainly by the checking code"
        + ("; the others are named under provenance below, with every cause" if made.causes else ""),
        *(f"stack: {label}; {n} run(s)" for label, n in stack_labels(results).items()),
    ]


@contextmanager
def _named_in(bundle: OpenedBundle) -> Iterator[None]:
    """An error about a bundled file names the bundle and the member, never the temporary folder it was extracted
    to (removed by then)."""
    try:
        yield
    except ResultError as e:
        raise BundleError(_members(str(e), bundle)) from None
    except UhError as e:
        e.args = (_members(str(e), bundle),)
        raise
    except Exception as e:  # the check's click errors (a ClickException's line is its `message`)
        if isinstance(getattr(e, "message", None), str):
            e.message = _members(e.message, bundle)  # type: ignore[attr-defined]
        raise


def _members(message: str, bundle: OpenedBundle) -> str:
    """`message` with each path under the extracted folder as `<bundle>: member <name>`."""
    extracted = str(bundle.results_dir.parent)
    return message.replace(f"{extracted}{os.sep}", f"{bundle.path}: member ").replace(extracted, str(bundle.path))


def check_bundle(
    path: Path,
    recompute: bool,
    data_dir: Path,
    run_ids: tuple[str, ...],
    width: int | None,
    check: Callable[[Path], None],
    echo: Callable[[str], None],
) -> None:
    """`uh check --bundle`: verify, `echo` the provenance (lines fitted to `width`), recompute R's last rows where
    asked (of `run_ids` alone where given: uh check --run-ids), then `check` the bundled results (uh check
    --results-dir's own command), never the bundled report."""
    with opened(path) as bundle, _named_in(bundle):
        count = len(bundle.crate.data_entities) + 1  # and the crate's metadata: the files in the zip, as uh bundle's
        opening = (
            f"bundle {path}: {count} files in the zip, each as {MANIFEST} records it; an "
            f"RO-Crate ({PROCESS_RUN_CRATE}) with a CreateAction per result.json"
        )
        echo(fit_line(opening, width))
        results = load_results(bundle.results_dir)
        echo("\n".join(fit_line(line, width) for line in receivers_page(results, recompute)))
        if recompute:
            from uniform_herding.evidence.recompute import recompute_last_rows

            if differ := recompute_last_rows(bundle.results_dir, data_dir, run_ids, echo):
                raise BundleError(
                    f"{path}: the recorded last row of R is not what the run's final state gives for "
                    f"{', '.join(differ)}: those results are not the runs'"
                )
        check(bundle.results_dir)
