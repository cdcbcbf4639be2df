"""The documents tell one current truth and need nothing outside the repository.

Every Markdown document in the repository is read. A link, or a repository path written in code (a
path under one of the repository's own folders), must name something that is in the repository, and
a link's #anchor a heading of its target. A `uh` command, a profile (`--profile P`, profile `P`) and a
run ID (`uh run ID`, `./reproduce.sh ID`) written in code must be ones `uh` and `reproduce.sh` know.
No document or code comment may point outside the repository. CITATION.cff must be valid CFF 1.2.0,
checked with check-jsonschema's built-in copy of the schema (no network). The lists of memory policies and
other components, and what each reads, are the registries' (components.py); docs/extending.md's worked
example is the code that runs and is tested, and its refusals are the lines `uh` prints.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import inspect
import itertools
import json
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import click
import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from markdown_it import MarkdownIt

from uniform_herding.catalogue import KEYS, PAPER_RUNS, PROFILES, RUN_GROUPS, RUNS, SEP, ConfigError, resolve
from uniform_herding.cli import main
from uniform_herding.method import components, memory
from uniform_herding.method.config import OPEN_CHOICES
from uniform_herding.verdict.words import EXIT_INPUT, ClaimKind, MetricKind, VerdictKind

ROOT = Path(__file__).resolve().parents[1]
SKIP_DIRS = {
    ".git",
    ".pytest_cache",
    ".ruff_cache",
    ".hypothesis",
    "data",
    "results",
    "results-smoke",
    "build",
    "node_modules",
}


def is_document(path: Path, root: Path = ROOT) -> bool:
    """A Markdown file of the repository's own: not in data, results or build output, and not in a virtual
    environment, whatever its name (.venv, .venv312: any folder holding pyvenv.cfg), whose packages ship theirs."""
    parts = path.relative_to(root).parts
    folders = [root.joinpath(*parts[:i]) for i in range(1, len(parts))]
    return not (
        SKIP_DIRS & set(parts)
        or any(part.endswith(".egg-info") for part in parts)
        or any((folder / "pyvenv.cfg").exists() for folder in folders)
    )


DOCS = sorted(p for p in ROOT.rglob("*.md") if is_document(p))
# Folders of the repository whose paths a document may write in code (`docs/design.md`, `tests/x.py::test`).
REPO_FOLDERS = ("src", "tests", "docs", "expected_results", "paper", "benchmarks", ".ci")
# What a document or comment must not point to: the design notes and data folder beside the repository.
OUTSIDE = re.compile(r"\.\./shared|/work/|DESIGN(\.md|\s*§)")

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```[^\n]*\n(.*?)^```", re.S | re.M)
INLINE = re.compile(r"`([^`\n]+)`")
PATH = re.compile(rf"(?<![\w/.-])((?:{'|'.join(re.escape(f) for f in REPO_FOLDERS)})/[\w./-]*(?:::\w+)?)")
PLACEHOLDER = re.compile(r"[<>$*{}\[\]|…]|\.\.\.|^[A-Z_]+$")
# Words after which `uh` starts a command (else it is output, e.g. squeue's job name).
STARTS = {"$", "&&", "||", ";", "|", "(", "time", "do", "then", "exec"}


def code(text: str) -> list[str]:
    """The document's code: fenced blocks and inline spans."""
    fenced = FENCE.findall(text)
    return fenced + INLINE.findall(FENCE.sub("", text))


def anchors(path: Path | None, text: str) -> set[str]:
    """GitHub's anchors of the headings of `path` (else of `text`): lower case, punctuation dropped,
    spaces to '-'."""
    headings = re.findall(r"^#+\s+(.*?)\s*$", FENCE.sub("", path.read_text() if path else text), re.M)
    return {re.sub(r"[^\w\- ]", "", h.lower()).replace(" ", "-") for h in headings}


def link_problems(doc: Path, text: str) -> list[str]:
    """Links of `doc` (its `text`) whose target is not in the repository, or whose #anchor is no
    heading of the target."""
    problems = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        path = (doc.parent / file).resolve() if file else None  # None: this document
        if path and (not path.is_relative_to(ROOT) or not path.exists()):
            problems.append(f"{target}: no such path in the repository")
        elif anchor and (not path or path.suffix == ".md") and anchor not in anchors(path, text):
            where = path.relative_to(ROOT) if path else "this document"
            problems.append(f"{target}: {where} has no heading #{anchor}")
    return problems


