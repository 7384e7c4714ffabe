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

Sampling (`shared_prefix_sample`) uses the same trick: prefill the P prompts once, repeat the
cache G times, then a plain decode loop (suppressed tokens -> temperature -> top-p -> multinomial,
the order of transformers' logits processors; rows that ended emit the pad token). It also drops
`generate`'s per-token bookkeeping, which dominates at the tiny default's size. Greedy decoding
through it reproduces `model.generate(do_sample=False)` token for token (tested), which pins the
positions, masks and cache handling.

Used automatically by `rollout.sequence_logprobs` / `rollout.sample_groups` when the batch has
groups (G > 1) and the model exposes Qwen3-VL's `get_rope_index(input_ids, mm_token_type_ids, ...)`;
other models (e.g. Qwen2.5-VL, whose rope index has another signature) take the plain passes.
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


def shared_prefix_logits(model: PreTrainedModel, batch: RolloutBatch,
                         forward: torch.nn.Module | None = None) -> torch.Tensor:
    """Logits predicting each completion token, [N, T, V], computed with one prompt pass per group.

    Runs under the caller's grad mode. `forward` (default `model`) is what the passes call: a
    DistributedDataParallel wrapper of `model`, whose hooks average the gradients across ranks. Rows must be prompt-major groups of `batch.group_size`
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
    run = forward if forward is not None else model
    head = run(
        input_ids=ids[first_d, :width], attention_mask=mask[first_d, :width], mm_token_type_ids=mm[first_d, :width],
        position_ids=positions[:, first_d, :width], use_cache=True, logits_to_keep=1, **{key: cache}, **prompt_vision,
    )
    cache.batch_repeat_interleave(g)
    tail = run(
        input_ids=ids[:, width:], attention_mask=mask, mm_token_type_ids=mm[:, width:],
        position_ids=positions[:, :, width:], use_cache=True, **{key: cache},
    )
    first_token = head.logits[:, -1:, :].repeat_interleave(g, dim=0)  # predicts completion token 0
    return torch.cat([first_token, tail.logits[:, :-1, :]], dim=1)


@torch.no_grad()
def shared_prefix_sample(
    model: PreTrainedModel,
    prompt_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mm_token_type_ids: torch.Tensor,
    vision: dict[str, torch.Tensor],
    group_size: int,
    max_new_tokens: int,
    *,
    end_ids: list[int],
    pad_id: int,
    suppressed: list[int],
    temperature: float = 1.0,
    top_p: float = 1.0,
    greedy: bool = False,
    generator: torch.Generator | None = None,
    generators: list[torch.Generator] | None = None,
) -> torch.Tensor:
    """Sample `group_size` completions per prompt row: [P·G, T] token ids (T <= max_new_tokens),
    rows prompt-major, `pad_id` after a row's end token; decoding stops when every row has ended.

    `prompt_ids`, `attention_mask`, `mm_token_type_ids`: [P, L] left-padded prompts (one row per
    group); `vision`: their images (pixel_values, image_grid_thw) on the model's device.
    `generators` (one per prompt row, on the model's device): each group draws its tokens from its
    own generator, so a group's completions do not depend on which other groups share the batch
    (distributed GRPO samples each rank's groups apart and must get the one-process rollouts).
    """
    if generators is not None and len(generators) != prompt_ids.shape[0]:
        raise ValueError(f"shared_prefix_sample: {len(generators)} generators for {prompt_ids.shape[0]} prompts")
    inner = _inner(model)
    if inner is None:
        raise ValueError("shared_prefix_sample: the model has no get_rope_index (not a Qwen-VL backbone)")
    device = next(model.parameters()).device
    g = group_size
    grid = vision.get("image_grid_thw")
    positions, _ = inner.get_rope_index(prompt_ids, mm_token_type_ids=mm_token_type_ids, image_grid_thw=grid,
                                        attention_mask=attention_mask)
    # the next text position of every row: one past the largest position the prompt used
    next_pos = (positions.amax(dim=(0, 2)) + 1).repeat_interleave(g)  # [N]
    cache = DynamicCache(config=model.config)
    key = _cache_kwarg(model)
    out = model(input_ids=prompt_ids, attention_mask=attention_mask, mm_token_type_ids=mm_token_type_ids,
                position_ids=positions, use_cache=True, logits_to_keep=1, **{key: cache}, **vision)
    cache.batch_repeat_interleave(g)
    logits = out.logits[:, -1, :].float().repeat_interleave(g, dim=0)  # [N, V]
    mask = attention_mask.repeat_interleave(g, dim=0)
    n = mask.shape[0]
    ends = torch.as_tensor(end_ids, device=device)
    finished = torch.zeros(n, dtype=torch.bool, device=device)
    tokens: list[torch.Tensor] = []
    for step in range(max_new_tokens):
        if suppressed:
            logits[:, suppressed] = float("-inf")
        if greedy:
            nxt = logits.argmax(dim=-1)
        else:
            logits = logits / temperature
            if top_p < 1.0:
                sorted_logits, order = logits.sort(dim=-1, descending=False)
                cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
                drop = cum <= (1 - top_p)
                drop[:, -1] = False  # always keep the most likely token
                logits = logits.masked_fill(drop.scatter(1, order, drop), float("-inf"))
            probs = logits.softmax(dim=-1)
            if generators is None:
                nxt = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            else:
                nxt = torch.cat([torch.multinomial(probs[i * g : (i + 1) * g], 1, generator=gen).squeeze(1)
                                 for i, gen in enumerate(generators)])
        nxt = torch.where(finished, torch.full_like(nxt, pad_id), nxt)
        tokens.append(nxt)
        finished |= torch.isin(nxt, ends)
        if bool(finished.all()) or step == max_new_tokens - 1:
            break
        mask = torch.cat([mask, torch.ones((n, 1), dtype=mask.dtype, device=device)], dim=1)
        pos = (next_pos + step).view(1, n, 1).expand(3, n, 1)
        out = model(input_ids=nxt[:, None], attention_mask=mask, position_ids=pos, use_cache=True, **{key: cache})
        logits = out.logits[:, -1, :].float()
    return torch.stack(tokens, dim=1)


__all__ = ["shared_prefix_logits", "shared_prefix_sample", "supports_shared_prefix"]
