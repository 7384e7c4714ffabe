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
