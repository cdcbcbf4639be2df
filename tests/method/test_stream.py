"""The split (class order, 30/20/450 hold-out) and the task stream built from it."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from uniform_herding.catalogue import resolve
from uniform_herding.data.archive import RawData
from uniform_herding.method.stream import TaskStream, make_split


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


def coordinate_stream(n: int) -> TaskStream:
    """A stream whose training image i holds its own coordinates: channel 0 = row + 1, channel 1 = column + 1,
    channel 2 = i % 251 + 1 (0 is the zero padding), so that every output pixel says where it came from."""
    stream = TaskStream(indexed_raw(), resolve("B3", "smoke"), torch.device("cpu"))
    side = torch.arange(1, 33, dtype=torch.uint8)
    x = torch.empty(n, 3, 32, 32, dtype=torch.uint8)
    x[:, 0], x[:, 1] = side.view(1, 32, 1), side.view(1, 1, 32)
    x[:, 2] = (torch.arange(n) % 251 + 1).to(torch.uint8).view(n, 1, 1)
    stream.train_x = x
    return stream


def decode(stream: TaskStream, out: torch.Tensor) -> torch.Tensor:
    """Augmented images back to uint8 pixel values (the normalisation inverted)."""
    return (out * stream.std + stream.mean).mul(255).round().to(torch.uint8)


def window(image: torch.Tensor, dy: int, dx: int, flip: bool) -> torch.Tensor:
    """The 32 x 32 crop at offset (dy, dx) of the image zero-padded by 4, mirrored left-right if `flip`."""
    padded = torch.zeros(3, 40, 40, dtype=image.dtype)
    padded[:, 4:36, 4:36] = image
    crop = padded[:, dy : dy + 32, dx : dx + 32]
    return crop.flip(-1) if flip else crop


def offsets_and_flips(pixels: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dy, dx, flipped) of each output, read off its central pixels (never padding: offsets are 0-8)."""
    rows, cols = pixels[:, 0, 16, 16].long() - 1, pixels[:, 1, 16, 16].long() - 1  # source row and column
    flipped = pixels[:, 1, 16, 17] < pixels[:, 1, 16, 16]  # columns run backwards
    dy = rows - 16 + 4
    dx = torch.where(flipped, cols - 15 + 4, cols - 16 + 4)  # output column 16 shows source column 15 mirrored
    return dy, dx, flipped


def test_augment_crops_and_flips_each_image_independently():
    """Every output is its own image's window at some offset (dy, dx), mirrored or not, built here by slicing;
    offsets and flips differ between images (not all flipped, not all unflipped)."""
    stream = coordinate_stream(64)
    items = torch.randperm(64, generator=torch.Generator().manual_seed(1))
    out = stream.augment(items, torch.Generator().manual_seed(0))
    assert out.shape == (64, 3, 32, 32) and out.dtype == torch.float32
    pixels = decode(stream, out)
    dy, dx, flipped = offsets_and_flips(pixels)
    for i in range(64):
        assert torch.equal(pixels[i], window(stream.train_x[items[i]], int(dy[i]), int(dx[i]), bool(flipped[i])))
    assert 0 < flipped.sum() < 64 and len(dy.unique()) > 1 and len(dx.unique()) > 1  # drawn per image


def test_augment_draws_each_of_the_nine_offsets_each_way_and_flips_half_the_images():
    """Over 4,500 images: flips at p = 0.5 (std 0.0075), each offset 0-8 of the zero-padded 40 x 40 image
    vertically and horizontally at 1/9 (std 0.005), and the three draws independent of each other."""
    n = 4500
    stream = coordinate_stream(n)
    out = stream.augment(torch.arange(n), torch.Generator().manual_seed(0))
    dy, dx, flipped = offsets_and_flips(decode(stream, out))
    assert abs(flipped.double().mean().item() - 0.5) < 0.03
    for offset in (dy, dx):
        share = torch.bincount(offset, minlength=9).double() / n
        assert len(share) == 9 and ((share - 1 / 9).abs() < 0.03).all(), share
    for a, b in ((dy, dx), (dy, flipped.long()), (dx, flipped.long())):
        assert abs(torch.corrcoef(torch.stack([a.double(), b.double()]))[0, 1].item()) < 0.06
