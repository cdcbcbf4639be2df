"""stacks.py: tau from re-runs on several stacks. The method-of-moments estimate against the formula computed
directly (scipy's one-way ANOVA), the interval's coverage over seeded simulations at a known tau, the stacks that
would pin tau against simulated studies of that size, and the command: results folders as stacks, their labels,
every figure in the JSON, and one line for every input it cannot use."""

from __future__ import annotations

import json
import shutil
import tomllib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from conftest import matrix_with
from scipy import stats

from uniform_herding.catalogue import resolve
from uniform_herding.cli import main
from uniform_herding.design.stacks import (
    AMENDMENT,
    TAU_IS,
    Stack,
    anova,
    cells,
    interval,
    pooled,
    projected,
    stacks_to_pin,
)
from uniform_herding.method.config import CONFIG_VERSION
from uniform_herding.runs.results import write_json_atomic

RUNS = ("B0", "B1", "B2", "B3")
SIGMAS = (0.6, 1.0, 1.6, 2.5)  # the seeds' SD per run ID, as unequal as the paper's


def stack(name: str, rows: list[tuple[str, int, float]]) -> Stack:
    """A stack whose acc holds the given (run ID, seed, value); forgetting and bwt fixed."""
    table = pd.DataFrame(
        [(r, k, v, 10.0, -10.0) for r, k, v in rows], columns=["run_id", "seed", "acc", "forgetting", "bwt"]
    )
    return Stack(name, table, "paper", name)


def simulated(rng: np.random.Generator, n_stacks: int, tau: float, seeds: int = 3) -> list[Stack]:
    """Stacks drawn from the module's model: each run ID's offset ~ N(0, tau^2) per stack, each seed ~ N(0, sigma^2)."""
    return [
        stack(
            f"s{s}",
            [
                (r, k, 50 + offset + rng.normal(0, sigma))
                for r, sigma in zip(RUNS, SIGMAS, strict=True)
                for offset in [rng.normal(0, tau)]
                for k in range(seeds)
            ],
        )
        for s in range(n_stacks)
    ]


def test_the_estimate_is_the_method_of_moments_formula_computed_directly() -> None:
    a = [np.array([50.0, 52, 54]), np.array([55.0, 57, 59]), np.array([49.0, 50, 51])]
    b = [np.array([30.0, 31]), np.array([33.0, 35, 34]), np.array([29.0, 30, 32]), np.array([31.0, 33, 32, 30])]
    # by hand, A: means 52, 57, 50 about 53; SS_b = 3 (1 + 16 + 9) = 78 on 2 df; SS_w = 8 + 8 + 2 = 18 on 6 df
    found = anova("B0", "acc", a)
    assert (found.ms_between, found.ms_within, found.n0, found.tau2) == pytest.approx((39.0, 3.0, 3.0, 12.0))
    for groups in (a, b):
        found = anova("B1", "acc", groups)
        sizes, total = np.array([len(g) for g in groups]), sum(len(g) for g in groups)
        ms_within = sum((len(g) - 1) * np.var(g, ddof=1) for g in groups) / (total - len(groups))
        assert found.ms_within == pytest.approx(ms_within)
        assert found.ms_between / found.ms_within == pytest.approx(stats.f_oneway(*groups).statistic)
        n0 = (total - np.sum(sizes**2) / total) / (len(groups) - 1)  # Searle's n0: E[MS_b] = sigma^2 + n0 tau^2
        assert found.tau2 == pytest.approx((found.ms_between - ms_within) / n0)
    sources = [
        stack(
            f"s{s}",
            [
                (r, k, float(v))
                for r, groups in (("B0", a), ("B1", b))
                if s < len(groups)
                for k, v in enumerate(groups[s])
            ],
        )
        for s in range(4)
    ]
    found = cells(sources, "acc")
    weights = np.array([2, 3]) / 5  # between-stack df: 3 stacks of B0, 4 of B1
    assert pooled(found) == pytest.approx(weights @ [anova("B0", "acc", a).tau2, anova("B1", "acc", b).tau2])


