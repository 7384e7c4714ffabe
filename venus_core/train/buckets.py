"""Length buckets: run a padded SFT batch as a few row groups of similar length, same gradient.

Why: a mid-training batch mixes ~1,000-token navigation steps with ~60–120-token grounding,
perception and VQA samples. One right-padded batch pads every short sample to the longest, so on
the tiny default ~60 % of the tokens a step pushes through the model are padding. Splitting the
collated batch's rows into groups of similar length (each group trimmed to its own longest row)
and weighting each group's mean loss by its share of the batch's answer tokens gives exactly the
loss — hence the gradient, up to float summation order — of the one padded batch (HF's causal-LM
loss is the mean over the non-ignored, shifted labels), at a fraction of the compute.

Rows are split, not re-collated: the processor runs once per batch, and each row's image patches
are picked out by counting its `<|vision_start|>` tokens against `image_grid_thw`.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

IGNORE_INDEX = -100


def length_groups(lengths: Sequence[int], ratio: float = 2.0) -> list[list[int]]:
    """Row indices grouped by length, longest first: a row joins the current group while the
    group's longest row is at most `ratio` times its length. `ratio` <= 1 puts each distinct length
    alone; a huge ratio gives one group (the plain padded batch).

    >>> length_groups([1000, 60, 1020, 115, 980])
    [[2, 0, 4], [3, 1]]
    """
    if ratio <= 0:
        raise ValueError(f"length_groups: ratio must be > 0, got {ratio}")
    order = sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))
    groups: list[list[int]] = []
    for i in order:
        if groups and lengths[groups[-1][0]] <= ratio * max(1, lengths[i]):
            groups[-1].append(i)
        else:
            groups.append([i])
    return groups


def answer_tokens(labels: torch.Tensor) -> int:
    """Tokens the causal-LM loss averages over: labels after the one-position shift, not ignored."""
    return int((labels[:, 1:] != IGNORE_INDEX).sum())


def select_rows(batch: dict[str, torch.Tensor], rows: Sequence[int], vision_start_id: int) -> dict[str, torch.Tensor]:
    """The sub-batch of `rows` of a right-padded `collate` batch, trimmed to its longest row."""
    idx = torch.as_tensor(list(rows), dtype=torch.long)
    width = int(batch["attention_mask"][idx].sum(dim=1).max())
    out = {k: batch[k][idx, :width] for k in ("input_ids", "attention_mask", "labels", "mm_token_type_ids") if k in batch}
    if "query_ids" in batch:  # per-row token bags, not positions: not trimmed to the width
        out["query_ids"] = batch["query_ids"][idx]
    if "image_grid_thw" in batch:
        grid = batch["image_grid_thw"]
        per_row = (batch["input_ids"] == vision_start_id).sum(dim=1).tolist()
        if sum(per_row) != grid.shape[0]:
            raise ValueError(f"select_rows: {sum(per_row)} <|vision_start|> tokens but {grid.shape[0]} images in the batch")
        counts = grid.prod(dim=1).tolist()
        first_image = [0]
        for n in per_row:
            first_image.append(first_image[-1] + n)
        first_patch = [0]
        for c in counts:
            first_patch.append(first_patch[-1] + c)
        images = [k for r in idx.tolist() for k in range(first_image[r], first_image[r + 1])]
        out["image_grid_thw"] = grid[images]
        out["pixel_values"] = (
            torch.cat([batch["pixel_values"][first_patch[k] : first_patch[k + 1]] for k in images])
            if images else batch["pixel_values"][:0]
        )
        if not images:  # a text-only group: the model must not see an empty image tensor
            del out["image_grid_thw"], out["pixel_values"]
    return out


def split_batch(batch: dict[str, torch.Tensor], vision_start_id: int, ratio: float = 2.0) -> list[tuple[dict[str, torch.Tensor], float]]:
    """(sub-batch, loss weight) pairs: Σ weight · mean-loss(sub-batch) = mean-loss(batch).

    The weight is the sub-batch's share of the batch's answer tokens; a group with no answer
    tokens (cannot happen with `collate`, which labels every answer) is dropped with weight 0.
    """
    lengths = batch["attention_mask"].sum(dim=1).tolist()
    total = answer_tokens(batch["labels"])
    if total == 0:
        raise ValueError("split_batch: the batch has no answer tokens to train on")
    pieces: list[tuple[dict[str, torch.Tensor], float]] = []
    for rows in length_groups([int(n) for n in lengths], ratio):
        sub = select_rows(batch, rows, vision_start_id)
        n = answer_tokens(sub["labels"])
        if n:
            pieces.append((sub, n / total))
    return pieces


__all__ = ["answer_tokens", "length_groups", "select_rows", "split_batch"]
