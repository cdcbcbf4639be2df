"""`uh bundle`: a re-run's results as one zip to send (`write_bundle`); what the zip holds is what evidence/verify.py
checks where it lands.

A bundle is an RO-Crate (the `rocrate` package) that follows the Process Run Crate profile (`PROCESS_RUN_CRATE`):
one CreateAction per run (run ID and seed) whose instrument is the code that made it (a SoftwareApplication
identified by the result's code hash, runs/provenance.py), whose object is the dataset archive (not included:
identified by its md5), the profile, the seed and the config, whose result is its result.json (with its final.pt
under --with-weights), and whose environment is the stack it ran on. Beside them: profile.json, check_report.json,
report/, submitit's logs and any code.diff, all under `results/` in the zip, and `manifest-sha256.txt`, the SHA-256
of every other file as `sha256sum -c` reads it (each File entity carries its own as `sha256` too). The hashes prove
integrity, not authorship: anyone can make a bundle with matching hashes.
"""

from __future__ import annotations

import hashlib
import io
import json
import mimetypes
import zipfile
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import quote

from rocrate.model import ContextEntity, File
from rocrate.rocrate import ROCrate

from uniform_herding import __version__
from uniform_herding.data.archive import DATASETS
from uniform_herding.errors import UhError
from uniform_herding.runs.final import FINAL_NAME
from uniform_herding.runs.provenance import DIFF_NAME, sha256sum
from uniform_herding.runs.results import (
    PROFILE_FILE,
    ResultError,
    load_results,
    result_path,
    results_profile,
    write_atomic,
)
from uniform_herding.runs.terminal import HEARTBEAT_S, Progress

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


class BundleError(UhError):
    """A bundle that cannot be written or used (exists already, hostile, changed, not a crate): one line, exit 2."""


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


def copy_hashed(src: BinaryIO, dst: BinaryIO, limit: Callable[[int], None] | None = None) -> tuple[str, int]:
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
                hashes[name], size = copy_hashed(_redacted(src, name, results_dir), dst)
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
