"""What a command shows its reader while it works and when it prints: progress of long work, and output that fits.

`Progress`: no command leaves its reader 10 s in silence. On a terminal a tqdm bar, redrawn every second so that its
clock moves between steps; elsewhere (a log, a pipe) a line when the work starts, one per stage it names (`stage`),
one every `every` seconds if asked, and one when it ends. Its count lives in shared memory, so the processes a
forked pool starts inside it count too (`advance`). All of it goes to standard error: standard output keeps the
command's figures alone.

`fit_table` and `fit_line`: tables and lines no wider than `columns()` (COLUMNS, else the terminal's width; at least
100, 120 where neither says), the informational columns dropped or wrapped first; `--wide` passes `None`, everything.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import sys
import textwrap
import threading
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Literal

MIN_COLUMNS, DEFAULT_COLUMNS = 100, 120
WRAP_INDENT = "    "  # a wrapped column's cell and a long line's continuation start here
HEARTBEAT_S = 8.0  # Progress's `every` for long work: away from a terminal, a line at least this often (under 10 s)


def columns(wide: bool = False) -> int | None:
    """The width output may fill: COLUMNS, else the terminal's, at least MIN_COLUMNS; DEFAULT_COLUMNS where neither
    says (a pipe, a log); None with --wide (`wide`): every column, however wide."""
    if wide:
        return None
    return max(MIN_COLUMNS, shutil.get_terminal_size((DEFAULT_COLUMNS, 24)).columns)


@dataclass(frozen=True)
class Column:
    """One column of a printed table. `fit`: keep it always; `wrap` its cells onto a line of their own under the
    row where the table is too wide; or `drop` it, first of all. `gap`: the spaces before it; `width`: at least."""

    header: str
    cells: list[str]
    align: Literal["<", ">"] = ">"
    fit: Literal["keep", "wrap", "drop"] = "keep"
    gap: int = 1
    width: int = 0


def _render(columns: list[Column], wrapped: list[Column]) -> list[str]:
    widths = [max(c.width, len(c.header), *(len(x) for x in c.cells)) for c in columns]
    rows = [[c.header for c in columns], *zip(*(c.cells for c in columns), strict=True)]
    extra = [[c.header for c in wrapped], *zip(*(c.cells for c in wrapped), strict=True)] if wrapped else []
    lines = []
    for i, row in enumerate(rows):
        placed = enumerate(zip(columns, row, widths, strict=True))
        cells = [" " * c.gap * (j > 0) + f"{cell:{c.align}{w}}" for j, (c, cell, w) in placed]
        lines.append("".join(cells).rstrip())
        lines += [WRAP_INDENT + cell for cell in (extra[i] if extra else []) if cell.strip()]
    return lines


def fit_table(table: list[Column], width: int | None) -> list[str]:
    """The table's lines, none wider than `width` where the kept columns allow it (None: every column in place).
    Over the width, the `drop` columns go, the last first, then the `wrap` columns move under their rows, the last
    first; a last line names what was left out. The `keep` columns stay, even where a line then runs over."""
    shown, wrapped = list(table), []
    movable = [c for c in reversed(table) if c.fit == "drop"] + [c for c in reversed(table) if c.fit == "wrap"]
    lines = _render(shown, wrapped)
    while width is not None and max(map(len, lines)) > width and movable:
        column = movable.pop(0)
        shown.remove(column)
        wrapped = [column, *wrapped] if column.fit == "wrap" else wrapped
        lines = _render(shown, wrapped)
    dropped = [c.header for c in table if c not in shown and c not in wrapped]
    if dropped:
        note = f"({', '.join(dropped)} left out to fit {width} columns; --wide shows every column)"
        lines += fit_line(note, width).splitlines()
    return lines


def fit_line(text: str, width: int | None, indent: str | None = None) -> str:
    """`text` wrapped at spaces to `width` (None: as it is), its continuation lines indented by `indent` (default:
    past its own indent; a table's last column: under that column); a word longer than the width (a path) is never
    cut."""
    if width is None or len(text) <= width:
        return text
    indent = text[: len(text) - len(text.lstrip(" "))] + WRAP_INDENT if indent is None else indent
    return "\n".join(
        textwrap.wrap(text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False)
    )


def duration(seconds: float) -> str:
    """Seconds in the unit a reader wants: s below 2 minutes, min below 2 hours, else h."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.2f} h"


def drawable() -> bool:
    """Whether standard error is a terminal a bar can be drawn on (a pseudo-terminal may say it has no width)."""
    try:
        return sys.stderr.isatty() and os.get_terminal_size(sys.stderr.fileno()).columns > 0
    except (AttributeError, OSError, ValueError):  # replaced by an object without a file descriptor
        return False


@dataclass
class Progress:
    """Work of `total` `unit`s (None: not counted), shown while it runs (the module's docstring says how). Use it as a
    context manager; `advance` counts, from this process or one forked inside the `with`."""

    what: str
    total: int | None = None
    unit: str = "step"
    every: float | None = None  # elsewhere than on a terminal, a line this often (seconds); None: none
    terminal: bool = field(default_factory=lambda: drawable())

    def __post_init__(self) -> None:
        self._count = multiprocessing.get_context("fork").Value("q", 0)
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._bar = None

    def advance(self, n: int = 1) -> None:
        with self._count.get_lock():
            self._count.value += n

    @property
    def count(self) -> int:
        return int(self._count.value)

    def stage(self, text: str) -> None:
        """A line for a stage done (both on a terminal, above the bar, and elsewhere)."""
        line = f"{self.what}: {text} ({duration(time.monotonic() - self._start)})"
        with self._lock:
            if self._bar is not None:
                self._bar.write(line, file=sys.stderr)
            else:
                print(line, file=sys.stderr, flush=True)

    def _counted(self) -> str:
        of = f" of {self.total}" if self.total is not None else ""
        return f"{self.count}{of} {self.unit}s" if self.total is not None or self.count else ""

    def _watch(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(min(1.0, self.every or 1.0)):
            with self._lock:
                if self._bar is not None:
                    self._bar.n = self.count
                    self._bar.refresh()
                elif self.every is not None and time.monotonic() - last >= self.every:
                    last = time.monotonic()
                    done = self._counted()
                    print(
                        f"{self.what}: {done + ', ' if done else ''}{duration(last - self._start)} so far",
                        file=sys.stderr,
                        flush=True,
                    )

    def __enter__(self) -> Progress:
        self._start = time.monotonic()
        if self.terminal:
            from tqdm import tqdm

            self._bar = tqdm(
                total=self.total,
                desc=self.what,
                unit=self.unit,
                file=sys.stderr,
                leave=True,
                dynamic_ncols=True,
                mininterval=0.5,
            )
        else:
            print(f"{self.what} ...", file=sys.stderr, flush=True)
        self._thread = threading.Thread(target=self._watch, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()
        if self._bar is not None:
            self._bar.n = self.count
            self._bar.close()
        elif kind is None:
            done = self._counted()
            print(
                f"{self.what}: done{', ' + done if done else ''} in {duration(time.monotonic() - self._start)}",
                file=sys.stderr,
                flush=True,
            )
