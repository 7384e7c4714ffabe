"""Shared helpers of the RL tests (a uniquely named module: several test folders have a
conftest.py, so `from conftest import ...` would pick whichever loaded last)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from venus_core.config.registry import REWARDS
from venus_core.config.spec import RewardSpec
from venus_core.rewards.base import RewardResult

LENGTH_REWARD = "rl_test_length"


def _length_reward(completion: str, reference: Mapping[str, Any], params: RewardSpec, progress: float = 0.0) -> RewardResult:
    """Test-only reward with variance even for an untrained model: shorter answers score higher."""
    return RewardResult(1.0 / (1.0 + len(completion)), {"short": float(len(completion) < 8)}, parsed=bool(completion))


if LENGTH_REWARD not in REWARDS:
    REWARDS.register(LENGTH_REWARD, _length_reward)
