"""Fixtures for model tests: one tiny model build per session (about a second)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import ModelSpec
from venus_core.models.tiny import build_tiny


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    torch.set_num_threads(1)
    return build_tiny(ModelSpec().tiny, tmp_path_factory.mktemp("tiny") / "model")


@pytest.fixture(scope="session")
def tiny(tiny_dir: Path):  # type: ignore[no-untyped-def]
    from venus_core.models.loading import load_model

    return load_model(tiny_dir, ModelSpec())

