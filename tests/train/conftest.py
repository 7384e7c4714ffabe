"""Fixtures of the training tests: one tiny model and a few small synthetic datasets per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import ModelSpec


@pytest.fixture(scope="session")
def train_tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.models.tiny import build_tiny

    torch.set_num_threads(1)
    return build_tiny(ModelSpec().tiny, tmp_path_factory.mktemp("train-tiny") / "model")


@pytest.fixture(scope="session")
def grounding_l0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.data.synth import synthesize

    out = tmp_path_factory.mktemp("train-data") / "g0"
    synthesize("grounding", 40, 0, 7, out)
    return out


@pytest.fixture(scope="session")
def mixture_l2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.data.synth import synthesize

    out = tmp_path_factory.mktemp("train-data") / "m2"
    synthesize("mixture", 24, 2, 8, out)
    return out
