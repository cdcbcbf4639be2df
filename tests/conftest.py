"""Shared test helpers.

The suite runs on the CPU wherever it runs (UH_DEVICE=cpu, for in-process runs and for the `uh`
processes tests start): its expectations (fp32, bit-identical reruns, CPU numbers) are a CPU's. Tests
marked `gpu` run where a GPU is usable (benchmarks/gpu-acceptance) and are skipped elsewhere. Tests
marked `system` change the host (they install packages, start daemons as root or build an image) and run
only where UH_SYSTEM_TESTS=1 asks for them, as .ci/run does; elsewhere they are skipped, naming that
command, so that `./reproduce.sh test` leaves the host as it was. A test that trains carries the `trains` marker,
so that `-m "not trains"` leaves out the part that trains, and `-m fast`, the developer's loop, the `slow` and
`system` tests too (docs/testing.md): one that trains in this process without it (a backward of train.fit_task's
loop, `Fabric.backward`, or Lightning's `Trainer.fit`, which the self-test's reference path runs) fails, naming the
marker (tests that train only in processes they start are marked by hand).
"""

from __future__ import annotations

import functools
import io
import json
import os
import tarfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
from lightning.fabric import Fabric
from lightning.pytorch import Trainer
from lightning.pytorch.strategies import Strategy

from uniform_herding.data.archive import RawData
from uniform_herding.method.config import Config
from uniform_herding.method.memory import Memory, make_memory
from uniform_herding.method.model import Learner
from uniform_herding.method.stream import TaskStream

os.environ["UH_DEVICE"] = "cpu"

_running: list[pytest.Item] = []  # the test being run (its fixtures' setup included)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    _running.append(item)
    try:
        return (yield)
    finally:
        _running.pop()


def _only_where_marked(trains, name: str):
    @functools.wraps(trains)
    def trains_if_marked(self, *args, **kwargs):
        if _running and _running[-1].get_closest_marker("trains") is None:
            pytest.fail(
                f"{_running[-1].nodeid} trains ({name}) but is not marked @pytest.mark.trains: "
                "mark it, so that `-m 'not trains'` stays the fast suite",
                pytrace=False,
            )
        return trains(self, *args, **kwargs)

    return trains_if_marked


Fabric.backward = _only_where_marked(Fabric.backward, "Fabric.backward")
Trainer.fit = _only_where_marked(Trainer.fit, "Trainer.fit")


SYSTEM_TESTS = "UH_SYSTEM_TESTS"
SYSTEM_SKIP = (
    f"changes the host (installs packages, starts daemons as root, builds an image): "
    f"run as root with {SYSTEM_TESTS}=1 ./reproduce.sh test, as .ci/run does"
)


@pytest.hookimpl(tryfirst=True)  # before pytest-xdist's own, which reads the groups marked here into node IDs
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the `gpu` tests, saying why, where no GPU is usable; skip the `system` tests unless asked for. A `gpu`
    test without the `trains` marker is refused here, on any host: on a GPU the guard above would fail it. Mark
    `fast` the tests of no slower tier; group them by module for pytest-xdist's workers."""
    from uniform_herding.runs.devices import gpu_problem

    if unmarked := [item.nodeid for item in items if "gpu" in item.keywords and "trains" not in item.keywords]:
        raise pytest.UsageError(f"{unmarked[0]} is marked gpu but not trains; every GPU test trains: mark it trains")

    if os.environ.get(SYSTEM_TESTS) != "1":
        for item in (item for item in items if "system" in item.keywords):
            item.add_marker(pytest.mark.skip(reason=SYSTEM_SKIP))
    if any("gpu" in item.keywords for item in items) and (problem := gpu_problem()):
        skip = pytest.mark.skip(reason=f"needs a usable GPU: {problem}")
        for item in (item for item in items if "gpu" in item.keywords):
            item.add_marker(skip)
    for item in (item for item in items if not any(tier in item.keywords for tier in SLOWER_TIERS)):
        item.add_marker(pytest.mark.fast)
    if config.getoption("loadgroup", False):  # pytest-xdist's --dist loadgroup, in a worker
        group_by_module(items)


