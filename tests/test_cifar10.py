"""CIFAR-10 as a second dataset: the profiles' scaled budgets, and a CIFAR-10 archive flowing through
load_data and TaskStream with its own normalisation and the same hold-out."""

from __future__ import annotations

import pytest
import torch

from uniform_herding.catalogue import PROFILES, RUNS, SIZE_FIELDS, resolve
from uniform_herding.data.archive import DATASETS, write_synthetic_archive
from uniform_herding.method.stream import TaskStream
from uniform_herding.runs.run import load_data


@pytest.mark.parametrize(
    "profile,budgets",
    [
        # M/10 (20 items per class at the end, as the paper's 2000/100); b unchanged (half a batch of 128).
        ("cifar10", {"B3": (200, 64), "s1": (50, 64), "s2": (400, 64), "s3": (200, 32), "s4": (200, 128)}),
        # the CPU size: batch 32, so b/4 keeps replay at half a batch
        ("cifar10-cpu", {"B3": (200, 16), "s1": (50, 16), "s2": (400, 16), "s3": (200, 8), "s4": (200, 32)}),
    ],
)
def test_cifar10_profiles_scale_budgets_and_change_sizes_only(profile, budgets):
    assert SIZE_FIELDS.issuperset(PROFILES[profile])
    for run_id in RUNS:
        cfg = resolve(run_id, profile)
        assert (cfg.dataset, cfg.n_tasks, cfg.classes_per_task) == ("cifar10", 5, 2)
        if run_id in budgets:
            assert (cfg.budget, cfg.retrieval) == budgets[run_id]
    assert (resolve("B0", profile).budget, resolve("B0", profile).retrieval) == (0, 0)


def test_cifar10_archive_flows_through_load_data_and_the_stream(tmp_path):
    cfg = resolve("B3", "cifar10-cpu")
    n_train = cfg.probe_per_class + cfg.val_per_class + cfg.train_per_class  # 30 + 20 + 250
    archive = write_synthetic_archive("cifar10", tmp_path / "c10", train_per_class=n_train, test_per_class=210)
    raw = load_data(cfg, tmp_path / "data", archive)  # verified by its .md5 sidecar, never downloaded
    stream = TaskStream(raw, cfg, torch.device("cpu"))
    assert stream.mean.flatten().tolist() == pytest.approx(DATASETS["cifar10"].mean)
    assert sorted(stream.split.order.tolist()) == list(range(10))
    assert stream.manifest()["per_class"] == {
        "probe": [30],
        "validation": [20],
        "train_available": [250],
        "train_used": [250],
        "test_used": [200],
    }
    assert [list(stream.classes(t)) for t in (0, 4)] == [[0, 1], [8, 9]]