@pytest.mark.slow
@pytest.mark.parametrize("tau", [0.0, 1.0])
def test_the_interval_covers_the_true_tau_at_its_level_over_seeded_simulations(tau: float) -> None:
    rng, n, covered = np.random.default_rng(20), 200, 0
    for _ in range(n):
        found = cells(simulated(rng, 3, tau), "acc")
        low, high = interval(found, draws=4000, seed=int(rng.integers(2**31)))
        assert low <= np.sqrt(max(0.0, pooled(found))) <= high
        covered += low <= tau <= high
    # 95% nominal; 200 draws carry a binomial SD of 1.5 pp, and the inversion is a little conservative
    assert 0.92 <= covered / n <= 0.99, covered / n


def test_a_known_tau_is_recovered_within_its_interval_and_tau_0_gives_one_that_holds_0() -> None:
    rng = np.random.default_rng(5)
    wide = cells(simulated(rng, 8, 1.5, seeds=5), "acc")
    low, high = interval(wide)
    assert low <= 1.5 <= high and low > 0, (low, high)
    none = cells(simulated(rng, 4, 0.0), "acc")
    assert interval(none)[0] == 0.0


def test_each_bound_puts_the_estimate_at_its_tail_of_re_runs_drawn_from_the_model() -> None:
    """At tau = low, re-runs drawn whole from the model (the seeds' SDs at the MS_within) exceed the estimate 2.5% of
    the time; at tau = high they fall below it 2.5% of the time: the chi-square law and the level, checked on data."""
    found = cells(simulated(np.random.default_rng(5), 8, 1.5, seeds=5), "acc")
    low, high = interval(found)
    sigma = np.sqrt([c.ms_within for c in found])[None, :, None, None]
    rng = np.random.default_rng(6)
    for tau, tail in ((low, lambda x: x >= pooled(found)), (high, lambda x: x <= pooled(found))):
        y = rng.normal(0, tau, (20_000, len(found), 8, 1)) + rng.normal(0, 1, (20_000, len(found), 8, 5)) * sigma
        means = y.mean(axis=3)
        ms_between = 5 * means.var(axis=2, ddof=1)
        ms_within = y.var(axis=3, ddof=1).mean(axis=2)
        assert tail(((ms_between - ms_within) / 5).mean(axis=1)).mean() == pytest.approx(0.025, abs=0.005)


@pytest.mark.slow
def test_the_stacks_to_pin_tau_give_the_half_width_asked_and_one_fewer_does_not() -> None:
    found = cells(simulated(np.random.default_rng(3), 3, 1.0), "acc")
    needed, tau2 = stacks_to_pin(found), max(0.0, pooled(found))

    def half(n_stacks: int) -> float:
        low, high = interval(projected(found, tau2, n_stacks))
        return (high - low) / 2

    assert needed is not None and half(needed) <= 0.25 < half(needed - 1)
    # the projection is the interval of a study of that size landing on the estimate: near simulated studies' median
    rng, truth = np.random.default_rng(4), np.sqrt(tau2)
    studies = [interval(cells(simulated(rng, needed, truth), "acc"), draws=4000) for _ in range(30)]
    assert np.median([(h - lo) / 2 for lo, h in studies]) == pytest.approx(0.25, abs=0.06)
    assert stacks_to_pin(found, half_width=0.01, most=50) is None


def write_stack(folder: Path, device: str, values: dict[str, list[float]], profile: str = "smoke") -> Path:
    """A results folder of `profile` whose run IDs hold these per-seed ACCs (F 20, BWT -20), run on `device`."""
    for run_id, accs in values.items():
        config = resolve(run_id, profile)
        for seed, acc in zip((1993, 2023, 42, 1, 2), accs, strict=False):
            write_json_atomic(
                folder / run_id / f"seed-{seed}" / "result.json",
                {
                    "config_version": CONFIG_VERSION,
                    "run_id": run_id,
                    "seed": seed,
                    "profile": profile,
                    "config": config.to_dict(),
                    "R": matrix_with(acc, 20.0, -20.0, config.n_tasks),
                    "metrics": {"acc": acc, "forgetting": 20.0, "bwt": -20.0},
                    "environment": {
                        "device": device,
                        "torch": "2.11.0+cu128",
                        "python": "3.11.9",
                        "precision": "16-mixed",
                        "compile": "off",
                        "step": "graph",
                    },
                },
            )
    return folder


