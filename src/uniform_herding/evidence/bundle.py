"""`uh bundle`: a re-run's results as one zip to send; `uh check --bundle`: such a zip verified, then checked.

A bundle is an RO-Crate (the `rocrate` package) that follows the Process Run Crate profile (`PROCESS_RUN_CRATE`):
one CreateAction per run (run ID and seed) whose instrument is the code that made it (a SoftwareApplication
identified by the result's code hash, runs/provenance.py), whose object is the dataset archive (not included:
identified by its md5), the profile, the seed and the config, whose result is its result.json (with its final.pt
under --with-weights), and whose environment is the stack it ran on. Beside them: profile.json, check_report.json,
report/, submitit's logs and any code.diff, all under `results/` in the zip, and `manifest-sha256.txt`, the SHA-256
of every other file as `sha256sum -c` reads it (each File entity carries its own as `sha256` too).

The hashes prove integrity, not authorship: anyone can make a bundle with matching hashes. A bundle is untrusted
input: `opened` reads only a regular file, refuses a hostile zip (`MAX_*`) on what its directory declares before it
writes anything and on the bytes it really reads and writes as it extracts, extracts into a temporary directory
only, and hands back the results folder only once every file matches the manifest and the crate lists exactly
the files there are.
"""

from __future__ import annotations

import hashlib
import io
import json
import mimetypes
import os
import re
import stat
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote, unquote

from rocrate.model import ContextEntity, File
from rocrate.rocrate import ROCrate

from uniform_herding import __version__
from uniform_herding.data.archive import DATASETS
from uniform_herding.errors import UhError
from uniform_herding.runs import schemas
from uniform_herding.runs.final import FINAL_NAME
from uniform_herding.runs.jsonfiles import read_json
from uniform_herding.runs.provenance import DIFF_NAME, checkout_state, made_by, sha256sum
from uniform_herding.runs.results import (
    PROFILE_FILE,
    ResultError,
    load_results,
    result_path,
    results_profile,
    stack_labels,
    write_atomic,
)
from uniform_herding.runs.terminal import HEARTBEAT_S, Progress, fit_line

METADATA = "ro-crate-metadata.json"
MANIFEST = "manifest-sha256.txt"
RESULTS = "results"  # the zip's folder that holds the results dir
PROCESS_RUN_CRATE = "https://w3id.org/ro/wfrun/process/0.5"
WORKFLOW_RUN_CONTEXT = "https://w3id.org/ro/terms/workflow-run/context"  # the profile's terms (sha256, environment)
LICENSE = "https://spdx.org/licenses/MIT"  # the project's license (LICENSE, pyproject.toml), the crate's too
LICENSE_ENTITY = {
    "@type": "CreativeWork",
    "name": "MIT License",
    "identifier": "MIT",
    "description": "The MIT License: use, copy, modify and distribute, keeping the copyright notice",
}
LOGS = (".out", ".err", ".json")  # under submitit/: its jobs' logs and uh's submission records, never its pickles
CHUNK = 1 << 16  # bytes copied at a time; extracting, what a member may read of the zip ahead of what it has used
FORMATS = {".pt": "application/octet-stream", ".out": "text/plain", ".err": "text/plain"}  # mimetypes guesses these

# What `opened` accepts of a zip: checked on its directory before anything is extracted, then each file's ratio on
# the bytes extracting really reads of the zip (`members`, `extract`). At the paper's size a bundle with weights of
# 20 seeds of the 15 run IDs is about 14 GB (final.pt ~45 MB) in under 2,000 files.
MAX_MEMBERS = 10_000
MAX_MEMBER_BYTES = 1 << 30  # 1 GiB uncompressed per file
MAX_TOTAL_BYTES = 16 << 30  # 16 GiB uncompressed in all
MAX_RATIO = 100  # uncompressed / compressed, of each file over RATIO_FROM bytes and of the whole zip
RATIO_FROM = 1 << 20


class BundleError(UhError):
    """A bundle that cannot be written or used (exists already, hostile, changed, not a crate): one line, exit 2."""


# --- writing ------------------------------------------------------------------------------------------------------


