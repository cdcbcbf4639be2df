"""benchmarks/bench.py: times the runs' own precision, and fits exactly the steps it asks for."""

import importlib.util
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).parents[1] / "benchmarks" / "bench.py"


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench", BENCH)
    module = importlib.util.module_from_spec(spec)
    sys.modules["bench"] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("bench")  # the full-size synthetic archive, written once


@pytest.mark.trains
@pytest.mark.parametrize("precision", ["32-true", "16-mixed"])
def test_bench_runs_its_fits_in_the_precision_asked_for(
    precision, bench, data_dir, gpu_like_fp16_conv, capsys, monkeypatch
):
    """Every fit goes through train.fit_task in `precision` (on a GPU the default is 16-mixed, the paper's)."""
    from uniform_herding.method import train

    seen = []
    fit_task = train.fit_task
    monkeypatch.setattr(train, "fit_task", lambda *a: (seen.append(a[7] == "16-mixed"), fit_task(*a))[1])
    bench.main(
        [
            "--device",
            "cpu",
            "--precision",
            precision,
            "--width",
            "8",
            "--steps",
            "2",
            "--data-steps",
            "2",
            "--repeats",
            "1",
            "--workers",
            "0",
            "--data-dir",
            str(data_dir),
        ]
    )
    out = capsys.readouterr().out
    assert f"; {precision}; width 8; 2 steps of 192 images" in out
    assert "projection  25200 steps of a paper-size B3 run" in out
    assert seen and set(seen[:3]) == {precision == "16-mixed"}


@pytest.mark.trains
def test_a_fit_runs_exactly_the_steps_it_asks_for_past_one_epoch(bench, data_dir):
    """A paper task's 4,500 items are 36 batches of 128: a fit asked for 40 steps (as the GPU default asked for
    108) must run 40, and report the images of 40 full steps (128 current + b = 64 replayed), not 36."""
    import dataclasses

    import torch

    from uniform_herding.catalogue import resolve
    from uniform_herding.data.archive import DATASETS, read_archive, write_synthetic_archive
    from uniform_herding.method import engine, train
    from uniform_herding.method.model import Learner
    from uniform_herding.method.stream import TaskStream

    folder = data_dir / "synthetic-500x100"
    if not (folder / DATASETS["cifar100"].filename).exists():
        write_synthetic_archive("cifar100", folder)
    cfg, cpu = resolve("B3", "paper"), torch.device("cpu")
    stream = TaskStream(read_archive("cifar100", folder / DATASETS["cifar100"].filename), cfg, cpu)
    items = stream.train_items(0)
    assert len(train.Batches(items, cfg.batch_size, torch.Generator())) == 36
    learner = Learner(8, cfg.head, cfg.cos_scale)
    learner.head.grow(2 * cfg.classes_per_task)
    task = bench.Task(
        dataclasses.replace(cfg, epochs=1),
        learner,
        train.freeze(learner),
        stream,
        items,
        torch.Generator().manual_seed(0),
        engine.Precision.FP32,
    )
    assert bench.fit_steps(task, items, 40) == (40, 40 * (128 + 64))


@pytest.mark.parametrize(
    ("name", "peak"),
    [
        ("NVIDIA H100 80GB HBM3", 989.0),
        ("NVIDIA H100 PCIe", 756.0),
        ("NVIDIA H100 NVL", 835.0),
        ("NVIDIA H200", 989.0),
        ("NVIDIA H200 NVL", 835.0),
        ("NVIDIA A100-SXM4-80GB", 312.0),
        ("NVIDIA A100 80GB PCIe", 312.0),
        ("Tesla T4", 65.0),
        ("NVIDIA L4", None),
    ],
)
def test_mfu_uses_the_peak_of_the_gpu_model_not_of_its_family(bench, name, peak):
    assert bench.peak_tflops(name) == peak


def test_a_synchronising_op_is_counted_with_the_place_that_called_it(bench, monkeypatch):
    """On the H200 bench counted 0.5 host synchronisations per step that the CPU count cannot see; CUDA's sync
    debug mode warns at the calling line, and bench prints where (here a stand-in warning, as on a GPU)."""
    import warnings

    monkeypatch.setattr(bench, "SYNC_SITES", bench.Counter())
    monkeypatch.setattr(bench.torch.cuda, "set_sync_debug_mode", lambda mode: None)

    def step() -> None:
        warnings.warn("called a synchronizing CUDA operation", UserWarning, stacklevel=1)

    assert bench.host_syncs(step, gpu=True) == 1
    assert list(bench.SYNC_SITES) == [f"test_bench.py:{step.__code__.co_firstlineno + 1}"]
