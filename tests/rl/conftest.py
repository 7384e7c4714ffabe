"""Fixtures for the RL tests: one tiny model and one small synthetic dataset per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import ModelSpec

import rl_helpers  # noqa: E402,F401 - registers the test-only reward


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.models.tiny import build_tiny

    torch.set_num_threads(1)
    return build_tiny(ModelSpec().tiny, tmp_path_factory.mktemp("rl_tiny") / "model")


@pytest.fixture(scope="session")
def grounding_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.data.synth import synthesize

    out = tmp_path_factory.mktemp("rl_data") / "grounding"
    synthesize("grounding", 12, 0, 5, out)
    return out


@pytest.fixture(scope="session")
def nav_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.data.synth import synthesize

    out = tmp_path_factory.mktemp("rl_data") / "nav"
    synthesize("navigation", 6, 0, 5, out, platform="mobile")
    return out