def test_results_folders_are_stacks_labelled_by_their_environment_and_every_figure_is_in_the_json(tmp_path) -> None:
    h100 = write_stack(tmp_path / "h100", "cuda: NVIDIA H100", {"B3": [50, 52, 54], "B1": [40, 41, 45]})
    t4 = write_stack(tmp_path / "t4", "cuda: Tesla T4", {"B3": [55, 57, 59], "B1": [42, 44, 43], "a1": [30, 31, 32]})
    again = write_stack(tmp_path / "t4-again", "cuda: Tesla T4", {"B3": [49, 50, 51], "a1": [33, 34, 35]})
    out = tmp_path / "tau.json"
    result = CliRunner().invoke(main, ["stacks", str(h100), str(t4), str(again), "--json-out", str(out)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0] == "uh stacks: 3 stacks of profile smoke, 3 run IDs held by 2 or more"
    stack_1 = lines.index(f"stack 1: {h100}")
    label = "cuda: NVIDIA H100, torch 2.11.0+cu128, python 3.11.9, 16-mixed, compile off, step graph"
    assert lines[stack_1 + 1] == f"  {label}"
    assert "note: stacks 2, 3 share a stack label; each SOURCE is taken as a stack of its own" in lines
    assert lines[-1] == AMENDMENT and max(len(line) for line in lines if str(tmp_path) not in line) <= 100
    report = json.loads(out.read_text())
    acc = next(m for m in report["metrics"] if m["metric"] == "acc")
    b3 = next(c for c in acc["cells"] if c["run_id"] == "B3")
    assert (b3["ms_between"], b3["ms_within"], b3["tau2"]) == pytest.approx((39.0, 3.0, 12.0))  # the hand example
    assert [c["run_id"] for c in acc["cells"]] == ["B1", "B3", "a1"] and acc["weights"] == pytest.approx(
        [0.25, 0.5, 0.25]
    )
    assert acc["tau"] == pytest.approx(np.sqrt(max(0, acc["tau2_pooled"]))) and len(acc["interval"]) == 2
    assert report["note"] == AMENDMENT and [s["label"].split(",")[0] for s in report["stacks"]] == [
        "cuda: NVIDIA H100",
        "cuda: Tesla T4",
        "cuda: Tesla T4",
    ]


def test_a_source_that_mixes_stacks_says_so(tmp_path) -> None:
    mixed = write_stack(tmp_path / "mixed", "cuda: Tesla T4", {"B3": [55, 57, 59], "a1": [30, 31, 32]})
    write_stack(mixed, "cuda: NVIDIA L4", {"B1": [42, 44, 43]})
    other = write_stack(tmp_path / "other", "cpu", {"B3": [50, 52, 54], "B1": [40, 41, 45]})
    result = CliRunner().invoke(main, ["stacks", str(mixed), str(other)])
    assert result.exit_code == 0, result.output
    label = "cuda: NVIDIA L4, torch 2.11.0+cu128, python 3.11.9, 16-mixed, compile off, step graph"
    assert f"  also {label}: taken as one stack" in result.output.splitlines()


def test_a_per_seed_csv_is_a_stack_taken_to_be_of_the_others_profile(tmp_path) -> None:
    folder = write_stack(tmp_path / "r", "cpu", {"B3": [50, 52, 54]})
    csv = tmp_path / "paper.csv"
    csv.write_text("run_id,seed,acc,forgetting,bwt\nB3,1993,55,20,-20\nB3,2023,57,20,-20\nB3,42,59,20,-20\n")
    result = CliRunner().invoke(main, ["stacks", str(folder), str(csv)])
    assert result.exit_code == 0, result.output
    assert "3 stacks" not in result.output and "2 stacks of profile smoke" in result.output
    assert f"stack 2: {csv}\n  a per-seed CSV: its stack is not recorded\n" in result.output


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: [write_stack(p / "a", "cpu", {"B3": [1, 2, 3]})], "uh stacks needs 2 SOURCEs or more"),
        (lambda p: [write_stack(p / "a", "cpu", {"B3": [1, 2, 3]})] * 2, "/a hold the same run (B3 seed 1993"),
        (
            lambda p: [
                write_stack(p / "a", "cpu", {"B3": [1, 2, 3]}),
                write_stack(p / "b", "cpu", {"B3": [1, 2, 3]}, profile="cifar10-cpu"),
            ],
            "different profiles",
        ),
        (
            lambda p: [write_stack(p / "a", "cpu", {"B3": [1, 2, 3]}), write_stack(p / "b", "cpu", {"B1": [1, 2, 3]})],
            "no run ID is held by 2 SOURCEs or more",
        ),
        (
            lambda p: [write_stack(p / "a", "cpu", {"B3": [1]}), write_stack(p / "b", "cpu", {"B3": [2]})],
            "the seeds' spread is unknown",
        ),
        (
            lambda p: [write_stack(p / "a", "cpu", {"B3": [1, 2, 3]}), p / "a" / "B3" / "seed-1993" / "result.json"],
            "not a results folder, a bundle (.zip, uh bundle) or a per-seed CSV",
        ),
        (lambda p: [write_stack(p / "a", "cpu", {"B3": [1, 2, 3]}), p / "empty"], "no <RUN>/seed-<SEED>/result.json"),
    ],
)
def test_inputs_that_cannot_measure_tau_are_refused_in_one_line(tmp_path, make, message) -> None:
    (tmp_path / "empty").mkdir()
    result = CliRunner().invoke(main, ["stacks", *map(str, make(tmp_path))])
    assert result.exit_code == 2, result.output
    assert message in result.output and len(result.output.strip().splitlines()) == 1, result.output


