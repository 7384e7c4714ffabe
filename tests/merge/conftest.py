"""Fixtures for merge tests."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from merge_helpers import perturb, random_base, write_ckpt


@pytest.fixture
def three_models(tmp_path: Path) -> tuple[Path, list[Path], dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    base = random_base(0)
    models = [perturb(base, s) for s in (1, 2, 3)]
    bp = write_ckpt(tmp_path / "base", base)
    mps = [write_ckpt(tmp_path / f"m{i}", m) for i, m in enumerate(models)]
    return bp, mps, base, models
