"""`uh report`: parses its options, writes the report (report/summary.write_report) and says where it is."""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.commands.options import results_dir_option
from uniform_herding.errors import UhError
from uniform_herding.report.summary import write_report
from uniform_herding.runs.results import ResultError


@click.command("report")
@results_dir_option("Where results/<RUN>/seed-<S>/ are.")
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    help="Output folder, e.g. paper/ [default: <results-dir>/report].",
)
@click.option(
    "--paper-values/--no-paper-values",
    default=None,
    help="Overlay the paper's published values on the figures [default: for paper-profile results].",
)
@click.option(
    "--base",
    metavar="RUN_ID",
    help="Compare every variant of the results with this run ID; its ID then ends in +vs=RUN_ID, as uh run "
    "--base writes it. Default: each variant's own (the +vs= of its ID, else the run ID it starts from).",
)
def report_command(results_dir: Path, out: Path | None, paper_values: bool | None, base: str | None) -> None:
    """Tables (LaTeX, Markdown), figures (PDF, PNG) and summary.{md,html} from whatever results exist."""
    out = out or results_dir / "report"
    try:
        written = write_report(results_dir, out, paper_values, click.echo, base)
    except ResultError as e:  # results that cannot be read: the user's to mend, exit 2
        raise UhError(str(e)) from None
    except OSError as e:  # a full or read-only disk: exit 1, nothing of the report written (docs/reliability.md)
        raise click.ClickException(
            f"cannot write {e.filename or out} ({e.strerror or e}); {out} is as it was; choose a writable --out"
        ) from None
    click.echo(f"wrote {len(written)} files under {out} (open {out / 'summary.html'})")
