"""conftest.py's guards: a test that trains without the `trains` marker fails, so `-m "not trains"` stays fast; a
test that changes the host runs only when UH_SYSTEM_TESTS=1 asks for it. And its tiers and pytest-xdist groups."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from lightning.pytorch import Trainer


def test_training_without_the_trains_marker_fails_naming_the_marker() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"is not marked @pytest.mark.trains"):
        Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(None)  # type: ignore[arg-type]


def test_a_backward_of_the_training_loop_without_the_trains_marker_fails_naming_it() -> None:
    from uniform_herding.method import engine

    with pytest.raises(pytest.fail.Exception, match=r"trains \(Fabric.backward\) but is not marked"):
        engine.fabric(torch.device("cpu"), fp16=False).backward(torch.ones((), requires_grad=True))


class _Item:
    """What the collection hook reads of a test: its keywords, node ID and fixtures, and the markers it adds."""

    def __init__(self, *markers: str, nodeid: str = "tests/test_x.py::test_x", fixtures: tuple[str, ...] = ()) -> None:
        self.keywords = dict.fromkeys(markers, True)
        self.nodeid, self.fixturenames = nodeid, list(fixtures)
        self.added: list[pytest.Mark] = []

    def add_marker(self, marker: pytest.MarkDecorator) -> None:
        self.added.append(marker.mark)


class _Config:
    """A pytest run's options as the collection hook reads them: each its default (no pytest-xdist)."""

    def getoption(self, name: str, default: object = None) -> object:
        return default


@pytest.mark.parametrize("asked", [None, "0", "1"])
def test_system_tests_run_only_when_asked_else_skip_naming_the_command(asked, monkeypatch) -> None:
    from conftest import pytest_collection_modifyitems

    if asked is None:
        monkeypatch.delenv("UH_SYSTEM_TESTS", raising=False)
    else:
        monkeypatch.setenv("UH_SYSTEM_TESTS", asked)
    system, plain = _Item("system"), _Item("trains")
    pytest_collection_modifyitems(_Config(), [system, plain])  # type: ignore[arg-type]
    assert plain.added == []
    if asked == "1":
        assert system.added == []
    else:
        (skip,) = system.added
        assert skip.name == "skip" and "UH_SYSTEM_TESTS=1 ./reproduce.sh test" in skip.kwargs["reason"]


def test_the_tests_that_change_the_host_are_marked_system() -> None:
    """The real Slurm cluster (munged, mariadbd and slurm daemons as root) and .ci/container (apt-get, dockerd,
    an image build) run only when UH_SYSTEM_TESTS=1 asks for them."""
    import test_container
    import test_slurm

    assert test_slurm.pytestmark.name == "system"
    assert "system" in [m.name for m in test_container.test_ci_container_fails_on_a_broken_dockerfile.pytestmark]


def test_fast_is_every_test_marked_neither_trains_slow_nor_system() -> None:
    """`-m fast`, the developer's loop, leaves out every slower tier."""
    from conftest import pytest_collection_modifyitems

    items = [_Item(), _Item("slow"), _Item("trains"), _Item("system"), _Item("parametrize")]
    pytest_collection_modifyitems(_Config(), items)  # type: ignore[arg-type]
    assert [[m.name for m in item.added if m.name != "skip"] for item in items] == [["fast"], [], [], [], ["fast"]]


def test_under_xdist_a_module_runs_on_one_worker_and_the_modules_sharing_a_session_fixture_together() -> None:
    """A module's module-scoped fixtures are made once, and so is smoke_sweep (a sweep of three smoke runs), though
    only some of the tests of the modules that use it ask for it."""
    from conftest import group_by_module

    items = [
        _Item(nodeid="tests/report/test_report.py::test_a"),
        _Item(nodeid="tests/report/test_report.py::test_sweep", fixtures=("tmp_path", "smoke_sweep")),
        _Item(nodeid="tests/report/test_report.py::test_b"),
        _Item(nodeid="tests/test_sweep.py::test_sweep", fixtures=("smoke_sweep",)),
        _Item(nodeid="tests/test_cli.py::test_c", fixtures=("tmp_path",)),
        _Item(nodeid="tests/test_cli.py::test_d[x::y]"),
    ]
    group_by_module(items)  # type: ignore[arg-type]
    assert [[(m.name, m.args) for m in item.added] for item in items] == [
        *[[("xdist_group", ("smoke_sweep",))]] * 4,
        *[[("xdist_group", ("tests/test_cli.py",))]] * 2,
    ]


