"""uh bundle and uh check --bundle (evidence/bundle.py, evidence/verify.py): an RO-Crate of a re-run, verified byte
for byte, refused when hostile, its verdict re-derived from its results, its last rows recomputed from its weights."""

from __future__ import annotations

import hashlib
import json
import os
import re
import resource
import shutil
import signal
import stat
import struct
import subprocess
import sys
import time
import warnings
import zipfile
import zlib
from collections.abc import Callable
from pathlib import Path
from urllib.parse import unquote

import pytest
from click.testing import CliRunner, Result
from conftest import MALFORMED_RESULTS, PROFILE_A_LIST
from rocrate.rocrate import ROCrate

from uniform_herding.cli import main
from uniform_herding.evidence import bundle, verify
from uniform_herding.evidence.recompute import final_path, last_row
from uniform_herding.method.metrics import PAPER, REPORTED
from uniform_herding.runs.provenance import checkout_state, code_hash
from uniform_herding.runs.results import load_results

SEED = 1993


def uh(*args: str) -> Result:
    return CliRunner().invoke(main, [*args])


def error_line(res: Result) -> str:
    """The one `Error:` line of a refused command (no traceback)."""
    errors = [line for line in res.output.splitlines() if line.startswith("Error")]
    assert len(errors) == 1 and "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit), res.exception
    return errors[0]


def verdict(res: Result) -> str:
    return next(line for line in res.output.splitlines() if line.startswith("verdict:"))


@pytest.fixture(scope="module")
def sent(smoke_sweep, tmp_path_factory) -> tuple[Path, Path]:
    """(data dir, results dir): the session's smoke sweep (B3, r2 and B3+rho=5, seed 1993, made by the local
    executor: with submitit's logs), copied, then checked and reported as a sender would before bundling."""
    data, results, _ = smoke_sweep
    copy = tmp_path_factory.mktemp("sent") / "results"
    shutil.copytree(results, copy)
    uh("check", "--results-dir", str(copy))
    assert uh("report", "--results-dir", str(copy)).exit_code == 0
    return data, copy


@pytest.fixture(scope="module")
def zipped(sent, tmp_path_factory) -> Path:
    """The sent results bundled with their weights."""
    out = tmp_path_factory.mktemp("bundle") / "rerun.zip"
    res = uh("bundle", "--results-dir", str(sent[1]), "-o", str(out), "--with-weights")
    assert res.exit_code == 0, res.output
    return out


def remanifest(files: dict[str, bytes]) -> None:
    """The manifest made again from the files as they are."""
    files[bundle.MANIFEST] = "".join(
        f"{hashlib.sha256(files[n]).hexdigest()}  {n}\n" for n in sorted(files) if n != bundle.MANIFEST
    ).encode()


def rezip(source: Path, target: Path, change: Callable[[dict[str, bytes]], None], rehash: bool = False) -> Path:
    """`source`'s members, changed by `change`, written to `target`; with `rehash`, the crate's sha256 and the
    manifest made again to match, as anyone can: then only a recompute can tell."""
    with zipfile.ZipFile(source) as zf:
        files = {name: zf.read(name) for name in zf.namelist()}
    change(files)
    if rehash:
        metadata = json.loads(files[bundle.METADATA])
        for entity in metadata["@graph"]:
            if entity["@id"] in files and entity["@id"] != bundle.MANIFEST:
                entity["sha256"] = hashlib.sha256(files[entity["@id"]]).hexdigest()
        files[bundle.METADATA] = json.dumps(metadata, indent=4).encode()
        remanifest(files)
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
    return target


# --- the crate ----------------------------------------------------------------------------------------------------


@pytest.mark.trains
def test_a_bundle_is_a_process_run_crate_with_a_create_action_per_run_and_a_sha256_per_file(sent, zipped) -> None:
    crate = ROCrate(zipped)  # rocrate's own reader, as a receiver would load it
    assert bundle.PROCESS_RUN_CRATE in [e.id for e in [crate.root_dataset["conformsTo"]]]
    results = {(r["run_id"], r["seed"]): r for r in load_results(sent[1])}
    actions = crate.get_by_type("CreateAction")
    assert sorted(a["name"] for a in actions) == sorted(f"{run} seed {seed}" for run, seed in results)
    assert set(crate.root_dataset["mentions"]) == set(actions)
    with zipfile.ZipFile(zipped) as zf:
        digests = {n: hashlib.sha256(zf.read(n)).hexdigest() for n in zf.namelist()}
        manifest = zf.read(bundle.MANIFEST).decode()
    assert manifest == "".join(f"{d}  {n}\n" for n, d in sorted(digests.items()) if n != bundle.MANIFEST)
    files = {e.id: e for e in crate.data_entities}
    assert {n for n in digests if n != bundle.METADATA} == {unquote(i) for i in files}
    assert all(e["sha256"] == digests[unquote(i)] for i, e in files.items() if i != bundle.MANIFEST)
    assert any(n.startswith("results/submitit/") and n.endswith("_log.out") for n in digests)  # the jobs' logs
    assert {"results/check_report.json", "results/report/summary.md"} <= set(digests)
    for action in actions:
        run, _, seed = action["name"].rpartition(" seed ")
        result = results[run, int(seed)]
        assert action["instrument"]["identifier"] == result["provenance"]["code_sha256"]
        assert {unquote(e.id) for e in action["result"]} == {
            f"results/{run}/seed-{seed}/result.json",
            f"results/{run}/seed-{seed}/final.pt",
        }
        objects = {e.id: e for e in action["object"]}
        assert objects[f"#data-md5-{result['environment']['data_md5']}"]["identifier"].endswith(
            result["environment"]["data_md5"]
        )
        assert {(e["name"], e["value"]) for e in action["object"] if e.type == "PropertyValue"} >= {
            ("seed", SEED),
            ("profile", "smoke"),
            *result["config"].items(),
        }
        assert (action["startTime"], action["endTime"]) == (result["started"], result["finished"])
        stack = {e["name"]: e["value"] for e in action["environment"]}
        assert stack["cuda"] is None and stack["torch"] == result["environment"]["torch"]  # a CPU run: no CUDA


