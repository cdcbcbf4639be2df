"""`uh price`: what `./reproduce.sh all` will cost before it starts, in runs and hours: the paper's runs and the whole
procedure (mean, 90th percentile, most). The hours are this machine's where `uh doctor` timed it (timing.py, in
RESULTS_DIR/doctor.json), else, for a GPU on the paper profile, the paper's Tesla T4's; a CPU without its timing gets
runs alone. A machine that cannot train the profile is refused once, rather than at every run.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from uniform_herding.catalogue import PAPER_RUNS
from uniform_herding.errors import UhError
from uniform_herding.estimate import PROCEDURE_RUNS, price, procedure_runs_csv
from uniform_herding.method.config import SEEDS
from uniform_herding.runs.terminal import duration

if TYPE_CHECKING:
    from uniform_herding.verdict.decide import Procedure


class Refused(UhError):
    """This machine cannot train the profile (as each `uh run` would refuse), or the expected set cannot be read.
    Exit 1, uh price's refusal, at which `./reproduce.sh all` stops before anything runs (expected_results/README.md,
    the exit codes)."""

    exit_code = 1


def trains_on(device) -> tuple[str, str, str]:
    """The device the runs will train on (None: a Slurm node's), as the price names it, short and possessive: "this
    machine's CPU (AMD EPYC, AVX512)", "this CPU", "this CPU's"."""
    if device is None:
        return "the Slurm nodes' devices", "the nodes", "the nodes'"
    from uniform_herding.runs.run import device_name

    kind, _, name = device_name(device).partition(": ")
    model, _, detail = name.removesuffix(")").rpartition(" (")  # a CPU's model (its instruction set)
    kind = "GPU" if kind == "cuda" else "CPU"
    return f"this machine's {kind} ({f'{model}, {detail}' if model else name})", f"this {kind}", f"this {kind}'s"


def training_device(profile: str, device: str | None, executor: str | None):
    """The device this machine's runs will train on (`uh run --device`'s choice), or None on Slurm, where the nodes'
    device trains, not this machine's. Refused where this machine cannot train the profile."""
    from uniform_herding.runs.devices import DeviceError, select

    if executor == "slurm":
        return None
    try:
        return select(device, profile)
    except DeviceError as e:
        raise Refused(f"{e}; to try the whole pipeline at a tiny size on this machine: ./reproduce.sh smoke") from None


def expected_set(profile: str):
    """The profile's expected set's directory, and the set where it has its tolerances.toml (else None), found as uh
    check finds it."""
    from uniform_herding.verdict.expected import ExpectedError, expected_dir_for, find_expected_root, load_expected

    try:
        directory = expected_dir_for(profile, find_expected_root([Path.cwd(), Path(__file__).resolve().parent]))
        return directory, load_expected(directory) if (directory / "tolerances.toml").is_file() else None
    except ExpectedError as e:
        raise Refused(str(e)) from None


def doctor_timing(profile: str, device) -> str:
    """The command that times this device's runs (uh doctor), as the price names it."""
    return f"`uh doctor --profile {profile}" + ("`" if device is None else f" --device {device.type}`")


def run_seconds(profile: str, results_dir: Path, device, expected) -> tuple[dict[str, float], str]:
    """One seed's seconds of each run ID, and whose hours they are: uh doctor's timing of the device that will train
    (RESULTS_DIR/doctor.json); else, for a GPU on the paper profile, the paper's Tesla T4's (the T4's hours, a GPU's,
    say nothing of a CPU's); else none."""
    from uniform_herding.report.load import doctor_estimates

    timed = results_dir / "doctor.json"
    seconds = doctor_estimates(timed, profile, None if device is None else device.type)
    its = trains_on(device)[2]
    on_cpu = device is not None and device.type == "cpu"
    if not seconds and profile == "paper" and expected is not None and not on_cpu:
        from uniform_herding.design.simulation import paper_seconds

        t4 = "the paper's Tesla T4's (expected_results/paper_compute.csv)"
        return paper_seconds(expected), f"{t4}, not {its}: {doctor_timing(profile, device)} times them"
    if device is None:
        return seconds, f"this machine's, as uh doctor timed them ({timed}), not necessarily {its}"
    return seconds, f"{its} own, as uh doctor timed them ({timed})"


@dataclass(frozen=True)
class Sums:
    """What `./reproduce.sh all` runs (estimate.price's sums: "paper", "most", "mean", "p90"), in runs, and in
    seconds where the runs' hours are known."""

    runs: dict[str, float]
    seconds: dict[str, float]

    def said(self, key: str) -> str:
        """One sum as the price says it: in runs (52.5 where a share of runs), then in hours where known."""
        n = f"{self.runs[key]:.0f}" if self.runs[key] == round(self.runs[key]) else f"{self.runs[key]:.1f}"
        return f"{n} runs" + (f", {duration(self.seconds[key])}" if self.seconds else "")


def price_lines(
    profile: str, results_dir: Path, seeds: tuple[int, ...], device: str | None, executor: str | None
) -> list[str]:
    """The price of `./reproduce.sh all`, line by line: its runs, and their hours where known (run_seconds), of the
    paper's runs on `seeds` (default: the paper's), then of the procedure the expected set registers (none with
    seeds of one's own)."""
    chosen = training_device(profile, device, executor)
    directory, expected = expected_set(profile)
    procedure = None if seeds or expected is None else expected.procedure
    runs_csv = procedure_runs_csv() if profile == "paper" and procedure else None
    extra_runs = None if runs_csv is None else pd.read_csv(runs_csv)
    seconds, hours = run_seconds(profile, results_dir, chosen, expected)
    n_seeds = len(seeds or SEEDS)
    runs = price(dict.fromkeys(PAPER_RUNS, 1.0), n_seeds, procedure, extra_runs)
    sums = Sums(runs, price(seconds, n_seeds, procedure, extra_runs) if seconds else {})
    on, this, _ = trains_on(chosen)
    lines = [f"the price of ./reproduce.sh all (profile {profile}), one run at a time on {on}:"]
    lines += [f"  hours: {hours}"] if sums.seconds else []
    lines.append(
        f"  the paper's {len(PAPER_RUNS)} run IDs on seeds {' '.join(map(str, seeds or SEEDS))}: {sums.said('paper')}"
    )
    if seeds:
        lines.append("  then no procedure: it takes the registered seeds only (./reproduce.sh next)")
    elif procedure is None:
        lines.append(f"  then nothing more: {directory} registers no [procedure]")
    else:
        lines += procedure_price(procedure, extra_runs is not None, sums)
    if not sums.seconds:
        on_cpu = chosen is not None and chosen.type == "cpu" and profile == "paper"
        gpus = " (the paper's hours are a GPU's)" if on_cpu else ""
        lines.append(f"no price in hours for {this} until {doctor_timing(profile, chosen)} times it{gpus}")
    return lines


def procedure_price(procedure: Procedure, faithful: bool, sums: Sums) -> list[str]:
    """The procedure's lines of the price: the whole procedure as uh oc's faithful re-runs ran it (where
    procedure_runs.csv is there: `faithful`), and at most, every look run."""
    lines = []
    if faithful:
        lines.append(f"  the whole procedure, to a decided verdict (as in uh oc's faithful re-runs, {PROCEDURE_RUNS}):")
        lines.append(f"    mean {sums.said('mean')}; 90th percentile {sums.said('p90')}")
    lines.append(
        f"  at most, every look run (claims C1-C5's run IDs on {procedure.looks[-1]} seeds, the others' on "
        f"{len(SEEDS)}): {sums.said('most')}"
    )
    return lines
