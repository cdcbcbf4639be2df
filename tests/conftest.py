"""Shared test helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uniform_herding.archive import RawData
from uniform_herding.config import Config
from uniform_herding.stream import TaskStream


@pytest.fixture
def tiny_stream():
    """Build a TaskStream for a config over random images (60 train, 4 test per class, 100 classes)."""

    def build(cfg: Config) -> TaskStream:
        rng = np.random.default_rng(0)
        y, test_y = np.repeat(np.arange(100), 60), np.repeat(np.arange(100), 4)
        raw = RawData(
            rng.integers(0, 256, (len(y), 3, 32, 32), dtype=np.uint8), y,
            rng.integers(0, 256, (len(test_y), 3, 32, 32), dtype=np.uint8), test_y,
            [f"c{i}" for i in range(100)], "0" * 32, "synthetic",
        )  # fmt: skip
        return TaskStream(raw, cfg, torch.device("cpu"))

    return build
