"""Shared test helpers."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from uniform_herding.archive import RawData
from uniform_herding.config import Config
from uniform_herding.memory import Memory, make_memory
from uniform_herding.model import Learner
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


def fresh_state(cfg: Config, seed: int) -> tuple[Learner, Memory, list[torch.Generator]]:
    """A learner with an empty head, the run's memory policy and its two generators, as at start-up."""
    torch.manual_seed(seed)
    gens = [torch.Generator().manual_seed(seed), torch.Generator().manual_seed(seed + 1)]
    return Learner(cfg.width, cfg.head, cfg.cos_scale), make_memory(cfg, gens[1]), gens


@pytest.fixture
def fresh():
    """fresh_state, for tests that build checkpoints by hand."""
    return fresh_state
