"""Rollout plumbing without a model: completion masks, per-group image repetition, sub-batches."""

from __future__ import annotations

import torch

from venus_core.rl.rollout import RolloutBatch, _repeat_vision, completion_mask


def test_completion_mask_stops_after_first_end_token() -> None:
    tokens = torch.tensor([[5, 9, 7, 9], [9, 1, 9, 2], [1, 2, 3, 4]])
    assert completion_mask(tokens, [9]).tolist() == [[1, 1, 0, 0], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert completion_mask(torch.tensor([[3, 8, 1]]), [8, 9]).tolist() == [[1, 1, 0]]


def test_repeat_vision_keeps_each_chats_patches_together() -> None:
    # two chats: chat 0 has one 1x2x2 image (4 patches), chat 1 one 1x1x2 image (2 patches)
    pv = torch.arange(6, dtype=torch.float32).unsqueeze(1)
    grid = torch.tensor([[1, 2, 2], [1, 1, 2]])
    out = _repeat_vision({"pixel_values": pv, "image_grid_thw": grid}, [1, 1], 2)
    assert out["pixel_values"].squeeze(1).tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 4, 5]
    assert out["image_grid_thw"].tolist() == [[1, 2, 2], [1, 2, 2], [1, 1, 2], [1, 1, 2]]


def test_select_picks_rows_and_their_images() -> None:
    n, g = 4, 2
    pv = torch.tensor([[0.0], [0.0], [1.0], [1.0], [2.0], [2.0], [3.0], [3.0]])  # 2 patches per row
    grid = torch.tensor([[1, 1, 2]] * n)
    ids = torch.arange(n).unsqueeze(1).repeat(1, 3)
    batch = RolloutBatch(ids, torch.ones_like(ids), torch.zeros_like(ids), {"pixel_values": pv, "image_grid_thw": grid},
                         ids[:, :2], torch.ones(n, 2), ["a", "b", "c", "d"], g, [])
    sub = batch.select([2, 3])
    assert sub.input_ids[:, 0].tolist() == [2, 3] and sub.texts == ["c", "d"]
    assert sub.vision["pixel_values"].squeeze(1).tolist() == [2.0, 2.0, 3.0, 3.0]
    assert sub.vision["image_grid_thw"].shape == (2, 3)
