"""Fixtures of the fault tests: one tiny model and small synthetic datasets per session."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import ModelSpec


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from venus_core.models.tiny import build_tiny

    torch.set_num_threads(1)
    return build_tiny(ModelSpec().tiny, tmp_path_factory.mktemp("faults_tiny") / "model")


@pytest.fixture(scope="session")
def domain_data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A small dataset per offline GRPO domain: grounding samples, mobile and web trajectories."""
    from venus_core.data.synth import synthesize

    root = tmp_path_factory.mktemp("faults_data")
    synthesize("grounding", 12, 0, 5, root / "grounding")
    synthesize("navigation", 6, 0, 5, root / "mobile", platform="mobile")
    synthesize("navigation", 6, 0, 5, root / "web", platform="web")
    return {d: root / d for d in ("grounding", "mobile", "web")}
