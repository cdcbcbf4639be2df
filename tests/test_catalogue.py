"""The run catalogue: the run IDs (the twelve and r1-r3 beyond the paper, what each changes), the profiles' sizes, the
run labels and groups, every run ID's config under every profile pinned; and variants (`uh run RUN --set KEY=VALUE`):
parsing and checking of values, canonical and shell-safe IDs, run IDs recognised by their config, one-line refusals
that write nothing, and, on real smoke runs, the same numbers as the equivalent config built by hand, and a resume
after a kill to the identical result."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner, Result

from uniform_herding import catalogue
from uniform_herding.catalogue import (
    BEYOND_PAPER,
    KEYS,
    PAPER_RUNS,
    PROFILES,
    RUN_GROUPS,
    RUNS,
    SIZE_FIELDS,
    SPLIT_FIELDS,
    ConfigError,
    RunSpec,
    expand_run_ids,
    format_value,
    grid_points,
    parse,
    parse_value,
    resolve,
    run_name,
)
from uniform_herding.cli import main
from uniform_herding.method.components import CHOICES, POLICIES
from uniform_herding.method.config import Config
from uniform_herding.runs.pair import RunOptions
from uniform_herding.runs.results import result_path
from uniform_herding.runs.run import run_seed

SEED = 1993
SAFE = re.compile(r"[A-Za-z0-9_.=+-]+")  # folder names on every filesystem, shell words without quoting


def uh(*args: str) -> Result:
    return CliRunner().invoke(main, list(args))


def only_line(res: Result) -> str:
    """The refusal is exactly one line (no usage text, no traceback); returns it."""
    lines = res.output.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), res.output
    return lines[0]


def test_every_config_field_is_a_key_a_size_or_the_split():
    """A new Config field must be sorted into one of them (and so be settable by --set, or refused)."""
    assert set(KEYS) | SIZE_FIELDS | SPLIT_FIELDS == {f.name for f in dataclasses.fields(Config)}
    assert not (set(KEYS) & SIZE_FIELDS or set(KEYS) & SPLIT_FIELDS)


@pytest.mark.parametrize(
    ("key", "text", "value"),
    [
        ("rho", "5", 5),
        ("M", "1000", 1000),
        ("lr", "0.05", 0.05),
        ("lr", "5e-2", 0.05),
        ("weight_decay", "0", 0.0),
        ("memory", "icarl", "icarl"),
        ("imprint", "false", False),
        ("kd_lambda", "2", 2.0),
    ],
)
def test_values_are_parsed_by_the_fields_type(key, text, value):
    parsed = parse_value(key, text)
    assert parsed == value and type(parsed) is type(value)


def test_the_id_is_the_same_whatever_order_the_changes_are_given_in():
    ids = {parse("B3", order).run_id for order in (["rho=5", "M=1000"], ["M=1000", "rho=5"])}
    ids.add(parse("B3+rho=5+M=1000").run_id)  # an ID written in another order is read as the same variant
    assert ids == {"B3+M=1000+rho=5"}
    assert parse("B3", ["lr=0.050"]).run_id == parse("B3", ["lr=5e-2"]).run_id == "B3+lr=0.05"
    assert parse("B3", ["rho=05"]).run_id == "B3+rho=5" and parse("B3", ["M=0500"]).run_id == "s1"  # no padding


def test_changes_equal_to_the_base_are_dropped():
    assert parse("B3", ["rho=3"]).run_id == "B3"
    assert parse("a1", ["kd_lambda=0"]).run_id == "a1"
    assert parse("B3", ["rho=3", "M=1000"]).run_id == "B3+M=1000"


@pytest.mark.parametrize("run_id", list(RUNS))
def test_a_variant_whose_config_is_a_run_ids_is_that_run_id(run_id):
    """`B3 --set M=500` is s1, and so for every run ID: it runs, and is found done, as that run ID."""
    assert parse("B3", [f"{k}={format_value(v)}" for k, v in RUNS[run_id].changes.items()]).run_id == run_id
    assert parse("B1", ["memory=uniform_herding"]).run_id == "r3"  # from another base alike


VARIANTS = [
    ["lr=0.05"],
    ["weight_decay=1e-5"],
    ["kd_lambda=1e20"],
    ["cos_margin=0.000001"],
    ["imprint=false"],
    ["memory=closest_to_mean", "M=1000"],
    ["loss=icarl_bce", "head=linear"],
    ["M=1000", "b=32", "momentum=0.5"],
    ["selection=random", "readout=head", "grad_clip=2.5", "kd_temperature=0.5", "cos_scale=16"],
]


@pytest.mark.parametrize("sets", VARIANTS)
def test_ids_are_folder_names_and_shell_words_that_need_no_quoting(sets, tmp_path):
    run_id = parse("B3", sets).run_id
    assert SAFE.fullmatch(run_id) and shlex.quote(run_id) == run_id and not set(run_id) & set("[]*?{}~$`'\" ")
    assert parse(run_id).run_id == run_id  # the ID reads back as the same variant
    (tmp_path / "x.txt").touch()  # something a glob could match
    echoed = subprocess.run(
        ["bash", "-O", "failglob", "-c", f"cd {tmp_path} && printf '%s\\n' {run_id}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert echoed == run_id + "\n"
    (tmp_path / run_id).mkdir()


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--set", "colour=red"], ["unknown key 'colour'", "rho"]),
        (["--set", "epochs=3"], ["epochs is a size, set by the profile"]),
        (["--set", "batch_size=64"], ["batch_size is a size"]),
        (["--set", "split_seed=1"], ["split_seed fixes the data split"]),
        (["--set", "rho"], ["'rho' is not KEY=VALUE"]),
        (["--set", "rho=0"], ["rho=0", "whole number >= 1"]),
        (["--set", "M=2.5"], ["M=2.5", "whole number >= 1"]),
        (["--set", "memory=fifo"], ["memory=fifo", f"memory is one of {', '.join(POLICIES)}"]),
        (["--set", "loss=mse"], ["loss=mse", f"loss is one of {', '.join(CHOICES['loss'])}"]),
        (["--set", "imprint=yes"], ["imprint=yes", "true or false"]),
        (["--set", "lr=nan"], ["lr=nan", "finite number > 0"]),
        (["--set", "lr=inf"], ["lr=inf", "finite number > 0"]),
        (["--set", "weight_decay=-1e-4"], ["weight_decay=-1e-4", ">= 0"]),
        (["--set", "kd_temperature=0"], ["kd_temperature=0", "> 0"]),
        (["--set", "momentum=1"], ["momentum=1", "[0, 1)"]),
        (["--set", "rho=5", "--set", "rho=4"], ["rho is given twice"]),
        (["--set", "memory=none"], ["memory=none", "readout=head"]),
        (
            ["--set", "memory=reservoir"],
            [
                "B3+memory=reservoir: readout=nme needs an exemplar of every seen class",
                "memory=reservoir may leave a class without one",
                "readout=head",
            ],
        ),
        (["--set", "M=100"], ["M=100", "profile smoke", "M >= 380"]),
        (
            ["--set", "memory=static", "--set", "rho=5"],
            [
                "B3+memory=static+rho=5: nothing in this run reads rho",
                "only memory=uniform_herding reads it",
                "drop it",
            ],
        ),
        (
            ["--set", "kd_lambda=0", "--set", "kd_temperature=4"],
            ["nothing in this run reads kd_temperature", "only loss=ce_kd when kd_lambda > 0 reads it"],
        ),
        (
            ["--set", "loss=icarl_bce", "--set", "cos_margin=0.5"],
            ["nothing in this run reads cos_margin", "only loss=ce_kd when head=cosine reads it"],
        ),
        (
            ["--set", "head=linear", "--set", "cos_scale=16"],
            ["nothing in this run reads cos_scale", "only head=cosine reads it"],
        ),
        (["--set", "memory=none", "--set", "readout=head", "--set", "b=32"], ["nothing in this run reads b"]),
        # values the profile makes the same run as another value (variants.level): one name per run
        (
            ["--set", "rho=40"],
            [
                "B3+rho=40: in profile smoke, rho=40 is the same run as rho=20",
                "pools of 20 * q_c hold all 100 training items of a class",
                "give rho=20",
            ],
        ),
        (["--set", "M=200000"], ["M=200000 is the same run as M=40000", "keeps all 1000 training items", "M=40000"]),
        (["--set", "M=2001"], ["M=2001 is the same run as M=2000, B3's own (M gives 50 exemplars); drop it"]),
        (["--set", "M=490"], ["M=490 is the same run as M=500 (M gives 12 exemplars); give M=500"]),
        (["--set", "b=59"], ["b=59 is the same run as b=60 (b gives 15 items replayed per step); give b=60"]),
        (["--set", "M=40000", "--set", "rho=5"], ["rho=5 is the same run as rho=3, B3's own", "drop it"]),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_key_and_writes_nothing(args, words, no_training, tmp_path):
    res = uh(
        "run",
        "B3",
        *args,
        "--profile",
        "smoke",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(tmp_path / "results"),
    )
    line = only_line(res)
    assert res.exit_code == 2 and all(w in line for w in words), line
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("run_id", "words"),
    [
        ("B9+rho=5", "unknown run ID 'B9'"),
        ("B3+rho=5+rho=4", "twice"),
        ("B2+rho=5", "B2+rho=5: nothing in this run reads rho (only memory=uniform_herding reads it)"),
        ("a1+kd_temperature=4", "a1+kd_temperature=4.0: nothing in this run reads kd_temperature"),
        ("B1+selection=random", "B1+selection=random: nothing in this run reads selection"),
    ],
)
def test_a_bad_variant_id_is_refused_alike(run_id, words, tmp_path):
    res = uh("run", run_id, "--profile", "smoke", "--results-dir", str(tmp_path / "results"))
    assert res.exit_code == 2 and words in only_line(res)
    assert list(tmp_path.iterdir()) == []


def test_what_a_run_reads_decides_which_variants_run():
    """A changed setting must be read by the run (components.py); a policy that may leave a class empty takes
    readout=head only; and every run ID is a run these checks let through."""
    assert resolve("B2+memory=reservoir", "smoke").memory == "reservoir"  # B2 reads out by the head
    assert resolve("B3+memory=reservoir+readout=head", "smoke").rho == 3  # rho stays B3's, unread
    assert resolve("B3+memory=static+readout=head", "smoke").memory == "static"  # B3's rho is no change
    assert resolve("B1+memory=uniform_herding+rho=5", "smoke").rho == 5  # read once memory reads it
    for run_id, spec in RUNS.items():
        reference = spec.base or "B3"  # B0-B3 are compared with no run; their changes are to B3's defaults
        cfg, base = catalogue.resolve(run_id, "smoke"), catalogue.resolve(reference, "smoke")
        changed = {k: v for k, v in dataclasses.asdict(cfg).items() if getattr(base, k) != v}
        catalogue.check(run_id, reference, cfg, changed, "smoke")  # no run ID changes what it does not read


@pytest.mark.parametrize(
    ("spellings", "name"),
    [
        (
            ["a2+memory=reservoir", "B3+memory=reservoir+readout=head", "B0+memory=reservoir+kd_lambda=1"],
            "a2+memory=reservoir",
        ),  # the run ID it needs the fewest --set keys from
        (["B3+M=500+rho=1", "s1+rho=1", "r2+M=500"], "s1+rho=1"),  # s1 and r2 need one key each: RUNS order
        (["B2+memory=reservoir", "B0+memory=reservoir+M=2000"], "B2+memory=reservoir"),  # B0 reads no M: B2 is nearer
        (["B3+loss=icarl_bce", "a1+loss=icarl_bce"], "a1+loss=icarl_bce"),  # icarl_bce reads no kd_lambda: one run
        (["B3+memory=icarl+M=500", "s1+memory=icarl", "r1+M=500"], "r1+M=500"),
    ],
)
def test_every_spelling_of_one_run_has_one_name(spellings, name):
    """The name of a run is its settings from the run ID that needs the fewest --set keys, ties to the one that reads
    the same settings most nearly, then RUNS order; its base is the run it is compared with (base_of)."""
    assert {parse(spelling).run_id for spelling in spellings} == {name}
    assert {catalogue.base_of(spelling) for spelling in spellings} == {name.split("+")[0]}
    assert parse(name).run_id == name and catalogue.base_of(name) == name.split("+")[0]


def test_two_spellings_of_one_run_are_one_folder(finished_result, no_training, tmp_path):
    """The issue's case: a2 with a reservoir, spelled from B3, is the run a2+memory=reservoir, found done in its folder;
    the command says so in one line."""
    path = finished_result(tmp_path, "a2+memory=reservoir", SEED)
    res = uh(
        "run",
        "B3",
        "--set",
        "memory=reservoir",
        "--set",
        "readout=head",
        "--seed",
        str(SEED),
        "--profile",
        "smoke",
        "--results-dir",
        str(tmp_path),
    )
    assert res.exit_code == 0 and res.output.splitlines() == [
        "B3+memory=reservoir+readout=head is a2+memory=reservoir (the same run, named from the run ID it needs the "
        "fewest --set keys from): running it as a2+memory=reservoir",
        f"a2+memory=reservoir seed {SEED}: done already ({path}); --force reruns it",
    ], res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a2+memory=reservoir"]


@pytest.mark.parametrize(
    ("run_id", "profile", "ok"),
    [
        ("B3+rho=23", "paper", True),
        ("B3+rho=24", "paper", False),  # q_c >= 20 of 450 items: rho = 23 holds all
        ("B3+rho=20", "smoke", True),
        ("B3+rho=21", "smoke", False),  # q_c >= 5 of 100
        ("s1+rho=100", "smoke", True),
        ("s1+rho=101", "smoke", False),  # s1's 12 exemplars: q_c >= 1
        ("B3+M=1000", "smoke", True),
        ("B3+M=1001", "smoke", False),  # 25 exemplars, as M=1000
        ("a2+M=40", "smoke", True),
        ("a2+M=39", "smoke", False),  # 1 exemplar (the least budget)
        ("B3+M=45000", "paper", True),
        ("B3+M=45001", "paper", False),
    ],  # all 100 x 450 items
)
def test_a_value_is_refused_where_the_profile_makes_it_another_values_run(run_id, profile, ok):
    """Of the values of M, b or rho that are one run under a profile (variants.level), one is its name: the ceiling
    where rho's pools or M's budget hold every training item, the level in the paper's units where scaled."""
    if ok:
        resolve(run_id, profile)
    else:
        with pytest.raises(catalogue.ConfigError, match=f"in profile {profile}, .* is the same run as"):
            resolve(run_id, profile)


