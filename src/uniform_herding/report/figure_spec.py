"""A figure of the report as a FigureSpec (its stem, label, caption, runs, claims and how it is drawn): whether the
results can draw it, what it needs when they cannot, and `save`, which writes it as PDF and PNG."""

from __future__ import annotations

import io
from collections.abc import Callable, Collection
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.figure import Figure

from uniform_herding.report.load import Runs
from uniform_herding.report.style import RC
from uniform_herding.runs.results import write_bytes_atomic


@dataclass(frozen=True)
class FigureSpec:
    """One figure of the paper: its file stem, LaTeX label, the runs and claims it shows."""

    stem: str
    label: str
    caption: str
    runs: tuple[str, ...]
    claims: tuple[str, ...]
    draw: Callable[[Runs], Figure]
    overlay: bool  # whether the paper prints values this figure can overlay
    # The groups of runs of which one must be present whole for the figure to show anything (a comparison needs
    # both sides); () is each of `runs` alone. `recorded` gives the runs whose results hold what the figure reads.
    needs: tuple[tuple[str, ...], ...] = ()
    recorded: Callable[[Runs], Collection[str]] = lambda runs: runs.R.keys()

    def groups(self) -> tuple[tuple[str, ...], ...]:
        return self.needs or tuple((r,) for r in self.runs)

    def drawable(self, runs: Runs) -> bool:
        """Whether the results hold a group it needs: otherwise it would be a blank or half-empty frame."""
        have = set(self.recorded(runs))
        return any(set(group) <= have for group in self.groups())

    def wants(self) -> str:
        """What it needs, for the line that says it was left out: `B3 & a1`, or `one of: B0, B1, B2`."""
        return wants(self.groups())


def wants(groups: tuple[tuple[str, ...], ...]) -> str:
    """Groups of runs of which one must be present whole, as the line that says an output was left out names them."""
    texts = [" & ".join(group) for group in groups]
    return texts[0] if len(texts) == 1 else f"one of: {', '.join(texts)}"


def save(spec: FigureSpec, runs: Runs, out_dir: Path) -> list[Path]:
    """Draw `spec` and write it as PDF and PNG, each atomically (results.write_bytes_atomic)."""
    paths = []
    with matplotlib.rc_context(RC):
        fig = spec.draw(runs)
        for ext, metadata in (("pdf", {"CreationDate": None}), ("png", {})):
            path = out_dir / f"{spec.stem}.{ext}"
            buffer = io.BytesIO()
            fig.savefig(buffer, format=ext, metadata=metadata)
            write_bytes_atomic(path, buffer.getvalue())
            paths.append(path)
    return paths
