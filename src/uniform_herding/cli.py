"""The `uh` command: run IDs, data, quotas, aggregation, checking and reporting."""

from __future__ import annotations

import click

from uniform_herding.config import RUNS


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
def main() -> None:
    """Reproduce 'Uniform Herding: Exemplar Replay with Representation Refresh'."""


@main.command("list")
def list_runs() -> None:
    """Print every run ID with what it changes."""
    for spec in RUNS.values():
        changes = ", ".join(f"{k}={v}" for k, v in spec.changes.items()) or "(the method itself)"
        click.echo(f"{spec.run_id:3} {spec.name:20} {spec.description}  [{changes}]")


# --- commands contributed by other modules (one line each) ---------------------------------------