def test_the_same_variant_from_sets_in_two_orders_is_one_folder(finished_result, no_training, tmp_path):
    path = finished_result(tmp_path, "B3+M=1000+rho=5", SEED)
    for order in (["rho=5", "M=1000"], ["M=1000", "rho=5"]):
        sets = [a for s in order for a in ("--set", s)]
        res = uh("run", "B3", *sets, "--seed", str(SEED), "--profile", "smoke", "--results-dir", str(tmp_path))
        assert res.exit_code == 0 and f"B3+M=1000+rho=5 seed {SEED}: done already ({path})" in res.output, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["B3+M=1000+rho=5"]


def test_a_result_or_checkpoint_of_another_variant_is_never_taken(finished_result, tmp_path):
    """Folders are per ID; a result.json names its run ID and a checkpoint its whole config (durability.py)."""
    other = finished_result(tmp_path, "B3+rho=4", SEED)
    mine = result_path(tmp_path, "B3+rho=5", SEED)
    mine.parent.mkdir(parents=True)
    shutil.copy(other, mine)
    res = uh("run", "B3+rho=5", "--seed", str(SEED), "--profile", "smoke", "--results-dir", str(tmp_path))
    assert res.exit_code == 1 and "holds a result of another run (run_id 'B3+rho=4'" in res.output, res.output
    assert mine.read_bytes() == other.read_bytes()


