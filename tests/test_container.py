"""The container and the reviewer scripts: Dockerfile, docker-compose.yml, constraints, reproduce.sh.

Most checks need no Docker engine: the image is checked by parsing (dockerfile-parse), hadolint and the
compose-spec schema (check-jsonschema), docker-compose.yml by the real `docker compose config` (v2) and
`docker-compose config` (v1), which need no daemon, and reproduce.sh is run against a fake `uh` that
logs its arguments. A check whose tool is not installed is skipped, with the reason; .ci/container
installs both Compose versions and runs the compose tests again, failing if one skips. The real build
and run is .ci/container (CI); the test here that it fails on a broken Dockerfile installs Docker, starts a
real dockerd and builds, so it is a `system` test (UH_SYSTEM_TESTS=1, set by .ci/run) and is skipped where
it cannot (not root, no git checkout).
"""

from __future__ import annotations

import ast
import contextlib
import importlib.metadata
import json
import os
import pty
import re
import shutil
import signal
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from uniform_herding.catalogue import BEYOND_PAPER, PAPER_RUNS, PROFILES, RUN_GROUPS, RUNS

ROOT = Path(__file__).resolve().parents[1]
DOCKERFILE = ROOT / "Dockerfile"
COMPOSE = ROOT / "docker-compose.yml"
REPRODUCE = ROOT / "reproduce.sh"
CI_CONTAINER = ROOT / ".ci" / "container"

BASE_IMAGE = "nvidia/cuda:12.8.1-base-ubuntu24.04"
TORCH, TORCHVISION, LIGHTNING = "2.11.0", "0.26.0", "2.6.5"
CHECK_TOOLS = "pip install -c constraints.txt -e '.[dev]'"
CUDA_RUNTIME = re.compile(r"^(nvidia-|cuda-|triton$)")


def tool(name: str) -> str:
    """Path of a check tool: next to this interpreter (the venv's bin) or on PATH; else skip."""
    path = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ["PATH"]]))
    if path is None:
        pytest.skip(f"{name} not installed ({CHECK_TOOLS})")
    return path


def pins(path: Path) -> dict[str, str]:
    """name -> version of every `name==version` line of a constraints file."""
    out = {}
    for line in path.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", f"{path.name}: {line!r} is not an exact pin"
            out[canonicalize_name(req.name)] = spec.version
    return out


@pytest.fixture(scope="module")
def dockerfile():
    dockerfile_parse = pytest.importorskip("dockerfile_parse", reason=f"dockerfile-parse ({CHECK_TOOLS})")
    return dockerfile_parse.DockerfileParser(path=str(DOCKERFILE))


def instructions(dockerfile, name: str) -> list[str]:
    return [i["value"] for i in dockerfile.structure if i["instruction"] == name]


@pytest.fixture(scope="module")
def compose() -> dict:
    return yaml.safe_load(COMPOSE.read_text())


# --- Dockerfile ---------------------------------------------------------------------------------------


def test_base_image_is_the_exact_cuda_12_8_ubuntu_24_04_tag(dockerfile):
    # One stage; the base is a build argument (CI builds on a local base) whose default is the exact tag.
    assert instructions(dockerfile, "FROM") == ["${BASE_IMAGE}"]
    assert instructions(dockerfile, "ARG")[0] == f"BASE_IMAGE={BASE_IMAGE}"
    assert re.fullmatch(r"nvidia/cuda:12\.8\.\d+-base-ubuntu24\.04", dockerfile.baseimage)
    assert dockerfile.labels["org.opencontainers.image.base.name"] == BASE_IMAGE  # the ARG, substituted


def test_torch_build_arguments_default_to_the_papers_cu128_builds(dockerfile):
    assert {k: v for k, v in dockerfile.args.items() if k.startswith("TORCH")} == {
        "TORCH_VERSION": f"{TORCH}+cu128",
        "TORCHVISION_VERSION": f"{TORCHVISION}+cu128",
        "TORCH_INDEX_URL": "https://download.pytorch.org/whl/cu128",
        "TORCH_CUDA": "12.8",
    }
    run = " ".join(instructions(dockerfile, "RUN"))
    assert re.findall(r"\btorch==(\S+)", run) == ['$TORCH_VERSION"']
    assert re.findall(r"\btorchvision==(\S+)", run) == ['$TORCHVISION_VERSION"']
    assert '--extra-index-url "$TORCH_INDEX_URL"' in run
    # The build fails unless pip kept the requested builds and torch reports the requested CUDA.
    for check in (
        "version('torch') == os.environ['TORCH_VERSION']",
        "version('torchvision') == os.environ['TORCHVISION_VERSION']",
        "torch.version.cuda == os.environ['TORCH_CUDA']",
    ):
        assert check in run


def test_ci_build_overrides_only_the_base_and_torchs_source():
    """Issue 15: nothing but the base and torch's source may differ between a reviewer's build and CI's."""
    script = CI_CONTAINER.read_text()
    overridden = set(re.findall(r"--build-arg ([A-Z_]+)=", script))
    assert overridden == {
        "BASE_IMAGE",
        "TORCH_VERSION",
        "TORCHVISION_VERSION",
        "TORCH_INDEX_URL",
        "TORCH_CUDA",
        "GIT_REVISION",
    }
    build = script[script.index("docker build") :]
    build = build[: build.index(" . ")]  # up to the context: the repository, with its own Dockerfile
    assert "--file" not in build and " -f " not in build


def test_torch_pins_agree_between_dockerfile_constraints_and_pyproject(dockerfile):

    constraints = pins(ROOT / "constraints.txt")
    assert constraints["torch"] == TORCH
    assert constraints["torchvision"] == TORCHVISION
    # A pin without a local label accepts the image's cu128 builds (PEP 440), so pip keeps them.
    for name, version in (("torch", TORCH), ("torchvision", TORCHVISION)):
        assert Version(f"{version}+cu128") in Requirement(f"{name}=={constraints[name]}").specifier

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    deps = {canonicalize_name(r.name): str(r.specifier) for r in map(Requirement, project["dependencies"])}
    assert deps["torch"] == f"=={TORCH}"
    assert deps["torchvision"] == f"=={TORCHVISION}"
    assert deps["lightning"] == f"=={LIGHTNING}"


def test_lightning_and_every_dependency_pinned_by_constraints():
    constraints = pins(ROOT / "constraints.txt")
    assert constraints["lightning"] == LIGHTNING
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"]["dev"]
    for dep in wanted:
        assert canonicalize_name(Requirement(dep).name) in constraints, f"{dep} not in constraints.txt"


def test_every_package_the_code_imports_is_a_declared_dependency():
    # The image installs pyproject.toml's dependencies only; an undeclared import works in the dev venv
    # and fails in the image.
    declared = {
        canonicalize_name(Requirement(d).name)
        for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    }
    distributions = importlib.metadata.packages_distributions()
    imported = set()
    for path in (ROOT / "src").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"uniform_herding"}
    missing = {
        module: distributions.get(module, [module])
        for module in sorted(third_party)
        if not {canonicalize_name(d) for d in distributions.get(module, [module])} & declared
    }
    assert not missing, f"imported but not in pyproject.toml [project.dependencies]: {missing}"


