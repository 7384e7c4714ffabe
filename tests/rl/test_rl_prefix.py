"""Shared-prefix log-probabilities: same values and gradients as the plain pass, on mixed prompts."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from venus_core.config.spec import ModelSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.rl.prefix import shared_prefix_logits, supports_shared_prefix
from venus_core.rl.prompts import grounding_item, navigation_item
from venus_core.rl.rollout import sample_groups, sequence_logprobs


def _chats(grounding_data: Path, nav_data: Path) -> list:  # type: ignore[type-arg]
    g = DatasetReader(grounding_data)
    chats = [grounding_item(r, g.open_image).messages for r in list(g)[:2]]
    n = DatasetReader(nav_data)
    steps = [s for rec in n for s in rec.to_steps(5)]  # type: ignore[union-attr]
    chats += [navigation_item(s, n.open_image).messages for s in steps[1:3]]
    return chats  # prompts of very different lengths: left padding differs per group


def _grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def test_shared_prefix_matches_the_plain_pass(tiny_dir: Path, grounding_data: Path, nav_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    assert supports_shared_prefix(model)
    batch = sample_groups(model, proc, _chats(grounding_data, nav_data), 3, 12, seed=4)
    mask = batch.completion_mask.bool()
    out = {}
    for shared in (False, True):
        model.zero_grad(set_to_none=True)
        logp, ent = sequence_logprobs(model, batch, temperature=0.7, with_entropy=True, shared_prefix=shared)
        ((logp * batch.completion_mask).sum() + 0.1 * (ent * batch.completion_mask).sum()).backward()  # type: ignore[operator]
        out[shared] = (logp.detach(), ent.detach(), _grads(model))  # type: ignore[union-attr]
    plain, shared = out[False], out[True]
    assert torch.allclose(shared[0][mask], plain[0][mask], atol=1e-4)
    assert torch.allclose(shared[1][mask], plain[1][mask], atol=1e-4)
    assert set(shared[2]) == set(plain[2])
    for name, g in plain[2].items():
        assert torch.isfinite(shared[2][name]).all(), name
        assert torch.allclose(shared[2][name], g, rtol=1e-3, atol=1e-5), name
    # the vision tower gets its gradient through the repeated cache
    assert any(".visual." in f".{n}" and float(g.abs().max()) > 0 for n, g in shared[2].items())


def test_shared_prefix_rejects_rows_that_are_not_groups(tiny_dir: Path, grounding_data: Path, nav_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    batch = sample_groups(model, proc, _chats(grounding_data, nav_data)[:2], 2, 4, seed=1)
    swapped = batch.select([0, 2, 1, 3])  # rows 0 and 1 now hold different prompts
    with pytest.raises(ValueError, match="different prompts"):
        shared_prefix_logits(model, swapped)
    with pytest.raises(ValueError, match="whole groups"):
        shared_prefix_logits(model, batch.select([0, 1, 2]))
