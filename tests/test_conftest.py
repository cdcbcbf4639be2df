"""conftest.py's guard: a test that trains without the `trains` marker fails, so `-m "not trains"` stays fast."""

from __future__ import annotations

import pytest
from lightning.pytorch import Trainer


def test_training_without_the_trains_marker_fails_naming_the_marker() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"is not marked @pytest.mark.trains"):
        Trainer(logger=False, enable_checkpointing=False, enable_progress_bar=False).fit(None)  # type: ignore[arg-type]