def bundled_files(results_dir: Path, results: list[dict], with_weights: bool) -> dict[str, Path]:
    """{name in the zip: file} of what a bundle holds: each run's result.json (its final.pt with weights, its
    code.diff where there is one), profile.json, check_report.json, report/ and submitit's logs; no hidden file,
    no link, no checkpoint of an unfinished run."""
    files = []
    for r in results:
        out = result_path(results_dir, r["run_id"], r["seed"])
        final = out.with_name(FINAL_NAME)
        if with_weights and not final.is_file():
            raise BundleError(
                f"{r['run_id']} seed {r['seed']} has no final state ({final}): it finished before uh "
                "kept one; re-run it (uh run --force) or bundle without --with-weights"
            )
        files += [out, *([final] if with_weights else []), out.with_name(DIFF_NAME)]
    files += [results_dir / PROFILE_FILE, results_dir / "check_report.json"]
    files += sorted((results_dir / "report").rglob("*"))
    files += [p for p in sorted((results_dir / "submitit").rglob("*")) if p.suffix in LOGS]
    return {
        f"{RESULTS}/{p.relative_to(results_dir).as_posix()}": p
        for p in files
        if p.is_file()
        and not p.is_symlink()
        and not any(part.startswith(".") for part in p.relative_to(results_dir).parts)
    }


def _value(crate: ROCrate, kind: str, name: str, value: Any, description: str | None = None) -> ContextEntity:
    """A PropertyValue entity, one per kind, name and value, shared by the runs that have it."""
    text = value if isinstance(value, str) else json.dumps(value)
    identifier = "#" + quote(f"{kind}:{name}={text}", safe=":=")
    if identifier not in crate:
        crate.add(
            ContextEntity(
                crate,
                identifier,
                {
                    "@type": "PropertyValue",
                    "name": name,
                    "value": value,
                    **({"description": description} if description else {}),
                },
            )
        )
    return crate.get(identifier)


def _code(crate: ROCrate, provenance: dict[str, Any]) -> ContextEntity:
    """The SoftwareApplication a run's result records as its code: its code hash is its identifier."""
    code, revision = provenance.get("code_sha256"), provenance.get("git_revision")
    identifier = f"#code-{code or 'unrecorded'}" + (f"@{revision}" if revision else "")
    if provenance.get("tree_modified"):
        identifier += "+modified"
    if provenance.get("unhashed_code"):
        identifier += "+unhashed"
    if identifier not in crate:
        facts = [
            _value(crate, "code", k, provenance.get(k))
            for k in ("code_files", "git_revision_verified", "tree_modified", "diff_sha256")
        ]
        crate.add(
            ContextEntity(
                crate,
                identifier,
                {
                    "@type": "SoftwareApplication",
                    "name": "uniform_herding: the code that trains and records a run",
                    "softwareVersion": __version__,
                    "additionalProperty": facts,
                    **({"version": revision} if revision else {}),
                    **({"identifier": code} if code else {"description": "the result records no code hash"}),
                },
            )
        )
    return crate.get(identifier)


def _archive(crate: ROCrate, result: dict[str, Any]) -> ContextEntity:
    """The dataset archive the run read: not in the crate, identified by its md5."""
    env = result.get("environment", {})
    md5, dataset = env.get("data_md5"), result["config"]["dataset"]
    identifier = f"#data-md5-{md5}"
    if identifier not in crate:
        name = DATASETS["cifar100" if dataset == "synthetic" else dataset].filename
        how = (
            "uh run and uh check --recompute write it again, byte for byte"
            if dataset == "synthetic"
            else f"uh run downloads it ({env.get('data_source')} archive)"
        )
        crate.add(
            ContextEntity(
                crate,
                identifier,
                {
                    "@type": "File",
                    "name": name,
                    "identifier": f"md5:{md5}",
                    "encodingFormat": "application/gzip",
                    "description": f"the {dataset} archive the run read, not included: {how}",
                },
            )
        )
    return crate.get(identifier)


def _stack(crate: ROCrate, result: dict[str, Any], here: dict[str, Any]) -> list[ContextEntity]:
    """The run's environment (result.json's) as PropertyValues; a stack entry the result lacks is what this
    process's torch reports, and says so."""
    env = {k: v for k, v in result.get("environment", {}).items() if k not in ("data_md5", "data_source")}
    values = [_value(crate, "environment", k, v) for k, v in env.items()]
    return values + [
        _value(crate, "environment", k, v, "not recorded by the run: what torch reports where the bundle was made")
        for k, v in here.items()
        if k not in env
    ]


