"""One run of `uh run`, as one value: a (run ID, seed) pair and the options that fix how it runs.

`run.run_seed` trains a `RunPair`, whichever way it came: one after another in `uh run`'s process, as a submitit job
on this machine (--jobs, --executor local) or on Slurm, or as a step of the Slurm chain. The options every pair of a
command shares are one `RunOptions`; a pair carries them whole, so that nothing of a run travels as loose arguments.
A module of its own, light (no torch), so that `uh run` builds its pairs before deciding whether any is to run.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path


@dataclasses.dataclass(frozen=True)
class RunOptions:
    """The options of `uh run` that every pair of the command shares: where its data and results are, and the
    numeric settings it runs under (result.json's command repeats them)."""

    profile: str
    data_dir: Path
    results_dir: Path
    archive: Path | None = None  # --archive: this archive instead of the data dir's
    force: bool = False  # --force: rerun a finished run, discard its checkpoint
    precision: str | None = None  # --precision; None: the device's default (engine.precision)
    device: str | None = None  # --device; None: UH_DEVICE, else auto (devices.select)
    deterministic: bool = False  # --deterministic

    def pair(self, run_id: str, seed: int) -> RunPair:
        """The pair (run_id, seed) under these options."""
        return RunPair(run_id, seed, self)

    def resolved(self) -> RunOptions:
        """The same options with absolute paths: what a job, started elsewhere or later, is given."""
        archive = self.archive.resolve() if self.archive else None
        return dataclasses.replace(
            self, data_dir=self.data_dir.resolve(), results_dir=self.results_dir.resolve(), archive=archive
        )

    def flags(self) -> list[str]:
        """These options as `uh run` takes them."""
        return [
            *("--profile", self.profile, "--data-dir", str(self.data_dir), "--results-dir", str(self.results_dir)),
            *(["--archive", str(self.archive)] if self.archive else []),
            *(["--precision", self.precision] if self.precision else []),
            *(["--device", self.device] if self.device else []),
            *(["--deterministic"] if self.deterministic else []),
        ]


@dataclasses.dataclass(frozen=True)
class RunPair:
    """One run ID and seed under the command's options: what `run.run_seed` trains."""

    run_id: str
    seed: int
    options: RunOptions

    def __str__(self) -> str:
        return f"{self.run_id} seed {self.seed}"

    def without_force(self) -> RunPair:
        """The same pair without --force: a job started again resumes from its checkpoint, never discards it."""
        return dataclasses.replace(self, options=dataclasses.replace(self.options, force=False))

    def command(self) -> list[str]:
        """The `uh run` that trains this pair alone (a job's result.json records it as its command)."""
        return ["uh", "run", self.run_id, "--seed", str(self.seed), *self.options.flags()]
