"""Config -> task stream: split seed 13, the probe/validation hold-out, device-resident tensors.

Class order: rng = RandomState(split_seed), order = rng.permutation(K); internal label i is original
class order[i]; task t holds internal labels C_new*t .. C_new*(t+1)-1. Hold-out: with the same rng,
for i = 0..K-1, idx = rng.permutation(train indices of class order[i], ascending); the first 30 are
probe, the next 20 validation, the rest training (450 on CIFAR-100). Probe and validation images are
never copied into the stream, so they cannot reach training or memory.

Each split is one uint8 tensor on the training device; a minibatch is an index tensor ("item");
crop, flip and normalisation are batched tensor ops (no DataLoader workers, no PIL).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from uniform_herding.data.archive import DATASETS, RawData
from uniform_herding.method.config import Config

PAD = 4  # random crop 32 from zero-padded 40


@dataclass(frozen=True)
class Split:
    """Per internal class: indices into the archive's training arrays."""

    order: np.ndarray  # [K] original class of internal label i
    probe: list[np.ndarray]
    val: list[np.ndarray]
    train: list[np.ndarray]

    def digest(self) -> str:
        """sha256 over the class order and every index list: pins the split across machines."""
        h = hashlib.sha256(self.order.astype(np.int64).tobytes())
        for part in (self.probe, self.val, self.train):
            for idx in part:
                h.update(idx.astype(np.int64).tobytes())
        return h.hexdigest()


def make_split(train_y: np.ndarray, n_classes: int, split_seed: int, n_probe: int, n_val: int) -> Split:
    """The class order and per-class hold-out of docs/design.md ("Data"), from one RandomState."""
    rng = np.random.RandomState(split_seed)
    order = rng.permutation(n_classes)
    probe, val, train = [], [], []
    for original in order:
        idx = rng.permutation(np.flatnonzero(train_y == original))
        if len(idx) <= n_probe + n_val:
            raise ValueError(f"class {original} has {len(idx)} training images; need > {n_probe + n_val}")
        probe.append(idx[:n_probe])
        val.append(idx[n_probe : n_probe + n_val])
        train.append(idx[n_probe + n_val :])
    return Split(order, probe, val, train)


class TaskStream:
    """Training and test images of the run's classes, relabelled to internal labels, on one device."""

    def __init__(self, raw: RawData, cfg: Config, device: torch.device) -> None:
        n_total = len(raw.class_names)
        if cfg.n_classes > n_total:
            raise ValueError(f"{cfg.n_tasks} tasks x {cfg.classes_per_task} classes > {n_total} classes")
        self.cfg, self.device = cfg, device
        self.split = make_split(raw.train_y, n_total, cfg.split_seed, cfg.probe_per_class, cfg.val_per_class)
        order = self.split.order[: cfg.n_classes]
        train_idx = [idx[: cfg.train_per_class] for idx in self.split.train[: cfg.n_classes]]
        test_idx = [np.flatnonzero(raw.test_y == c)[: cfg.test_per_class] for c in order]
        self.train_x, self.train_y, self.class_items = self._gather(raw.train_x, train_idx)
        self.test_x, self.test_y, _ = self._gather(raw.test_x, test_idx)
        spec = DATASETS["cifar100" if cfg.dataset == "synthetic" else cfg.dataset]
        self.mean = torch.tensor(spec.mean, device=device).view(1, 3, 1, 1)
        self.std = torch.tensor(spec.std, device=device).view(1, 3, 1, 1)
        self.columns = torch.arange(self.train_x.shape[-1], device=device)  # an image's rows or columns in order
        self.reversed = self.columns.flip(0)  # a flipped image's columns
        self.image_numbers: dict[int, Tensor] = {}  # batch size -> [B,1,1] 0..B-1 (`numbered`)

    def _gather(self, x: np.ndarray, per_class: list[np.ndarray]) -> tuple[Tensor, Tensor, list[Tensor]]:
        """Concatenate per-class images class by class; return images, labels, items per class."""
        sizes = [len(idx) for idx in per_class]
        images = torch.from_numpy(x[np.concatenate(per_class)]).to(self.device)  # [N,3,32,32] uint8
        labels = torch.repeat_interleave(torch.arange(len(sizes)), torch.tensor(sizes)).to(self.device)
        items = list(torch.arange(sum(sizes), device=self.device).split(sizes))
        return images, labels, items

    def classes(self, t: int) -> range:
        """Internal labels introduced by task t."""
        c = self.cfg.classes_per_task
        return range(c * t, c * (t + 1))

    def train_items(self, t: int) -> Tensor:
        return torch.cat([self.class_items[c] for c in self.classes(t)])

    def test_items(self, t: int) -> Tensor:
        lo, hi = self.classes(t).start, self.classes(t).stop
        return torch.nonzero((self.test_y >= lo) & (self.test_y < hi)).squeeze(1)

    def normalize(self, x: Tensor) -> Tensor:
        """uint8 [B,3,32,32] -> normalised float (the evaluation transform)."""
        return (x.float().div_(255) - self.mean) / self.std

    def augment(self, items: Tensor, generator: torch.Generator) -> Tensor:
        """Training transform: random crop from zero-pad 4 and flip p=0.5, independently per image."""
        x = torch.nn.functional.pad(self.train_x[items], (PAD, PAD, PAD, PAD))  # [B,3,40,40]
        n = len(items)
        dy, dx = torch.randint(0, 2 * PAD + 1, (2, n, 1), device=self.device, generator=generator)
        flip = torch.rand(n, 1, device=self.device, generator=generator) < 0.5
        rows = dy + self.columns  # [B,32]
        cols = dx + torch.where(flip, self.reversed, self.columns)  # [B,32], reversed columns = flip
        crop = x[self.numbered(n), :, rows[:, :, None], cols[:, None, :]]  # [B,32,32,3]
        return self.normalize(crop.permute(0, 3, 1, 2))

    def numbered(self, n: int) -> Tensor:
        """[n,1,1]: 0..n-1, each image's number in a batch of n, made once per batch size (not in every step)."""
        if n not in self.image_numbers:
            self.image_numbers[n] = torch.arange(n, device=self.device).view(n, 1, 1)
        return self.image_numbers[n]

    def manifest(self) -> dict:
        """What the run saw: class order, split sizes and digest (recorded in result.json)."""

        def sizes(part: list) -> list[int]:
            return sorted({len(idx) for idx in part[: self.cfg.n_classes]})

        return {
            "class_order": self.split.order.tolist(),
            "classes_used": self.cfg.n_classes,
            "split_seed": self.cfg.split_seed,
            "split_digest": self.split.digest(),
            "per_class": {
                "probe": sizes(self.split.probe),
                "validation": sizes(self.split.val),
                "train_available": sizes(self.split.train),
                "train_used": sorted({len(items) for items in self.class_items}),
                "test_used": sorted(torch.bincount(self.test_y).unique().tolist()),
            },
        }
