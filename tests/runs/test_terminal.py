"""runs/terminal.py: tables and lines fitted to the width, durations, and the progress of long work."""

from __future__ import annotations

import multiprocessing
import re
import time

import pytest

from uniform_herding.runs.terminal import Column, Progress, columns, duration, fit_line, fit_table


@pytest.mark.parametrize(("seconds", "text"), [(42.4, "42 s"), (119, "119 s"), (600, "10.0 min"), (3 * 3600, "3.00 h")])
def test_durations_are_printed_in_the_unit_a_reader_wants(seconds, text):
    assert duration(seconds) == text


@pytest.mark.parametrize(("value", "width"), [(None, 120), ("150", 150), ("100", 100), ("60", 100)])
def test_the_width_is_columns_at_least_100_and_120_where_unset(value, width, monkeypatch) -> None:
    """Issue 52: COLUMNS, never under 100; 120 where neither COLUMNS nor a terminal says (pytest's output is none)."""
    if value is None:
        monkeypatch.delenv("COLUMNS", raising=False)
    else:
        monkeypatch.setenv("COLUMNS", value)
    assert columns() == width and columns(wide=True) is None


def table() -> list[Column]:
    return [
        Column("id", ["a", "bb"], "<"),
        Column("value", ["1.00", "22.00"], gap=2),
        Column("extra", ["x" * 20, "y" * 20], fit="drop"),
        Column("note", ["first note", ""], "<", fit="wrap"),
        Column("more", ["m" * 10, "n" * 10], fit="drop"),
    ]


def test_a_table_drops_the_drop_columns_last_first_then_wraps_then_keeps_the_rest() -> None:
    """None: every column in place; then, as the width shrinks, `more` (the last droppable) goes, then `extra`, then
    `note` moves under its row (none for an empty cell); the kept columns stay even where they do not fit. The line
    naming what was left out wraps to the width too (issue 52: uh check's ran over)."""
    assert fit_table(table(), None) == [
        "id  value                extra note             more",
        "a    1.00 xxxxxxxxxxxxxxxxxxxx first note mmmmmmmmmm",
        "bb  22.00 yyyyyyyyyyyyyyyyyyyy            nnnnnnnnnn",
    ]
    assert fit_table(table(), 45) == [
        "id  value                extra note",
        "a    1.00 xxxxxxxxxxxxxxxxxxxx first note",
        "bb  22.00 yyyyyyyyyyyyyyyyyyyy",
        "(more left out to fit 45 columns; --wide",
        "    shows every column)",
    ]
    assert fit_table(table(), 20) == [
        "id  value note",
        "a    1.00 first note",
        "bb  22.00",
        "(extra, more left",
        "    out to fit 20",
        "    columns; --wide",
        "    shows every",
        "    column)",
    ]
    assert fit_table(table(), 10)[:5] == ["id  value", "    note", "a    1.00", "    first note", "bb  22.00"]
    assert fit_table(table(), 5)[0] == "id  value"  # kept columns stay, over the width


def test_a_long_line_wraps_at_spaces_and_never_cuts_a_path() -> None:
    path = "/results/" + "x" * 40 + "/seed-1/log.err"
    text = f"B0 seed 1: failed [Slurm job 4] FAILED: Error: out of memory; log: {path}"
    assert fit_line(text, None) == text and fit_line("short", 10) == "short"
    assert fit_line(text, 40).splitlines() == [
        "B0 seed 1: failed [Slurm job 4] FAILED:",
        "    Error: out of memory; log:",
        f"    {path}",
    ]
    # an indented line's continuation goes past its own indent (uh check's evidence under a claim)
    assert fit_line("  evidence: a b c d e f", 16).splitlines() == ["  evidence: a b", "      c d e f"]


def work(progress: Progress, n: int) -> None:
    for _ in range(n):
        progress.advance()


def test_progress_away_from_a_terminal_says_what_starts_beats_and_ends(capsys) -> None:
    """Issue 52: a line as the work starts, one every `every` seconds with the count so far (counted in a forked
    process too), one per stage, one when it ends: never 10 s in silence."""
    with Progress("timing: something", total=6, unit="step", every=0.3, terminal=False) as progress:
        child = multiprocessing.get_context("fork").Process(target=work, args=(progress, 2))
        child.start()
        child.join()
        time.sleep(0.8)
        progress.stage("half done")
        work(progress, 4)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "timing: something ..."
    beats = [line for line in lines if line.endswith("so far")]
    assert len(beats) >= 2 and all(re.fullmatch(r"timing: something: 2 of 6 steps, \d s so far", b) for b in beats)
    assert re.fullmatch(r"timing: something: half done \(\d s\)", lines[-2])
    assert re.fullmatch(r"timing: something: done, 6 of 6 steps in \d s", lines[-1])


def test_progress_on_a_terminal_draws_a_bar_that_ends_at_the_count(capsys) -> None:
    with Progress("uh oc", total=5, unit="re-run", terminal=True) as progress:
        work(progress, 5)
        time.sleep(1.2)  # the bar is redrawn every second, between the work's own steps too
    err = capsys.readouterr().err
    assert "uh oc:   0%" in err and "5/5 [" in err and "re-run/s]" in err
