"""Batched generation with transformers `generate`: the in-process inference backend.

Why: rollouts and evaluation on a laptop or in CI run the policy in process; the cluster uses vLLM
behind the OpenAI-compatible API (another module). Defaults follow the UI-Venus-1.5 evaluation
decoding: greedy (temperature 0) with repetition penalty 1.05. Prompts are left-padded so every
row's new tokens start at the same column; special tokens are dropped from the decoded text
(`<think>` and `</think>` are ordinary added tokens in Qwen3 and survive).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.models.batches import encode_prompts


def _left_pad(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r)
        mask[i, width - len(r) :] = 1
    return ids, mask


def prepare_inputs(
    model: PreTrainedModel, processor: ProcessorMixin, batch_of_messages: Sequence[Sequence[dict[str, Any]]]
) -> tuple[dict[str, torch.Tensor], list[int], int]:
    """`generate` keyword inputs for left-padded prompts on the model's device, each prompt's
    length in tokens (image tokens included), and the pad id."""
    tokenizer = processor.tokenizer  # type: ignore[attr-defined]
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    ids, mm_rows, vision = encode_prompts(processor, batch_of_messages)
    input_ids, attention = _left_pad(ids, int(pad_id))
    mm_types, _ = _left_pad(mm_rows, 0)
    device = next(model.parameters()).device
    inputs: dict[str, torch.Tensor] = {
        "input_ids": input_ids.to(device),
        "attention_mask": attention.to(device),
        "mm_token_type_ids": mm_types.to(device),
    }
    for k, v in vision.items():
        inputs[k] = v.to(device=device, dtype=model.dtype) if v.is_floating_point() else v.to(device)
    return inputs, [len(r) for r in ids], int(pad_id)


@torch.inference_mode()
def generate(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    batch_of_messages: Sequence[Sequence[dict[str, Any]]],
    max_new_tokens: int,
    temperature: float = 0.0,
    repetition_penalty: float = 1.05,
    *,
    top_p: float = 1.0,
    seed: int | None = None,
) -> list[str]:
    """Decode one answer per chat (each chat ends with a user turn); greedy when temperature is 0."""
    if not batch_of_messages:
        return []
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
    tokenizer = processor.tokenizer  # type: ignore[attr-defined]
    inputs, _, pad_id = prepare_inputs(model, processor, batch_of_messages)
    input_ids = inputs["input_ids"]
    sampling: dict[str, Any] = {"do_sample": False}
    if temperature > 0:
        sampling = {"do_sample": True, "temperature": float(temperature), "top_p": float(top_p)}
        if seed is not None:
            torch.manual_seed(seed)
    out = model.generate(
        **inputs,
        max_new_tokens=int(max_new_tokens),
        repetition_penalty=float(repetition_penalty),
        pad_token_id=pad_id,
        top_k=None,
        **sampling,
    )
    new = out[:, input_ids.shape[1] :]
    return [str(t) for t in tokenizer.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)]