def added_profiles(text: str) -> set[str]:
    """Profiles a document adds itself, in a diff it shows (`+PROFILES["name"] = ...`): known within it."""
    return set(re.findall(r'^\+PROFILES\["([\w-]+)"\]', text, re.M))


def path_problems(text: str) -> list[str]:
    """Repository paths written in a document's code that do not exist (and tests that are not there)."""
    problems = []
    own = tuple(f"expected_results/{name}/" for name in added_profiles(text))
    for snippet in code(text):
        for token in PATH.findall(snippet):
            if PLACEHOLDER.search(token) or (own and token.startswith(own)):
                continue
            file, _, name = token.rstrip(".,;:").partition("::")
            path = ROOT / file
            if not path.exists():
                problems.append(f"{token}: no such path in the repository")
            elif name and not re.search(rf"^\s*(def|class) {name}\b", path.read_text(), re.M):
                problems.append(f"{token}: {file} has no {name}")
    return problems


def variant(name: str) -> bool:
    """Whether `name` is a variant ID that `uh run` accepts (B3+rho=5)."""
    try:
        resolve(name)
    except ConfigError:
        return False
    return SEP in name


def reproduce_targets() -> set[str]:
    """The targets reproduce.sh accepts: its case list, and every run ID."""
    script = (ROOT / "reproduce.sh").read_text()
    case = re.search(r"^\s*(all \|[^)]*)\) ;;", script, re.M)
    assert case, "reproduce.sh's list of targets not found"
    return {t.strip() for t in case.group(1).split("|")} | set(RUNS)


def name_problems(text: str) -> list[str]:
    """`uh` commands, run IDs and profiles in a document's code (and profiles in its prose) that are unknown."""
    ctx = click.Context(main)
    commands = set(main.list_commands(ctx))
    known_ids, targets = set(RUNS) | set(RUN_GROUPS), reproduce_targets()
    profiles = set(PROFILES) | added_profiles(text)
    problems = []
    for snippet in code(text):
        for words in (line.split() for line in snippet.splitlines()):
            for i, word in enumerate(words):
                rest = [w.rstrip(",;)") for w in words[i + 1 :]]
                starts = i == 0 or words[i - 1] in STARTS or "=" in words[i - 1] or words[i - 1].isdigit()
                if word == "uh" and starts and rest and re.fullmatch(r"[a-z][a-z-]*", rest[0]):
                    command = main.get_command(ctx, rest[0])
                    if rest[0] not in commands:
                        problems.append(f"uh {rest[0]}: no such command")
                    elif isinstance(command, click.Group) and len(rest) > 1 and not rest[1].startswith("-"):
                        if rest[1] not in command.list_commands(ctx) and not PLACEHOLDER.search(rest[1]):
                            problems.append(f"uh {rest[0]} {rest[1]}: no such command")
                    elif rest[0] == "run":
                        for arg in rest[1:]:
                            if arg.startswith(("-", "#", "\\", "&", ";", "|", ">", ")")):
                                break
                            if arg not in known_ids and not PLACEHOLDER.search(arg) and not variant(arg):
                                problems.append(f"uh run {arg}: no such run ID or group")
                target = rest[0] if word == "./reproduce.sh" and rest else "-"
                if not target.startswith("-") and target not in targets and not PLACEHOLDER.search(target):
                    problems.append(f"./reproduce.sh {target}: no such target")
                if word == "--profile" or word.startswith("--profile="):
                    value = word.partition("=")[2] or (rest[0] if rest else "")
                    if value and not PLACEHOLDER.search(value) and value not in profiles and value != "P":
                        problems.append(f"--profile {value}: no such profile")
    for name in re.findall(r"\bprofiles? `([\w-]+)`", text):
        if name not in profiles:
            problems.append(f"profile `{name}`: no such profile")
    return problems