def test_an_unwritable_json_out_is_one_line_after_the_figures(tmp_path) -> None:
    a = write_stack(tmp_path / "a", "cpu", {"B3": [50, 52, 54]})
    b = write_stack(tmp_path / "b", "gpu", {"B3": [55, 57, 59]})
    under_a_file = tmp_path / "a" / "B3" / "seed-42" / "result.json" / "tau.json"
    result = CliRunner().invoke(main, ["stacks", str(a), str(b), "--json-out", str(under_a_file)])
    assert result.exit_code == 2 and "uh stacks: 2 stacks" in result.output
    assert result.output.strip().splitlines()[-1].startswith("Error: cannot write")


def test_bundles_made_by_uh_bundle_are_read_as_their_results_folders(tmp_path) -> None:
    """A zip from `uh bundle` is verified, extracted and read as the folder it was made from: the same figures."""
    h100 = write_stack(tmp_path / "h100", "cuda: NVIDIA H100", {"B3": [50, 52, 54], "B1": [40, 41, 45]})
    t4 = write_stack(tmp_path / "t4", "cuda: Tesla T4", {"B3": [55, 57, 59], "B1": [42, 44, 43]})
    zips = [tmp_path / "h100.zip", tmp_path / "t4.zip"]
    for folder, zipped in zip((h100, t4), zips, strict=True):
        result = CliRunner().invoke(main, ["bundle", "--results-dir", str(folder), "-o", str(zipped)])
        assert result.exit_code == 0, result.output
    figures = []
    for sources in ((h100, t4), zips):
        out = tmp_path / "tau.json"
        result = CliRunner().invoke(main, ["stacks", *map(str, sources), "--json-out", str(out)])
        assert result.exit_code == 0, result.output
        figures.append(
            [
                {k: m[k] for k in ("metric", "tau", "tau2_pooled", "interval")}
                for m in json.loads(out.read_text())["metrics"]
            ]
        )
    assert figures[0] == figures[1]
    (tmp_path / "t4.zip").write_bytes((tmp_path / "t4.zip").read_bytes()[:-30])  # a damaged zip: one line, exit 2
    result = CliRunner().invoke(main, ["stacks", *map(str, zips)])
    assert result.exit_code == 2 and "t4.zip" in result.output, result.output


