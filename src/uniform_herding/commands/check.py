"""`uh check`: the options, one call of verdict/check.py's `check_report`, and what it decided printed and written to
check_report.json; `--bundle` verifies a bundle first (evidence/verify.py) and checks its results the same way."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from uniform_herding.catalogue import PROFILES
from uniform_herding.commands.options import chosen_input, data_dir_option, input_options
from uniform_herding.runs.terminal import columns
from uniform_herding.verdict.aggregate import InputError
from uniform_herding.verdict.check import check_report, named_run_ids, report_lines, write_report
from uniform_herding.verdict.claims import PAPER_CLAIMS
from uniform_herding.verdict.words import EXIT_POLICY


@click.command("check", epilog=EXIT_POLICY)
@input_options
@click.option(
    "--expected",
    "expected_dir",
    type=click.Path(file_okay=False, path_type=Path),
    help="Expected set: a dir with tolerances.toml and the per-seed CSV it names [default: by profile].",
)
@click.option(
    "--profile",
    type=click.Choice(list(PROFILES)),
    help="Profile of the re-run; a per-seed CSV is taken to be of it [default: the results', else paper].",
)
@click.option(
    "--json-out",
    type=click.Path(dir_okay=False, path_type=Path),
    help="JSON report [default: <results-dir>/check_report.json; ./check_report.json for --per-seed or --bundle].",
)
@click.option(
    "--claim",
    "claim_id",
    type=click.Choice([c.claim_id for c in PAPER_CLAIMS]),
    help="One claim of the paper alone, on its run IDs alone: its verdict and, while undecided, its own next "
    "look (next_step never names the other run IDs). Never the badge: EXPECTED SET MATCHED at best.",
)
@click.option(
    "--run-ids",
    "run_ids_option",
    metavar="IDS",
    help="Only these run IDs of the expected set, comma-separated (B0,B3): the verdict names the subset; "
    "never the badge. Without it every run ID of the set is asked for: one missing is INCOMPLETE.",
)
@click.option(
    "--bundle",
    type=click.Path(dir_okay=False, path_type=Path),
    help="A zip uh bundle wrote, instead of a results dir: every file verified against its SHA-256, the "
    "provenance printed, then its results checked (evidence/verify.py).",
)
@click.option(
    "--recompute",
    is_flag=True,
    help="With --bundle: evaluate R's last row of each run again on the CPU from its final state "
    "(uh bundle --with-weights); exit 2 naming any run whose recorded row differs.",
)
@data_dir_option("With --recompute: where the runs' archive is, as for uh run.")
@click.option(
    "--wide",
    is_flag=True,
    help="Every column and line whole, however wide (else the output fits COLUMNS, "
    "120 where unset: the TOST text left out first, then the Welch interval under its row, long lines "
    "wrapped). The JSON report holds every field either way.",
)
def check_command(
    results_dir: Path | None,
    per_seed: Path | None,
    expected_dir: Path | None,
    profile: str | None,
    json_out: Path | None,
    claim_id: str | None,
    run_ids_option: str | None,
    bundle: Path | None = None,
    recompute: bool = False,
    data_dir: Path = Path("data"),
    wide: bool = False,
) -> None:
    """Compare a re-run with expected_results/ metric by metric, then check the paper's claims C1-C5
    and the findings C6-C8 beyond the paper (r1-r3; reported, never gating); variants against their base."""
    if run_ids_option is not None and claim_id is not None:
        raise InputError("give --run-ids or --claim, not both: --claim checks its claim's run IDs alone")
    asked = {"expected_dir": expected_dir, "profile": profile, "claim_id": claim_id, "run_ids_option": run_ids_option}
    if bundle is not None or recompute:
        where = f"--bundle {bundle}"  # the source the check names, not the temporary directory
        out = json_out or Path("check_report.json")
        recomputed = named_run_ids(run_ids_option) if recompute else ()
        _bundled(bundle, recompute, data_dir, recomputed, lambda results: _said(results, None, where, asked, out, wide))
        return  # the check exits with its verdict's code; a bundle's never goes on to ./results
    results_dir, per_seed = chosen_input(results_dir, per_seed)
    out = json_out or (
        Path("check_report.json") if per_seed else (results_dir or Path("results")) / "check_report.json"
    )
    _said(results_dir, per_seed, None, asked, out, wide)


def _said(
    results_dir: Path | None, per_seed: Path | None, source: str | None, asked: dict[str, Any], out: Path, wide: bool
) -> None:
    """The one call (check_report), its lines printed and its report written to `out`; exit with its verdict's code."""
    report = check_report(results_dir, per_seed, source=source, **asked)
    click.echo("\n".join(report_lines(report, columns(wide))))
    write_report(out, report)
    click.echo(f"wrote {out}")
    click.get_current_context().exit(report.verdict.code)


def _bundled(
    bundle: Path | None, recompute: bool, data_dir: Path, run_ids: tuple[str, ...], check: Callable[[Path], None]
) -> None:
    """`--bundle`: verified and its provenance printed (R's last rows of `run_ids` recomputed where asked), then its
    results `check`ed as a results dir (evidence/verify.py)."""
    from uniform_herding.evidence.verify import check_bundle  # only --bundle needs the RO-Crate's stack

    ctx = click.get_current_context()
    if bundle is None:
        raise click.UsageError("--recompute goes with --bundle: uh check --bundle FILE.zip --recompute")
    given = [
        f"--{k.replace('_', '-')}"
        for k in ("results_dir", "per_seed")
        if ctx.params.get(k) is not None and ctx.get_parameter_source(k) != ParameterSource.ENVIRONMENT
    ]
    if given:
        raise click.UsageError(f"give --bundle or {given[0]}, not both")
    wide = bool(ctx.params.get("wide"))
    check_bundle(bundle, recompute, data_dir, run_ids, columns(wide), check, click.echo)