def test_a_package_readme_in_any_virtual_environment_is_not_a_document(tmp_path: Path) -> None:
    for venv in (".venv", ".venv312", "env"):
        (tmp_path / venv).mkdir()
        (tmp_path / venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
        readme = tmp_path / venv / "lib" / "site-packages" / "README.md"
        assert not is_document(readme, tmp_path)
    assert is_document(tmp_path / "docs" / "design.md", tmp_path)


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_and_path_of_a_document_is_in_the_repository(doc: Path) -> None:
    text = doc.read_text()
    assert link_problems(doc, text) + path_problems(text) == []


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_profile_and_run_id_of_a_document_is_one_uh_knows(doc: Path) -> None:
    assert name_problems(doc.read_text()) == []


def test_no_document_or_comment_points_outside_the_repository() -> None:
    tests = (p for p in (ROOT / "tests").rglob("*.py") if p.name != "test_docs.py")  # this file names them
    sources = [*DOCS, *(ROOT / "src").rglob("*.py"), *tests]
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in sources for m in OUTSIDE.finditer(p.read_text())]
    assert found == []


# A table's delimiter row (`|---|:--:|`): what makes the line above it a header (GitHub Flavored Markdown).
DELIMITER = re.compile(r"^\|?\s*:?-+:?\s*(\|\s*:?-+:?\s*)*\|?$")


def row_cells(line: str) -> list[str]:
    """The cells of a table row as GitHub splits them: at every `|` not escaped as `\\|`, inside backticks too
    (GFM splits the row before it reads code spans), the outer pipes dropped."""
    line = line.strip()
    line = line[1:] if line.startswith("|") else line
    line = line[:-1] if line.endswith("|") and not line.endswith("\\|") else line
    return re.split(r"(?<!\\)\|", line)


def table_shape_problems(text: str) -> list[str]:
    """Rows of the document's Markdown tables (outside fenced code) whose number of cells is not the header's:
    GitHub drops the extra cells of a row and pads a short one, so a row out of shape loses or shifts text. A
    table runs to the next blank line: a line of text right under it is a row too."""
    lines = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), text).splitlines()
    problems = []
    for i in range(1, len(lines)):
        header = lines[i - 1]
        if "|" not in header or not DELIMITER.match(lines[i].strip()) or "|" not in lines[i]:
            continue
        width = len(row_cells(header))
        for j in itertools.takewhile(lambda j: lines[j].strip(), range(i, len(lines))):  # to a blank line
            if (n := len(row_cells(lines[j]))) != width:
                problems.append(f"line {j + 1}: {n} cells under a header of {width}: {lines[j][:60]}")
    return problems


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_row_of_every_table_has_as_many_cells_as_its_header(doc: Path) -> None:
    assert table_shape_problems(doc.read_text()) == []


def test_the_table_check_finds_rows_out_of_shape_and_reads_escaped_pipes_as_text() -> None:
    text = (
        "| a | b |\n|---|---|\n| 1 | x \\| y |\n| 2 | 3 | 4 |\n| `p|q` | 5 |\n\n"
        "```text\n| in | code |\n|---|---|\n| not | a | table |\n```\n"
        "c | d\n:-|-:\n5\n"
    )
    assert table_shape_problems(text) == [
        "line 4: 3 cells under a header of 2: | 2 | 3 | 4 |",
        "line 5: 3 cells under a header of 2: | `p|q` | 5 |",
        "line 14: 1 cells under a header of 2: 5",
    ]


# The documents a reviewer follows. `./reproduce.sh` calls `.venv/bin/uh` itself, but a `uh ...` they write
# works only once the venv is on PATH: the README's setup says so, and every other document says it or links
# there before its first such command.
REVIEWER_DOCS = [
    ROOT / "README.md",
    ROOT / "ARTIFACT.md",
    *sorted((ROOT / "docs").glob("*.md")),
    ROOT / "expected_results" / "README.md",
    ROOT / "paper" / "README.md",
]
README_SETUP = "Try it on a CPU (no GPU, no dataset download)"
ACTIVATE = "source .venv/bin/activate"
UH_ON_PATH = re.compile(rf"{re.escape(ACTIVATE)}|README\.md#{re.escape(anchors(None, '# ' + README_SETUP).pop())}")
BARE_UH = re.compile(r"(?<![\w/.-])uh(?= +-{0,2}[a-z])")


def first_bare_uh(text: str) -> int | None:
    """Where the document's first `uh` command in code (a fenced block or an inline span) starts, if any."""
    blanked = FENCE.sub(lambda m: " " * len(m.group(0)), text)
    snippets = [(m.start(1), m.group(1)) for m in (*FENCE.finditer(text), *INLINE.finditer(blanked))]
    return min((at + m.start() for at, snippet in snippets for m in BARE_UH.finditer(snippet)), default=None)