# --- real smoke runs -------------------------------------------------------------------------------------


@pytest.mark.trains
def test_a_variant_gives_the_numbers_of_the_same_config_built_by_hand(smoke_sweep, monkeypatch, tmp_path):
    """B3+rho=5 (from the sweep, run by --jobs) against a run ID made by hand with rho=5: the same R, bit for bit."""
    data, results, _ = smoke_sweep
    variant = json.loads(result_path(results, "B3+rho=5", SEED).read_text())
    assert variant["variant"] == {"base": "B3", "changes": {"rho": 5}} and variant["config"]["rho"] == 5
    x5 = RunSpec("x5", "by hand", "B3 with rho=5, written as a run ID", {"rho": 5})
    monkeypatch.setitem(catalogue.RUNS, "x5", x5)
    path = run_seed(RunOptions("smoke", data, tmp_path).pair("x5", SEED), resolve("x5", "smoke"), echo=lambda _: None)
    by_hand = json.loads(path.read_text())
    assert by_hand["config"] == variant["config"]
    assert by_hand["R"] == variant["R"] and by_hand["metrics"] == variant["metrics"]


@pytest.mark.trains
def test_a_variant_killed_mid_run_resumes_to_the_identical_result(smoke_sweep, tmp_path):
    data, results, _ = smoke_sweep
    args = [
        "B3+rho=5",
        "--seed",
        str(SEED),
        "--profile",
        "smoke",
        "--data-dir",
        str(data),
        "--results-dir",
        str(tmp_path),
    ]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "uniform_herding", "run", *args]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    assert proc.stdout is not None
    for line in proc.stdout:
        if "task 1/5:" in line:
            proc.kill()  # SIGKILL during task 2, or while its checkpoint is written
            break
    assert proc.wait() == -signal.SIGKILL
    checkpoint = result_path(tmp_path, "B3+rho=5", SEED).with_name("checkpoint.pt")
    assert checkpoint.exists() and not checkpoint.with_name("result.json").exists()

    foreign = result_path(tmp_path, "B3+rho=4", SEED).with_name("checkpoint.pt")  # another variant's folder
    foreign.parent.mkdir(parents=True)
    shutil.copy(checkpoint, foreign)
    res = uh("run", "B3+rho=4", *args[1:])
    assert res.exit_code == 1 and f"checkpoint {foreign} was written with another config" in res.output, res.output
    assert not foreign.with_name("result.json").exists()

    res = uh("run", *args)
    assert res.exit_code == 0 and "resuming after task" in res.output, res.output
    resumed = json.loads(result_path(tmp_path, "B3+rho=5", SEED).read_text())
    uninterrupted = json.loads(result_path(results, "B3+rho=5", SEED).read_text())
    assert resumed["R"] == uninterrupted["R"] and resumed["metrics"] == uninterrupted["metrics"]
    assert resumed["variant"] == uninterrupted["variant"]


