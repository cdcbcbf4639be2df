"""`uh bundle`: a results dir as one zip to send, with every file's SHA-256 (evidence/bundle.py)."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.commands.options import results_dir_option
from uniform_herding.evidence.bundle import write_bundle


@click.command("bundle")
@results_dir_option("The results to send.")
@click.option(
    "-o",
    "--out",
    type=click.Path(dir_okay=False, path_type=Path),
    required=True,
    help="The zip to write (a new file: never overwritten).",
)
@click.option(
    "--with-weights",
    is_flag=True,
    help="Also each run's final state (final.pt: weights and exemplar "
    "indices, ~45 MB a run at the paper's size), so that uh check --bundle --recompute can evaluate R's "
    "last row again on a CPU.",
)
def bundle_command(results_dir: Path, out: Path, with_weights: bool) -> None:
    """Write the results as one zip to send (an RO-Crate, Process Run Crate profile): each run with its code hash,
    dataset md5 and stack, uh check's report, uh report's output, the logs, and every file's SHA-256."""
    runs, files = write_bundle(results_dir, out, with_weights)
    click.echo(
        f"wrote {out}: {runs} runs, {files} files in the zip{' with weights' if with_weights else ''}, "
        f"{out.stat().st_size / 1e6:.1f} MB; the receiver checks it with uh check --bundle {out}"
    )