def test_the_readmes_setup_puts_uh_on_path() -> None:
    setup = section(ROOT / "README.md", f"## {README_SETUP}")
    assert any(ACTIVATE in block for block in FENCE.findall(setup))


@pytest.mark.parametrize("doc", REVIEWER_DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_bare_uh_command_comes_after_the_reader_is_told_to_put_uh_on_path(doc: Path) -> None:
    text = doc.read_text()
    if (first := first_bare_uh(text)) is not None:
        told = UH_ON_PATH.search(text)
        line = text.count("\n", 0, first) + 1
        assert told and told.start() < first, (
            f"line {line} writes a `uh` command before it says `{ACTIVATE}` or links the README's setup"
        )


def test_the_uh_check_finds_a_command_before_the_reader_is_told() -> None:
    assert first_bare_uh("See `uh check`.\n```bash\nuh run B3\n```\n") == 5
    assert first_bare_uh("`.venv/bin/uh check`, the `uh` command, `uh`'s\n```text\n.venv/bin/uh run\n```") is None
    assert first_bare_uh("```bash\nsource .venv/bin/activate\nuh --help\n```") == 34


@pytest.fixture(scope="module")
def smoke_summary():
    """benchmarks/smoke-summary, loaded as a module."""
    script = ROOT / "benchmarks" / "smoke-summary"
    loader = importlib.machinery.SourceFileLoader("smoke_summary", str(script))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("smoke_summary", loader))
    loader.exec_module(module)
    return module


@pytest.mark.slow
def test_the_smoke_summary_the_guide_shows_is_what_the_smoke_prints(smoke_summary) -> None:
    """The summary `uh check` prints for the smoke's runs (the committed ones, restricted to `uh run all`'s run IDs:
    36 metrics, no r1-r3) is the block docs/reproducing.md shows."""
    printed = smoke_summary.summary()
    assert f"metrics: {3 * len(PAPER_RUNS)} REPLICATED (" in printed and "PIPELINE CHECK PASSED" in printed
    assert smoke_summary.shown() == printed, f"regenerate it: {smoke_summary.COMMAND}"


def section(path: Path, heading: str) -> str:
    """The text under `heading` in the document at `path`, up to the next heading of level 2."""
    return path.read_text().split(f"\n{heading}\n")[1].split("\n## ")[0]


def test_the_reproducing_guide_lists_every_option_reproduce_sh_takes() -> None:
    """Every option `./reproduce.sh --help` names is in docs/reproducing.md's list of options."""
    shown = subprocess.run(["bash", str(ROOT / "reproduce.sh"), "--help"], capture_output=True, text=True)
    options = set(re.findall(r"(?<![\w-])--[a-z][a-z-]*", shown.stdout.split("\nOptions:", 1)[1])) - {"--help"}
    listed = re.search(r"^Options: .*?\n\n", (ROOT / "docs" / "reproducing.md").read_text(), re.S | re.M)
    assert listed and options and sorted(o for o in options if f"`{o}" not in listed.group(0)) == []


def test_the_reproducing_guide_lists_every_profile() -> None:
    profiles = section(ROOT / "docs" / "reproducing.md", "## Profiles")
    assert set(re.findall(r"^\| `([\w-]+)`", profiles, re.M)) == set(PROFILES)


# GitHub's Markdown, as far as the documents use it: CommonMark and its tables.
MARKDOWN = MarkdownIt("commonmark").enable("table")
README_WORDS = 700  # one rendered page


def rendered_words(text: str) -> list[str]:
    """The words a reader sees of `text` rendered: its prose, table cells, inline code and code blocks (code blocks
    included: they fill the page too), split at white space; never a link's target, a comment or markup."""
    words = []
    for token in MARKDOWN.parse(text):
        if token.type in ("fence", "code_block"):
            words += token.content.split()
        elif token.type == "inline":
            parts = (
                " " if c.type in ("softbreak", "hardbreak") else c.content
                for c in token.children or []
                if c.type in ("text", "code_inline", "softbreak", "hardbreak")
            )
            words += "".join(parts).split()
    return words


def test_the_word_count_reads_the_rendered_page() -> None:
    text = (
        "# Title\n\nTwo **bold** [words](https://example.org/a-long-target)<!-- no -->\n\n"
        "| a | `b c` |\n|---|---|\n\n```bash\nuh check\n```\n"
    )
    assert rendered_words(text) == ["Title", "Two", "bold", "words", "a", "b", "c", "uh", "check"]