def test_ids_in_results_are_canonical(finished_result, tmp_path):
    """A result.json whose run_id is not canonical (B3+M=500 is s1) is refused where results are read."""
    path = finished_result(tmp_path / "ok", "B3+rho=5", SEED)
    body = json.loads(path.read_text()) | {"run_id": "B3+M=500"}
    Path(tmp_path / "bad" / "B3+M=500" / f"seed-{SEED}").mkdir(parents=True)
    (tmp_path / "bad" / "B3+M=500" / f"seed-{SEED}" / "result.json").write_text(json.dumps(body))
    res = uh("aggregate", "--results-dir", str(tmp_path / "bad"))
    assert res.exit_code == 2 and "'B3+M=500' is not a canonical ID: the same run is 's1'" in res.output, res.output


# --- what a run is compared with (base_of), and --base -----------------------------------------------------


def test_base_of_is_the_one_rule_for_what_every_run_is_compared_with():
    """A run ID: its RunSpec.base (B3 for the ablations and sweeps, r3 against B1, none for B0-B3); a variant: the run
    ID its name starts from, or the one its `+vs=` names (uh run --base)."""
    ablations_and_sweeps = dict.fromkeys(["a1", "a2", "a3", "a4", "s1", "s2", "s3", "s4"], "B3")
    assert {r: catalogue.base_of(r) for r in RUNS} == {
        "B0": None,
        "B1": None,
        "B2": None,
        "B3": None,
        **ablations_and_sweeps,
        "r1": "B3",
        "r2": "B3",
        "r3": "B1",
    }
    assert catalogue.base_of("r1+memory=closest_to_mean") == "r1"
    assert catalogue.base_of("r1+memory=closest_to_mean+vs=B3") == "B3"