def test_under_xdist_the_groups_of_system_tests_go_first_each_in_its_order() -> None:
    """The Slurm tests mostly wait on the cluster: handed out last, they trailed the rest of the suite by minutes."""
    from conftest import group_by_module

    items = [
        _Item(nodeid="tests/runs/test_executor.py::test_a", fixtures=("one_at_a_time",)),
        _Item(nodeid="tests/test_cli.py::test_c"),
        _Item(nodeid="tests/runs/test_executor.py::test_b"),
        _Item("system", nodeid="tests/test_slurm.py::test_s", fixtures=("one_at_a_time",)),
        _Item(nodeid="tests/test_x.py::test_d"),
    ]
    group_by_module(items)  # type: ignore[arg-type]
    assert [item.nodeid.rsplit("::", 1)[1] for item in items] == ["test_a", "test_b", "test_s", "test_c", "test_d"]


@pytest.mark.slow
def test_under_real_xdist_workers_with_loadgroup_each_module_runs_on_one_worker(tmp_path) -> None:
    """The hook marks the groups before pytest-xdist reads them (tryfirst), under a pytest whose node IDs xdist can
    suffix (9.1.1: constraints.txt): without either nothing was grouped, and every module's fixtures (test_run's smoke
    runs, the smoke sweep) were made on both workers. Two modules of six tests, on two real workers: each on one."""
    tests = Path(__file__).resolve().parent
    (tmp_path / "conftest.py").write_text(  # the project's hook, from its file (this tree's conftest is another)
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('project_conftest', {str(tests / 'conftest.py')!r})\n"
        "project = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(project)\n"
        "pytest_collection_modifyitems = project.pytest_collection_modifyitems\n"
    )
    record = "import os\n\ndef record(name):\n    with open('ran.txt', 'a') as f:\n"
    record += "        f.write(name + ' ' + os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n"
    for module in ("test_a", "test_b"):
        body = "".join(f"\ndef test_{i}():\n    record('{module}')\n" for i in range(6))
        (tmp_path / f"{module}.py").write_text(record + body)
    env = {**os.environ, "PYTEST_ADDOPTS": ""}
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    workers: dict[str, set[str]] = {}
    for line in (tmp_path / "ran.txt").read_text().splitlines():
        module, worker = line.split()
        workers.setdefault(module, set()).add(worker)
    assert {module: len(on) for module, on in workers.items()} == {"test_a": 1, "test_b": 1}, workers


SLOWER = ("pytest.mark.slow", "pytest.mark.trains")


def test_every_test_the_mutation_check_names_is_in_the_fast_tier() -> None:
    """`-m fast` catches each bug tests/test_mutations.py plants: no test it names (or no test of a module it names)
    is marked slow or trains, on the test or on its module."""
    import ast
    from pathlib import Path

    from test_mutations import BUGS

    for node in {node for bug in BUGS.values() for node in bug.tests}:
        path, _, name = node.partition("::")
        tree = ast.parse((Path(__file__).parents[1] / path).read_text())
        on_module = [
            ast.unparse(a.value) for a in tree.body if isinstance(a, ast.Assign) and "pytestmark" in ast.unparse(a)
        ]
        tests = [
            f
            for f in tree.body
            if isinstance(f, ast.FunctionDef) and (f.name == name or (not name and f.name.startswith("test_")))
        ]
        assert tests, f"{node}, which the mutation check names, is not there"
        for test in tests:
            marks = [ast.unparse(d) for d in test.decorator_list] + on_module
            assert not [m for m in marks for slower in SLOWER if slower in m], f"{path}::{test.name} is marked {marks}"


def test_an_xdist_worker_has_the_controllers_columns_and_no_pytest_addopts(monkeypatch) -> None:
    """A pytest-xdist worker starts with COLUMNS=80 and LINES=24, to which reproduce.sh wrapped a line that the
    controller's environment (no COLUMNS: 120) keeps whole; and a pytest its tests start must not start workers."""
    from conftest import pytest_configure

    for name, value in {"COLUMNS": "80", "LINES": "24", "PYTEST_ADDOPTS": "-n 2"}.items():
        monkeypatch.setenv(name, value)
    threads = torch.get_num_threads()
    try:
        worker = SimpleNamespace(workerinput={"terminal": {"COLUMNS": None, "LINES": "30"}, "workercount": 2})
        pytest_configure(worker)  # type: ignore[arg-type]
    finally:
        torch.set_num_threads(threads)
    assert [os.environ.get(name) for name in ("COLUMNS", "LINES", "PYTEST_ADDOPTS")] == [None, "30", None]