def test_the_readme_is_one_rendered_page_in_the_reviewers_order() -> None:
    """What it is, the status (what never ran included), a CPU try-out, the GPU run, the verdicts, links; at most
    README_WORDS words rendered, code blocks included (rendered_words); and no table cell of the first pages a
    paragraph long."""
    readme = ROOT / "README.md"
    words = len(rendered_words(readme.read_text()))
    assert words <= README_WORDS, f"the README renders {words} words, more than a page ({README_WORDS})"
    assert re.findall(r"^## (.+)$", readme.read_text(), re.M) == [
        "Status",
        README_SETUP,
        "The paper's runs, on a GPU",
        "The verdicts of `uh check`",
        "More",
    ]
    never = section(readme, "## Status").split("**Never run:**")[1]
    assert all(s in never for s in ("the paper's size", "torch 2.11.0+cu128"))
    cells = [
        c.strip()
        for p in (readme, ROOT / "ARTIFACT.md")
        for line in p.read_text().splitlines()
        if line.startswith("|")
        for c in line.strip("|").split("|")
    ]
    assert max(map(len, cells)) <= 250


def tracked_docs() -> list[Path]:
    """Every Markdown file git tracks (DOCS, where this is no git checkout)."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--", "*.md"], capture_output=True, text=True)
    if listed.returncode != 0:
        return DOCS
    return sorted(p for p in (ROOT / name for name in listed.stdout.split("\0") if name) if p.exists())


def rows_outside_tables(text: str) -> list[str]:
    """Lines that read as table rows (they start with `|`) but render outside every table and code block: a table
    split by a blank line renders its header and the rows above the split, and the rest as a paragraph of pipes."""
    inside: set[int] = set()
    for token in MARKDOWN.parse(text):
        if token.type in ("table_open", "fence", "code_block") and token.map:
            inside.update(range(*token.map))
    return [
        f"line {i + 1}: {line.strip()[:60]}"
        for i, line in enumerate(text.splitlines())
        if line.lstrip().startswith("|") and i not in inside
    ]


@pytest.mark.parametrize("doc", tracked_docs(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_table_renders_whole(doc: Path) -> None:
    assert rows_outside_tables(doc.read_text()) == []


def test_the_table_check_finds_rows_split_from_their_table() -> None:
    text = "| a | b |\n|---|---|\n| 1 | 2 |\n\n| 3 | 4 |\n\n```text\n| in | code |\n```\n\n| no | delimiter |\n"
    assert rows_outside_tables(text) == ["line 5: | 3 | 4 |", "line 11: | no | delimiter |"]


def rendered_tables(text: str) -> list[list[list[str]]]:
    """Each table of `text` as it renders: its rows (the header first), each a list of its cells' source text."""
    tables: list[list[list[str]]] = []
    for before, token in itertools.pairwise([None, *MARKDOWN.parse(text)]):
        if token.type == "table_open":
            tables.append([])
        elif token.type == "tr_open":
            tables[-1].append([])
        elif token.type == "inline" and before and before.type in ("th_open", "td_open"):  # a cell's content
            tables[-1][-1].append(token.content)
    return tables


EXPECTED_README = ROOT / "expected_results" / "README.md"
EXIT_TABLE = "### The verdict and its exit code"
EXIT_ANCHOR = "expected_results/README.md#" + anchors(None, EXIT_TABLE).pop()


def subsection(path: Path, heading: str) -> str:
    """The text under `heading` in the document at `path`, up to the next heading of any level."""
    return path.read_text().split(f"\n{heading}\n")[1].split("\n#")[0]


def test_one_table_holds_every_exit_code_as_words_py_gives_it() -> None:
    """expected_results/README.md's exit-code table renders whole, with a row per verdict word and the code
    words.EXIT_CODES gives it, a row for EXIT_INPUT (2, unusable inputs) and one for each signal (cli.py, 128 + it):
    codes 0-6, each verdict once, 130 and 143."""
    table = rendered_tables(subsection(EXPECTED_README, EXIT_TABLE))[0]
    assert table[0][:2] == ["exit", "word"]
    rows = [
        (int(code), re.match(r"`([A-Z ]+?)(?: \(|`)", word))
        for code, word, *_ in table[1:]
        if "./reproduce.sh all" not in word  # its rows where it does not start: the next test's
    ]
    assert {(m.group(1), code) for code, m in rows if m} == {(v.value, v.code) for v in VerdictKind}
    assert [code for code, m in rows if not m] == [EXIT_INPUT, 128 + signal.SIGINT, 128 + signal.SIGTERM]
    assert sorted({code for code, _ in rows}) == [*range(7), 130, 143]


