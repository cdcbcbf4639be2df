"""The loader, class order and hold-out against the real CIFAR-100 layout, which synthetic data cannot pin.

UH_REAL_DATA names a folder holding `cifar100-fragment/` (`.ci/run` sets it where CI has such a
folder): the official `meta`, every label and file name of both splits, and the first few hundred
real images of each. Nothing of it is committed; without the variable every test here is skipped,
and `pytest -ra` lists the skips.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_tar
from torchvision.datasets.utils import calculate_md5

from uniform_herding.catalogue import resolve
from uniform_herding.data.archive import DATASETS, RawData, _parse_meta, read_archive
from uniform_herding.method.stream import TaskStream, make_split

META_MD5 = "7973b15100ade9c7d40fb424638fde48"  # the official CIFAR-100 meta, byte-exact
# Split seed 13 on the real training labels; computed once here, so any change to the class order, the
# hold-out rule or the label parsing shows up as a different digest.
SPLIT_DIGEST = "1bdaaa409aba3d55c2be3f2817694dac0e9e663886dad38b9301e56b936c6a32"
FIRST_CLASSES = [37, 62, 83, 14, 43, 9, 44, 31, 69, 57]  # task 0's original classes, in internal order


@pytest.fixture(scope="module")
def fragment() -> Path:
    if not (root := os.environ.get("UH_REAL_DATA")):
        pytest.skip("real-data check: set UH_REAL_DATA to a folder with cifar100-fragment/ (see .ci/run)")
    return Path(root) / "cifar100-fragment"


def real_labels(fragment: Path, split: str) -> np.ndarray:
    return np.load(fragment / f"{split}_all_labels.npz")["fine_labels"].astype(np.int64)


def rebuild_cifar100_from_fragment(fragment: Path, out_dir: Path) -> Path:
    """A full-size CIFAR-100 archive: the real meta, labels, file names and prefix images; the other
    images are random pixels (the fragment lacks them), distinct enough to tell every image apart."""
    rng = np.random.default_rng(0)
    members = {"meta": (fragment / "meta").read_bytes()}
    for split, label in (("train", "training"), ("test", "testing")):
        labels = np.load(fragment / f"{split}_all_labels.npz")
        prefix = np.load(fragment / f"{split}_prefix_images.npz")["data"]
        data = rng.integers(0, 256, (len(labels["fine_labels"]), 3072), dtype=np.uint8)
        data[: len(prefix)] = prefix
        batch = {
            "filenames": labels["filenames"].tolist(),
            "batch_label": f"{label} batch 1 of 1",
            "fine_labels": labels["fine_labels"].tolist(),
            "coarse_labels": labels["coarse_labels"].tolist(),
            "data": data,
        }
        members[split] = pickle.dumps(batch, protocol=4)
    path = out_dir / DATASETS["cifar100"].filename
    write_tar(path, "cifar-100-python", members, compresslevel=0)  # 185 MB: compressing takes seconds
    return path


@pytest.fixture(scope="module")
def rebuilt(fragment: Path, tmp_path_factory: pytest.TempPathFactory) -> RawData:
    """The rebuilt archive as the real loader reads it (once per module: it is 185 MB)."""
    return read_archive("cifar100", rebuild_cifar100_from_fragment(fragment, tmp_path_factory.mktemp("c100")))


def test_real_meta_parses(fragment):
    assert calculate_md5(fragment / "meta") == META_MD5
    names = _parse_meta("cifar100", (fragment / "meta").read_bytes())
    assert len(names) == 100 and len(set(names)) == 100
    assert names[:3] == ["apple", "aquarium_fish", "baby"] and names[-1] == "worm"


def test_rebuilt_real_cifar100_reads_back_real_labels_and_pixels(fragment, rebuilt):
    assert rebuilt.class_names == _parse_meta("cifar100", (fragment / "meta").read_bytes())
    assert rebuilt.source == "local"
    for split, x, y in (("train", rebuilt.train_x, rebuilt.train_y), ("test", rebuilt.test_x, rebuilt.test_y)):
        labels = real_labels(fragment, split)
        prefix = np.load(fragment / f"{split}_prefix_images.npz")["data"]
        assert np.array_equal(y, labels) and y.dtype == np.int64
        assert np.bincount(y).tolist() == [500 if split == "train" else 100] * 100
        assert np.array_equal(x[: len(prefix)].reshape(len(prefix), -1), prefix)
        assert x.shape == (len(labels), 3, 32, 32)


def test_split_on_real_labels_is_30_20_450_disjoint_and_pinned(fragment):
    y = real_labels(fragment, "train")
    split = make_split(y, 100, split_seed=13, n_probe=30, n_val=20)
    assert sorted(split.order.tolist()) == list(range(100)) and split.order[:10].tolist() == FIRST_CLASSES
    for original, probe, val, train in zip(split.order, split.probe, split.val, split.train, strict=True):
        assert (len(probe), len(val), len(train)) == (30, 20, 450)
        together = np.concatenate([probe, val, train])
        assert len(np.unique(together)) == 500, "probe, validation and training must be disjoint"
        assert np.array_equal(np.sort(together), np.flatnonzero(y == original)), "exactly the class's images"
    assert split.digest() == SPLIT_DIGEST
    assert make_split(y, 100, 13, 30, 20).digest() == SPLIT_DIGEST, "the same split on every call"


def test_task_stream_on_rebuilt_archive_holds_the_pinned_split(rebuilt):
    stream = TaskStream(rebuilt, resolve("B3", "paper"), torch.device("cpu"))
    manifest = stream.manifest()
    assert manifest["split_digest"] == SPLIT_DIGEST and manifest["class_order"][:10] == FIRST_CLASSES
    assert manifest["per_class"] == {
        "probe": [30],
        "validation": [20],
        "train_available": [450],
        "train_used": [450],
        "test_used": [100],
    }
    # The stream's images of internal class 0 are exactly its 450 training images: no probe or validation.
    first = stream.train_x[stream.class_items[0]].numpy()
    assert np.array_equal(first, rebuilt.train_x[stream.split.train[0]])
    assert stream.test_x.shape == (10_000, 3, 32, 32)
