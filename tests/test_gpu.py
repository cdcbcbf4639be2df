"""On a GPU (`pytest -m gpu`, run by benchmarks/gpu-acceptance; skipped elsewhere): the paths that only a GPU
takes, with Lightning's real teardown to the CPU after the self-test's reference fit."""

import dataclasses
import json

import pytest
import torch
from click.testing import CliRunner

from uniform_herding.catalogue import resolve
from uniform_herding.cli import main
from uniform_herding.method.engine import Precision
from uniform_herding.runs import selftest

pytestmark = [pytest.mark.gpu, pytest.mark.trains]  # each trains, in this process or one it starts
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def on_the_gpu(monkeypatch):
    monkeypatch.setenv("UH_DEVICE", "cuda")


def learner_past_task_0(cfg):
    """A learner on the GPU from seed 0, its head grown for task 1, and its frozen teacher of task 0."""
    from uniform_herding.method.model import Learner
    from uniform_herding.method.train import freeze

    torch.manual_seed(0)
    learner = Learner(cfg.width, cfg.head, cfg.cos_scale).to(CUDA)
    learner.head.grow(cfg.classes_per_task)
    teacher = freeze(learner)
    learner.head.grow(cfg.classes_per_task)
    return learner, teacher


@pytest.mark.parametrize("precision", [Precision.FP16, Precision.FP32])
def test_fit_task_on_the_gpu_returns_stats_and_the_learner_on_the_gpu(precision, tiny_stream):
    from uniform_herding.method.train import fit_task

    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=2, batch_size=8)
    stream = tiny_stream(cfg, "cuda")
    learner, teacher = learner_past_task_0(cfg)
    gen = torch.Generator(device=CUDA).manual_seed(0)
    stats = fit_task(cfg, learner, teacher, stream, stream.train_items(0), stream.train_items(1), gen, precision)
    assert stats.steps == 6 and stats.divergence() is None and len(stats.epoch_loss) == 2
    assert all(p.device.type == "cuda" for p in learner.parameters())


def test_the_gpu_path_equals_lightnings_stock_path_at_paper_size():
    c = selftest.compare(CUDA, width=64, steps=8)
    assert c.failures() == [], c.failures()


def run_smoke(tmp_path, name: str, *args: str) -> dict:
    res = CliRunner().invoke(
        main,
        [
            "run",
            "B3",
            "--profile",
            "smoke",
            "--seed",
            "1993",
            "--device",
            "cuda",
            "--data-dir",
            str(tmp_path / "data"),
            "--results-dir",
            str(tmp_path / name),
            *args,
        ],
    )
    assert res.exit_code == 0, res.output
    return json.loads((tmp_path / name / "B3" / "seed-1993" / "result.json").read_text())


def test_a_gpu_run_end_to_end_in_16_mixed_records_its_device(tmp_path):
    result = run_smoke(tmp_path, "r")
    env = result["environment"]
    assert env["device"].startswith("cuda: ") and env["precision"] == "16-mixed" and not env["deterministic"]
    assert all(task["loss_scale"] is not None for task in result["tasks"])
    assert result["metrics"]["acc"] > 20  # chance is 10% after the last task


def test_two_deterministic_gpu_runs_agree_bitwise(tmp_path):
    a, b = run_smoke(tmp_path, "a", "--deterministic"), run_smoke(tmp_path, "b", "--deterministic")
    try:
        assert a["R"] == b["R"] and [t["epoch_loss"] for t in a["tasks"]] == [t["epoch_loss"] for t in b["tasks"]]
    finally:
        torch.use_deterministic_algorithms(False)


def test_a_deterministic_gpu_run_killed_after_a_task_resumes_to_the_uninterrupted_result(tmp_path, monkeypatch):
    """The checkpoint holds the run's own GPU's random state, and the resumed learner has the layout the
    uninterrupted one has (channels_last), so under --deterministic the resumed run equals an uninterrupted one."""
    from uniform_herding.runs import durability

    save = durability.Checkpoint.save

    def stop_after_task_two(self, t, *args):
        save(self, t, *args)
        if t == 1:
            raise durability.Interrupted(15)

    args = [
        "run",
        "B3",
        "--profile",
        "smoke",
        "--seed",
        "1993",
        "--device",
        "cuda",
        "--deterministic",
        "--data-dir",
        str(tmp_path / "data"),
        "--results-dir",
        str(tmp_path / "r"),
    ]
    try:
        whole = run_smoke(tmp_path, "whole", "--deterministic")
        monkeypatch.setattr(durability.Checkpoint, "save", stop_after_task_two)
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 143 and (tmp_path / "r" / "B3" / "seed-1993" / "checkpoint.pt").exists()
        monkeypatch.setattr(durability.Checkpoint, "save", save)
        res = CliRunner().invoke(main, args)
        assert res.exit_code == 0 and "resuming after task 2/5" in res.output, res.output
        resumed = json.loads((tmp_path / "r" / "B3" / "seed-1993" / "result.json").read_text())
        assert resumed["R"] == whole["R"]
        assert [t["epoch_loss"] for t in resumed["tasks"]] == [t["epoch_loss"] for t in whole["tasks"]]
    finally:
        torch.use_deterministic_algorithms(False)


@pytest.mark.parametrize("precision", [Precision.FP16, Precision.FP32])
def test_the_step_replayed_as_a_cuda_graph_equals_the_eager_step_bitwise(precision, tiny_stream, monkeypatch):
    """30 steps of a B3 task 1 (teacher, replay), each epoch 2 full batches and a partial one: under UH_STEP=graph
    3 warm-up steps, the capture, 16 replays and the partial batches eagerly; fp16 overflows forced (a first loss
    scale of 2^24, skipped steps inside the replays). The same weights, BatchNorm statistics and record as the
    eager step, bit for bit."""
    from uniform_herding.method.train import fit_task

    init = torch.amp.GradScaler.__init__
    monkeypatch.setattr(torch.amp.GradScaler, "__init__", lambda self, device: init(self, device, init_scale=2.0**24))
    cfg = dataclasses.replace(resolve("B3", "smoke"), epochs=10, batch_size=8)
    stream = tiny_stream(cfg, "cuda")

    def fit(step: str):
        monkeypatch.setenv("UH_STEP", step)
        learner, teacher = learner_past_task_0(cfg)
        gen = torch.Generator(device=CUDA).manual_seed(0)
        items = stream.train_items(1)[:20]
        stats = fit_task(cfg, learner, teacher, stream, stream.train_items(0), items, gen, precision)
        return stats, learner.state_dict()

    (eager, eager_state), (replayed, replayed_state) = fit("eager"), fit("graph")
    assert (eager.step, replayed.step) == ("eager", "graph") and eager.steps == 30
    assert dataclasses.replace(replayed, step="eager") == eager
    assert precision == "32-true" or eager.skipped_steps >= 5
    assert all(torch.equal(eager_state[k], replayed_state[k]) for k in eager_state)