def test_the_exit_code_table_has_reproduce_sh_alls_codes_where_it_does_not_start() -> None:
    """Issue 61.7: `./reproduce.sh all` that does not start exits 1 (a "no" to its question, or uh price's refusal:
    `|| exit $?`) or 2 (no terminal to answer it; tests/test_container.py runs each); the table has a row of its
    own for each code, as agree_to_price exits."""
    table = rendered_tables(subsection(EXPECTED_README, EXIT_TABLE))[0]
    rows = [(int(code), when) for code, word, when, *_ in table[1:] if "./reproduce.sh all" in word]
    agree = (ROOT / "reproduce.sh").read_text().split("\nagree_to_price() {\n")[1].split("\n}\n")[0]
    assert sorted(code for code, _ in rows) == sorted(map(int, re.findall(r"exit (\d)\b", agree))) == [1, 2]
    assert all("nothing was run" in when for _, when in rows)


# A verdict word paired with an exit code (`INCOMPLETE` (exit 3), NOT REPLICATED (1)): a list of codes of its own.
WORD_AND_CODE = re.compile(rf"\b(?:{'|'.join(re.escape(v.value) for v in VerdictKind)})`?,?\s*\(?(?:exit |exits )?\d\b")


def test_the_readme_and_artifact_md_point_to_the_exit_code_table_and_list_no_codes() -> None:
    for doc in (ROOT / "README.md", ROOT / "ARTIFACT.md"):
        text = doc.read_text()
        assert EXIT_ANCHOR in text, f"{doc.name} does not link {EXIT_ANCHOR}"
        assert WORD_AND_CODE.findall(text) == [], doc.name


def test_the_exit_code_check_finds_a_word_paired_with_a_code() -> None:
    text = "`RESULTS REPLICATED` (exit 0), NOT REPLICATED (1), `INCOMPLETE`, exit 3; RESULTS REPLICATED (ACM v1.1)"
    assert WORD_AND_CODE.findall(text) == ["RESULTS REPLICATED` (exit 0", "NOT REPLICATED (1", "INCOMPLETE`, exit 3"]


GLOSSARY = ROOT / "docs" / "glossary.md"
GLOSSARY_WORDS = {
    "### A metric's words": MetricKind,
    "### A claim's words": ClaimKind,
    "### The verdict's words": VerdictKind,
}


def test_the_glossary_defines_every_word_uh_check_prints() -> None:
    """docs/glossary.md has a table per kind of words.py (MetricKind, ClaimKind, VerdictKind): a row for each of its
    words, in words.py's order, and a link to the rules in expected_results/README.md."""
    for heading, kind in GLOSSARY_WORDS.items():
        text = subsection(GLOSSARY, heading)
        rows = rendered_tables(text)[0][1:]
        assert [row[0] for row in rows] == [f"`{k.value}`" for k in kind], heading
        assert "expected_results/README.md" in text, heading


# A count of tests, as pytest prints it or in words: it drifts with every test added, so no document holds one.
# uh status's summary counts runs ("0 queued, 1 failed"), not tests.
TEST_COUNT = re.compile(r"(?<!queued, )\b\d[\d,]* (?:passed|skipped|failed|xfailed|tests|test files)\b")


def test_no_document_writes_down_a_test_count() -> None:
    found = [f"{p.relative_to(ROOT)}: {m.group(0)}" for p in DOCS for m in TEST_COUNT.finditer(p.read_text())]
    assert found == []