@pytest.mark.parametrize(
    ("run_id", "base", "pinned"),
    [
        ("r1+memory=closest_to_mean", "B3", "r1+memory=closest_to_mean+vs=B3"),
        ("r1+memory=closest_to_mean+vs=B3", "r1", "r1+memory=closest_to_mean"),  # its own base: no `vs`, one name
        ("B3+rho=5", "B3", "B3+rho=5"),
        ("B3+rho=5", "a4", "B3+rho=5+vs=a4"),
        ("a1", "B3", "a1"),
        ("B3", "B3", "B3"),
    ],  # a run ID keeps its own base
)
def test_pin_writes_the_chosen_base_into_the_variants_id(run_id, base, pinned):
    assert catalogue.pin(run_id, base) == pinned
    catalogue.check_id(pinned)  # a canonical ID: what a results folder and a CSV row may name
    assert catalogue.base_of(pinned) == (base if catalogue.is_variant(pinned) else RUNS[pinned].base)


@pytest.mark.parametrize(
    ("run_id", "words"),
    [
        ("B3+rho=5+vs=B3", "is not a canonical ID: the same run is 'B3+rho=5'"),
        ("s1+vs=B1", "is not a canonical ID: the same run is 's1'"),
        ("B3+rho=5+vs=X9", "vs=X9 names no run ID"),
    ],
)
def test_an_id_whose_vs_changes_nothing_or_names_no_run_is_refused(run_id, words):
    with pytest.raises(catalogue.ConfigError, match=re.escape(words)):
        catalogue.check_id(run_id)


