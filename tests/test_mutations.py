"""The mutation check: sixteen realistic one-line bugs, each planted alone in a copy of the package, must each
fail the fast tests named for it. A change that blinds one of those tests fails here.

A bug is one text replacement in one module; its original text must occur exactly once, so that a change to the
code fails here loudly instead of planting nothing. The named tests of tests/ run in a subprocess that imports
the copy (PYTHONPATH), all bugs at once on every CPU core; the check passes only when each run ends with failed
tests (pytest exit 1), not with errors. Deselect with `pytest -m "not mutations"`.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "uniform_herding"

pytestmark = [pytest.mark.mutations, pytest.mark.trains]  # the tests it runs train


@dataclass(frozen=True)
class Bug:
    """`original` -> `planted` in src/uniform_herding/`module`; `tests` (pytest node IDs) must catch it."""

    module: str
    original: str
    planted: str
    tests: tuple[str, ...]


BUGS = {
    "replay drawn without replacement": Bug(
        "method/train.py",
        "replay[torch.randint(len(replay), (b,), device=replay.device, generator=generator)]",
        "replay[torch.randperm(len(replay), device=replay.device, generator=generator)[:b]]",
        ("tests/method/test_train.py::test_replay_draws_b_items_uniformly_with_replacement_from_the_stored_items",),
    ),
    "NME prototypes from all of a class's images": Bug(
        "method/evaluate.py",
        "    feats = features(learner, stream, stream.train_x[torch.cat(",
        "    active = {c: stream.class_items[c] for c in active}\n    feats = features(learner, stream, "
        "stream.train_x[torch.cat(",
        ("tests/method/test_evaluate.py",),
    ),
    "flip probability 1": Bug(
        "method/stream.py",
        "generator=generator) < 0.5",
        "generator=generator) < 1.0",
        (
            "tests/method/test_stream.py::test_augment_draws_each_of_the_nine_offsets_each_way_and_flips_half_the_images",
        ),
    ),
    "crop offsets 0-7": Bug(
        "method/stream.py",
        "torch.randint(0, 2 * PAD + 1,",
        "torch.randint(0, 2 * PAD,",
        (
            "tests/method/test_stream.py::test_augment_draws_each_of_the_nine_offsets_each_way_and_flips_half_the_images",
        ),
    ),
    "REPLICATED only strictly inside the tolerance": Bug(
        "verdict/decide.py",
        "np.round(np.abs(difference), DECIMALS) <= np.round(tolerance, DECIMALS)",
        "np.round(np.abs(difference), DECIMALS) < np.round(tolerance, DECIMALS)",
        ("tests/verdict/test_check.py::test_a_difference_of_exactly_the_tolerance_is_replicated",),
    ),
    "the tolerance compared with float noise (2.0000000000000018 > 2.0)": Bug(
        "verdict/decide.py",
        "np.round(np.abs(difference), DECIMALS) <= np.round(tolerance, DECIMALS)",
        "np.abs(difference) <= tolerance",
        ("tests/verdict/test_decide.py::test_a_shift_of_exactly_the_tolerance_passes_whichever_its_sign",),
    ),
    "a derived tolerance's own decimals left unrounded": Bug(
        "verdict/decide.py",
        "np.round(np.abs(difference), DECIMALS) <= np.round(tolerance, DECIMALS)",
        "np.round(np.abs(difference), DECIMALS) <= tolerance",
        ("tests/verdict/test_check.py::test_a_shift_of_exactly_the_tolerance_passes_either_way",),
    ),
    "a metric's miss final at every look (the family's alpha spent once per look)": Bug(
        "verdict/procedure.py",
        "return not self.missing(run_id) and not self.waiting_on(run_id)",
        "return True",
        ("tests/verdict/test_check.py::test_a_metric_miss_waits_for_the_seeds_the_next_look_adds",),
    ),
    "a claim contradicted at alpha / m, not alpha / 2m": Bug(
        "verdict/decide.py",
        "return alpha / (2 * m)",
        "return alpha / m",
        (
            "tests/verdict/test_decide.py::test_a_claim_of_several_comparisons_needs_each_one",
            "tests/verdict/test_decide.py::test_a_claim_with_no_true_effect_is_contradicted_at_most_2_5_percent_of_the_time",
        ),
    ),
    "quota remainder to the highest labels": Bug(
        "method/memory.py",
        "(1 if i < M % C else 0)",
        "(1 if i >= C - M % C else 0)",
        ("tests/method/test_memory.py::test_quotas_sum_to_budget_remainder_to_lowest_labels",),
    ),
    "herding on normalised features": Bug(
        "method/memory.py",
        "f = torch.stack([group.double() for group in features])",
        "f = torch.stack([torch.nn.functional.normalize(group.double(), dim=1) for group in features])",
        ("tests/method/test_memory.py::test_herding_matches_brute_force",),
    ),
    "KD on the margin logits": Bug(
        "method/train.py",
        "kd_loss(logits[:, :C_old], teacher_logits",
        "kd_loss(train_logits[:, :C_old], teacher_logits",
        ("tests/method/test_train.py::test_ce_kd_uses_margin_for_ce_but_margin_free_logits_for_kd",),
    ),
    "forgetting from the first accuracy, not the best": Bug(
        "method/metrics.py",
        "R[..., j:, j].max(axis=-1)",
        "R[..., j, j]",
        ("tests/method/test_metrics.py",),
    ),
    "sample std over seeds instead of the population std": Bug(
        "verdict/aggregate.py",
        "grouped[m].std(ddof=0)",
        "grouped[m].std(ddof=1)",
        ("tests/verdict/test_aggregate.py::test_summarize_uses_population_std_in_runs_order",),
    ),
    "candidate multiplier rho = 2": Bug(
        "method/config.py",
        "rho: int = 3",
        "rho: int = 2",
        ("tests/method/test_config.py::test_the_paper_protocol_sizes",),
    ),
    "checkpoint restores no generator": Bug(
        "runs/durability.py",
        "g.set_state(s.cpu())",
        "g.get_state()",
        ("tests/runs/test_durability.py::test_a_checkpoint_restores_learner_memory_and_every_generator",),
    ),
}


def plant(bug: Bug, src: Path) -> None:
    """A copy of the package under `src` with `bug` planted."""
    shutil.copytree(PACKAGE, src / "uniform_herding", ignore=shutil.ignore_patterns("__pycache__"))
    module = src / "uniform_herding" / bug.module
    text = module.read_text()
    assert text.count(bug.original) == 1, f"{bug.module} no longer holds {bug.original!r} exactly once"
    module.write_text(text.replace(bug.original, bug.planted))


def run_tests(bug: Bug, src: Path) -> subprocess.CompletedProcess:
    """Plant the bug under `src`, then run its tests importing the package from there (checked)."""
    plant(bug, src)
    env = {**os.environ, "PYTHONPATH": str(src)}
    where = subprocess.run(
        [sys.executable, "-c", "import uniform_herding; print(uniform_herding.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert Path(where.strip()).is_relative_to(src), where
    command = [sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider", "-m", "not mutations"]
    return subprocess.run([*command, *bug.tests], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory):
    """Every bug's test run, started together (one per CPU core) on first use."""
    pool = ThreadPoolExecutor(max_workers=len(os.sched_getaffinity(0)))
    futures: dict[str, Future] = {}
    for name, bug in BUGS.items():
        futures[name] = pool.submit(run_tests, bug, tmp_path_factory.mktemp("mutant"))
    yield futures
    pool.shutdown(cancel_futures=True)


@pytest.mark.parametrize("name", list(BUGS))
def test_the_fast_tests_catch_the_planted_bug(runs: dict[str, Future], name: str) -> None:
    result = runs[name].result()
    summary = result.stdout.strip().splitlines()[-1] if result.stdout.strip() else ""
    assert result.returncode == 1 and " failed" in summary and " error" not in summary, (
        f"{name}: planted in {BUGS[name].module}, {' '.join(BUGS[name].tests)} exited {result.returncode}: "
        f"{summary or result.stderr[-2000:]}"
    )
