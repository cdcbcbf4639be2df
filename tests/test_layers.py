"""The package's layers are a contract: report | design > verdict > evidence > runs > catalogue > method > data >
errors, each importing only the layers below it, and the top-level modules one of their own: cli > commands > sweep |
doctor | progress > launch > chain | estimate, which no layer imports (pyproject.toml [tool.importlinter];
docs/architecture.md). `.ci/run` runs `lint-imports` on the package itself; here the same contracts are run on a copy
of the package, once as it is and once with one wrong import planted, so that a contract that no longer catches one
(a renamed layer, a lost containers line) fails here.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "uniform_herding"
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")
# One upward import: the method (metrics.py) importing the verdict layer's decide.py.
PLANTED_IN = Path("method") / "metrics.py"
PLANTED = "from uniform_herding.verdict import decide  # noqa: F401\n"
VERDICTS = ("verdict", "design", "evidence")  # the three packages that verdict/ once was


def lint_imports(
    tmp_path: Path, plant: bool, planted: str = PLANTED, planted_in: Path = PLANTED_IN
) -> subprocess.CompletedProcess:
    """`lint-imports` with pyproject.toml's contracts on a copy of the package under `tmp_path` (checked to be
    the package it imports), with the import `planted` in module `planted_in` if `plant`."""
    if not LINT_IMPORTS.exists():
        pytest.skip('import-linter not installed: pip install -c constraints.txt -e ".[dev]"')
    src = tmp_path / "src"
    shutil.copytree(PACKAGE, src / "uniform_herding", ignore=shutil.ignore_patterns("__pycache__"))
    if plant:
        module = src / "uniform_herding" / planted_in
        text = module.read_text()
        future = "from __future__ import annotations\n"
        assert text.count(future) == 1 and planted not in text
        module.write_text(text.replace(future, future + planted))
    config = tmp_path / "pyproject.toml"
    shutil.copy(ROOT / "pyproject.toml", config)
    env = {**os.environ, "PYTHONPATH": str(src), "COLUMNS": "200"}  # a contract's name on one line
    where = subprocess.run(
        [sys.executable, "-c", "import uniform_herding; print(uniform_herding.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(src), where
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache", "--no-logo", str(config)],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_package_as_it_is_keeps_its_layers(tmp_path: Path) -> None:
    result = lint_imports(tmp_path, plant=False)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Contracts: 3 kept, 0 broken." in result.stdout


def test_one_upward_import_breaks_the_layers_contract(tmp_path: Path) -> None:
    """metrics.py (method/) importing verdict/decide.py fails the contract, naming that import."""
    result = lint_imports(tmp_path, plant=True)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Contracts: 2 kept, 1 broken." in result.stdout
    assert "uniform_herding.method.metrics -> uniform_herding.verdict.decide" in result.stdout, result.stdout


def test_the_method_importing_the_run_catalogue_breaks_the_contract(tmp_path: Path) -> None:
    """method/ holds only the paper and reads a Config, never a run ID: the run catalogue (run IDs, profiles, variants)
    is a layer above it, which method/ may not import (metrics.py importing uniform_herding.catalogue fails the
    contract, naming that import)."""
    result = lint_imports(tmp_path, plant=True, planted="from uniform_herding import catalogue  # noqa: F401\n")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "uniform_herding.method.metrics -> uniform_herding.catalogue" in result.stdout, result.stdout


@pytest.mark.parametrize(("importer", "imported"), [("chain", "progress"), ("sweep", "cli")])
def test_either_import_circle_put_back_breaks_the_top_level_contract(
    tmp_path: Path, importer: str, imported: str
) -> None:
    """The two circles that once were: progress.py (uh status) imports chain.py, so chain.py importing progress.py (as
    it did for checked_now, now verdict/judge.py's); cli.py loads sweep.py when `sweep` is named (LAZY_COMMANDS), so
    sweep.py importing cli.py (as it did for uh run, now launch.py's). Either fails the top-level contract, naming
    that import."""
    result = lint_imports(
        tmp_path,
        plant=True,
        planted=f"from uniform_herding import {imported}  # noqa: F401\n",
        planted_in=Path(f"{importer}.py"),
    )
    assert result.returncode == 1, result.stdout + result.stderr
    top_level = "The top level: cli > commands > sweep | doctor | progress > launch > chain | estimate"
    assert f"{top_level} BROKEN" in result.stdout, result.stdout
    assert f"uniform_herding.{importer} -> uniform_herding.{imported}" in result.stdout, result.stdout


@pytest.mark.parametrize(
    ("planted_in", "imported"),
    [
        (Path("evidence") / "bundle.py", "uniform_herding.verdict.judge"),
        (Path("report") / "summary.py", "uniform_herding.design.stacks"),
    ],
)
def test_the_evidence_reading_the_verdict_or_the_report_reading_the_design_breaks_the_layers(
    tmp_path: Path, planted_in: Path, imported: str
) -> None:
    """verdict/, design/ and evidence/ are layers of their own: a bundle is evidence whatever the verdict (evidence/
    importing verdict/judge.py fails the contract), and the report and the procedure's design are siblings that
    read the verdict, never each other (report/summary.py importing design/stacks.py fails it)."""
    module, name = imported.rsplit(".", 1)
    result = lint_imports(
        tmp_path, plant=True, planted=f"from {module} import {name}  # noqa: F401\n", planted_in=planted_in
    )
    assert result.returncode == 1, result.stdout + result.stderr
    importer = "uniform_herding." + ".".join(planted_in.with_suffix("").parts)
    assert f"{importer} -> {imported}" in result.stdout, result.stdout


def test_a_layer_importing_a_top_level_module_breaks_its_contract(tmp_path: Path) -> None:
    """The top level drives the layers, never the reverse: runs/executor.py importing chain.py (which imports it)
    fails the contract that no layer imports a top-level module."""
    result = lint_imports(
        tmp_path,
        plant=True,
        planted="from uniform_herding import chain  # noqa: F401\n",
        planted_in=Path("runs") / "executor.py",
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "No layer imports a top-level module BROKEN" in result.stdout, result.stdout
    assert "uniform_herding.runs.executor -> uniform_herding.chain" in result.stdout, result.stdout


def test_no_function_of_the_method_is_over_40_lines() -> None:
    """method/ reads like the paper's Section 3: small functions, each readable at once (a reader follows one task in
    task.py and the functions it names). A function over 40 lines, decorators and docstring included, fails here."""
    import ast

    long = []
    for path in sorted((PACKAGE / "method").glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
                if node.end_lineno - first + 1 > 40:
                    long.append(f"{path.name}: {node.name} ({node.end_lineno - first + 1} lines)")
    assert long == []


def test_no_module_of_the_design_or_the_evidence_imports_click() -> None:
    """click is the command line's (commands/, cli.py): the procedure's design and the evidence raise errors.UhError,
    which cli.py turns into one line and an exit code, and print nothing through click."""
    import ast

    found = []
    for layer in ("design", "evidence"):
        for path in sorted((PACKAGE / layer).glob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Import):
                    names = [alias.name for alias in node.names]
                else:
                    names = [node.module or ""] if isinstance(node, ast.ImportFrom) else []
                found += [f"{layer}/{path.name}: {name}" for name in names if name.split(".")[0] == "click"]
    assert found == []


def test_each_class_of_verdict_has_one_name_that_no_import_changes() -> None:
    """One name per type across verdict/, design/ and evidence/: no two of their modules define a class of the same
    name (words.py's enums once shared Claim and Verdict with claims.py's and judge.py's dataclasses), so no module of
    the package or the tests imports one of their classes under another name (the aliases Kind, ClaimKind and
    JudgeVerdict once did)."""
    import ast

    defined: dict[str, list[str]] = {}
    for path in sorted(path for layer in VERDICTS for path in (PACKAGE / layer).glob("*.py")):
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                defined.setdefault(node.name, []).append(f"{path.parent.name}/{path.name}")
    assert {name: where for name, where in defined.items() if len(where) > 1} == {}
    aliased = [
        f"{path.relative_to(ROOT)}: {alias.name} as {alias.asname}"
        for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py")])
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom)
        and (node.module or "").startswith(tuple(f"uniform_herding.{layer}" for layer in VERDICTS))
        for alias in node.names
        if alias.asname and alias.name in defined
    ]
    assert aliased == []