def test_results_that_lack_the_stack_and_the_code_hash_get_this_machines_stack_saying_so(
    finished_result, tmp_path
) -> None:
    finished_result(tmp_path / "r", "B3", SEED)  # a result.json without environment or provenance
    out = tmp_path / "old.zip"
    assert uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(out)).exit_code == 0
    (action,) = ROCrate(out).get_by_type("CreateAction")
    assert "identifier" not in action["instrument"] and "no code hash" in action["instrument"]["description"]
    assert {e["name"] for e in action["environment"]} >= {"python", "torch", "cuda", "cpu"}
    assert all("not recorded by the run" in e["description"] for e in action["environment"])


def test_uh_bundle_says_each_stage_on_standard_error(finished_result, tmp_path) -> None:
    """Issue 61.5: uh bundle was silent for 19 s (most of it torch's import). Away from a terminal it says each stage
    on standard error as it ends (runs/terminal.Progress): the results read, torch imported, the runs described, then
    done; its one line stays on standard output."""
    for seed in (SEED, 2023):
        finished_result(tmp_path / "r", "B3", seed)
    res = uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "b.zip"))
    assert res.exit_code == 0, res.output
    stages = [line.split(" (")[0] for line in res.stderr.splitlines() if not line.endswith(" so far")]  # a heartbeat
    assert stages[:-1] == [
        "uh bundle ...",
        "uh bundle: read 2 runs: 2 files to bundle",
        "uh bundle: torch imported: this machine's stack, for the runs that did not record theirs",
        "uh bundle: each run described",
    ]
    assert stages[-1].startswith("uh bundle: done in ") and res.stdout.startswith(f"wrote {tmp_path / 'b.zip'}: 2 runs")


# Local copies of the JSON-LD contexts a crate names, for the validator, which would fetch them over the network: the
# RO-Crate 1.1 context's terms are those rocrate ships (its context of RO-Crate 1.3, whose terms the crate uses map
# alike), and the Process Run Crate's terms are https://w3id.org/ro/terms/workflow-run/context's.
WORKFLOW_RUN_TERMS = [
    *("ParameterConnection", "ContainerImage", "DockerImage", "SIFImage", "connection", "sourceParameter"),
    *("targetParameter", "md5", "sha1", "sha256", "sha512", "environment", "registry", "tag", "containerImage"),
    "resourceUsage",
]


def contexts() -> dict[str, dict]:
    """{context URL: its JSON-LD document}, for the contexts a bundle's crate names."""
    from rocrate.vocabs import RO_CRATE

    terms = {term: f"https://w3id.org/ro/terms/workflow-run#{term}" for term in WORKFLOW_RUN_TERMS}
    return {
        "https://w3id.org/ro/crate/1.1/context": {"@context": RO_CRATE["@context"]},
        bundle.WORKFLOW_RUN_CONTEXT: {"@context": terms},
    }


@pytest.mark.trains
def test_a_smoke_bundle_passes_the_ro_crate_validator_at_required_for_process_run_crate(zipped, monkeypatch) -> None:
    """Issue 61: the RO-Crate community's validator (roc-validator), profile process-run-crate-0.5, passes every
    REQUIRED check of a smoke bundle; it failed the root's license. Its contexts come from local copies, and nothing
    else is fetched."""
    pytest.importorskip("rocrate_validator", reason="roc-validator is not installed (docs/testing.md)")
    import requests
    from rocrate_validator import models, services
    from rocrate_validator.utils.http import HttpRequester

    local, asked = contexts(), []

    def get(_, url: str, *args: object, **kwargs: object) -> requests.Response:
        asked.append(url)
        response = requests.Response()
        response.url, response.status_code = url, 200 if url in local else 404
        response._content = json.dumps(local.get(url, {})).encode()
        response.headers["Content-Type"] = "application/ld+json"
        return response

    monkeypatch.setattr(HttpRequester, "get", get, raising=False)  # its requests are looked up on the instance
    required = models.Severity.REQUIRED
    profile = "process-run-crate-0.5"
    result = services.validate(
        services.ValidationSettings(rocrate_uri=str(zipped), profile_identifier=profile, requirement_severity=required)
    )
    assert result.passed(), [issue.message for issue in result.get_issues()]
    assert set(asked) <= set(local)