def _action(crate: ROCrate, result: dict[str, Any], parts: dict[str, File], here: dict[str, Any]) -> ContextEntity:
    """The run as a CreateAction: its code, inputs, outputs and environment."""
    run_id, seed = result["run_id"], result["seed"]
    folder = f"{RESULTS}/{run_id}/seed-{seed}/"
    inputs = [
        _archive(crate, result),
        _value(crate, "run", "profile", result["profile"]),
        _value(crate, "run", "seed", seed),
        *(_value(crate, "config", k, v) for k, v in result["config"].items()),
    ]
    times = {"startTime": result.get("started"), "endTime": result.get("finished")}
    return crate.add(
        ContextEntity(
            crate,
            "#" + quote(f"run-{run_id}-seed-{seed}"),
            {
                "@type": "CreateAction",
                "name": f"{run_id} seed {seed}",
                "description": result.get("command"),
                "actionStatus": {"@id": "http://schema.org/CompletedActionStatus"},
                "instrument": _code(crate, result.get("provenance") or {}),
                "object": inputs + [parts[n] for n in (folder + DIFF_NAME,) if n in parts],
                "result": [parts[n] for n in (folder + "result.json", folder + FINAL_NAME) if n in parts],
                "environment": _stack(crate, result, here),
                **{k: v for k, v in times.items() if v},
            },
        )
    )


RUN_FILES = {
    "result.json": "its result (uh run)",
    FINAL_NAME: "its final state: the learner's weights and the memory's active exemplars",
    DIFF_NAME: "the diff of the modified tree that ran it against its git revision",
}
OTHER_FILES = {
    PROFILE_FILE: "the results' profile",
    "check_report.json": "uh check's report as the sender ran it",
    MANIFEST: "the SHA-256 of every other file of the bundle, as sha256sum -c reads it",
    "report": "uh report's output",
    "submitit": "a job's log",
}


def _describe(name: str) -> str:
    """What a bundled file is, for its File entity: results/<RUN>/seed-<S>/<file>, results/<file>, results/report/...,
    results/submitit/... or the manifest."""
    parts = name.split("/")
    if len(parts) == 4 and parts[3] in RUN_FILES:
        return f"{parts[1]} seed {parts[2].removeprefix('seed-')}: {RUN_FILES[parts[3]]}"
    return OTHER_FILES.get(parts[-1]) or OTHER_FILES.get(parts[1] if len(parts) > 2 else "", name)


def crate_of(results: list[dict], files: dict[str, Path], here: dict[str, Any]) -> tuple[ROCrate, dict[str, File]]:
    """The crate's metadata for `results` and their `files` (each File entity's sha256 is set as it is zipped)."""
    crate = ROCrate(version="1.1")
    crate.metadata.extra_contexts.append(WORKFLOW_RUN_CONTEXT)
    profile = crate.add(
        ContextEntity(
            crate, PROCESS_RUN_CRATE, {"@type": "CreativeWork", "name": "Process Run Crate", "version": "0.5"}
        )
    )
    parts = {
        name: crate.add_file(
            source,
            dest_path=name,
            properties={
                "name": Path(name).name,
                "description": _describe(name),
                "encodingFormat": FORMATS.get(Path(name).suffix) or mimetypes.guess_type(name)[0] or FORMATS[".pt"],
            },
        )
        for name, source in files.items()
    }
    parts[MANIFEST] = crate.add_file(
        None,
        dest_path=MANIFEST,
        properties={"name": MANIFEST, "description": _describe(MANIFEST), "encodingFormat": "text/plain"},
    )
    crate.name = f"Uniform Herding re-run: {len(results)} runs of profile {results_profile(results)}"
    crate.description = (
        "uh bundle: one CreateAction per run (run ID and seed); every file's SHA-256 in "
        f"{MANIFEST}; check it with uh check --bundle"
    )
    crate.datePublished = datetime.now(UTC).isoformat(timespec="seconds")
    crate.root_dataset["license"] = crate.add(ContextEntity(crate, LICENSE, LICENSE_ENTITY))
    crate.root_dataset["conformsTo"] = profile
    crate.root_dataset["mentions"] = [_action(crate, r, parts, here) for r in results]
    return crate, parts


