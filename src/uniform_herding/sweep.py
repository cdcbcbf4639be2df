"""`uh sweep RUN_ID KEY=V1,V2,... [KEY2=...]`: the cartesian product of the values as variants, times the seeds.

The grid is printed first (each point's canonical ID and how many of its seeds are done); `--dry-run`
prints only that. Then the variants go to `uh run` itself, with every option it takes (seeds,
profile, executors, Slurm), so a sweep runs, skips, resumes and fails exactly as `uh run` does.
"""

from __future__ import annotations

from pathlib import Path

import click

from uniform_herding.catalogue import SEP, ConfigError, grid_points, parse
from uniform_herding.launch import BadName, run_cmd, run_named, run_names
from uniform_herding.method.config import SEEDS, TRAINING_ENVIRONMENT


def done_seeds(results_dir: Path, run_id: str, seeds: tuple[int, ...], profile: str) -> list[int]:
    """The seeds of `run_id` whose valid result is there; anything `uh run` would refuse counts as not done."""
    from uniform_herding.runs.results import ResultError, is_finished, result_path

    done = []
    for seed in seeds:
        try:
            if is_finished(result_path(results_dir, run_id, seed), run_id, seed, profile):
                done.append(seed)
        except ResultError:
            pass
    return done


def grid_lines(
    run_id: str, points: list[tuple[str, str]], seeds: tuple[int, ...], profile: str, results_dir: Path
) -> list[str]:
    """The grid as printed: a header, then per point its settings, canonical ID and seeds done."""
    ids = list(dict.fromkeys(rid for _, rid in points))
    done = {rid: done_seeds(results_dir, rid, seeds, profile) for rid in ids}
    n_done = sum(len(d) for d in done.values())
    varied = parse(run_id).run_id  # the canonical ID of the run the grid varies
    runs = len(ids) * len(seeds)
    lines = [
        f"sweep of {varied}: {len(ids)} setting{'s' * (len(ids) > 1)} x {len(seeds)} seed{'s' * (len(seeds) > 1)}"
        f" = {runs} run{'s' * (runs > 1)} (profile {profile}, {results_dir}); {n_done} done already"
    ]
    if varied != run_id:
        lines.append(f"{run_id} is {varied} (the same run, by its canonical name)")
    rows = []
    for sets, rid in points:
        note = "" if SEP in rid else f"({varied} itself)" if rid == varied else f"(run ID {rid}: the same config)"
        rows.append((sets, rid, f"done: {', '.join(map(str, done[rid])) or 'none'}", note))
    widths = [max(len(row[i]) for row in rows) for i in range(3)]
    lines += [
        "  " + "  ".join([*(f"{c:{w}}" for c, w in zip(row, widths, strict=False)), row[3]]).rstrip() for row in rows
    ]
    return lines


@click.command(
    "sweep",
    epilog="Every option of `uh run` applies to each point of the grid (uh run --help). "
    "Environment: as uh run's; " + TRAINING_ENVIRONMENT,
)
@click.argument("run_id")
@click.argument("grid", nargs=-1, required=True, metavar="KEY=V1,V2,...")
@click.option("--dry-run", is_flag=True, help="Print the grid and what is done already; start nothing.")
def sweep_command(run_id: str, grid: tuple[str, ...], dry_run: bool, **options: object) -> None:
    """Run every combination of the values as a variant of RUN_ID, for every seed, e.g.
    `uh sweep B3 rho=1,3,5`; finished runs are skipped (docs/extending.md)."""
    seeds: tuple[int, ...] = options["seeds"] or SEEDS  # type: ignore[assignment]
    profile, results_dir = str(options["profile"]), Path(str(options["results_dir"]))
    base: str | None = options["base"]  # type: ignore[assignment]
    try:
        points = grid_points(run_id, grid, base)
        runs = run_names(tuple(dict.fromkeys(rid for _, rid in points)), (), profile, base)
    except ConfigError as e:
        raise BadName(str(e)) from None
    for line in grid_lines(run_id, points, seeds, profile, results_dir):
        click.echo(line)
    if dry_run:
        click.echo("dry run: nothing started")
        return
    run_named(runs, **options)  # type: ignore[arg-type]


# The options of `uh run` (all but its run IDs and --set), so that a sweep takes each of them as uh run does.
sweep_command.params.extend(p for p in run_cmd.params if p.name not in ("run_ids", "sets"))
