"""The `uh` command: run IDs, data, quotas, aggregation, checking and reporting.

Only click and the config load with this module: the commands of other modules (run, sweep, aggregate,
check, report, data, ...) are imported when named, so that `uh run` installs its signal handlers within a
fraction of a second and decides "done already" without pandas' plotting stack or torch.
"""

from __future__ import annotations

import importlib
import signal
import sys
from typing import Any

import click

from uniform_herding import __version__
from uniform_herding.catalogue import RUN_GROUPS, RUNS, differences

# Commands contributed by other modules, imported on first use: name -> ("module:attribute", the one line
# `uh --help` shows for it, so that listing the commands imports none of them).
LAZY_COMMANDS = {
    "aggregate": (
        "uniform_herding.commands.aggregate:aggregate_command",
        "Mean +/- std over seeds per run ID, paired deltas vs B3.",
    ),
    "bundle": (
        "uniform_herding.commands.bundle:bundle_command",
        "The results as one zip to send, with every file's SHA-256.",
    ),
    "check": (
        "uniform_herding.commands.check:check_command",
        "Verdicts: metrics vs the paper, claims C1-C5, findings C6-C8.",
    ),
    "data": ("uniform_herding.commands.data:data_cmd", "Write a synthetic archive, or verify an archive."),
    "oc": ("uniform_herding.commands.oc:oc_command", "How often uh check passes a faithful re-run and fails a miss."),
    "doctor": (
        "uniform_herding.commands.doctor:doctor_command",
        "Preflight: versions, GPU, data, fp16 self-test, hours.",
    ),
    "price": ("uniform_herding.commands.price:price_command", "What ./reproduce.sh all costs, in runs and hours."),
    "report": ("uniform_herding.commands.report:report_command", "The paper's tables and figures, and a summary page."),
    "run": ("uniform_herding.commands.run:run_cmd", "Train run IDs for each seed; skip finished runs, resume others."),
    "status": (
        "uniform_herding.commands.status:status_command",
        "Where a re-run stands: runs, look, verdict, time left.",
    ),
    "stacks": (
        "uniform_herding.commands.stacks:stacks_command",
        "tau, the stack offset the rule allows, from re-runs on 2+ stacks.",
    ),
    "sweep": (
        "uniform_herding.commands.sweep:sweep_command",
        "Run every combination of values as variants of a run ID.",
    ),
}


class LazyGroup(click.Group):
    """A group whose LAZY_COMMANDS are imported when they are named (not when --help lists them)."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        """Every command with SIGTERM and SIGINT raised as Interrupted (runs/durability.py), so that every `with` on
        the way cleans up (a bundle's temporary folder, a half-written zip), then one line and exit 128 + the signal
        (143, 130): never click's exit 1 for Ctrl-C, a failed replication's code. uh run installs its own on top.
        The library's own refusals (errors.UhError) become their one line and exit code here, at the edge."""
        from uniform_herding.errors import UhError
        from uniform_herding.runs.durability import Interrupted, stop_on_signals

        with stop_on_signals():
            try:
                return super().main(*args, **kwargs)
            except Interrupted as e:
                click.echo(f"Error: stopped by {signal.Signals(e.signum).name}", err=True)
                sys.exit(128 + e.signum)
            except UhError as e:  # the library's refusals: one line, their exit code (errors.py)
                click.echo(f"Error: {e}", err=True)
                sys.exit(e.exit_code)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            module, attribute = LAZY_COMMANDS[name][0].split(":")
            return getattr(importlib.import_module(module), attribute)
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Every command with its whole one-line summary (click would cut it at the terminal's width)."""
        rows = [
            (name, LAZY_COMMANDS[name][1] if name in LAZY_COMMANDS else self.commands[name].get_short_help_str(999))
            for name in self.list_commands(ctx)
        ]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


def print_version(ctx: click.Context, _: click.Parameter, value: bool) -> None:
    """`uh --version`: the package's version and this checkout's code hash, the one a result.json
    (provenance.code_sha256) and a check_report.json (code_sha256) record, beside its git revision and whether the
    tree differs from it; computed only when asked."""
    if not value or ctx.resilient_parsing:
        return
    from uniform_herding.runs.provenance import checkout_state  # no other command needs it

    click.echo(
        f"uh {__version__}\n{checkout_state()}\n(result.json: provenance.code_sha256, git_revision, tree_modified; "
        "check_report.json: code_sha256)"
    )
    ctx.exit()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--version",
    is_flag=True,
    expose_value=False,
    is_eager=True,
    callback=print_version,
    help="The version, code hash, git revision and modified: yes/no (runs/provenance.py).",
)
def main() -> None:
    """Replicate 'Uniform Herding: Exemplar Replay with Representation Refresh' (an independent implementation)."""


@main.command("list", short_help="The run IDs, what each changes, and the groups.")
@click.option("--wide", is_flag=True, help="Lines as long as they are (else wrapped to COLUMNS, 120 where unset).")
def list_runs(wide: bool) -> None:
    """Print every run ID with what it changes, then the groups `uh run` accepts."""
    from uniform_herding.runs.terminal import columns, fit_line

    width = columns(wide)
    id_width, name_width = (max(len(getattr(spec, f)) for spec in RUNS.values()) for f in ("run_id", "name"))
    for spec in RUNS.values():
        changes = ", ".join(f"{k}={v}" for k, v in spec.changes.items()) or "(the method itself)"
        mark = ""
        if spec.beyond_paper:  # what it changes against the run it is compared with
            vs_base = differences(spec.run_id, spec.base)
            changes = f"vs {spec.base}: " + ", ".join(f"{k}={v}" for k, v in vs_base.items())
            mark = "  [beyond the paper: no paper value]"
        line = f"{spec.run_id:{id_width}}  {spec.name:{name_width}}  {spec.description}  [{changes}]{mark}"
        click.echo(fit_line(line, width, indent=" " * (id_width + name_width + 4)))  # under the description
    for group, ids in RUN_GROUPS.items():
        click.echo(fit_line(f"group {group}: {' '.join(ids)}", width))


@main.command("quotas", short_help="Per-class quota after each task (the paper's appendix).")
@click.option("--budget", "-M", type=click.IntRange(min=1), required=True, help="Active budget M.")
@click.option("--tasks", type=click.IntRange(min=1), default=10, show_default=True)
@click.option("--classes-per-task", type=click.IntRange(min=1), default=10, show_default=True)
def quotas_cmd(budget: int, tasks: int, classes_per_task: int) -> None:
    """Per-class quota q after each task (min-max where they differ), as in the paper's appendix."""
    from uniform_herding.method.memory import quotas

    cells = []
    for t in range(tasks):
        q = quotas(budget, classes_per_task * (t + 1))
        cells.append(f"{min(q)}" if min(q) == max(q) else f"{min(q)}-{max(q)}")
    click.echo("M      " + " ".join(f"T{t:<7}" for t in range(tasks)))
    click.echo(f"{budget:<6} " + " ".join(f"{c:<8}" for c in cells))