def test_base_names_the_run_a_variant_is_compared_with_and_its_folder(finished_result, no_training, tmp_path):
    """The issue's case: B3 with closest-to-mean selection is named from r1 (one setting away) and compared with it,
    a run beyond the paper; --base B3 compares it with B3 instead, and the ID says so (its own folder, found done)."""
    path = finished_result(tmp_path, "r1+memory=closest_to_mean+vs=B3", SEED)
    res = uh(
        "run",
        "B3",
        "--set",
        "memory=closest_to_mean",
        "--base",
        "B3",
        "--seed",
        str(SEED),
        "--profile",
        "smoke",
        "--results-dir",
        str(tmp_path),
    )
    assert res.exit_code == 0 and res.output.splitlines() == [
        "B3+memory=closest_to_mean is r1+memory=closest_to_mean (the same run, named from the run ID it needs the "
        "fewest --set keys from): running it as r1+memory=closest_to_mean",
        "r1+memory=closest_to_mean is compared with B3 (--base): running it as r1+memory=closest_to_mean+vs=B3",
        f"r1+memory=closest_to_mean+vs=B3 seed {SEED}: done already ({path}); --force reruns it",
    ], res.output
    assert json.loads(path.read_text())["variant"] == {
        "base": "r1",
        "changes": {"memory": "closest_to_mean"},
        "vs": "B3",
    }


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["a1", "--base", "B1"], "--base B1: a1 is a run ID, compared with B3 (uh list)"),
        (["B0", "--base", "B3"], "--base B3: B0 is a run ID, compared with no run"),
        (["B3", "--set", "rho=5", "--base", "X9"], "--base X9: not a run ID"),
        (["B3+rho=5+vs=a4", "--base", "a1"], "B3+rho=5+vs=a4 is compared with a4, and --base asks for a1"),
    ],
)
def test_a_base_that_cannot_be_is_one_line_and_writes_nothing(args, words, no_training, tmp_path):
    res = uh("run", *args, "--profile", "smoke", "--results-dir", str(tmp_path / "results"))
    assert res.exit_code == 2 and words in only_line(res)
    assert list(tmp_path.iterdir()) == []


def test_a_sweep_with_base_compares_every_point_with_it(tmp_path):
    """An M sweep of B3 with closest-to-mean selection is named from three run IDs (s1, r1, s2); --base B3 compares
    each with B3."""
    args = [
        "sweep",
        "B3+memory=closest_to_mean",
        "M=500,2000,4000",
        "--profile",
        "smoke",
        "--dry-run",
        "--results-dir",
        str(tmp_path),
    ]
    assert [line.split()[1] for line in uh(*args).output.splitlines()[2:5]] == [
        "s1+memory=closest_to_mean",
        "r1+memory=closest_to_mean",
        "s2+memory=closest_to_mean",
    ]
    res = uh(*args, "--base", "B3")
    points = [line.split()[1] for line in res.output.splitlines()[2:5]]
    assert res.exit_code == 0 and points == [
        f"{p}+vs=B3" for p in ("s1+memory=closest_to_mean", "r1+memory=closest_to_mean", "s2+memory=closest_to_mean")
    ], res.output


