"""Shared-prefix forward passes for GRPO groups: each prompt through the model once, not G times.

Why: the G completions of a group share their prompt (screenshot + instruction + history), and on
navigation the prompt is ~90 % of the sequence (the tiny default: ~915 prompt tokens, ≤ 96
completion tokens). The plain pass runs prompt + completion for all P·G rows; this one runs the P
distinct prompts once with a KV cache, repeats the cache G times along the batch
(`Cache.batch_repeat_interleave`) and runs only the completion tokens against it. Gradients flow
through the repeated cache into the prompt pass, so log-probabilities *and* their gradients equal
the plain pass's (up to float summation order): the tests check both.

Positions: Qwen3-VL's multimodal RoPE positions are computed once for the full rows
(`get_rope_index`, the function the model itself uses), then sliced into the prompt part and the
completion part, so the completion tokens get exactly the positions the plain pass gives them.

Used automatically by `rollout.sequence_logprobs` when the batch has groups (G > 1) and the model
exposes Qwen3-VL's `get_rope_index(input_ids, mm_token_type_ids, ...)`; other models (e.g.
Qwen2.5-VL, whose rope index has another signature) take the plain pass.
"""

from __future__ import annotations

import inspect
from typing import TYPE_CHECKING

import torch
from transformers import DynamicCache, PreTrainedModel

if TYPE_CHECKING:
    from venus_core.rl.rollout import RolloutBatch


def _inner(model: PreTrainedModel) -> torch.nn.Module | None:
    """The multimodal backbone holding `get_rope_index` (also under a peft wrapper)."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    inner = getattr(base, "model", None)
    return inner if inner is not None and hasattr(inner, "get_rope_index") else None


def supports_shared_prefix(model: PreTrainedModel) -> bool:
    """True when the model's rope index takes `mm_token_type_ids` (Qwen3-VL family)."""
    inner = _inner(model)
    if inner is None:
        return False
    return "mm_token_type_ids" in inspect.signature(inner.get_rope_index).parameters


def _cache_kwarg(model: PreTrainedModel) -> str:
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return "cache" if "cache" in inspect.signature(base.forward).parameters else "past_key_values"


def shared_prefix_logits(model: PreTrainedModel, batch: RolloutBatch) -> torch.Tensor:
    """Logits predicting each completion token, [N, T, V], computed with one prompt pass per group.

    Runs under the caller's grad mode. Rows must be prompt-major groups of `batch.group_size`
    identical prompts (what `sample_groups` and `RolloutBatch.select` produce): checked.
    """
    g = batch.group_size
    n, total = batch.input_ids.shape
    t = batch.completion_ids.shape[1]
    width = total - t
    if g < 2 or n % g:
        raise ValueError(f"shared_prefix_logits: {n} rows are not whole groups of {g}")
    first = torch.arange(0, n, g)
    prompts = batch.input_ids[:, :width].view(n // g, g, width)
    if not bool((prompts == prompts[:, :1]).all()):
        raise ValueError("shared_prefix_logits: rows of a group have different prompts")
    inner = _inner(model)
    if inner is None:
        raise ValueError("shared_prefix_logits: the model has no get_rope_index (not a Qwen-VL backbone)")
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    ids = batch.input_ids.to(device)
    mask = batch.attention_mask.to(device)
    mm = batch.mm_token_type_ids.to(device)
    vision = batch.vision
    grid = vision.get("image_grid_thw")
    with torch.no_grad():
        positions, _ = inner.get_rope_index(
            ids, mm_token_type_ids=mm, image_grid_thw=None if grid is None else grid.to(device), attention_mask=mask
        )
    prompt_vision: dict[str, torch.Tensor] = {}
    if grid is not None:
        one_per_group = batch.select(first.tolist()).vision  # the first row's images of every group
        prompt_vision = {k: (v.to(device, dtype) if v.is_floating_point() else v.to(device)) for k, v in one_per_group.items()}
    first_d = first.to(device)
    cache = DynamicCache(config=model.config)
    key = _cache_kwarg(model)
    head = model(
        input_ids=ids[first_d, :width], attention_mask=mask[first_d, :width], mm_token_type_ids=mm[first_d, :width],
        position_ids=positions[:, first_d, :width], use_cache=True, logits_to_keep=1, **{key: cache}, **prompt_vision,
    )
    cache.batch_repeat_interleave(g)
    tail = model(
        input_ids=ids[:, width:], attention_mask=mask, mm_token_type_ids=mm[:, width:],
        position_ids=positions[:, :, width:], use_cache=True, **{key: cache},
    )
    first_token = head.logits[:, -1:, :].repeat_interleave(g, dim=0)  # predicts completion token 0
    return torch.cat([first_token, tail.logits[:, :-1, :]], dim=1)


__all__ = ["shared_prefix_logits", "supports_shared_prefix"]