@pytest.mark.parametrize("route", ["copy", "bundle", "csv"])
def test_the_same_runs_given_twice_by_any_route_are_refused_naming_both(tmp_path, route) -> None:
    """A copy of a results folder, a folder and its own bundle, a CSV and its copy were two stacks (tau 0.00 [0.00,
    0.00]): only the same path was refused. A stack is its runs, to the last bit, whatever route brings them."""
    other = write_stack(tmp_path / "other", "gpu", {"B3": [55, 57, 59]})
    first = write_stack(tmp_path / "r", "cpu", {"B3": [50, 52, 54]})
    if route == "copy":
        twice = shutil.copytree(first, tmp_path / "copy-of-r")
    elif route == "bundle":
        twice = tmp_path / "r.zip"
        assert CliRunner().invoke(main, ["bundle", "--results-dir", str(first), "-o", str(twice)]).exit_code == 0
    else:
        first, twice = tmp_path / "a.csv", tmp_path / "copy-of-a.csv"
        first.write_text("run_id,seed,acc,forgetting,bwt\nB3,1993,50,20,-20\nB3,2023,52,20,-20\n")
        shutil.copy(first, twice)
    result = CliRunner().invoke(main, ["stacks", str(first), str(other), str(twice)])
    assert result.exit_code == 2, result.output
    assert result.output.startswith(f"Error: {first} and {twice} hold the same run (B3 seed 1993, its metrics equal")
    assert len(result.output.strip().splitlines()) == 1, result.output


def test_the_report_says_what_tau_is_and_sets_the_tau_the_tolerances_assume_beside_it(tmp_path) -> None:
    """tau was given as "the SD of a stack's offset" and never set beside the tau the rule assumes ([derive] in the
    profile's tolerances.toml): per-seed CSVs are of the paper's profile, whose set states tau; smoke's states none."""
    csvs = [tmp_path / "a.csv", tmp_path / "b.csv"]
    for csv, accs in zip(csvs, ((50, 52, 54), (55, 57, 59)), strict=True):
        csv.write_text("run_id,seed,acc,forgetting,bwt\n" + "".join(f"B3,{k},{v},20,-20\n" for k, v in enumerate(accs)))
    paper = Path(__file__).resolve().parents[2] / "expected_results" / "tolerances.toml"
    tau = tomllib.loads(paper.read_text())["derive"]["tau"]
    result = CliRunner().invoke(main, ["stacks", *map(str, csvs), "--json-out", str(tmp_path / "tau.json")])
    assert result.exit_code == 0, result.output
    assert json.loads((tmp_path / "tau.json").read_text())["rule_tau"]["tau"] == tau
    lines = result.output.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("metric "))
    assert lines[header].split()[-2:] == ["rule", "tau"]
    assert [line.split()[-1] for line in lines[header + 1 : header + 4]] == [f"{tau:.2f}"] * 3
    assert TAU_IS in lines
    assumed = f"  {tau:g} pp, [derive] in {paper} (profile paper: per-seed CSVs record none; --profile names theirs)"
    assert assumed in lines
    lines = CliRunner().invoke(main, ["stacks", *map(str, csvs), "--profile", "smoke"]).output.splitlines()
    assert lines[0].startswith("uh stacks: 2 stacks of profile smoke,")
    header = next(i for i, line in enumerate(lines) if line.startswith("metric "))
    assert [line.split()[-1] for line in lines[header + 1 : header + 4]] == ["-"] * 3
    assert any(line.endswith("smoke/tolerances.toml states its tolerances as numbers") for line in lines), lines
    folder = write_stack(tmp_path / "x", "cpu", {"B3": [1, 2, 3]})  # a smoke folder: its CSV said to be paper's
    result = CliRunner().invoke(main, ["stacks", str(folder), str(csvs[0]), "--profile", "paper"])
    assert result.exit_code == 2 and "different profiles" in result.output, result.output