@pytest.mark.trains
def test_a_bundle_of_runs_made_now_holds_no_absolute_path_of_the_machine(smoke_sweep, sent, zipped, tmp_path) -> None:
    """Issue 61: result.json (its command), check_report.json, the crate's metadata, the jobs' logs and submission
    records (submitit and uh print paths: redacted as the zip names them) hold neither the results folder's absolute
    path, nor the data folder's, nor the home folder."""
    with zipfile.ZipFile(zipped) as zf:
        zf.extractall(tmp_path / "unzipped")
    machine = {str(sent[1].resolve()), str(sent[1]), str(smoke_sweep[0].resolve()), str(Path.home())}
    files = [p for p in (tmp_path / "unzipped").rglob("*") if p.is_file() and p.suffix != ".pt"]
    assert any(p.name.endswith("_log.out") for p in files) and len(files) > 10
    found = {(p.name, path) for p in files for path in machine if path.encode() in p.read_bytes()}
    assert not found, found


def test_the_crates_root_carries_the_projects_license_and_both_commands_count_the_zips_files(
    finished_result, tmp_path
) -> None:
    """Issue 61: the crate's root names its license (the project's MIT license, a contextual entity with a name and
    a description, as the RO-Crate validator asks), and uh bundle and uh check --bundle count the same files: those
    in the zip, the crate's metadata and the manifest among them (they said 3 and 2)."""
    finished_result(tmp_path / "r", "B3", SEED)
    out = tmp_path / "b.zip"
    sent = uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(out))
    metadata = {e["@id"]: e for e in json.loads(zipfile.ZipFile(out).read(bundle.METADATA))["@graph"]}
    assert metadata["./"]["license"] == {"@id": "https://spdx.org/licenses/MIT"}
    license_entity = metadata["https://spdx.org/licenses/MIT"]
    assert license_entity["name"] == "MIT License" and license_entity["description"]
    assert (Path(__file__).parents[2] / "LICENSE").read_text().startswith(license_entity["name"])
    checked = uh("check", "--bundle", str(out), "--json-out", str(tmp_path / "report.json"))
    n = len(zipfile.ZipFile(out).namelist())
    assert f"{n} files in the zip" in sent.output and f"{n} files in the zip" in checked.output, checked.output


def test_the_receivers_page_names_the_checking_checkout_and_what_was_and_was_not_verified(
    finished_result, tmp_path
) -> None:
    """Issue 61: uh check --bundle names the checkout that checks (its code hash, revision, modified or not), what it
    verified (the files' hashes, the crate's listing, the verdict derived again; R's rows only under --recompute)
    and what it cannot (who made the files)."""
    finished_result(tmp_path / "r", "B3", SEED)
    uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "b.zip"))
    lines = uh("check", "--bundle", str(tmp_path / "b.zip"), "--json-out", str(tmp_path / "j"), "--wide").output
    lines = lines.splitlines()
    assert f"checked by this checkout: {checkout_state()}" in lines
    verified = "verified: every file's SHA-256 (manifest-sha256.txt); the crate lists exactly the zip's files; the"
    assert any(line.startswith(verified) and "the verdict below is derived again" in line for line in lines)
    assert any(line.startswith("R's rows: taken as recorded, not recomputed") for line in lines)
    assert any(line.startswith("not verifiable: who made the files") for line in lines)
    others = "the others are named under provenance below, with every cause"
    assert f"results: 0 of 1 made plainly by the checking code; {others}" in lines


# --- uh bundle's refusals -----------------------------------------------------------------------------------------


def test_uh_bundle_refuses_no_results_an_existing_file_and_weights_a_run_lacks(finished_result, tmp_path) -> None:
    (tmp_path / "empty").mkdir()
    assert "no <RUN>/seed-<SEED>/result.json found" in error_line(
        res := uh("bundle", "--results-dir", str(tmp_path / "empty"), "-o", str(tmp_path / "a.zip"))
    )
    assert res.exit_code == 2 and not (tmp_path / "a.zip").exists()

    finished_result(tmp_path / "r", "B3", SEED)
    (tmp_path / "taken.zip").write_bytes(b"mine")
    res = uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "taken.zip"))
    assert res.exit_code == 2 and "never overwrites" in error_line(res) and "another -o name" in error_line(res)
    assert (tmp_path / "taken.zip").read_bytes() == b"mine"

    res = uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "w.zip"), "--with-weights")
    assert res.exit_code == 2 and "B3 seed 1993 has no final state" in error_line(res)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["empty", "r", "taken.zip"]  # no zip, no temp file


# --- uh check --bundle ------------------------------------------------------------------------------------------