@pytest.mark.slow
def test_a_variant_run_with_base_b3_is_compared_with_b3_in_uh_check_and_the_report(finished_result, tmp_path):
    """`uh run B3 --set memory=closest_to_mean --base B3`'s results: uh check measures it against B3, the report's
    variants table pairs it with B3; `uh report --base B3` does the same for the variant run without --base."""
    from uniform_herding.report.summary import write_report

    for seed, acc in ((1993, 50.0), (2023, 52.0)):
        finished_result(tmp_path / "pinned", "B3", seed, acc)
        finished_result(tmp_path / "pinned", "r1+memory=closest_to_mean+vs=B3", seed, acc - 3.0)
        finished_result(tmp_path / "plain", "B3", seed, acc)
        finished_result(tmp_path / "plain", "r1+memory=closest_to_mean", seed, acc - 3.0)
    res = uh("check", "--results-dir", str(tmp_path / "pinned"), "--json-out", str(tmp_path / "check.json"))
    (variant,) = json.loads((tmp_path / "check.json").read_text())["variants"]
    assert variant["statement"] == "r1+memory=closest_to_mean+vs=B3 against B3 (memory=closest_to_mean)", res.output
    assert variant["evidence"][0].startswith("r1+memory=closest_to_mean+vs=B3 - B3 acc: 1993 -3.00, 2023 -3.00")
    for folder, base in (("pinned", None), ("plain", "B3")):
        write_report(tmp_path / folder, tmp_path / folder / "report", echo=lambda _: None, base=base)
        table = (tmp_path / folder / "report" / "tables" / "variants.md").read_text()
        assert "| r1+memory=closest_to_mean+vs=B3 | B3 | memory=closest_to_mean |" in table, table
        assert "-3.00" in table


def test_the_grid_is_the_product_in_the_order_given_with_canonical_ids():
    assert grid_points("B3", ("rho=1,5", "M=500,1000")) == [
        ("rho=1 M=500", "s1+rho=1"),
        ("rho=1 M=1000", "r2+M=1000"),
        ("rho=5 M=500", "s1+rho=5"),
        ("rho=5 M=1000", "B3+M=1000+rho=5"),
    ]
    assert [rid for _, rid in grid_points("B3", ("rho=1,3,5",))] == ["r2", "B3", "B3+rho=5"]  # run IDs by config
    assert [rid for _, rid in grid_points("B3+M=1000", ("lr=0.05,0.2",))] == ["B3+M=1000+lr=0.05", "B3+M=1000+lr=0.2"]


# --- run IDs and profiles ---------------------------------------------------------------------------------------


def changed_fields(a, b) -> set[str]:
    da, db = dataclasses.asdict(a), dataclasses.asdict(b)
    return {k for k in da if da[k] != db[k]}


@pytest.mark.parametrize("run_id", [r for r in RUNS if r[0] in "as"])
def test_every_ablation_and_sweep_changes_exactly_one_setting_of_b3(run_id):
    assert len(changed_fields(resolve(run_id), resolve("B3"))) == 1


# Issue 17: each run beyond the paper changes exactly one named setting of its base run.
STATED = {"r1": ("B3", {"memory": "icarl"}), "r2": ("B3", {"rho": 1}), "r3": ("B1", {"memory": "uniform_herding"})}


@pytest.mark.parametrize("profile", list(PROFILES))
@pytest.mark.parametrize("run_id", list(STATED))
def test_each_run_beyond_the_paper_differs_from_its_base_in_exactly_the_stated_setting(run_id, profile):
    base, stated = STATED[run_id]
    assert RUNS[run_id].base == base and RUNS[run_id].beyond_paper
    a = dataclasses.asdict(resolve(run_id, profile))
    assert {k: a[k] for k in changed_fields(resolve(run_id, profile), resolve(base, profile))} == stated
    assert resolve(run_id, profile).budget == resolve(base, profile).budget  # same M, b: only storage policy
    assert resolve(run_id, profile).retrieval == resolve(base, profile).retrieval


