"""The `uh` command itself: what it costs to start."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from uniform_herding import __version__
from uniform_herding.catalogue import BEYOND_PAPER, RUNS
from uniform_herding.cli import main
from uniform_herding.runs.provenance import code_hash


def test_the_cli_starts_without_torch():
    """`uh list`, `uh check` and `uh aggregate` need no model: importing torch (and torchvision) would
    add seconds to every command. Only `uh run` and `uh data` import it, when they run."""
    code = "import sys, uniform_herding.cli; print(sorted({'torch', 'torchvision', 'lightning'} & set(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_uh_help_lists_every_command_with_its_whole_summary_on_one_line_importing_none():
    """`uh --help` is the command table: every command once, its summary whole (click cuts a long one with
    "..."), one line each at 80 columns; listing imports no command's module (pandas, scipy, torch)."""
    code = (
        "import sys\nfrom uniform_herding.cli import main\ntry:\n    main(['--help'])\nexcept SystemExit:\n"
        "    print(sorted(m for m in sys.modules if m.startswith('uniform_herding.') and m not in "
        "{'uniform_herding.cli', 'uniform_herding.method', 'uniform_herding.method.components', "
        "'uniform_herding.method.config', 'uniform_herding.runs', 'uniform_herding.catalogue', "
        "'uniform_herding.runs.executor', 'uniform_herding.runs.durability', 'uniform_herding.errors'}))"
    )
    env = {**os.environ, "COLUMNS": "80"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env).stdout
    *help_lines, imported = out.rstrip("\n").splitlines()
    rows = help_lines[help_lines.index("Commands:") + 1 :]
    assert [row.split()[0] for row in rows] == main.list_commands(click.Context(main))  # no continuation lines
    assert all(len(row) <= 80 and "..." not in row and len(row.split()) > 2 for row in rows)
    assert imported == "[]"


def test_uh_list_sizes_its_columns_from_the_names():
    """Each description starts in one column, after the longest name and two spaces: a column of fixed
    width ran r1's and r2's names into their descriptions."""
    lines = CliRunner().invoke(main, ["list", "--wide"]).output.splitlines()
    starts = set()
    for spec, line in zip(RUNS.values(), lines, strict=False):
        start = line.index(spec.description)
        assert line[:start] == f"{spec.run_id}  {spec.name}".ljust(start - 2) + "  "
        starts.add(start)
    assert len(starts) == 1


VERSION = (
    "import sys\nfrom uniform_herding.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n"
    "    print(sorted({'torch', 'pandas', 'numpy'} & set(sys.modules)))"
)


def uh_version(checkout: Path | None = None) -> list[str]:
    """`uh --version`'s lines in a process of `checkout`'s package (this one's by default), then the heavy modules
    it imported."""
    env = os.environ | ({"PYTHONPATH": str(checkout / "src")} if checkout else {})
    run = subprocess.run([sys.executable, "-c", VERSION], cwd=checkout, env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    return run.stdout.splitlines()


def test_uh_version_prints_the_version_and_this_checkouts_code_hash_without_torch():
    """Issue 51: `uh --version` says which code this is, by the hash a result.json and a check_report.json record
    (runs/provenance.py: issue 59, one hash of the whole package), beside its revision and whether the tree differs
    from it (issue 61), and stays fast: no torch, no pandas."""
    out = uh_version()
    assert out[0] == f"uh {__version__}" and out[-1] == "[]"
    assert re.fullmatch(rf"code sha256 {code_hash()}, revision \w+, modified: (yes|no)", out[1]), out
    assert out[2].startswith("(result.json: provenance.code_sha256, git_revision, tree_modified;"), out


def test_uh_version_says_modified_no_in_a_clean_clone_and_yes_once_it_is_edited(tmp_path: Path) -> None:
    """Issue 61: `uh --version` in a clean clone prints its revision and `modified: no`; an edit to the package makes
    it `modified: yes`, with the edited code's hash."""
    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        pytest.skip("this checkout has no git to clone")
    clone, package = tmp_path / "clone", tmp_path / "clone" / "src" / "uniform_herding"
    subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{root}", str(clone)], check=True)
    shutil.rmtree(package)  # the code under test, as this checkout has it, committed in the clone
    shutil.copytree(root / "src" / "uniform_herding", package, ignore=shutil.ignore_patterns("__pycache__"))
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run([*git, "add", "-A"], cwd=clone, check=True)
    subprocess.run([*git, "commit", "-qm", "this checkout's code", "--allow-empty"], cwd=clone, check=True)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clone, capture_output=True, text=True).stdout.strip()
    assert uh_version(clone)[1] == f"code sha256 {code_hash(package, clone)}, revision {head}, modified: no"
    (package / "catalogue.py").write_text((package / "catalogue.py").read_text() + "# an edit\n")
    assert uh_version(clone)[1] == f"code sha256 {code_hash(package, clone)}, revision {head}, modified: yes"


def test_uh_list_marks_the_runs_beyond_the_paper():
    out = CliRunner().invoke(main, ["list", "--wide"]).output.splitlines()
    marked = [line.split()[0] for line in out if "beyond the paper" in line]
    assert marked == list(BEYOND_PAPER)
    assert any(line.startswith("r3") and "[vs B1: memory=uniform_herding]" in line for line in out)
    assert "group refresh: B1 B3 r1 r2 r3" in out


def test_uh_list_fits_columns_wrapping_under_the_description_and_losing_nothing():
    """Issue 61.5: each line of uh list fits COLUMNS (120 here; its longest line was 192), continued under the
    description column; every word of --wide's lines is there, in order."""
    lines = CliRunner(env={"COLUMNS": "120"}).invoke(main, ["list"]).output.splitlines()
    wide = CliRunner().invoke(main, ["list", "--wide"]).output
    assert max(map(len, lines)) <= 120 and " ".join(lines).split() == wide.split()
    start = lines[0].index(RUNS["B0"].description)
    assert all(line[:start].isspace() for line in lines if not line.startswith((*RUNS, "group")))


def test_a_refusal_of_the_library_is_one_line_and_its_exit_code_at_the_edge(monkeypatch):
    """The library raises errors.UhError and never imports click; cli.py alone turns it into a line and a code."""
    import click
    from click.testing import CliRunner

    from uniform_herding import cli
    from uniform_herding.errors import UhError

    class Refused(UhError):
        exit_code = 2

    @click.command("refuses")
    def refuses() -> None:
        raise Refused("the archive is not CIFAR-100's; give --data-dir the folder that holds it")

    monkeypatch.setitem(cli.main.commands, "refuses", refuses)
    result = CliRunner().invoke(cli.main, ["refuses"])
    assert result.exit_code == 2
    assert result.output == "Error: the archive is not CIFAR-100's; give --data-dir the folder that holds it\n"