def test_the_paper_t4_times_quoted_are_the_sums_of_its_table() -> None:
    """The paper's T4 seconds per run ID (Table tab:app-compute, expected_results/paper_compute.csv) as
    docs/reproducing.md tables them (the hours of all 36 runs there and nowhere else), each claim's look 1 in
    ARTIFACT.md."""
    paper = pd.read_csv(ROOT / "expected_results" / "paper_compute.csv").set_index("run_id")

    def hours(run_ids: list[str]) -> float:  # three seeds each
        return round(3 * paper.loc[run_ids, "seconds_mean"].sum() / 3600, 1)

    guide = section(ROOT / "docs" / "reproducing.md", "## Hardware and time")
    rows = re.findall(r"^\| (\w\d) \| [^|]+ \| ([\d.]+) ± ([\d.]+) \| ([\d.]+) \|$", guide, re.M)
    assert {r: (float(s), float(sd), float(h)) for r, s, sd, h in rows} == {
        r: (paper.loc[r, "seconds_mean"], paper.loc[r, "seconds_std"], hours([r])) for r in PAPER_RUNS
    }
    every = hours(list(PAPER_RUNS))
    total = re.search(r"\*\*all 36 runs\*\* \| ([\d.]+) per seed \| \*\*([\d.]+)\*\*", guide)
    assert total and (float(total[1]), float(total[2])) == (round(paper["seconds_mean"].sum(), 1), every)
    # The total lives in the guide's table alone; every other place links to it.
    figure = re.compile(rf"\b(?:{re.escape(str(every))}|{round(every)}) ?(?:h\b|hours|GPU-hours|T4)")
    elsewhere = [p.relative_to(ROOT) for p in DOCS if figure.search(p.read_text().replace(guide, ""))]
    assert elsewhere == []
    claims = re.findall(
        r"^\| C\d \| `uh run ([\w ]+) && uh check --claim C\d` \| ([\d.]+) \|", (ROOT / "ARTIFACT.md").read_text(), re.M
    )
    assert len(claims) == 5 and all(float(h) == hours(ids.split()) for ids, h in claims)


def test_the_design_table_has_a_row_for_every_open_choice() -> None:
    """docs/design.md's one-line table names every open choice a result can record: config.OPEN_CHOICES (every
    run's) and each component's (components.py), no more."""
    table = section(ROOT / "docs" / "design.md", "## Every choice, one line each")
    every = set(OPEN_CHOICES) | {
        key for registry in components.CHOICES.values() for part in registry.values() for key in part.choices
    }
    assert set(re.findall(r"^\| [^|`]+\(`(\w+)`\) \|", table, re.M)) == every


def test_the_checks_find_a_planted_bad_link_path_command_profile_and_run_id() -> None:
    """The checks are not vacuous: each finds its planted fault in a document beside the real ones."""
    text = (
        "[design](design.md) [gone](no-such-file.md) [anchor](design.md#no-such-heading) [here](#planted)\n"
        "# Planted\n`tests/test_docs.py::no_such_test` `docs/no-such-dir/` `docs/design.md`\n"
        "```bash\nuh frobnicate\nuh run B9 B3 --profile paperish\n./reproduce.sh everything\nuh check\n```\n"
    )
    assert link_problems(ROOT / "docs" / "planted.md", text) == [
        "no-such-file.md: no such path in the repository",
        "design.md#no-such-heading: docs/design.md has no heading #no-such-heading",
    ]
    assert path_problems(text) == [
        "tests/test_docs.py::no_such_test: tests/test_docs.py has no no_such_test",
        "docs/no-such-dir/: no such path in the repository",
    ]
    assert name_problems(text) == [
        "uh frobnicate: no such command",
        "uh run B9: no such run ID or group",
        "--profile paperish: no such profile",
        "./reproduce.sh everything: no such target",
    ]