def test_constraints_leave_the_cuda_runtime_to_torch():
    # Pinning PyPI torch's CUDA 13 wheels in constraints.txt would make pip swap the image's cu128 torch.
    shared = pins(ROOT / "constraints.txt")
    assert not [name for name in shared if CUDA_RUNTIME.match(name)]
    cu130 = pins(ROOT / "constraints-cu130.txt")
    assert cu130 and all(CUDA_RUNTIME.match(name) for name in cu130)
    assert not set(shared) & set(cu130)


def test_this_environment_has_the_pinned_torch_and_lightning():
    import lightning
    import torch
    import torchvision

    assert Version(torch.__version__).base_version == TORCH
    assert Version(torchvision.__version__).base_version == TORCHVISION
    assert lightning.__version__ == LIGHTNING


def test_runs_as_a_numeric_non_root_user(dockerfile):
    user = instructions(dockerfile, "USER")[-1]
    assert re.fullmatch(r"\d+(:\d+)?", user), f"USER {user} is not numeric"
    assert int(user.split(":")[0]) != 0
    assert all(int(part) != 0 for part in user.split(":"))


def test_entrypoint_is_reproduce_sh_from_the_repo(dockerfile):
    (entrypoint,) = instructions(dockerfile, "ENTRYPOINT")
    argv = json.loads(entrypoint)  # exec form
    assert argv == ["/app/reproduce.sh"]
    assert instructions(dockerfile, "WORKDIR")[-1] == "/app"
    in_repo = ROOT / Path(argv[0]).relative_to("/app")
    assert in_repo.is_file()
    assert os.access(in_repo, os.X_OK), f"{in_repo.name} is not executable (chmod +x)"
    assert any(re.search(r"\breproduce\.sh\s+\./?$", c) for c in instructions(dockerfile, "COPY"))


