"""Fixtures for the RL tests: one tiny model and one small synthetic dataset per session."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import torch

from venus_core.config.registry import REWARDS
from venus_core.config.spec import ModelSpec, RewardSpec
from venus_core.rewards.base import RewardResult

LENGTH_REWARD = "rl_test_length"


def _length_reward(completion: str, reference: Mapping[str, Any], params: RewardSpec, progress: float = 0.0) -> RewardResult:
    """Test-only reward with variance even for an untrained model: shorter answers score higher."""
    return RewardResult(1.0 / (1.0 + len(completion)), {"short": float(len(completion) < 8)}, parsed=bool(completion))


if LENGTH_REWARD not in REWARDS:
    REWARDS.register(LENGTH_REWARD, _length_reward)


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