def _copy_hashed(src: BinaryIO, dst: BinaryIO, limit: Callable[[int], None] | None = None) -> tuple[str, int]:
    """Copy `src` to `dst` a chunk at a time, hashing what passes, so that no file is read twice or held whole:
    (SHA-256, bytes). `limit` sees the bytes read so far before each chunk is written, and raises to stop."""
    digest, size = hashlib.sha256(), 0
    while chunk := src.read(CHUNK):
        size += len(chunk)
        if limit is not None:
            limit(size)
        digest.update(chunk)
        dst.write(chunk)
    return digest.hexdigest(), size


REDACTED = (f"{RESULTS}/submitit/", f"{RESULTS}/report/")  # text that may hold the sender's paths: logs, uh report's


def _redacted(src: BinaryIO, name: str, results_dir: Path) -> BinaryIO:
    """A log's or a report's bytes (`REDACTED`) with the sender's absolute paths as the zip names them (submitit
    and uh print them): the results folder as `results`, the home folder as `~`; any other file as it is. A bundle
    holds no absolute path of the machine that made it."""
    if not name.startswith(REDACTED):
        return src
    data, home = src.read(), Path.home()
    for path, shown in ((results_dir.resolve(), RESULTS), (results_dir.absolute(), RESULTS), (home, "~")):
        if len(path.parts) > 1:  # never "/" itself
            data = data.replace(str(path).encode(), shown.encode())
    return io.BytesIO(data)


def _zip(f: BinaryIO, crate: ROCrate, files: dict[str, Path], parts: dict[str, File], results_dir: Path) -> None:
    """Each file, hashed as it is written (logs and reports `_redacted`); then the crate's metadata, which holds
    those hashes; then the manifest."""
    hashes = {}
    with zipfile.ZipFile(f, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, source in files.items():
            info = zipfile.ZipInfo.from_file(source, name)  # its time and mode (a regular file's)
            info.compress_type = zipfile.ZIP_DEFLATED
            with source.open("rb") as src, zf.open(info, "w", force_zip64=True) as dst:
                hashes[name], size = _copy_hashed(_redacted(src, name, results_dir), dst)
            parts[name]["sha256"], parts[name]["contentSize"] = hashes[name], str(size)
        metadata = b"".join(chunk for _, chunk in crate.metadata.stream())
        zf.writestr(METADATA, metadata)
        hashes[METADATA] = hashlib.sha256(metadata).hexdigest()
        zf.writestr(MANIFEST, sha256sum(hashes))


def write_bundle(results_dir: Path, out: Path, with_weights: bool) -> tuple[int, int]:
    """Write `results_dir` as a bundle at `out`, atomically and never over a file; (runs, files in the zip: the
    crate's metadata and the manifest among them, as uh check --bundle counts them). Its progress goes to standard
    error (runs/terminal.Progress: a line per stage; torch's import alone takes seconds)."""
    if out.exists():
        raise BundleError(f"{out} exists; uh bundle never overwrites a file: choose another -o name")
    try:  # read before the progress starts: a malformed result is one line, nothing before it
        results = load_results(results_dir)
    except ResultError as e:
        raise BundleError(str(e)) from None
    with Progress("uh bundle", every=HEARTBEAT_S) as progress:
        files = bundled_files(results_dir, results, with_weights)
        progress.stage(f"read {len(results)} runs: {len(files)} files to bundle")
        import torch

        from uniform_herding.runs.run import stack

        here = stack(torch.device("cuda" if torch.cuda.is_available() else "cpu"))
        progress.stage("torch imported: this machine's stack, for the runs that did not record theirs")
        crate, parts = crate_of(results, files, here)
        progress.stage("each run described (the RO-Crate's metadata); zipping")
        try:
            write_atomic(out, lambda f: _zip(f, crate, files, parts, results_dir), replace=False)
        except FileExistsError:
            raise BundleError(f"{out} appeared while the bundle was written; choose another -o name") from None
        except OSError as e:
            raise BundleError(f"cannot write {out} ({e.strerror or e}); choose a writable -o path") from None
    return len(results), len(files) + 2


# --- verifying ----------------------------------------------------------------------------------------------------


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
                hashes[info.filename], _ = _copy_hashed(src, dst, limit)
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