def dockerignored() -> set[str]:
    return {
        line.strip().rstrip("/")
        for line in (ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }


def test_copy_sources_exist_and_are_not_dockerignored(dockerfile):
    ignored = dockerignored()
    for copy in instructions(dockerfile, "COPY"):
        *sources, _dest = [arg for arg in copy.split() if not arg.startswith("--")]
        for source in sources:
            assert (ROOT / source).exists(), f"COPY {source}: not in the repo"
            assert Path(source).parts[0] not in ignored, f"COPY {source}: excluded by .dockerignore"


def test_what_runs_leave_in_the_checkout_stays_out_of_the_build_context():
    """Every top-level output that .gitignore names (results, data, gpu-acceptance/, .env, ...) is
    .dockerignored too: else a build sends GBs of results to the daemon, and a host's .env into it."""
    outputs = {
        line.strip().strip("/")
        for line in (ROOT / ".gitignore").read_text().splitlines()
        if line.startswith("/") and "/" not in line.strip().strip("/")
    }
    assert {"results", "data", "gpu-acceptance", ".env"} <= outputs
    assert outputs - dockerignored() == set()


def test_nothing_but_the_base_argument_needs_the_cuda_base(dockerfile):
    """torch's cu128 wheels bring CUDA, and the NVIDIA runtime the driver: no step may use what only the CUDA
    base image has (its CUDA directory, its variables), so that BASE_IMAGE=ubuntu:24.04 builds the same image.
    CI's build on a bare Debian base is the real proof (docs/reproducing.md)."""
    cuda_base_only = re.compile(
        r"/usr/local/cuda|\bCUDA_VERSION\b|\bNV_[A-Z]|LD_LIBRARY_PATH|cuda-compat|"
        r"NVIDIA_REQUIRE|NVIDIA_VISIBLE_DEVICES"
    )
    steps = [f"{i['instruction']} {i['value']}" for i in dockerfile.structure if i["instruction"] != "COMMENT"]
    assert [s for s in steps if cuda_base_only.search(s)] == []
    assert dockerfile.envs["NVIDIA_DRIVER_CAPABILITIES"] == "compute,utility"  # set by the CUDA base, so here too


def test_dependency_layers_come_before_the_code(dockerfile):
    steps = [(i["instruction"], i["value"]) for i in dockerfile.structure]
    steps = [(kind, value) for kind, value in steps if kind in ("COPY", "RUN")]
    first_code = next(n for n, (kind, value) in enumerate(steps) if kind == "COPY" and value[:4] == "src/")
    before, after = steps[:first_code], steps[first_code:]
    assert any(kind == "RUN" and "-c constraints.txt" in value and "-r " in value for kind, value in before)
    assert any(kind == "RUN" and "torch==" in value for kind, value in before)
    project_installs = [value for kind, value in after if kind == "RUN" and "pip install" in value]
    assert project_installs and all("--no-deps" in value for value in project_installs)


def test_labels_env_and_revision(dockerfile):
    assert "GIT_REVISION=unknown" in instructions(dockerfile, "ARG")
    labels = " ".join(instructions(dockerfile, "LABEL"))
    assert "org.opencontainers.image.revision=$GIT_REVISION" in labels
    for key in ("org.opencontainers.image.source", "org.opencontainers.image.title"):
        assert key in dockerfile.labels
    env = dockerfile.envs
    assert env["UH_DATA_DIR"] == "/data"
    assert env["UH_RESULTS_DIR"] == "/results"
    assert env["UH_IN_CONTAINER"] == "1"


def test_hadolint_passes():
    result = subprocess.run([tool("hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.system
def test_ci_container_fails_on_a_broken_dockerfile(tmp_path):
    """.ci/container on a copy of this checkout whose Dockerfile COPYs a missing file: a real dockerd and
    build (the cached layers before the broken step make it quick on a warm cache), which must fail."""
    if os.geteuid() != 0:
        pytest.skip(".ci/container needs root (it installs docker.io and starts dockerd)")
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "-co", "--exclude-standard"], capture_output=True
    )
    if listed.returncode != 0:
        pytest.skip(f"{ROOT} is not a git checkout")
    copy = tmp_path / "repo"
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    dockerfile = copy / "Dockerfile"
    text = dockerfile.read_text()
    assert "COPY README.md ./\n" in text
    dockerfile.write_text(text.replace("COPY README.md ./\n", "COPY README.md ./\nCOPY no-such-file.txt ./\n"))
    git = ["git", "-C", str(copy), "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
    subprocess.run([*git, "init", "-q"], check=True)
    subprocess.run([*git, "add", "-A"], check=True)
    subprocess.run([*git, "commit", "-qm", "broken Dockerfile"], check=True)

    result = subprocess.run(["bash", str(copy / ".ci" / "container")], capture_output=True, text=True, timeout=3600)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-3000:]
    assert "FAILED during building the image" in output, output[-3000:]
    assert "no-such-file.txt" in output, output[-3000:]
    assert "PASSED" not in output
    assert not (copy / "results-smoke").exists()  # it stopped at the build: nothing ran


# --- docker-compose.yml -------------------------------------------------------------------------------


def test_compose_matches_the_compose_spec_schema():
    cmd = [tool("check-jsonschema"), "--builtin-schema", "vendor.compose-spec", str(COMPOSE)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


ENV_FILE_COMMAND = "printf 'UID=%s\\nGID=%s\\n' `id -u` `id -g` > .env"  # as the error and the docs name it


def test_compose_repro_service_has_gpu_init_shm_and_mounts(compose):
    repro = compose["services"]["repro"]
    (device,) = repro["deploy"]["resources"]["reservations"]["devices"]
    assert device["driver"] == "nvidia"
    assert device["count"] in (1, "all")
    assert device["capabilities"] == ["gpu"]
    assert repro["init"] is True
    assert repro["shm_size"]
    assert {"./data:/data", "./results:/results"} <= set(repro["volumes"])
    assert repro["build"]["context"] == "."
    assert {"GIT_REVISION", "SOURCE_URL"} <= set(repro["build"]["args"])


def test_compose_user_has_no_default_and_names_the_command_that_sets_it(compose):
    """An unset UID or GID stops compose (`${VAR:?message}`) instead of running as 1000."""
    user = compose["services"]["repro"]["user"]
    message = f"UID and GID are not set: run {ENV_FILE_COMMAND} (docs/reproducing.md)"
    assert user == f"${{UID:?{message}}}:${{GID:?{message}}}"


def test_compose_cpu_service_is_the_gpu_service_without_the_gpu(compose):
    """check, report and --help without a GPU: the same image, user and volumes, no reservation, and none where
    nvidia is Docker's default runtime (the CUDA base image sets NVIDIA_VISIBLE_DEVICES=all). No UH_DEVICE:
    a paper run there stops at once instead of training on the CPU for days."""
    services = compose["services"]
    repro, cpu = services["repro"], services["cpu"]
    assert {k: v for k, v in repro.items() if k != "deploy"} == {k: v for k, v in cpu.items() if k != "environment"}
    assert cpu["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_compose_smoke_service_is_cpu_only(compose):
    """No GPU reservation, and none where nvidia is Docker's default runtime: its expectations are a CPU's."""
    smoke, cpu = compose["services"]["smoke"], compose["services"]["cpu"]
    assert "deploy" not in smoke
    assert smoke["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void", "UH_DEVICE": "cpu"}
    assert smoke["command"] == ["smoke"]
    assert {k: v for k, v in smoke.items() if k not in ("command", "environment")} == {
        k: v for k, v in cpu.items() if k not in ("command", "environment")
    }


def compose_cli(name: str) -> list[str]:
    """The command of a Compose implementation installed here: Compose v2 as the docker CLI plugin
    (`docker compose`, what docs/reproducing.md uses) or v1's `docker-compose`; else skip."""
    argv = ["docker", "compose"] if name == "v2" else ["docker-compose"]
    if shutil.which(argv[0]) is None:
        pytest.skip(f"{argv[0]} not installed")
    version = subprocess.run([*argv, "version"], capture_output=True, text=True)
    if version.returncode != 0 or (name == "v2") != ("v2." in version.stdout):
        pytest.skip(f"no Compose {name} here (`{' '.join(argv)} version`: {(version.stdout + version.stderr).strip()})")
    return argv


@pytest.mark.slow
@pytest.mark.parametrize("implementation", ["v2", "v1"])
def test_compose_config_without_uid_fails_naming_the_command_whose_env_file_then_works(implementation, tmp_path):
    """The real `docker compose config` (no daemon needed) in a copy of the project: with UID and GID unset
    (bash does not export UID; sudo drops it) it fails at once, naming a command; that command, run by
    bash, writes .env, after which the same config resolves to this user's UID:GID."""
    argv = compose_cli(implementation)
    shutil.copy(COMPOSE, tmp_path / COMPOSE.name)
    env = {k: v for k, v in os.environ.items() if k not in ("UID", "GID", "SOURCE_URL", "GIT_REVISION")}

    def config() -> subprocess.CompletedProcess:
        return subprocess.run([*argv, "config"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)

    failed = config()
    assert failed.returncode != 0, failed.stdout
    assert "UID and GID are not set: run " in failed.stderr, failed.stderr
    named = re.search(r"UID and GID are not set: run (.*?) \(docs/reproducing\.md\)", failed.stderr).group(1)
    assert named == ENV_FILE_COMMAND
    subprocess.run(["bash", "-c", named], cwd=tmp_path, env=env, check=True)

    resolved = config()
    assert resolved.returncode == 0, resolved.stderr
    services = yaml.load(resolved.stdout, Loader=yaml.BaseLoader)["services"]  # all strings: 1000:50 is no number
    for name in ("repro", "cpu", "smoke"):
        assert services[name]["user"] == f"{os.getuid()}:{os.getgid()}"
        assert services[name]["build"]["args"] == {"GIT_REVISION": "unknown", "SOURCE_URL": "unknown"}
    assert services["repro"]["deploy"]["resources"]["reservations"]["devices"][0]["driver"] == "nvidia"
    assert "deploy" not in services["cpu"] and services["cpu"]["environment"] == {"NVIDIA_VISIBLE_DEVICES": "void"}


# --- reproduce.sh -------------------------------------------------------------------------------------


def test_shellcheck_passes():
    result = subprocess.run([tool("shellcheck"), str(REPRODUCE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    ("name", "ids"),
    [("RUN_IDS", PAPER_RUNS), ("BEYOND_PAPER_IDS", BEYOND_PAPER), ("REFRESH_IDS", RUN_GROUPS["refresh"])],
)
def test_reproduce_sh_knows_the_run_ids_of_the_config(name, ids):
    match = re.search(rf"^readonly {name}=\(([^)]*)\)", REPRODUCE.read_text(), re.MULTILINE)
    assert match and match.group(1).split() == list(ids)
    assert RUN_GROUPS["all"] == PAPER_RUNS and set(PAPER_RUNS) | set(BEYOND_PAPER) == set(RUNS)


FAKE_UH = """\
#!{python}
# A stand-in for `uh`: logs its argv as one JSON line; fails for `run $FAKE_UH_FAIL` and for the
# command named in $FAKE_UH_FAIL_COMMAND, with exit status $FAKE_UH_STATUS (default 3). With
# $FAKE_UH_CHECKS (a JSON list of [exit code, next_step]), its n-th `check` writes the n-th verdict to
# <results-dir>/check_report.json as `uh check` does, with a procedure of the looks $FAKE_UH_LOOKS
# (default the paper's four), and exits with its code (99 past the list's end). With $FAKE_UH_SLEEP (a
# file), `run` and `doctor` write their pid there and sleep: `run` ends on SIGTERM or SIGINT as uh run does,
# after adding the signal's name; `doctor` keeps Python's own handlers, as uh doctor does. The command
# named in $FAKE_UH_REAL runs the real uh.
import json, os, signal, sys, time
args = sys.argv[1:]
with open(os.environ["FAKE_UH_LOG"], "a+") as log:
    log.seek(0)
    checks_before = sum(json.loads(line)[:1] == ["check"] for line in log)
    log.write(json.dumps(args) + "\\n")
if args[:1] == [os.environ.get("FAKE_UH_REAL")]:
    os.execv(sys.executable, [sys.executable, "-m", "uniform_herding", *args])
scripted = os.environ.get("FAKE_UH_CHECKS")
if args[:1] == ["check"] and scripted:
    verdicts = json.loads(scripted)
    if checks_before >= len(verdicts):
        sys.exit(99)
    code, step = verdicts[checks_before]
    kind = {{0: "RESULTS_REPLICATED", 1: "NOT_REPLICATED", 3: "INCOMPLETE", 4: "UNDECIDED", 6: "SET_MATCHED"}}[code]
    word = {{"SET_MATCHED": "EXPECTED SET MATCHED"}}.get(kind, kind.replace("_", " "))
    looks = json.loads(os.environ.get("FAKE_UH_LOOKS", "[3, 5, 8, 12, 20]"))
    procedure = {{"seeds": list(range(looks[-1])), "looks": looks, "alpha": [0.05 / len(looks)] * len(looks)}}
    verdict = {{"line": f"{{word}} (look {{checks_before + 1}})", "kind": kind, "causes": []}}
    report = {{"verdict": verdict, "next_step": step, "exit_code": code, "procedure": procedure}}
    with open(os.path.join(args[args.index("--results-dir") + 1], "check_report.json"), "w") as out:
        json.dump(report, out)
    sys.exit(code)
fail_run, fail_command = os.environ.get("FAKE_UH_FAIL"), os.environ.get("FAKE_UH_FAIL_COMMAND")
if args[:2] == ["run", fail_run] or args[:1] == [fail_command]:
    sys.exit(int(os.environ.get("FAKE_UH_STATUS", "3")))
if args[:1] in (["run"], ["doctor"]) and os.environ.get("FAKE_UH_SLEEP"):
    def stop(signum, frame):
        with open(os.environ["FAKE_UH_SLEEP"], "a") as marker:
            marker.write(" " + signal.Signals(signum).name)
        sys.exit(128 + signum)
    if args[0] == "run":
        signal.signal(signal.SIGTERM, stop)
        signal.signal(signal.SIGINT, stop)
    with open(os.environ["FAKE_UH_SLEEP"], "w") as marker:
        marker.write(str(os.getpid()))
    time.sleep(60)
"""


def checks(*verdicts: tuple[int, dict]) -> str:
    """FAKE_UH_CHECKS: what the fake's successive `check` calls decide, each (exit code, next_step)."""
    return json.dumps(list(verdicts))


def step(run_ids: str, seeds: str) -> dict:
    return {"run_ids": run_ids.split(), "seeds": [int(s) for s in seeds.split()]}


def step_run(run_ids: str, seeds: str, *more: str) -> list[str]:
    """The `uh run` argv of a next_step."""
    return ["run", *run_ids.split(), *(a for s in seeds.split() for a in ("--seed", s)), *more]


def fake_uh(tmp_path: Path, in_container: bool = False, **env: str) -> dict[str, str]:
    """The environment in which reproduce.sh calls a fake uh (FAKE_UH) that logs to tmp_path/uh.log, emptied."""
    fake = tmp_path / "uh"
    fake.write_text(FAKE_UH.format(python=sys.executable))
    fake.chmod(0o755)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("UH", "FAKE_UH"))}
    if in_container:  # as in the image: no UH, `uh` found on PATH
        environ.update(UH_IN_CONTAINER="1", PATH=f"{tmp_path}{os.pathsep}{environ['PATH']}")
    else:
        environ["UH"] = str(fake)
    (tmp_path / "uh.log").write_text("")
    return {**environ, "FAKE_UH_LOG": str(tmp_path / "uh.log"), **env}


def last_said(stderr: str) -> str:
    """reproduce.sh's last message, its lines wrapped to the width (continued by 4 spaces: log's) joined again."""
    lines = stderr.strip().splitlines()
    start = max(i for i, line in enumerate(lines) if not line.startswith("    "))
    return " ".join(line.strip() for line in lines[start:])


@pytest.fixture
def reproduce(tmp_path):
    """Run reproduce.sh with a fake uh, standard input not a terminal; returns (result, the list of uh argv's)."""

    def run(*args: str, in_container: bool = False, cwd: Path | None = None, **env: str):
        environ = fake_uh(tmp_path, in_container, **env)
        result = subprocess.run(
            [str(REPRODUCE), *args],
            capture_output=True,
            text=True,
            env=environ,
            timeout=60,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
        )
        return result, [json.loads(line) for line in (tmp_path / "uh.log").read_text().splitlines()]

    return run


def test_all_runs_every_id_goes_on_after_a_failure_and_reports_it(reproduce):
    result, calls = reproduce("all", "--yes", FAKE_UH_FAIL="a2")
    assert result.returncode != 0
    assert calls == [["price"]] + [["run", run_id] for run_id in PAPER_RUNS] + [["check"], ["report"]]
    last = last_said(result.stderr)
    assert "FAILED" in last and "a2" in last and "B3" not in last


@pytest.mark.slow
def test_all_prints_its_price_before_the_first_run_and_needs_yes_without_a_terminal(reproduce, tmp_path):
    """Issue 46.3: `all` prints uh price (the real one: here the paper's runs on a CPU, in runs alone, the whole
    procedure and its most) before any run; where standard input is not a terminal it refuses without --yes in one
    line, and goes on with it."""
    results = str(tmp_path / "r")
    result, calls = reproduce("all", "--device", "cpu", "--results-dir", results, FAKE_UH_REAL="price")
    assert result.returncode == 2
    assert calls == [["price", "--results-dir", results, "--device", "cpu"]]
    assert "the paper's 12 run IDs on seeds 1993 2023 42: 36 runs\n" in result.stdout
    assert "mean " in result.stdout and "at most, every look run" in result.stdout
    assert last_said(result.stderr) == (
        "reproduce.sh: standard input is not a terminal, so no one can answer: pass --yes to start these runs"
    )
    result, calls = reproduce("all", "--device", "cpu", "--results-dir", results, "--yes", FAKE_UH_REAL="price")
    assert result.returncode == 0, result.stderr
    assert ": 36 runs\n" in result.stdout
    assert calls[:2] == [
        ["price", "--results-dir", results, "--device", "cpu"],
        ["run", "B0", "--results-dir", results, "--device", "cpu"],
    ]


@pytest.mark.slow
def test_all_on_a_cpu_prints_no_line_wider_than_columns_and_says_it_has_no_price_in_hours(reproduce, tmp_path):
    """Issue 61.5 and 6: `COLUMNS=120 ./reproduce.sh all --device cpu` without a terminal prices (the real uh price),
    then refuses; no line of uh price's or of reproduce.sh's own (here its `+ uh price` line, made long by the results
    dir) is wider than 120, and the CPU, which the paper's T4 hours say nothing of, gets a line saying it has no price
    in hours."""
    results = tmp_path / ("r" * (100 - len(str(tmp_path)) - 1))  # a path of 100 characters: one word, never cut
    result, calls = reproduce(
        "all", "--device", "cpu", "--results-dir", str(results), FAKE_UH_REAL="price", COLUMNS="120"
    )
    assert result.returncode == 2 and [c[0] for c in calls] == ["price"], result.stderr
    assert max(map(len, result.stdout.splitlines() + result.stderr.splitlines())) <= 120
    said = " ".join(result.stderr.split())
    assert said.startswith(f"reproduce.sh: + uh price --results-dir {results} --device cpu reproduce.sh: standard")
    assert result.stdout.splitlines()[-1].startswith("no price in hours for this CPU until `uh doctor --profile paper")


@pytest.mark.slow
def test_all_on_the_smoke_profile_prices_its_small_procedure_before_the_first_run(tmp_path):
    """Issue 46.3 on the smoke profile, whose set here registers a small procedure (looks at 3 and 5 seeds): the
    real uh price prints the paper's 36 runs and the most its looks can ask (C1-C5's ten run IDs on 5 seeds, B0's
    and a3's on 3: 56 runs) before any run; without a terminal and without --yes, nothing runs; with --yes the runs
    start. reproduce.sh is copied beside that set, as a checkout holding it would be."""
    repo = tmp_path / "repo"
    shutil.copytree(ROOT / "expected_results", repo / "expected_results")
    shutil.copy2(REPRODUCE, repo / "reproduce.sh")
    toml = repo / "expected_results" / "smoke" / "tolerances.toml"
    toml.write_text(
        toml.read_text() + "\n[procedure]\nseeds = [1993, 2023, 42, 1, 2]\nlooks = [3, 5]\nalpha = [0.01, 0.04]\n"
    )
    results = str(tmp_path / "r")

    def reproduce(*args: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
        environ = fake_uh(tmp_path, FAKE_UH_REAL="price")
        result = subprocess.run(
            [str(repo / "reproduce.sh"), "all", "--profile", "smoke", "--results-dir", results, *args],
            capture_output=True,
            text=True,
            env=environ,
            timeout=120,
            stdin=subprocess.DEVNULL,
        )
        return result, [json.loads(line) for line in (tmp_path / "uh.log").read_text().splitlines()]

    result, calls = reproduce()
    assert result.returncode == 2 and [c[0] for c in calls] == ["price"], result.stderr
    assert "the price of ./reproduce.sh all (profile smoke)" in result.stdout
    assert "the paper's 12 run IDs on seeds 1993 2023 42: 36 runs" in result.stdout
    assert "at most, every look run (claims C1-C5's run IDs on 5 seeds, the others' on 3): 56 runs" in result.stdout
    assert "pass --yes to start these runs" in last_said(result.stderr)
    result, calls = reproduce("--yes")
    assert [c[:2] for c in calls[:2]] == [["price", "--profile"], ["run", "B0"]], result.stderr


@pytest.mark.parametrize(("answer", "code"), [("y\n", 0), ("\n", 1)])
def test_all_on_a_terminal_asks_whether_to_go_on(tmp_path, answer, code):
    """On a terminal `all` asks after its price: y goes on, anything else (Enter: the default, N) runs nothing."""
    controller, terminal = pty.openpty()
    results = str(tmp_path / "r")
    script = subprocess.Popen(
        [str(REPRODUCE), "all", "--results-dir", results],
        env=fake_uh(tmp_path),
        stdin=terminal,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    os.close(terminal)
    os.write(controller, answer.encode())
    _, stderr = script.communicate(timeout=60)
    os.close(controller)
    calls = [json.loads(line) for line in (tmp_path / "uh.log").read_text().splitlines()]
    assert script.returncode == code, stderr
    assert "Start these runs? [y/N]" in stderr
    assert [c[:2] for c in calls if c[0] == "run"] == ([["run", r] for r in PAPER_RUNS] if code == 0 else [])


def test_all_stops_at_once_where_uh_price_refuses(reproduce):
    """Issue 46.3: without a usable GPU each of the twelve `uh run` refused, then check and report failed; uh
    price refuses once (test_doctor.py), and `all` stops there, its status."""
    result, calls = reproduce("all", "--yes", FAKE_UH_FAIL_COMMAND="price", FAKE_UH_STATUS="1")
    assert result.returncode == 1 and calls == [["price"]]


@pytest.mark.slow
def test_all_without_a_usable_gpu_is_refused_once_before_anything(tmp_path):
    """Issue 46.3, with the real uh on a host without a usable GPU: one refusal that says what to do, no run."""
    from uniform_herding.runs.devices import gpu_problem

    if gpu_problem() is None:
        pytest.skip("a GPU is usable here")
    env = {k: v for k, v in os.environ.items() if not k.startswith("UH")}  # no UH_DEVICE=cpu (conftest's)
    env["UH"] = str(Path(sys.executable).parent / "uh")
    result = subprocess.run(
        [str(REPRODUCE), "all", "--yes", "--results-dir", str(tmp_path / "r")],
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 1 and result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("reproduce.sh: + uh price"), result.stderr
    assert lines[1].startswith("Error: profile 'paper' trains at the paper's size")
    assert lines[1].endswith("./reproduce.sh smoke")


@pytest.mark.parametrize("status", ["130", "143"])
def test_all_stops_when_a_run_is_interrupted(reproduce, status):
    """Ctrl-C or `docker stop` (SIGINT/SIGTERM: uh exits 128+signal) ends `all`, not just one run."""
    result, calls = reproduce("all", "--yes", FAKE_UH_FAIL="B2", FAKE_UH_STATUS=status)
    assert result.returncode == int(status)
    assert calls == [["price"], ["run", "B0"], ["run", "B1"], ["run", "B2"]]
    assert "interrupted" in result.stderr


def test_all_succeeds_when_every_run_succeeds(reproduce):
    result, calls = reproduce("all", "--seed", "7", "--yes")
    assert result.returncode == 0, result.stderr
    assert calls == (
        [["price", "--seed", "7"]] + [["run", run_id, "--seed", "7"] for run_id in PAPER_RUNS] + [["check"], ["report"]]
    )


def test_refresh_runs_the_refresh_isolation_study_then_checks_and_reports(reproduce):
    result, calls = reproduce("refresh", "--seed", "7", FAKE_UH_FAIL="r2")
    assert result.returncode == 1
    assert calls == [["run", r, "--seed", "7"] for r in ("B1", "B3", "r1", "r2", "r3")] + [["check"], ["report"]]
    assert "FAILED run IDs: r2" in result.stderr
    result, calls = reproduce("r3")
    assert result.returncode == 0 and calls == [["run", "r3"]]


def test_next_runs_next_step_and_checks_again_until_decided(reproduce, tmp_path):
    """UNDECIDED (exit 4): `next` runs the run IDs and seeds of check_report.json's next_step, checks again, and
    stops at the first verdict that is not UNDECIDED; then reports. Seeds come from the procedure only."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    result, calls = reproduce(
        "next", "--results-dir", results, FAKE_UH_CHECKS=checks((4, step("B1 B3", "1 2 3")), (0, {}))
    )
    assert result.returncode == 0, result.stderr
    assert calls == [
        ["check", "--results-dir", results],
        ["run", "B1", "B3", "--seed", "1", "--seed", "2", "--seed", "3", "--results-dir", results],
        ["check", "--results-dir", results],
        ["report", "--results-dir", results],
    ]
    result, calls = reproduce("next", "--seed", "5")
    assert result.returncode == 2 and calls == [] and "next takes its seeds from the procedure" in result.stderr


def test_all_follows_the_procedure_look_by_look_until_the_verdict_is_decided(reproduce, tmp_path):
    """`all` on an empty results dir: the 36 paper runs, then check; while check names a next_step, its runs on
    its seeds and check again (two looks here); then report, exiting with the decided verdict's code."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    verdicts = checks((4, step("B1 B2 B3 a4", "1 2 3")), (4, step("B3 a4", "4 5 6")), (1, {}))
    result, calls = reproduce("all", "--yes", "--results-dir", results, FAKE_UH_CHECKS=verdicts)
    assert result.returncode == 1, result.stderr
    assert calls == [
        ["price", "--results-dir", results],
        *(["run", run_id, "--results-dir", results] for run_id in PAPER_RUNS),
        ["check", "--results-dir", results],
        step_run("B1 B2 B3 a4", "1 2 3", "--results-dir", results),
        ["check", "--results-dir", results],
        step_run("B3 a4", "4 5 6", "--results-dir", results),
        ["check", "--results-dir", results],
        ["report", "--results-dir", results],
    ]
    assert last_said(result.stderr) == "reproduce.sh: verdict NOT REPLICATED (look 3) (exit 1)"


def test_all_paper_runs_only_stops_after_the_36_runs(reproduce, tmp_path):
    """--paper-runs-only: the 36 runs, check and report once, whatever check's next_step; so does `all` with seeds
    of the user's own (the procedure's seeds are registered). Both say that `next` goes on."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    for options in (["--paper-runs-only"], ["--seed", "7"]):
        result, calls = reproduce(
            "all", *options, "--yes", "--results-dir", results, FAKE_UH_CHECKS=checks((4, step("B1 B3", "1 2 3")))
        )
        assert result.returncode == 4, result.stderr
        seeds = options[1:] and ["--seed", "7"]
        assert calls == [
            ["price", *seeds, "--results-dir", results],
            *(["run", run_id, *seeds, "--results-dir", results] for run_id in PAPER_RUNS),
            ["check", "--results-dir", results],
            ["report", "--results-dir", results],
        ]
        assert "./reproduce.sh next" in result.stderr


def test_next_follows_an_incomplete_verdicts_next_step_too(reproduce, tmp_path):
    """INCOMPLETE (exit 3) with a next_step (a re-run of B1 B2 B3 only: the other run IDs on the paper's seeds):
    run it and check again, as for UNDECIDED."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    others = "B0 a1 a2 a3 a4 s1 s2 s3 s4"
    result, calls = reproduce(
        "next", "--results-dir", results, FAKE_UH_CHECKS=checks((3, step(others, "1993 2023 42")), (6, {}))
    )
    assert result.returncode == 6, result.stderr
    assert calls == [
        ["check", "--results-dir", results],
        step_run(others, "1993 2023 42", "--results-dir", results),
        ["check", "--results-dir", results],
        ["report", "--results-dir", results],
    ]
    assert last_said(result.stderr) == "reproduce.sh: verdict EXPECTED SET MATCHED (look 2) (exit 6)"


def test_next_says_when_report_failed_after_a_passing_check(reproduce, tmp_path):
    """Issue 45.6: check passes, uh report fails: the last line names both, never "verdict RESULTS REPLICATED ...
    (exit 1)" as if the verdict had exit 1."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    result, _ = reproduce(
        "next",
        "--results-dir",
        results,
        FAKE_UH_CHECKS=checks((0, {})),
        FAKE_UH_FAIL_COMMAND="report",
        FAKE_UH_STATUS="1",
    )
    assert result.returncode == 1, result.stderr
    assert last_said(result.stderr) == (
        "reproduce.sh: verdict RESULTS REPLICATED (look 1) (uh check exit 0); uh report failed (exit 1)"
    )


def test_next_stops_when_next_step_asks_again_for_the_runs_just_run(reproduce, tmp_path):
    """A next_step that names exactly the runs just run (they did not change the verdict) stops the loop, exit 1,
    naming them, instead of running them for ever."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    again = (4, step("B1 B3", "1 2 3"))
    result, calls = reproduce("next", "--results-dir", results, FAKE_UH_CHECKS=checks(again, again, again, (0, {})))
    assert result.returncode == 1, result.stderr
    assert calls == [
        ["check", "--results-dir", results],
        step_run("B1 B3", "1 2 3", "--results-dir", results),
        ["check", "--results-dir", results],
    ]
    last = last_said(result.stderr)
    assert "again" in last and "B1 B3" in last and "1 2 3" in last


def test_next_refuses_a_next_step_it_ran_before_not_only_the_last(reproduce, tmp_path):
    """Issue 45.4: a next_step alternating X, Y, X, Y ran look after look (only the step just run was compared);
    any step run before now stops it, exit 1, naming it."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    x, y = (4, step("B1 B3", "1 2 3")), (4, step("B3 a4", "4 5 6"))
    result, calls = reproduce("next", "--results-dir", results, FAKE_UH_CHECKS=checks(x, y, x, y, x, y, (0, {})))
    assert result.returncode == 1, result.stderr
    check = ["check", "--results-dir", results]
    assert calls == [
        check,
        step_run("B1 B3", "1 2 3", "--results-dir", results),
        check,
        step_run("B3 a4", "4 5 6", "--results-dir", results),
        check,
    ]
    last = last_said(result.stderr)
    assert "asks again for B1 B3 on seeds 1 2 3, which ran before" in last


def test_next_stops_after_the_procedures_looks_plus_one_steps(reproduce, tmp_path):
    """Issue 45.4: every step new, yet no more than looks + 1 of them (the procedure of check_report.json has
    two looks here: three steps run, the fourth is refused in one line)."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    steps = [(4, step("B3", seed)) for seed in ("1", "2", "3", "4", "5")]
    result, calls = reproduce(
        "next", "--results-dir", results, FAKE_UH_CHECKS=checks(*steps, (0, {})), FAKE_UH_LOOKS="[3, 6]"
    )
    assert result.returncode == 1, result.stderr
    assert [c for c in calls if c[0] == "run"] == [step_run("B3", s, "--results-dir", results) for s in "123"]
    assert calls[-1][0] == "check"
    assert last_said(result.stderr) == (
        "reproduce.sh: next_step asks for B3 on seeds 4 after 3 steps, the most its procedure can need (its 2 "
        "looks + 1); stopping: see uh check's output above and uh status"
    )


@pytest.mark.parametrize(
    ("target", "signum", "how"),
    [
        ("next", signal.SIGTERM, "./reproduce.sh next goes on"),
        ("next", signal.SIGINT, "./reproduce.sh next goes on"),
        ("doctor", signal.SIGINT, "run the same command again"),  # a uh that keeps Python's SIGINT, which bash ignores
    ],
)
def test_a_signal_to_the_script_reaches_the_running_uh_and_says_how_to_go_on(tmp_path, target, signum, how):
    """Issue 45.4: SIGTERM to reproduce.sh alone (a scheduler, `timeout`, `kill PID`) ended bash at once and left
    `uh run` training, orphaned. Now the signal reaches uh, the script waits for it to end, says how to go on
    and exits with 128 + the signal."""
    results, marker = tmp_path / "r", tmp_path / "uh.pid"
    results.mkdir()
    env = fake_uh(tmp_path, FAKE_UH_CHECKS=checks((4, step("B1 B3", "1 2 3"))), FAKE_UH_SLEEP=str(marker))
    script = subprocess.Popen(
        [str(REPRODUCE), target, "--results-dir", str(results)],
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while not (marker.exists() and marker.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        uh = int(marker.read_text())
        script.send_signal(signum)
        _, stderr = script.communicate(timeout=30)
        with pytest.raises(ProcessLookupError):  # it ended, and the script waited for it
            os.kill(uh, 0)
    finally:
        script.kill()
        with contextlib.suppress(ProcessLookupError, NameError):
            os.kill(uh, signal.SIGKILL)  # the old script left it running
    assert marker.read_text().split()[1:] == ([signum.name] if target == "next" else [])  # uh run's handler: once
    assert script.returncode == 128 + signum
    assert last_said(stderr) == (
        f"reproduce.sh: stopped by {signum.name} (exit {128 + signum}); finished runs are kept and an interrupted "
        f"run resumes from its last finished task: {how}"
    )


@pytest.mark.parametrize(("status", "code"), [("3", 1), ("130", 130)])
def test_next_stops_when_a_next_step_run_fails(reproduce, tmp_path, status, code):
    """A next_step run that fails stops the procedure (exit 1, naming it; a signal's status when interrupted)."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    result, calls = reproduce(
        "next",
        "--results-dir",
        results,
        FAKE_UH_CHECKS=checks((4, step("B1 B3", "1 2 3"))),
        FAKE_UH_FAIL="B1",
        FAKE_UH_STATUS=status,
    )
    assert result.returncode == code
    assert calls == [["check", "--results-dir", results], step_run("B1 B3", "1 2 3", "--results-dir", results)]
    assert "B1 B3 on seeds 1 2 3" in last_said(result.stderr)


def test_next_fails_when_report_fails(reproduce, tmp_path):
    """A report that crashes after a passing check is not hidden: logged, and the exit status is not 0."""
    results = str(tmp_path / "r")
    Path(results).mkdir()
    result, calls = reproduce(
        "next", "--results-dir", results, FAKE_UH_CHECKS=checks((0, {})), FAKE_UH_FAIL_COMMAND="report"
    )
    assert result.returncode == 3
    assert calls == [["check", "--results-dir", results], ["report", "--results-dir", results]]
    assert "uh report exited 3" in result.stderr


def test_all_fails_when_check_fails_but_still_reports(reproduce):
    result, calls = reproduce("all", "--yes", FAKE_UH_FAIL_COMMAND="check")
    assert result.returncode != 0
    assert calls[-2:] == [["check"], ["report"]]


def test_in_the_container_uh_comes_from_path(reproduce):
    result, calls = reproduce("B0", "--seed", "42", in_container=True)
    assert result.returncode == 0, result.stderr
    assert calls == [["run", "B0", "--seed", "42"]]
    result, _ = reproduce("test", in_container=True)
    assert result.returncode == 1
    assert "not in the image" in result.stderr


def test_options_are_passed_through_to_uh_run(reproduce, tmp_path):
    data, results = str(tmp_path / "d"), str(tmp_path / "r")
    options = ["--seeds", "1993 2023", "--profile", "smoke", "--data-dir", data, "--results-dir", results]
    result, calls = reproduce("B3", *options, "--force", "--jobs", "3")
    assert result.returncode == 0, result.stderr
    assert calls == [
        [
            "run",
            "B3",
            "--seed",
            "1993",
            "--seed",
            "2023",
            "--profile",
            "smoke",
            "--data-dir",
            data,
            "--results-dir",
            results,
            "--force",
            "--jobs",
            "3",
        ]
    ]


def test_repeated_seed_option(reproduce):
    result, calls = reproduce("--seed", "42", "s4", "--seed=1993")
    assert result.returncode == 0, result.stderr
    assert calls == [["run", "s4", "--seed", "42", "--seed", "1993"]]


def test_a_failed_run_id_fails_the_script(reproduce):
    result, calls = reproduce("B1", FAKE_UH_FAIL="B1")
    assert result.returncode == 3
    assert calls == [["run", "B1"]]


def test_check_and_report_targets(reproduce, tmp_path):
    result, calls = reproduce("check", "--results-dir", "R", "--profile", "smoke", cwd=tmp_path)
    assert result.returncode == 0
    assert calls == [["check", "--results-dir", str(tmp_path / "R"), "--profile", "smoke"]]
    result, calls = reproduce("report", "--results-dir", "R", cwd=tmp_path)
    assert result.returncode == 0
    assert calls == [["report", "--results-dir", str(tmp_path / "R")]]
    result, calls = reproduce("check", "--run-ids", "B0,B3", "--profile", "smoke", cwd=tmp_path)  # a subset, by name
    assert result.returncode == 0 and calls == [["check", "--profile", "smoke", "--run-ids", "B0,B3"]]


def test_relative_dirs_are_the_callers(reproduce, tmp_path):
    """Issue 14.7: relative --results-dir and --data-dir (and UH_* dirs) resolved against the repo."""
    caller = tmp_path / "caller"
    caller.mkdir()
    result, calls = reproduce("B3", "--results-dir", "r", "--data-dir", "../d", cwd=caller)
    assert result.returncode == 0, result.stderr
    assert calls == [["run", "B3", "--data-dir", str(caller / "../d"), "--results-dir", str(caller / "r")]]
    result, calls = reproduce("check", cwd=caller, UH_RESULTS_DIR="env-r", UH_DATA_DIR="env-d")
    assert result.returncode == 0, result.stderr
    assert calls == [["check", "--results-dir", str(caller / "env-r")]]
    _, calls = reproduce("smoke", cwd=caller, UH_SMOKE_RESULTS_DIR="s")
    assert calls[0][-6:-4] == ["--results-dir", str(caller / "s")]  # then --executor local --device cpu


def test_doctor_target(reproduce, tmp_path):
    result, calls = reproduce("doctor", "--profile", "smoke", "--data-dir", "D", "--results-dir", "R", cwd=tmp_path)
    assert result.returncode == 0
    assert calls == [
        ["doctor", "--profile", "smoke", "--data-dir", str(tmp_path / "D"), "--results-dir", str(tmp_path / "R")]
    ]


def test_smoke_runs_everything_on_the_smoke_profile_in_a_scratch_dir(reproduce, tmp_path):
    scratch = str(tmp_path / "scratch")
    result, calls = reproduce("smoke", UH_SMOKE_RESULTS_DIR=scratch)
    assert result.returncode == 0, result.stderr
    assert calls == [  # every core at once by default
        ["run", "all", "--profile", "smoke", "--results-dir", scratch, "--executor", "local", "--device", "cpu"],
        ["check", "--results-dir", scratch, "--profile", "smoke"],
        ["report", "--results-dir", scratch],
    ]
    _, calls = reproduce("smoke")
    assert calls[0][:5] == ["run", "all", "--profile", "smoke", "--results-dir"]
    assert calls[0][5] == str(ROOT / "results-smoke")
    _, calls = reproduce("smoke", "--results-dir", "elsewhere", cwd=tmp_path)
    assert calls[0][-6:] == ["--results-dir", str(tmp_path / "elsewhere"), "--executor", "local", "--device", "cpu"]
    _, calls = reproduce("smoke", "--jobs", "1")  # one at a time when asked
    assert calls[0][-4:] == ["--jobs", "1", "--device", "cpu"] and "--executor" not in calls[0]
    _, calls = reproduce("smoke", "--executor", "slurm")  # check needs the results: wait for the array
    assert calls[0][-5:] == ["--executor", "slurm", "--device", "cpu", "--wait"]


def test_smoke_runs_on_the_cpu_even_where_a_gpu_is_asked_for(reproduce):
    """Its expectations are a CPU's: UH_DEVICE=cuda does not move it (--device cpu wins), --device cuda is refused."""
    _, calls = reproduce("smoke", UH_DEVICE="cuda")
    assert calls[0][-2:] == ["--device", "cpu"]
    result, calls = reproduce("smoke", "--device", "cuda")
    assert result.returncode == 2 and calls == []
    assert "smoke always runs on the CPU (--device cpu)" in result.stderr


FAKE_PYTHON = """\
#!/bin/bash
# A stand-in interpreter for reproduce.sh's venv set-up: `-m venv DIR` makes DIR/bin/python (this script);
# `-m pip ...` logs its arguments and fails where they name the PyTorch index (unreachable), else makes bin/uh.
here=$(cd "$(dirname "$0")" && pwd)
if [[ "$1 $2" == "-m venv" ]]; then mkdir -p "$3/bin"; cp "$0" "$3/bin/python"; exit 0; fi
echo "$*" >>"$FAKE_PIP_LOG"
[[ "$*" == *download.pytorch.org* ]] && exit 1
printf '#!/bin/sh\nexit 0\n' >"$here/uh"; chmod +x "$here/uh"
"""


def test_the_venv_on_an_nvidia_host_tries_the_papers_cu128_torch_then_falls_back_with_one_line(tmp_path):
    fake_python = tmp_path / "python"
    fake_python.write_text(FAKE_PYTHON)
    fake_python.chmod(0o755)
    nvidia_smi = tmp_path / "bin" / "nvidia-smi"
    nvidia_smi.parent.mkdir()
    nvidia_smi.write_text("#!/bin/sh\nexit 0\n")
    nvidia_smi.chmod(0o755)
    pip_log = tmp_path / "pip.log"
    environ = {k: v for k, v in os.environ.items() if not k.startswith("UH")}

    def setup(path: str) -> subprocess.CompletedProcess:
        venv = tmp_path / f"venv-{len(list(tmp_path.glob('venv-*')))}"
        env = {**environ, "PYTHON": str(fake_python), "UH_VENV": str(venv), "FAKE_PIP_LOG": str(pip_log), "PATH": path}
        pip_log.write_text("")
        return subprocess.run([str(REPRODUCE), "check"], capture_output=True, text=True, env=env, timeout=60)

    result = setup(f"{nvidia_smi.parent}{os.pathsep}{environ['PATH']}")
    assert result.returncode == 0, result.stderr
    first, second = pip_log.read_text().splitlines()
    assert "torch==2.11.0+cu128" in first and "https://download.pytorch.org/whl/cu128" in first
    assert "could not be reached: installing PyPI's torch 2.11.0 (CUDA 13.0), which needs NVIDIA driver >= 580" in (
        " ".join(result.stderr.split())  # however the line is wrapped
    )
    assert "-c constraints-cu130.txt" in second and second.endswith("-e .[dev]")
    if not Path("/proc/driver/nvidia/version").exists():  # a host without NVIDIA: PyPI's torch, nothing tried
        result = setup(environ["PATH"])
        assert result.returncode == 0 and "could not be reached" not in result.stderr
        assert pip_log.read_text().splitlines() == [second]


def test_all_on_slurm_submits_the_chain_that_follows_the_procedure_and_cancel_stops_it(reproduce):
    """Issue 48: `all` on Slurm is one command: the array and the chain behind it (uh run --procedure), which goes on
    by itself; --cancel passes to it, without the price; with the paper's runs only, the array alone, as before."""
    result, calls = reproduce("all", "--executor", "slurm", "--yes")
    assert result.returncode == 0, result.stderr
    assert calls == [["price", "--executor", "slurm"], ["run", "all", "--executor", "slurm", "--procedure"]]
    assert "the chain goes on to a decided verdict and its report without this terminal" in result.stderr
    result, calls = reproduce("all", "--executor", "slurm", "--cancel")
    assert result.returncode == 0 and calls == [["run", "all", "--executor", "slurm", "--procedure", "--cancel"]]
    result, calls = reproduce("all", "--executor", "slurm", "--yes", "--paper-runs-only")
    assert calls[1] == ["run", "all", "--executor", "slurm"]
    assert "when 'uh status' shows every run done: ./reproduce.sh check" in result.stderr
    result, calls = reproduce("all", "--cancel")
    assert result.returncode == 2 and calls == [] and "--cancel goes with all --executor slurm" in result.stderr


@pytest.mark.parametrize(
    "args",
    [
        ("bogus",),
        ("b3",),
        (),
        ("all", "--no-such-option"),
        ("B3", "B2"),
        ("B3", "--seeds"),
        ("B3", "--seed", "x"),
        ("smoke", "--profile", "paper"),
        ("smoke", "--jobs", "0"),
        ("B3", "--jobs=two"),
        ("B3", "--executor", "cloud"),
        ("B3", "--paper-runs-only"),
        ("next", "--paper-runs-only"),
        ("smoke", "--run-ids", "B0,B3"),
        ("check", "--run-ids"),
    ],
)
def test_bad_usage_exits_2_naming_the_valid_targets(reproduce, args):
    result, calls = reproduce(*args)
    assert result.returncode == 2
    assert calls == []
    assert "valid targets" in result.stderr
    for target in ["all", "refresh", "smoke", "doctor", "check", "report", "test", *RUNS]:
        assert re.search(rf"\b{target}\b", result.stderr)


def test_help_names_every_profile(reproduce):
    result, _ = reproduce("--help")
    option = re.search(r"--profile P +(.*?)\n  --", result.stdout, re.S)
    assert option and set(re.findall(r"[\w-]+", option.group(1))) >= set(PROFILES), result.stdout


def test_help_lists_the_targets(reproduce):
    for flag in ("--help", "-h"):
        result, calls = reproduce(flag)
        assert result.returncode == 0
        assert calls == []
        for target in ["all", "refresh", "smoke", "check", "report", "test", "--seeds", "--profile", "--jobs", *RUNS]:
            assert target in result.stdout