# The tiers that leave `-m fast`, the developer's loop (docs/testing.md): the others' tests are marked by hand.
SLOWER_TIERS = ("trains", "slow", "system")
# Session fixtures that several modules use: under pytest-xdist (`--dist loadgroup`, as .ci/run runs the suite)
# the modules that use one run on one worker together, so that it is made once.
SHARED_FIXTURES = ("smoke_sweep", "one_at_a_time")


def group_by_module(items: list[pytest.Item]) -> None:
    """Each module's tests on one worker (its module-scoped fixtures made once, its tests in their order), and the
    modules that share a session fixture of SHARED_FIXTURES on one worker together. The groups that hold a `system`
    test go first: the Slurm tests mostly wait on the cluster, so they start at once beside the rest instead of
    trailing it (pytest-xdist hands out the groups in the order of their items)."""
    group: dict[str, str] = {}
    for item in items:
        module = item.nodeid.split("::")[0]
        shared = next((name for name in SHARED_FIXTURES if name in item.fixturenames), None)
        group[module] = shared or group.get(module, module)
    of = {item.nodeid: group[item.nodeid.split("::")[0]] for item in items}
    for item in items:
        item.add_marker(pytest.mark.xdist_group(of[item.nodeid]))
    waiting = {of[item.nodeid] for item in items if "system" in item.keywords}
    items.sort(key=lambda item: of[item.nodeid] not in waiting)  # stable: each group in its order


TERMINAL = ("COLUMNS", "LINES")  # what uh and reproduce.sh fit their lines to


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node) -> None:
    """pytest-xdist's controller: each worker gets its COLUMNS and LINES (or none), restored in pytest_configure."""
    node.workerinput["terminal"] = {name: os.environ.get(name) for name in TERMINAL}


