"""Fixtures of the evaluation tests (helpers live in eval_fixtures, a uniquely named module)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from eval_fixtures import Scripted, write_grounding, write_trajectories


@pytest.fixture()
def grounding_data(tmp_path: Path) -> Path:
    return write_grounding(tmp_path / "ss-pro")


@pytest.fixture()
def nav_data(tmp_path: Path) -> Path:
    return write_trajectories(tmp_path / "ac")


@pytest.fixture()
def scripted() -> Callable[..., Scripted]:
    return Scripted


@pytest.fixture(scope="session")
def tiny_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The untrained tiny default, built once per session (plumbing tests only)."""
    from venus_core.config import AgentSpec
    from venus_core.models.tiny import build_tiny

    return build_tiny(AgentSpec().model.tiny, tmp_path_factory.mktemp("eval-tiny") / "tiny")