@pytest.mark.trains
def test_uh_check_bundle_exits_as_uh_check_results_dir_does_wherever_the_zip_is(
    sent, zipped, tmp_path, monkeypatch
) -> None:
    direct = uh("check", "--results-dir", str(sent[1]), "--json-out", str(tmp_path / "direct.json"))
    code = json.loads((sent[1] / "B3" / f"seed-{SEED}" / "result.json").read_text())["provenance"]["code_sha256"]
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    shutil.copy(zipped, elsewhere / "copy.zip")
    monkeypatch.chdir(elsewhere)
    for zip_path in (zipped, Path("copy.zip")):
        res = uh("check", "--bundle", str(zip_path))
        assert (res.exit_code, verdict(res)) == (direct.exit_code, verdict(direct)), res.output
        said = " ".join(res.output.split())  # the words, however the terminal's width wraps the zip's path
        assert "each as manifest-sha256.txt records it" in said
        assert code == code_hash() and "results: 3 of 3 made plainly by the checking code" in said
        stack = r"stack: cpu: .*, torch .*, python .*, compile \w+, step eager; 3 run\(s\)"
        assert re.search(stack, res.output), res.output
    report = json.loads((elsewhere / "check_report.json").read_text())  # --bundle writes ./check_report.json
    assert report["metrics"] == json.loads((tmp_path / "direct.json").read_text())["metrics"]


@pytest.mark.trains
def test_one_changed_byte_of_a_result_is_exit_2_naming_the_file(zipped, tmp_path) -> None:
    name = f"results/B3/seed-{SEED}/result.json"

    def flip(files: dict[str, bytes]) -> None:
        data = bytearray(files[name])
        at = data.index(b'"seed": 1993') + len(b'"seed": 199')
        data[at] = ord("4")  # 1993 -> 1994: still JSON, still a valid-looking result
        files[name] = bytes(data)

    res = uh("check", "--bundle", str(rezip(zipped, tmp_path / "changed.zip", flip)))
    assert res.exit_code == 2
    assert f"{name} has changed: its SHA-256 is not the one manifest-sha256.txt records" in error_line(res)


def test_a_crate_that_lists_another_sha256_than_the_manifest_is_refused(finished_result, tmp_path) -> None:
    finished_result(tmp_path / "r", "B3", SEED)
    uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "b.zip"))

    def lie(files: dict[str, bytes]) -> None:  # the crate's hash of one file changed, the manifest made to match
        real = hashlib.sha256(files[f"results/B3/seed-{SEED}/result.json"]).hexdigest().encode()
        files[bundle.METADATA] = files[bundle.METADATA].replace(real, b"0" * 64)
        remanifest(files)

    res = uh("check", "--bundle", str(rezip(tmp_path / "b.zip", tmp_path / "lie.zip", lie)))
    assert res.exit_code == 2
    assert f"the crate records another SHA-256 for results/B3/seed-{SEED}/result.json" in error_line(res)