def pytest_configure(config: pytest.Config) -> None:
    """A pytest-xdist worker: the controller's COLUMNS and LINES (a worker starts with 80 and 24, to which uh and
    reproduce.sh would wrap their lines); its share of the cores for torch's threads, so that the workers do not
    fight over them; and PYTEST_ADDOPTS (the run's `-n`) not passed on to the pytest runs its tests start (the
    mutation check's), which would start workers of their own."""
    if workerinput := getattr(config, "workerinput", None):
        for name, value in workerinput["terminal"].items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        torch.set_num_threads(max(1, len(os.sched_getaffinity(0)) // workerinput["workercount"]))
        os.environ.pop("PYTEST_ADDOPTS", None)


@pytest.fixture
def teardown_to_meta(monkeypatch):
    """Lightning's teardown moves the module off the training device: a GPU run's module lands on the CPU.
    Here it lands on `meta`, a second device, so that code which reads the module after `fit` and mixes
    devices fails on a CPU as it fails on a GPU. The values are kept aside and come back when the code
    moves the module to a device (as a GPU run's `.to(cuda)` brings its weights back)."""
    kept: list[tuple[torch.nn.Module, dict[str, torch.Tensor]]] = []
    teardown, to = Strategy.teardown, torch.nn.Module.to

    def teardown_then_meta(self: Strategy) -> None:
        module = self.lightning_module
        teardown(self)
        if module is not None:
            kept.append((module, {k: v.detach().clone() for k, v in module.state_dict().items()}))
            to(module, "meta")

    def to_brings_values_back(self: torch.nn.Module, *args, **kwargs) -> torch.nn.Module:
        if any(t.is_meta for t in (*self.parameters(), *self.buffers())):
            for root, state in kept:
                prefix = next((f"{name}." if name else "" for name, m in root.named_modules() if m is self), None)
                if prefix is not None:
                    self.to_empty(device="cpu")
                    self.load_state_dict({k[len(prefix) :]: v for k, v in state.items() if k.startswith(prefix)})
                    break
        return to(self, *args, **kwargs)

    monkeypatch.setattr(Strategy, "teardown", teardown_then_meta)
    monkeypatch.setattr(torch.nn.Module, "to", to_brings_values_back)


@pytest.fixture
def tiny_stream():
    """Build a TaskStream for a config over random images (60 train, 4 test per class, 100 classes)."""

    def build(cfg: Config, device: str = "cpu") -> TaskStream:
        rng = np.random.default_rng(0)
        y, test_y = np.repeat(np.arange(100), 60), np.repeat(np.arange(100), 4)
        raw = RawData(
            rng.integers(0, 256, (len(y), 3, 32, 32), dtype=np.uint8),
            y,
            rng.integers(0, 256, (len(test_y), 3, 32, 32), dtype=np.uint8),
            test_y,
            [f"c{i}" for i in range(100)],
            "0" * 32,
            "synthetic",
        )
        return TaskStream(raw, cfg, torch.device(device))

    return build


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory) -> tuple[Path, Path, str]:
    """`uh sweep B3 rho=1,3,5 --seed 1993 --profile smoke --jobs 2`, once per session: r2 (rho=1 is r2), B3 and
    the variant B3+rho=5, through the local executor. (data dir, results dir, the command's output)."""
    from click.testing import CliRunner

    from uniform_herding.cli import main

    root = tmp_path_factory.mktemp("sweep")
    args = [
        "sweep",
        "B3",
        "rho=1,3,5",
        "--seed",
        "1993",
        "--profile",
        "smoke",
        "--jobs",
        "2",
        "--data-dir",
        str(root / "data"),
        "--results-dir",
        str(root / "results"),
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    return root / "data", root / "results", res.output


@pytest.fixture
def finished_result():
    """Write a valid result.json of a run or variant ID (what `uh run` finds done), with the given ACC; its path."""
    from uniform_herding.catalogue import record, resolve
    from uniform_herding.method.config import CONFIG_VERSION
    from uniform_herding.runs.results import result_path, write_json_atomic

    def write(results_dir: Path, run_id: str, seed: int, acc: float = 50.0, profile: str = "smoke") -> Path:
        T = resolve(run_id, profile).n_tasks
        R = [[acc] * (i + 1) + [None] * (T - i - 1) for i in range(T)]
        body = {
            "config_version": CONFIG_VERSION,
            "run_id": run_id,
            "seed": seed,
            "profile": profile,
            "config": resolve(run_id, profile).to_dict(),
            **record(run_id),
            "R": R,
            "metrics": {"acc": acc, "forgetting": 0.0, "bwt": 0.0},
        }
        path = result_path(results_dir, run_id, seed)
        write_json_atomic(path, body)
        return path

    return write


@pytest.fixture
def no_training(monkeypatch):
    """A run that starts fails the test at once (instead of training for minutes)."""
    from uniform_herding.runs import run

    def refuse(pair, *args, **kwargs):
        raise AssertionError(f"{pair} was started")

    monkeypatch.setattr(run, "run_seed", refuse)


@pytest.fixture
def uninitialised_memory_is_nan(monkeypatch):
    """`torch.empty_like` returns NaN-filled tensors: uninitialised memory, made deterministic. torch's
    fused SGD creates its momentum buffers with it and, when its first step is skipped, reads them later."""
    empty_like = torch.empty_like

    def nan_like(*args, **kwargs):
        out = empty_like(*args, **kwargs)
        return out.fill_(float("nan")) if out.is_floating_point() else out

    monkeypatch.setattr(torch, "empty_like", nan_like)


@pytest.fixture
def gpu_like_fp16_conv(monkeypatch):
    """Under fp16 autocast on a CPU, convolutions computed as a GPU's are: fp16 operands, fp32 accumulation,
    fp16 result (and likewise in the backward, through the casts). This CPU has no fast fp16 convolution:
    torch falls back to `_slow_conv2d`, over ten times slower than fp32 (docs/testing.md). Every other
    op of the fp16 path, the scaler and the optimizer run unchanged."""
    original = torch.nn.Conv2d._conv_forward

    def conv(self, x, weight, bias):
        if not torch.is_autocast_enabled("cpu") or torch.get_autocast_dtype("cpu") != torch.float16:
            return original(self, x, weight, bias)
        with torch.autocast("cpu", enabled=False):
            out = original(self, x.half().float(), weight.half().float(), None if bias is None else bias.half().float())
        return out.half()

    monkeypatch.setattr(torch.nn.Conv2d, "_conv_forward", conv)


def fresh_state(cfg: Config, seed: int) -> tuple[Learner, Memory, list[torch.Generator]]:
    """A learner with an empty head, the run's memory policy and its two generators, as at start-up."""
    torch.manual_seed(seed)
    gens = [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)]
    return Learner(cfg.width, cfg.head, cfg.cos_scale), make_memory(cfg, gens[1]), gens


@pytest.fixture
def fresh():
    """fresh_state, for tests that build checkpoints by hand."""
    return fresh_state


@pytest.fixture(scope="session")
def one_at_a_time(tmp_path_factory):
    """result.json of a smoke run made here, in this process (`run_seed`, one thread), by run ID and seed, each
    run once per session: what a test of determinism compares another way of running that seed with. Smoke
    numbers differ between kinds of CPU (expected_results/README.md), so such a test compares two runs made on
    the same machine, never a run with the committed rows."""
    import json

    from uniform_herding.catalogue import resolve
    from uniform_herding.runs.pair import RunOptions
    from uniform_herding.runs.run import run_seed

    root = tmp_path_factory.mktemp("one-at-a-time")
    options = RunOptions("smoke", root / "data", root / "results")

    def get(run_id: str, seed: int) -> dict:
        path = run_seed(options.pair(run_id, seed), resolve(run_id, "smoke"), echo=lambda _: None)
        return json.loads(path.read_text())

    return get


def matrix_with(acc: float, forgetting: float, bwt: float, T: int = 10) -> list[list[float | None]]:
    """An accuracy matrix R (T x T, None above the diagonal) whose ACC, F and BWT are the given ones, so that a
    result.json carrying published metrics holds an R that gives them (results.check_metrics_of_R): the last row
    all `acc`, each earlier task learned at acc - bwt, and F's excess over -BWT as a peak on the row after each of
    the tasks 0..T-3. Needs BWT <= 0 <= F + BWT (the best accuracy is at least the first) and every entry in
    [0, 100]."""
    learned, excess = acc - bwt, forgetting + bwt
    assert T >= 3 and bwt <= 0 <= excess, (acc, forgetting, bwt)
    peak = learned + excess * (T - 1) / (T - 2)
    R = [[learned if j == i else peak if j == i - 1 and i < T - 1 else learned for j in range(i + 1)] for i in range(T)]
    R[-1] = [acc] * T
    assert all(0 <= x <= 100 for row in R for x in row), (acc, forgetting, bwt)
    return [row + [None] * (T - len(row)) for row in R]


def next_look(paper: pd.DataFrame, runs: list[str], seeds: list[int], lead: float) -> pd.DataFrame:
    """The paper's rows plus `runs` on `seeds`: each the run's paper mean, B3 `lead` pp above in ACC."""
    rows = []
    for k, seed in enumerate(seeds):
        for run_id in runs:
            mean = paper[paper["run_id"] == run_id][["acc", "forgetting", "bwt"]].mean()
            wobble = (-0.3, 0.2, 0.1, -0.2, 0.3, -0.1, 0.0)[k % 7]
            acc = mean["acc"] + wobble + (lead if run_id == "B3" else 0.0)
            rows.append(
                {
                    "run_id": run_id,
                    "seed": seed,
                    "acc": acc,
                    "forgetting": mean["forgetting"] + wobble,
                    "bwt": mean["bwt"] - wobble,
                }
            )
    return pd.concat([paper, pd.DataFrame(rows)], ignore_index=True)


def write_tar(path: Path, folder: str, files: dict[str, bytes], compresslevel: int = 9) -> None:
    """A tar.gz written with plain tarfile, independent of the package's writer."""
    with tarfile.open(path, "w:gz", compresslevel=compresslevel) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(f"{folder}/{name}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))


def smoke_rehearsal(directory: Path) -> Path:
    """The smoke set's B3 and a2 rows and tolerances, gating on claims, with a procedure whose first look (alpha
    0.0001) cannot decide C2 on three seeds: looks at 3 and 4 seeds."""
    directory.mkdir(parents=True)
    smoke = Path(__file__).resolve().parents[1] / "expected_results" / "smoke"
    rows = [r for r in (smoke / "per_seed.csv").read_text().splitlines() if r.startswith(("run_id,", "B3,", "a2,"))]
    (directory / "per_seed.csv").write_text("\n".join(rows) + "\n")
    toml = (smoke / "tolerances.toml").read_text().replace("gate_exit_code = false", "gate_exit_code = true")
    (directory / "tolerances.toml").write_text(
        toml + "\n[procedure]\nseeds = [1993, 2023, 42, 1]\nlooks = [3, 4]\nalpha = [0.0001, 0.0499]\n"
    )
    return directory


def fake_slurm_clients(folder: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> None:
    """squeue and sacct on PATH as shell scripts of `script`'s body (`exit 0`: an empty queue; `sleep 60`: a Slurm
    that gives no answer, as squeue retrying a missing SLURM_CONF for a minute)."""
    folder.mkdir(parents=True, exist_ok=True)
    for client in ("squeue", "sacct"):
        (folder / client).write_text(f"#!/bin/sh\n{script}\n")
        (folder / client).chmod(0o755)
    monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")


def _deep(result: dict) -> str:
    return json.dumps(result | {"manifest": "DEEP"}).replace('"DEEP"', "[" * 100_000 + "]" * 100_000)


# Issue 59.4: result.json as an adversary wrote it (every hash made consistent), each once ending in a traceback and
# exit 1, the code of a failed replication; each is refused in one line naming the file and what (the field) is wrong.
MALFORMED_RESULTS: dict[str, tuple[Callable[[dict], str], str]] = {
    "nested 100,000 deep": (_deep, "cannot read JSON (nested 100001 levels deep, more than 32)"),
    "a seed of 5,000 digits": (
        lambda r: json.dumps(r).replace(f'"seed": {r["seed"]}', '"seed": ' + "1" * 5000),
        "cannot read JSON ($.seed is 111111111111...1111 (5000 characters): uh writes finite numbers of at most 40",
    ),
    "tasks a number": (lambda r: json.dumps(r | {"tasks": 5}), "$.tasks is 5, not an array"),
    "a task's code hash a list": (
        lambda r: json.dumps(r | {"tasks": [{"task": 0, "code_sha256": ["ab"]}]}),
        "$.tasks[0].code_sha256 is ['ab'], not a string",
    ),
    "environment a string": (lambda r: json.dumps(r | {"environment": "abc"}), "$.environment is 'abc', not an object"),
    "epoch losses ragged": (  # uh report stacks them: ValueError
        lambda r: json.dumps(r | {"tasks": [{"epoch_loss": [1.0]}, {"epoch_loss": [1.0, 2.0]}]}),
        "$.tasks[0].epoch_loss has 1 entries, not one for each of the config's 6 epochs",
    ),
}
PROFILE_A_LIST = ('{"profile": ["smoke"]}', "profile.json: $.profile is ['smoke'], not a string")