def test_the_paper_runs_and_the_runs_beyond_it():
    assert PAPER_RUNS == ("B0", "B1", "B2", "B3", "a1", "a2", "a3", "a4", "s1", "s2", "s3", "s4")
    assert BEYOND_PAPER == ("r1", "r2", "r3") and set(RUNS) == set(PAPER_RUNS) | set(BEYOND_PAPER)
    assert RUN_GROUPS == {"all": PAPER_RUNS, "refresh": ("B1", "B3", "r1", "r2", "r3")}
    assert expand_run_ids(["all"]) == list(PAPER_RUNS)  # `uh run all` stays the paper's 36 runs
    assert expand_run_ids(["r2", "refresh", "B3"]) == ["r2", "B1", "B3", "r1", "r3"]  # each once
    assert expand_run_ids(["B9"]) == ["B9"]  # unknown names are left to resolve() to refuse


def test_the_long_cpu_profile_only_trains_longer():
    assert {**PROFILES["cifar10-cpu"], "epochs": 12} == PROFILES["cifar10-cpu-long"]


@pytest.mark.parametrize("profile", list(PROFILES))
def test_a_profile_changes_sizes_only(profile):
    for run_id in RUNS:
        assert changed_fields(resolve(run_id, profile), resolve(run_id)) <= SIZE_FIELDS


def test_the_paper_sizes_of_other_run_ids():
    assert [resolve(r).budget for r in ("s1", "s2")] == [500, 4000]
    assert [resolve(r).retrieval for r in ("s3", "s4")] == [32, 128]
    assert resolve("B0").budget == resolve("B0").retrieval == 0


def test_run_names_state_the_sizes_the_profile_uses():
    assert [run_name(r) for r in RUNS] == [spec.name for spec in RUNS.values()]  # the paper's labels
    assert [run_name(r, "smoke") for r in ("s1", "s2", "s3", "s4")] == [
        "Active budget 12",
        "Active budget 100",
        "Retrieval 8",
        "Retrieval 32",
    ]
    assert run_name("B3", "smoke") == "Uniform Herding"


@pytest.mark.parametrize(
    ("run_id", "profile", "message"), [("b3", "paper", "unknown run ID 'b3'"), ("B3", "tiny", "unknown profile 'tiny'")]
)
def test_unknown_names_are_config_errors(run_id, profile, message):
    with pytest.raises(ConfigError, match=message):
        resolve(run_id, profile)


# Every run ID's resolved config (Config.to_dict) and label (run_name) under each profile, as the SHA-256 of their JSON
# (sorted keys): pinned when RUNS, PROFILES and resolve moved into this module (issue 54), equal to the digests the code
# before the move gave. A change here changes what some run trains or is called: re-derive deliberately, and say why.
PINNED = {
    "paper": "c907983f8ec97b73b7e25a709e221236003ca543ab5d406354d676a789fe666e",
    "smoke": "6c059af9c9878c458fdaa41015a11af7a391a5573f4363689b6232ab9048a553",
    "cifar10": "4190fb6a3c9b3d71c73e3a9ceb98a685338189f65328d76d1c61c6587da98956",
    "cifar10-cpu": "c9f80af75f6df56bd45f4c8f017d3d36e167ba5dc4ed526c0bfd0ced6b313d61",
    "cifar10-cpu-long": "fbd1d20482f98cacd039f05fd18f8a0c089a8478f754597e31fe6ede2f234f1e",
}


@pytest.mark.parametrize("profile", list(PROFILES))
def test_every_run_ids_config_and_name_under_every_profile_are_pinned(profile):
    assert set(PINNED) == set(PROFILES)
    table = {run_id: [resolve(run_id, profile).to_dict(), run_name(run_id, profile)] for run_id in RUNS}
    digest = hashlib.sha256(json.dumps(table, sort_keys=True).encode()).hexdigest()
    assert digest == PINNED[profile], f"profile {profile}: {json.dumps(table, sort_keys=True, indent=1)}"
