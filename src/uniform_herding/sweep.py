"""`uh sweep RUN_ID KEY=V1,V2,... [KEY2=...]`: the cartesian product of the values as variants, times the seeds.

The grid is printed first (each point's canonical ID and how many of its seeds are done); `--dry-run`
prints only that. Then the variants go to `uh run` itself, with every option it takes (seeds,
profile, executors, Slurm), so a sweep runs, skips, resumes and fails exactly as `uh run` does.
"""

from __future__ import annotations

from pathlib import Path

from uniform_herding.catalogue import SEP, ConfigError, grid_points, parse
from uniform_herding.launch import BadName, Echo, Plan, run_named, run_names


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


def sweep(run_id: str, grid: tuple[str, ...], base: str | None, dry_run: bool, plan: Plan, echo: Echo) -> int:
    """`uh sweep`: the grid's points named and resolved once, printed with what is done, then (unless `dry_run`) run
    as `uh run` runs them, with every option of its `plan`; the exit status."""
    profile = plan.options.profile
    try:
        points = grid_points(run_id, grid, base)
        runs = run_names(tuple(dict.fromkeys(rid for _, rid in points)), (), profile, base, echo)
    except ConfigError as e:
        raise BadName(str(e)) from None
    for line in grid_lines(run_id, points, plan.seeds, profile, plan.options.results_dir):
        echo(line)
    if dry_run:
        echo("dry run: nothing started")
        return 0
    return run_named(runs, plan, echo)