def hostile(kind: str, path: Path) -> str:
    """A zip of one kind of attack at `path`; the words its refusal must hold."""
    if kind == "not-a-zip":
        path.write_bytes(b"PK\x03\x04 not really")
        return "cannot be read as a zip"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf, warnings.catch_warnings(action="ignore"):
        if kind == "dotdot":
            zf.writestr("results/../../../escaped.txt", b"x")
            return "has a '..', '.' or empty part"
        if kind == "absolute":
            zf.writestr(zipfile.ZipInfo("/tmp/escaped.txt"), b"x")
            return "is an absolute path"
        if kind == "symlink":
            link = zipfile.ZipInfo("results/link")
            link.external_attr = (stat.S_IFLNK | 0o777) << 16
            zf.writestr(link, "/etc/passwd")
            return "is a symbolic link"
        if kind == "duplicate":
            zf.writestr("results/profile.json", b"{}")
            zf.writestr("results/profile.json", b"{}")
            return "appears twice"
        if kind == "many":
            for i in range(verify.MAX_MEMBERS + 1):
                zf.writestr(f"results/{i}", b"")
            return f"more than the {verify.MAX_MEMBERS} a bundle may hold"
        if kind == "bomb":  # one member of zeros compressing ~1000:1
            zf.writestr("results/bomb", bytes(2 * verify.RATIO_FROM))
            return f"more than {verify.MAX_RATIO}:1"
        if kind == "small-bombs":  # many members under RATIO_FROM each, ~1000:1 together
            for i in range(40):
                zf.writestr(f"results/{i}", bytes(verify.RATIO_FROM // 2))
            return f"or {verify.MAX_RATIO}:1; refused"
        if kind == "bzip2":  # bz2 decompresses a read whole, however large: no ratio check could stop it in time
            zf.writestr("results/bz2", b"x", compress_type=zipfile.ZIP_BZIP2)
            return "is compressed by method 12, not stored or deflated"
        if kind == "large":  # incompressible, over the per-file limit (set low by the test)
            zf.writestr("results/large", bytes(range(256)) * 8)
            return "bytes uncompressed, more than 1000"
        if kind == "total":  # incompressible, over the total limit (set low by the test)
            for i in range(3):
                zf.writestr(f"results/{i}", bytes(range(256)) * 4)
            return "more than 2000 or"
    raise ValueError(kind)


@pytest.mark.parametrize(
    "kind",
    [
        "dotdot",
        "absolute",
        "symlink",
        "duplicate",
        "many",
        "bomb",
        "small-bombs",
        "bzip2",
        "large",
        "total",
        "not-a-zip",
    ],
)
def test_a_hostile_zip_is_refused_with_exit_2_and_nothing_written_outside_the_temporary_dir(
    kind, tmp_path, monkeypatch
) -> None:
    tmp, cwd = tmp_path / "tmp", tmp_path / "cwd"
    tmp.mkdir(), cwd.mkdir()
    path = tmp_path / "hostile.zip"
    words = hostile(kind, path)
    monkeypatch.setattr(verify, "MAX_MEMBER_BYTES", 1000 if kind == "large" else verify.MAX_MEMBER_BYTES)
    monkeypatch.setattr(verify, "MAX_TOTAL_BYTES", 2000 if kind == "total" else verify.MAX_TOTAL_BYTES)
    monkeypatch.setattr("tempfile.tempdir", str(tmp))
    monkeypatch.chdir(cwd)
    res = uh("check", "--bundle", str(path))
    assert res.exit_code == 2 and words in error_line(res), res.output
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["cwd", "hostile.zip", "tmp"]  # the temp dir is gone too


def zeros_zip(path: Path, members: int, size: int, declared: int | None = None, junk: int = 0) -> int:
    """A zip of `members` files of `size` zero bytes, deflated, each followed by `junk` random bytes, whose local
    headers and central directory declare `declared` compressed bytes each (default: the truth, junk included);
    built by hand, as an attacker would. The deflated size of one."""
    packer = zlib.compressobj(9, zlib.DEFLATED, -15)
    stream = packer.compress(bytes(size)) + packer.flush()
    crc, packed = zlib.crc32(bytes(size)), len(stream) + junk if declared is None else declared
    body, directory = b"", b""
    for i in range(members):
        name = f"results/{i}".encode()
        fields = (zipfile.ZIP_DEFLATED, 0, 0x21, crc, packed, size, len(name))  # method, time, date, CRC, sizes, name
        mode = (stat.S_IFREG | 0o644) << 16
        central = (zipfile.stringCentralDir, 20, 3, 20, 0, 0, *fields, 0, 0, 0, 0, mode, len(body))
        directory += struct.pack(zipfile.structCentralDir, *central) + name
        local = struct.pack(zipfile.structFileHeader, zipfile.stringFileHeader, 20, 0, 0, *fields, 0)
        body += local + name + stream + os.urandom(junk)
    end = struct.pack(
        zipfile.structEndArchive, zipfile.stringEndArchive, 0, 0, members, members, len(directory), len(body), 0
    )
    path.write_bytes(body + directory + end)
    return len(stream)


@pytest.fixture
def written(monkeypatch) -> list[int]:
    """The size of every chunk extracting writes, as it writes it."""
    chunks: list[int] = []
    copy = verify.copy_hashed

    class Counting:
        def __init__(self, f) -> None:
            self.f = f

        def write(self, data: bytes) -> None:
            chunks.append(len(data))
            self.f.write(data)

    monkeypatch.setattr(verify, "copy_hashed", lambda src, dst, *limit: copy(src, Counting(dst), *limit))
    return chunks


def test_a_zip_whose_directory_declares_larger_compressed_sizes_than_it_holds_is_refused_before_writing(
    tmp_path, monkeypatch, written
) -> None:
    """The tester's bomb, at 1/8 of its size: four files of zeros whose directory declares 80:1 (6.7 MB each for 512
    MiB), the zip a few hundred kB: 2.15 GB were written before something else refused it."""
    size = 64 << 20
    zeros_zip(tmp_path / "forged.zip", 4, size, declared=size // 80)
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    res = uh("check", "--bundle", str(tmp_path / "forged.zip"))
    assert res.exit_code == 2 and "it lies about its sizes; refused, nothing extracted" in error_line(res)
    assert sum(written) < size and not any((tmp_path / "tmp").iterdir())


def test_a_file_that_really_compresses_more_than_the_ratio_is_stopped_as_it_is_extracted(
    tmp_path, monkeypatch, written
) -> None:
    """A directory true to the zip's bytes can still hide a bomb: a file of zeros whose compressed size counts the
    junk after its stream passes the 100:1 its directory declares; the bytes extracting reads tell."""
    size = 64 << 20
    stream = zeros_zip(tmp_path / "padded.zip", 1, size, junk=size // 90)
    with zipfile.ZipFile(tmp_path / "padded.zip") as zf:  # the directory declares 90:1, and the zip is that large
        assert zf.getinfo("results/0").compress_size == stream + size // 90
    assert (tmp_path / "padded.zip").stat().st_size > size // 100
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    res = uh("check", "--bundle", str(tmp_path / "padded.zip"))
    assert res.exit_code == 2, res.output
    assert f"more than {verify.MAX_RATIO}:1 whatever its directory declares; refused" in error_line(res)
    assert 0 < sum(written) < size // 8 and not any((tmp_path / "tmp").iterdir())


@pytest.mark.parametrize("kind", ["device", "fifo"])
def test_a_bundle_that_is_not_a_regular_file_is_refused_before_reading(kind, tmp_path) -> None:
    """/dev/zero read until memory ran out; a FIFO waited for a writer for ever. In a child with 1 GiB of memory."""
    path = {"device": Path("/dev/zero"), "fifo": tmp_path / "pipe"}[kind]
    if kind == "fifo":
        os.mkfifo(path)
    limit = (1 << 30, 1 << 30)
    child = subprocess.run(
        [sys.executable, "-m", "uniform_herding", "check", "--bundle", str(path)],
        timeout=60,
        capture_output=True,
        text=True,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, limit),
    )
    assert child.returncode == 2, child.stderr
    refusal = f"Error: {path} is not a regular file (a device, a FIFO or a folder); give the zip uh bundle wrote\n"
    assert child.stderr == refusal


# A child that copies slowly: each chunk written, then a minute's wait, time for a signal mid-copy.
SLOW = """import sys, time
from uniform_herding.evidence import bundle, verify

copy = bundle.copy_hashed


class Slow:
    def __init__(self, f):
        self.f = f

    def write(self, data):
        self.f.write(data)
        self.f.flush()
        time.sleep(60)


bundle.copy_hashed = verify.copy_hashed = lambda src, dst, *limit: copy(src, Slow(dst), *limit)
from uniform_herding.cli import main

main(sys.argv[1:])
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("command", "signum"), [("check", signal.SIGTERM), ("check", signal.SIGINT), ("bundle", signal.SIGTERM)]
)
def test_a_signal_mid_copy_removes_the_temporary_files_and_exits_128_plus_it(
    command, signum, finished_result, tmp_path
) -> None:
    """SIGTERM left 470 MB of an extraction in TMPDIR, SIGINT exited 1 (a failed replication's code): the temporary
    folder (uh check --bundle) or file (uh bundle) is removed, one line, 143 or 130."""
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    if command == "check":
        with zipfile.ZipFile(tmp_path / "b.zip", "w") as zf:
            zf.writestr("results/a", os.urandom(4 * bundle.CHUNK))
        args, started = ["check", "--bundle", str(tmp_path / "b.zip")], "uh-bundle-*/results/a"
    else:
        finished_result(tmp_path / "r", "B3", SEED)
        args = ["bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp / "b.zip")]
        started = ".b.zip.*.tmp"
    child = subprocess.Popen(
        [sys.executable, "-c", SLOW, *args], env={**os.environ, "TMPDIR": str(tmp)}, stderr=subprocess.PIPE, text=True
    )
    deadline = time.monotonic() + 120
    while not any(tmp.glob(started)):
        assert child.poll() is None and time.monotonic() < deadline, child.communicate(timeout=5)
        time.sleep(0.05)
    child.send_signal(signum)
    _, err = child.communicate(timeout=60)
    error = f"Error: stopped by {signal.Signals(signum).name}"  # after uh bundle's stage lines, if any
    assert child.returncode == 128 + signum and err.splitlines()[-1] == error and "Traceback" not in err, err
    assert [line for line in err.splitlines() if not line.startswith("uh bundle")] == [error], err
    assert list(tmp.iterdir()) == []


def test_usage_bundle_with_results_dir_and_recompute_without_bundle(tmp_path) -> None:
    res = uh("check", "--bundle", str(tmp_path / "b.zip"), "--results-dir", str(tmp_path))
    assert res.exit_code == 2 and "give --bundle or --results-dir, not both" in res.output
    res = uh("check", "--recompute", "--results-dir", str(tmp_path))
    assert res.exit_code == 2 and "--recompute goes with --bundle" in res.output


# --- --recompute --------------------------------------------------------------------------------------------------


@pytest.mark.trains
def test_recompute_gives_each_runs_recorded_last_row_bit_for_bit(sent, zipped, tmp_path) -> None:
    data, results = sent
    for result in load_results(results):  # on this CPU, the smoke run's own: equal to the last bit
        row, _ = last_row(result, final_path(results, result), data, {})
        assert row == result["R"][-1], result["run_id"]
    direct = uh("check", "--results-dir", str(results), "--json-out", str(tmp_path / "direct.json"))
    res = uh(
        "check",
        "--bundle",
        str(zipped),
        "--recompute",
        "--data-dir",
        str(tmp_path / "fresh-data"),
        "--json-out",
        str(tmp_path / "bundle.json"),
    )  # the synthetic archive written again
    assert res.exit_code == direct.exit_code, res.output
    assert res.output.count("last row recomputed on the CPU equals the recorded one (largest difference 0.00)") == 3


@pytest.mark.trains
def test_recompute_names_the_run_whose_recorded_row_was_forged_with_its_hashes_made_again(zipped, tmp_path) -> None:
    name = f"results/B3/seed-{SEED}/result.json"

    def forge(files: dict[str, bytes]) -> None:  # +10 points on the last task, metrics made to agree with R
        result = json.loads(files[name])
        result["R"][-1][-1] = min(100.0, result["R"][-1][-1] + 10)
        result["metrics"] = {n: m.of(result["R"]) for n, m in {**PAPER, **REPORTED}.items()}
        files[name] = json.dumps(result, indent=2).encode()

    forged = rezip(zipped, tmp_path / "forged.zip", forge, rehash=True)
    plain = uh("check", "--bundle", str(forged), "--json-out", str(tmp_path / "r.json"))
    assert plain.exit_code in (0, 1, 3, 4, 5, 6), plain.output  # the hashes match: only the recompute can tell
    res = uh("check", "--bundle", str(forged), "--recompute", "--data-dir", str(tmp_path / "data"))
    assert res.exit_code == 2
    line = error_line(res)
    assert "B3 seed 1993 (task 5: recorded" in line and "r2 seed" not in line and "rho=5" not in line


def test_recompute_of_a_bundle_without_weights_says_to_bundle_them(finished_result, tmp_path) -> None:
    finished_result(tmp_path / "r", "B3", SEED)
    uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "b.zip"))
    res = uh("check", "--bundle", str(tmp_path / "b.zip"), "--recompute")
    assert res.exit_code == 2 and "uh bundle --with-weights" in error_line(res)


def test_the_limits_the_docs_state_are_the_codes() -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "reproducing.md").read_text()
    assert f"{verify.MAX_MEMBERS:,} files" in text and f"{verify.MAX_RATIO}:1" in text
    assert f"{verify.MAX_MEMBER_BYTES >> 30} GiB per file" in text and f"{verify.MAX_TOTAL_BYTES >> 30} GiB" in text


# --- input that is no file uh wrote, its hashes made to agree (issue 59.4, 59.5) ---------------------------------


def weighed(results: Path, out: Path, runs: dict[str, bytes]) -> Path:
    """`runs` ({run ID: final.pt's bytes}, seed SEED) as results with a final state each, bundled with weights."""
    from uniform_herding.runs.results import result_path

    for run_id, final in runs.items():
        path = result_path(results, run_id, SEED)
        path.with_name("final.pt").write_bytes(final)
    res = uh("bundle", "--results-dir", str(results), "-o", str(out), "--with-weights")
    assert res.exit_code == 0, res.output
    return out


def without(name: str) -> Callable[[dict[str, bytes]], None]:
    """A change for rezip: the bundle without file `name`, in its crate too (its entity and every reference)."""

    def drop(files: dict[str, bytes]) -> None:
        del files[name]
        metadata = json.loads(files[bundle.METADATA])
        metadata["@graph"] = [e for e in metadata["@graph"] if e["@id"] != name]
        for entity in metadata["@graph"]:
            for key, value in entity.items():
                if isinstance(value, list):
                    entity[key] = [v for v in value if v != {"@id": name}]
        files[bundle.METADATA] = json.dumps(metadata).encode()

    return drop


@pytest.mark.parametrize("kind", [*MALFORMED_RESULTS, "profile.json a list"])
def test_a_malformed_result_whose_hashes_agree_is_one_line_and_exit_2(kind, finished_result, tmp_path) -> None:
    """Issue 59.4: a bundle whose result.json or profile.json was made malformed, every hash made to agree, ended uh
    check --bundle and uh stacks in a traceback and exit 1; each now names the file and the field, exit 2."""
    finished_result(tmp_path / "r", "B3", SEED)
    finished_result(tmp_path / "r", "a2", SEED)
    finished_result(tmp_path / "other", "B3", 42)
    (tmp_path / "r" / "profile.json").write_text('{"profile": "smoke"}')
    uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "b.zip"))
    if kind in MALFORMED_RESULTS:
        name, (malformed, words) = f"results/B3/seed-{SEED}/result.json", MALFORMED_RESULTS[kind]
    else:
        name, words = "results/profile.json", PROFILE_A_LIST[1]

    def edit(files: dict[str, bytes]) -> None:
        files[name] = (malformed(json.loads(files[name])) if kind in MALFORMED_RESULTS else PROFILE_A_LIST[0]).encode()

    forged = rezip(tmp_path / "b.zip", tmp_path / "forged.zip", edit, rehash=True)
    for args in (["check", "--bundle", str(forged)], ["stacks", str(forged), str(tmp_path / "other")]):
        res = uh(*args)
        assert res.exit_code == 2 and name.removeprefix("results/") in error_line(res), res.output
        assert words.removeprefix("profile.json") in error_line(res), res.output
    error = error_line(uh("check", "--bundle", str(forged)))  # issue 61: the bundle's member, not the temporary folder
    assert f"{forged}: member {name}" in error and "uh-bundle-" not in error, error


@pytest.mark.parametrize(("entity", "key", "value"), [("#run-B3-seed-1993", "result", 5), ("./", "conformsTo", [7])])
def test_a_crate_whose_references_are_not_ids_is_one_line_and_exit_2(
    entity, key, value, finished_result, tmp_path
) -> None:
    """Issue 59.4: a CreateAction whose result is a number, or a root whose conformsTo is, with the manifest made to
    agree, ended uh check --bundle in an AttributeError's traceback; the crate's metadata is read by the schema too."""
    finished_result(tmp_path / "r", "B3", SEED)
    uh("bundle", "--results-dir", str(tmp_path / "r"), "-o", str(tmp_path / "b.zip"))
    at = []

    def edit(files: dict[str, bytes]) -> None:
        metadata = json.loads(files[bundle.METADATA])
        at.append(next(i for i, e in enumerate(metadata["@graph"]) if e["@id"] == entity))
        metadata["@graph"][at[0]][key] = value
        files[bundle.METADATA] = json.dumps(metadata).encode()
        remanifest(files)

    res = uh("check", "--bundle", str(rezip(tmp_path / "b.zip", tmp_path / "forged.zip", edit)))
    words = f"ro-crate-metadata.json: $['@graph'][{at[0]}].{key} is {value!r}, not an @id or a list of them"
    assert res.exit_code == 2 and f"{words}; not a bundle uh bundle wrote" in error_line(res), res.output


def test_recompute_refuses_a_bundle_whose_run_lacks_its_final_state_unless_run_ids_leaves_it_out(
    finished_result, tmp_path
) -> None:
    """Issue 59.5: a run whose final.pt was left out of the bundle, the crate and the manifest made to agree, was
    named on a line and not recomputed, and uh check --bundle --recompute went on to pass it. A run --recompute
    cannot check is an error naming it, exit 2, before anything is recomputed; unless --run-ids leaves it out."""
    finished_result(tmp_path / "r", "B3", SEED)
    finished_result(tmp_path / "r", "a2", SEED)
    weights = weighed(tmp_path / "r", tmp_path / "b.zip", {"B3": b"not a final state", "a2": b"not one either"})
    forged = rezip(weights, tmp_path / "forged.zip", without(f"results/B3/seed-{SEED}/final.pt"), rehash=True)
    data = tmp_path / "data"
    res = uh("check", "--bundle", str(forged), "--recompute", "--data-dir", str(data))
    assert res.exit_code == 2 and "last row recomputed" not in res.output
    assert error_line(res) == (
        f"Error: B3 seed {SEED}: no final state (final.pt) in the bundle, so --recompute cannot check its last row: "
        "bundle the runs with uh bundle --with-weights, or leave their run IDs out with --run-ids"
    )
    res = uh("check", "--bundle", str(forged), "--recompute", "--data-dir", str(data), "--run-ids", "a2")
    assert f"B3 seed {SEED}: not recomputed (--run-ids leaves it out)" in res.output
    assert res.exit_code == 2 and f"a2 seed {SEED} read an archive of md5 None" in error_line(res)  # a2 recomputed


@pytest.mark.trains
def test_a_forged_row_whose_final_state_was_left_out_is_refused_not_passed(zipped, tmp_path) -> None:
    """Issue 59.5's case: B3's last row forged by -20 points, its final.pt left out of the bundle, every hash made to
    agree: uh check --bundle --recompute exited 0, one line saying B3 was not recomputed. Now it is exit 2 naming it;
    --run-ids r2 leaves B3 out and recomputes r2 alone."""
    name = f"results/B3/seed-{SEED}/result.json"

    def forge(files: dict[str, bytes]) -> None:
        result = json.loads(files[name])
        result["R"][-1] = [max(0.0, x - 20) for x in result["R"][-1]]
        result["metrics"] = {n: m.of(result["R"]) for n, m in {**PAPER, **REPORTED}.items()}
        files[name] = json.dumps(result, indent=2).encode()
        without(f"results/B3/seed-{SEED}/final.pt")(files)

    forged = rezip(zipped, tmp_path / "forged.zip", forge, rehash=True)
    args = ["check", "--bundle", str(forged), "--recompute", "--data-dir", str(tmp_path / "data")]
    res = uh(*args, "--json-out", str(tmp_path / "a.json"))
    assert res.exit_code == 2 and f"Error: B3 seed {SEED}: no final state (final.pt) in the bundle" in error_line(res)
    res = uh(*args, "--run-ids", "r2", "--json-out", str(tmp_path / "b.json"))
    assert f"B3 seed {SEED}: not recomputed (--run-ids leaves it out)" in res.output
    assert f"r2 seed {SEED}: last row recomputed on the CPU equals the recorded one" in res.output
    assert "B3+rho=5 seed" in res.output and res.exit_code != 2, res.output


@pytest.mark.trains
@pytest.mark.parametrize("exemplars", ["out of range", "floats"])
def test_recompute_refuses_exemplar_indices_out_of_range_or_floats_in_one_line(exemplars, zipped, tmp_path) -> None:
    """Issue 59.4: a final.pt whose active exemplars of class 0 index past the stream or are floats, sealed and hashed
    again, ended uh check --bundle --recompute in an IndexError's traceback; load_final checks them first."""
    import io

    import torch

    from uniform_herding.runs.durability import seal, unseal

    name = f"results/B3/seed-{SEED}/final.pt"

    def forge(files: dict[str, bytes]) -> None:
        state = torch.load(io.BytesIO(unseal(files[name])), weights_only=True)
        active = state["active"][0]
        state["active"][0] = active + 10**6 if exemplars == "out of range" else active.double()
        buffer = io.BytesIO()
        torch.save(state, buffer)
        files[name] = seal(buffer.getvalue())

    forged = rezip(zipped, tmp_path / "forged.zip", forge, rehash=True)
    res = uh("check", "--bundle", str(forged), "--recompute", "--data-dir", str(tmp_path / "data"))
    problem = "hold positions outside [0, " if exemplars == "out of range" else "are of torch.float64, not integers"
    assert res.exit_code == 2 and f"{name}: the active exemplars of class 0 {problem}" in error_line(res), res.output
