"""GRPO learns: on the untrained tiny model, a reward for short answers must be climbed.

The grounding learning result (SFT checkpoint -> GRPO, held-out hit rate with intervals) takes
CPU-minutes and is recorded in docs/learning_offline_rl.md; this test checks the same update in
about a minute: held-out prompts (not trained on) must end their answers sooner after training.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import GroundingRLSpec, ModelSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.rl.grpo import OfflineGRPO
from venus_core.rl.prompts import grounding_item
from venus_core.rl.rollout import sample_groups
from venus_core.train.tracker import MemoryTracker

from rl_helpers import LENGTH_REWARD


def _mean_length(model, proc, items) -> float:  # type: ignore[no-untyped-def]
    batch = sample_groups(model, proc, [it.messages for it in items], 8, 8, seed=123)
    return float(batch.completion_mask.sum(dim=1).mean())


@pytest.mark.slow
def test_grpo_shortens_answers_on_held_out_prompts(tiny_dir: Path, grounding_data: Path) -> None:
    torch.manual_seed(0)
    model, proc = load_model(tiny_dir, ModelSpec())
    reader = DatasetReader(grounding_data)
    items = [grounding_item(r, reader.open_image) for r in reader]
    train, held = items[:8], items[8:]
    before = _mean_length(model, proc, held)
    spec = GroundingRLSpec(reward=LENGTH_REWARD, group_size=8, prompts_per_step=4, max_new_tokens=8,
                           lr=3e-3, kl_coef=1e-3, max_steps=20)
    tracker = MemoryTracker()
    OfflineGRPO(model, proc, spec, tracker).train(lambda e: train)
    after = _mean_length(model, proc, held)
    rewards = [v for _, v in tracker.series("reward/mean")]
    assert after < before - 0.5, (before, after)  # measured here: 7.97 -> 6.81
    assert sum(rewards[-5:]) / 5 > sum(rewards[:5]) / 5
