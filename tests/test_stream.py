"""The split (class order, 30/20/450 hold-out) and the task stream built from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from uniform_herding.archive import RawData
from uniform_herding.config import resolve
from uniform_herding.stream import TaskStream, make_split


def cifar100_labels(per_class: int = 500, seed: int = 0) -> np.ndarray:
    """Labels laid out like CIFAR-100's training set: per_class of each class, shuffled."""
    return np.random.default_rng(seed).permutation(np.repeat(np.arange(100), per_class))


def test_split_sizes_disjoint_and_cover_each_class():
    y = cifar100_labels()
    split = make_split(y, 100, split_seed=13, n_probe=30, n_val=20)
    assert sorted(split.order.tolist()) == list(range(100))
    for i, original in enumerate(split.order):
        probe, val, train = split.probe[i], split.val[i], split.train[i]
        assert (len(probe), len(val), len(train)) == (30, 20, 450)
        together = np.concatenate([probe, val, train])
        assert len(set(together.tolist())) == 500  # disjoint
        assert set(together.tolist()) == set(np.flatnonzero(y == original).tolist())


def test_split_follows_the_design_recipe():
    """One RandomState(13): the class order, then one permutation per internal class in turn."""
    y = cifar100_labels()
    split = make_split(y, 100, 13, 30, 20)
    rng = np.random.RandomState(13)
    assert np.array_equal(split.order, rng.permutation(100))
    for i in range(3):
        idx = rng.permutation(np.flatnonzero(y == split.order[i]))
        assert np.array_equal(split.probe[i], idx[:30]) and np.array_equal(split.train[i], idx[50:])


def test_split_is_deterministic_and_depends_on_the_seed():
    y = cifar100_labels()
    assert make_split(y, 100, 13, 30, 20).digest() == make_split(y, 100, 13, 30, 20).digest()
    assert make_split(y, 100, 13, 30, 20).digest() != make_split(y, 100, 14, 30, 20).digest()


def test_class_too_small_for_the_hold_out_is_an_error():
    with pytest.raises(ValueError, match="need > 50"):
        make_split(np.repeat(np.arange(3), 50), 3, 13, 30, 20)


def indexed_raw(n_classes: int = 100, per_class: int = 60, per_test: int = 10) -> RawData:
    """Images whose pixels encode their archive index, so a stream image can be traced back."""
    y = cifar100_labels(per_class)
    x = np.zeros((len(y), 3, 32, 32), np.uint8)
    x[:, 0, 0, 0], x[:, 0, 0, 1] = np.arange(len(y)) % 256, np.arange(len(y)) // 256
    test_y = np.repeat(np.arange(n_classes), per_test)
    test_x = np.zeros((len(test_y), 3, 32, 32), np.uint8)
    return RawData(x, y, test_x, test_y, [f"c{i}" for i in range(n_classes)], "0" * 32, "synthetic")


def test_stream_holds_only_training_images_of_the_run_classes():
    raw = indexed_raw()
    cfg = dataclasses.replace(resolve("B3", "smoke"), train_per_class=None, test_per_class=None)
    stream = TaskStream(raw, cfg, torch.device("cpu"))
    index = (stream.train_x[:, 0, 0, 0].long() + 256 * stream.train_x[:, 0, 0, 1].long()).numpy()
    held_out = set(np.concatenate(stream.split.probe + stream.split.val).tolist())
    assert not held_out & set(index.tolist())  # no probe or validation image can reach training or memory
    for c in range(cfg.n_classes):
        items = stream.class_items[c].numpy()
        assert np.array_equal(np.sort(index[items]), np.sort(stream.split.train[c]))
        assert (stream.train_y[items] == c).all()
        assert raw.train_y[index[items]].tolist() == [stream.split.order[c]] * len(items)
    assert len(stream.train_x) == cfg.n_classes * 10  # 60 - 30 - 20 per class
    assert stream.test_items(1).tolist() == list(range(20, 40))  # internal labels 2, 3 of task 1


def test_augment_crops_and_flips_each_image_independently():
    raw = indexed_raw()
    cfg = resolve("B3", "smoke")
    stream = TaskStream(raw, cfg, torch.device("cpu"))
    stream.train_x = torch.randint(0, 256, (64, 3, 32, 32), dtype=torch.uint8)
    out = stream.augment(torch.arange(64), torch.Generator().manual_seed(0))
    assert out.shape == (64, 3, 32, 32) and out.dtype == torch.float32
    plain = stream.normalize(stream.train_x)
    zero = stream.normalize(torch.zeros(1, 3, 1, 1, dtype=torch.uint8))  # a padded pixel, normalised
    # every output is a shifted (and maybe flipped) window of its own zero-padded image
    padded = torch.nn.functional.pad(plain - zero, (4, 4, 4, 4)) + zero
    for i in range(64):
        windows = [padded[i, :, dy : dy + 32, dx : dx + 32] for dy in range(9) for dx in range(9)]
        assert any(torch.allclose(out[i], w) or torch.allclose(out[i], w.flip(-1)) for w in windows)
    assert not torch.allclose(out, plain)  # something moved