def test_citation_cff_is_valid_cff_and_claims_no_release_that_does_not_exist() -> None:
    tool = shutil.which("check-jsonschema") or str(Path(sys.executable).parent / "check-jsonschema")
    if not Path(tool).exists():
        pytest.skip('check-jsonschema not installed: pip install -c constraints.txt -e ".[dev]"')
    cff = ROOT / "CITATION.cff"
    cmd = [tool, "--builtin-schema", "vendor.citation-file-format", "--default-filetype", "yaml", str(cff)]
    result = subprocess.run(cmd, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr
    citation = yaml.safe_load(cff.read_text())
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert citation["license"] == project["license"]
    tags = subprocess.run(["git", "-C", str(ROOT), "tag", "--list"], capture_output=True, text=True).stdout.split()
    if not tags:  # no release: the file claims none (a release sets its version and date together)
        assert "version" not in citation and "date-released" not in citation
    else:
        assert citation["version"] == project["version"] and "date-released" in citation


def test_zenodo_json_says_what_citation_cff_says() -> None:
    """Issue 52: Zenodo's GitHub integration archives a tagged release with .zenodo.json's metadata (which it reads
    before CITATION.cff): its title, creators (a person as "Family, Given"), license, keywords and version are
    CITATION.cff's, its description the abstract; neither has a version before a release (the test above), and the
    DOI is Zenodo's to mint."""
    zenodo = json.loads((ROOT / ".zenodo.json").read_text())
    citation = yaml.safe_load((ROOT / "CITATION.cff").read_text())

    def creator(author: dict) -> str:
        return author.get("name") or f"{author['family-names']}, {author['given-names']}"

    assert zenodo["upload_type"] == "software" and zenodo["access_right"] == "open"
    assert zenodo["title"] == citation["title"] and zenodo["description"] == citation["abstract"]
    assert [c["name"] for c in zenodo["creators"]] == [creator(a) for a in citation["authors"]]
    assert zenodo["license"] == citation["license"] and zenodo["keywords"] == citation["keywords"]
    assert zenodo.get("version") == citation.get("version") and "doi" not in zenodo


EXTENDING = ROOT / "docs" / "extending.md"


def table_rows(text: str, header: str) -> list[list[str]]:
    """The cells of each row of the Markdown table under `header` (its first line) in `text`."""
    block = text.split(header + "\n", 1)[1].split("\n\n", 1)[0]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in block.splitlines()[1:]]


def test_the_docs_list_the_registered_components_and_what_each_reads() -> None:
    """docs/extending.md's values of memory, loss, head and readout, and its table of who reads each setting, are
    the registries' (a new policy fails this until the docs name it); docs/design.md names every policy."""
    text = EXTENDING.read_text()
    values = {row[0].strip("`"): re.findall(r"`([^`]+)`", row[1]) for row in table_rows(text, "| key | values |")}
    for key, registry in components.CHOICES.items():
        assert values[key] == list(registry), key
    read_by: dict[str, list[str]] = {}
    for keys, readers in table_rows(text, "| setting | read by |"):
        for key in re.findall(r"`(\w+)`", keys):
            read_by[key] = readers.replace("`", "").split(", ")
    expected = {key: ["every run"] if key in components.PROTOCOL.reads else components.readers(key) for key in KEYS}
    assert read_by == expected
    memory_section = (ROOT / "docs" / "design.md").read_text().split("## Memory\n")[1].split("\n## ")[0]
    assert [name for name in components.POLICIES if f"`{name}`" not in memory_section] == []


def fenced_python(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)


def test_the_worked_example_is_the_code_that_runs_and_is_tested() -> None:
    """Each Python block of docs/extending.md's worked example is the reservoir's class in memory.py, its entry in
    components.py, or one of its tests in tests/method/test_memory.py, verbatim."""
    section = EXTENDING.read_text().split("## Adding a memory policy")[1].split("\n## ")[0]
    blocks = fenced_python(section)
    tests = (ROOT / "tests" / "method" / "test_memory.py").read_text()
    assert len(blocks) == 4 and blocks[0] == inspect.getsource(memory.Reservoir)
    assert blocks[1].startswith('    "reservoir": Policy(') and blocks[1] in inspect.getsource(components)
    for block in blocks[2:]:  # whole test functions: from a `def` at the line's start to two blank lines
        assert block.startswith("def test_") and f"\n{block}\n\n" in f"{tests}\n\n", block[:80]


def doc_refusals(text: str) -> list[tuple[str, str]]:
    """(`uh` command, the Error line the document shows for it) for every refusal of `uh run` or `uh sweep`."""
    pairs = []
    for block in FENCE.findall(text):
        lines = block.splitlines()
        for command, output in itertools.pairwise(lines):
            if re.match(r"\$ uh (run|sweep) ", command) and output.startswith("Error: ") and "..." not in output:
                pairs.append((command[len("$ uh ") :], output))
    return pairs


@pytest.mark.parametrize(("command", "line"), doc_refusals(EXTENDING.read_text()), ids=lambda x: x[:40])
def test_the_refusals_docs_extending_md_shows_are_what_uh_prints(command, line, no_training, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)  # a command that wrote anything would write here
    result = CliRunner().invoke(main, shlex.split(command))
    assert (result.exit_code, result.output.rstrip("\n")) == (2, line)
    assert list(tmp_path.iterdir()) == []
