"""Shared fixtures of the scoring tests: a small synthetic dataset (level 0, fast to render)."""

from __future__ import annotations

from pathlib import Path

import pytest

from venus_core.data.store import DatasetReader
from venus_core.data.synth import synthesize


@pytest.fixture(scope="session")
def synth_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("scoring") / "synth"
    synthesize("mixture", 12, 0, 7, out)
    return out


@pytest.fixture(scope="session")
def synth_records(synth_dir: Path) -> list:
    return list(DatasetReader(synth_dir))
