"""Group rollouts and their log-probabilities: the two model passes of a GRPO step.

Why not `venus_core.models.generate`: that returns decoded text, and GRPO needs the sampled token
ids themselves (re-tokenizing decoded text does not reproduce the sampled BPE segmentation, so the
log-probabilities would belong to other tokens). Each prompt is encoded once and its tensors
(token ids, image patches) repeated G times, instead of running the processor G times.

Sampling uses repetition penalty 1.0: the rollouts must come from π_θ (softened only by the
temperature / top-p of the spec) for the importance ratio to mean anything; log-probabilities are
computed on logits divided by the same temperature, as TRL does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.models.batches import END_OF_TURN, encode_prompts
from venus_core.rl.prefix import shared_prefix_logits, shared_prefix_sample, supports_shared_prefix
from venus_core.rl.losses import token_entropy, token_logprobs


@dataclass
class RolloutBatch:
    """N = prompts × group rows; L = padded prompt length; T = completion length."""

    input_ids: torch.Tensor  # [N, L+T] left-padded prompt, then the completion (pad after its end)
    attention_mask: torch.Tensor  # [N, L+T]
    mm_token_type_ids: torch.Tensor  # [N, L+T]
    vision: dict[str, torch.Tensor]  # pixel_values [patches, D], image_grid_thw [images, 3]
    completion_ids: torch.Tensor  # [N, T]
    completion_mask: torch.Tensor  # [N, T] float, 1 up to and including the first end-of-turn
    texts: list[str]  # decoded completions (special tokens dropped)
    group_size: int
    suppressed: list[int]  # token ids the sampler could not emit (masked in log-probs too)

    def select(self, rows: Sequence[int]) -> RolloutBatch:
        """The sub-batch of whole groups `rows` (row indices; images are picked accordingly)."""
        idx = torch.as_tensor(list(rows), dtype=torch.long)
        vision = _select_vision(self.vision, idx.tolist(), self.input_ids.shape[0]) if self.vision else {}
        return RolloutBatch(
            self.input_ids[idx], self.attention_mask[idx], self.mm_token_type_ids[idx], vision,
            self.completion_ids[idx], self.completion_mask[idx], [self.texts[i] for i in idx.tolist()],
            self.group_size, self.suppressed,
        )


def _select_vision(vision: dict[str, torch.Tensor], rows: Sequence[int], n_rows: int) -> dict[str, torch.Tensor]:
    """The image patches and grids of `rows` (each row has the same number of images)."""
    grid = vision["image_grid_thw"]
    counts = grid.prod(dim=1)
    starts = torch.cat([counts.new_zeros(1), counts.cumsum(0)[:-1]])
    per_row = grid.shape[0] // n_rows
    imgs = [r * per_row + k for r in rows for k in range(per_row)]
    return {"image_grid_thw": grid[imgs],
            "pixel_values": torch.cat([vision["pixel_values"][int(starts[i]) : int(starts[i] + counts[i])] for i in imgs])}


def _images_per_chat(messages: Sequence[dict[str, Any]]) -> int:
    n = 0
    for m in messages:
        content = m.get("content")
        if not isinstance(content, str):
            n += sum(1 for item in content or [] if item.get("type") == "image")
    return n


def _repeat_vision(vision: dict[str, torch.Tensor], images_per_chat: list[int], g: int) -> dict[str, torch.Tensor]:
    """Repeat each chat's image patches g times, chat by chat (rows are chat-major)."""
    if not vision:
        return {}
    grid = vision["image_grid_thw"]
    counts = grid.prod(dim=1).tolist()
    patches = list(torch.split(vision["pixel_values"], counts))
    grids = list(grid)
    out_p: list[torch.Tensor] = []
    out_g: list[torch.Tensor] = []
    k = 0
    for n in images_per_chat:
        for _ in range(g):
            out_p.extend(patches[k : k + n])
            out_g.extend(grids[k : k + n])
        k += n
    return {"pixel_values": torch.cat(out_p), "image_grid_thw": torch.stack(out_g)}


def _left_pad(rows: list[list[int]], pad: int) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, width - len(r) :] = torch.tensor(r, dtype=torch.long)
        mask[i, width - len(r) :] = 1
    return ids, mask


def end_token_ids(model: PreTrainedModel, processor: ProcessorMixin) -> list[int]:
    """Token ids that end a completion: `<|im_end|>` and the generation config's eos ids."""
    tok = processor.tokenizer  # type: ignore[attr-defined]
    ids = {int(tok.convert_tokens_to_ids(END_OF_TURN))}
    eos = getattr(model.generation_config, "eos_token_id", None)
    if isinstance(eos, int):
        ids.add(eos)
    elif eos:
        ids.update(int(e) for e in eos)
    return sorted(ids)


VISION_TOKENS = ("<|image_pad|>", "<|video_pad|>", "<|vision_start|>", "<|vision_end|>")
"""Never sampled in a completion: an image placeholder in the answer breaks the next forward pass
(image tokens and features no longer match), and no answer needs one."""


def suppressed_token_ids(processor: ProcessorMixin) -> list[int]:
    """Ids of `VISION_TOKENS` known to the tokenizer."""
    tok = processor.tokenizer  # type: ignore[attr-defined]
    unk = tok.unk_token_id
    ids = {int(i) for i in (tok.convert_tokens_to_ids(t) for t in VISION_TOKENS) if i is not None and i != unk}
    return sorted(ids)


def completion_mask(tokens: torch.Tensor, end_ids: Sequence[int]) -> torch.Tensor:
    """tokens [N, T] -> float mask [N, T]: 1 up to and including the first end token."""
    is_end = torch.isin(tokens, torch.as_tensor(list(end_ids), dtype=tokens.dtype, device=tokens.device))
    ended_before = (is_end.cumsum(dim=1) - is_end.long()) > 0  # an end token strictly earlier
    return (~ended_before).float()


@torch.no_grad()
def sample_groups(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    prompts: Sequence[Sequence[dict[str, Any]]],
    group_size: int,
    max_new_tokens: int,
    *,
    temperature: float = 1.0,
    top_p: float = 1.0,
    seed: int | None = None,
    shared_prefix: bool = True,
    group_seeds: Sequence[int] | None = None,
) -> RolloutBatch:
    """Sample `group_size` completions for each chat in `prompts` (rows are prompt-major).

    On a Qwen3-VL model each prompt is prefilled once and its cache shared by its group
    (`rl.prefix.shared_prefix_sample`); otherwise `model.generate` on the repeated rows.
    `group_seeds` (one per prompt) seed each group's sampling on its own, so a group's completions
    do not depend on the other prompts of the batch: the offline trainer samples with them, and a
    group gets the same rollouts whichever rank of a distributed run samples it (`seed` is then unused).
    """
    if group_seeds is not None and len(group_seeds) != len(prompts):
        raise ValueError(f"sample_groups: {len(group_seeds)} group seeds for {len(prompts)} prompts")
    if not prompts:
        raise ValueError("sample_groups: no prompts")
    if group_size < 1 or max_new_tokens < 1 or temperature <= 0:
        raise ValueError(f"sample_groups: bad group_size={group_size}, max_new_tokens={max_new_tokens}, "
                         f"temperature={temperature}")
    tok = processor.tokenizer  # type: ignore[attr-defined]
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    ids, mm_rows, vision = encode_prompts(processor, prompts)
    device = next(model.parameters()).device
    end_ids = end_token_ids(model, processor)
    suppressed = suppressed_token_ids(processor)
    if seed is not None:
        torch.manual_seed(seed)
    was_training = model.training
    model.eval()
    p_ids, p_attention = _left_pad(ids, pad)  # one row per prompt
    p_mm, _ = _left_pad(mm_rows, 0)
    input_ids, attention, mm_types = (t.repeat_interleave(group_size, dim=0) for t in (p_ids, p_attention, p_mm))
    repeated = _repeat_vision(vision, [_images_per_chat(p) for p in prompts], group_size)

    def on_device(v: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        return {k: (t.to(device, model.dtype) if t.is_floating_point() else t.to(device)) for k, t in v.items()}

    if shared_prefix and supports_shared_prefix(model):
        generators = None if group_seeds is None else [
            torch.Generator(device=device).manual_seed(int(s)) for s in group_seeds]
        new = shared_prefix_sample(
            model, p_ids.to(device), p_attention.to(device), p_mm.to(device), on_device(vision), group_size,
            max_new_tokens, end_ids=end_ids, pad_id=pad, suppressed=suppressed, temperature=temperature, top_p=top_p,
            generators=generators,
        ).cpu()
    else:
        def generate(rows: slice, vis: dict[str, torch.Tensor]) -> torch.Tensor:
            out = model.generate(
                input_ids=input_ids[rows].to(device), attention_mask=attention[rows].to(device),
                mm_token_type_ids=mm_types[rows].to(device), **on_device(vis),
                do_sample=True, temperature=float(temperature), top_p=float(top_p), top_k=None,
                repetition_penalty=1.0, max_new_tokens=int(max_new_tokens), pad_token_id=pad, eos_token_id=end_ids,
                suppress_tokens=suppressed or None,
            )
            return out[:, input_ids.shape[1] :].cpu()

        if group_seeds is None:
            new = generate(slice(None), repeated)
        else:  # one generate call per group, each from its own seed
            parts = []
            for i, s in enumerate(group_seeds):
                torch.manual_seed(int(s))
                rows = list(range(i * group_size, (i + 1) * group_size))
                vis = _select_vision(repeated, rows, input_ids.shape[0]) if repeated else {}
                parts.append(generate(slice(rows[0], rows[-1] + 1), vis))
            width = max(p.shape[1] for p in parts)
            new = torch.cat([torch.nn.functional.pad(p, (0, width - p.shape[1]), value=pad) for p in parts])
    model.train(was_training)
    cmask = completion_mask(new, end_ids)
    new = torch.where(cmask.bool(), new, torch.full_like(new, pad))
    texts = [str(t) for t in tok.batch_decode(new, skip_special_tokens=True, clean_up_tokenization_spaces=False)]
    full_mask = torch.cat([attention, cmask.long()], dim=1)
    full_mm = torch.cat([mm_types, torch.zeros_like(new)], dim=1)
    return RolloutBatch(torch.cat([input_ids, new], dim=1), full_mask, full_mm, repeated, new, cmask, texts,
                        group_size, suppressed)


def completions_batch(
    processor: ProcessorMixin,
    prompts: Sequence[Sequence[dict[str, Any]]],
    completions: Sequence[Sequence[int]],
) -> RolloutBatch:
    """A one-row-per-prompt batch of given completions (token ids, each ending where its sampling
    ended), laid out as `sample_groups` lays out its rows, for `sequence_logprobs`.

    For online RL: the steps of many trajectories, each with its own screenshot and prompt, whose
    sampled ids were kept when they were generated."""
    if not prompts or len(prompts) != len(completions):
        raise ValueError(f"completions_batch: {len(prompts)} prompts for {len(completions)} completions")
    if any(len(c) == 0 for c in completions):
        raise ValueError("completions_batch: an empty completion")
    tok = processor.tokenizer  # type: ignore[attr-defined]
    pad = int(tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id)
    ids, mm_rows, vision = encode_prompts(processor, prompts)
    p_ids, p_attention = _left_pad(ids, pad)
    p_mm, _ = _left_pad(mm_rows, 0)
    t = max(len(c) for c in completions)
    comp = torch.full((len(completions), t), pad, dtype=torch.long)
    cmask = torch.zeros((len(completions), t), dtype=torch.float32)
    for i, c in enumerate(completions):
        comp[i, : len(c)] = torch.as_tensor(list(c), dtype=torch.long)
        cmask[i, : len(c)] = 1.0
    return RolloutBatch(torch.cat([p_ids, comp], dim=1), torch.cat([p_attention, cmask.long()], dim=1),
                        torch.cat([p_mm, torch.zeros_like(comp)], dim=1), vision, comp, cmask,
                        [""] * len(completions), 1, suppressed_token_ids(processor))


def completion_logits(
    model: PreTrainedModel, batch: RolloutBatch, *, temperature: float = 1.0, shared_prefix: bool = True,
    forward: torch.nn.Module | None = None,
) -> torch.Tensor:
    """Float logits over the whole vocabulary predicting each completion token, divided by
    `temperature`: [N, T, V], on the model's device; the sampler's suppressed tokens are -inf.

    Runs under the caller's grad mode; only the last T+1 positions go through the LM head. With
    groups (G > 1) on a Qwen3-VL model each prompt runs once (`rl.prefix`), same values and gradients.
    `forward` (default `model`) is the module the passes call, e.g. `model`'s DDP wrapper; `model`
    itself is only inspected (device, dtype, rope index). `sequence_logprobs` gathers the sampled
    tokens from these; on-policy distillation (`merge.distill`) compares whole distributions.
    """
    run = forward if forward is not None else model
    device = next(model.parameters()).device
    t = batch.completion_ids.shape[1]
    if shared_prefix and batch.group_size > 1 and supports_shared_prefix(model):
        logits = shared_prefix_logits(model, batch, run).float() / temperature  # [N, T, V]
    else:
        vision = {k: (v.to(device, model.dtype) if v.is_floating_point() else v.to(device)) for k, v in batch.vision.items()}
        out = run(
            input_ids=batch.input_ids.to(device), attention_mask=batch.attention_mask.to(device),
            mm_token_type_ids=batch.mm_token_type_ids.to(device), **vision,
            logits_to_keep=t + 1, use_cache=False,
        )
        logits = out.logits[:, -(t + 1) : -1, :].float() / temperature  # [N, T, V]
    if batch.suppressed:  # the sampler's distribution: suppressed tokens have probability 0
        logits[..., batch.suppressed] = float("-inf")
    return logits


def sequence_logprobs(
    model: PreTrainedModel, batch: RolloutBatch, *, temperature: float = 1.0, with_entropy: bool = False,
    shared_prefix: bool = True, forward: torch.nn.Module | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per-token log-probabilities of the completion tokens (and entropies): [N, T] each, from
    `completion_logits` (same grad mode, groups and `forward` rules)."""
    logits = completion_logits(model, batch, temperature=temperature, shared_prefix=shared_prefix, forward=forward)
    logp = token_logprobs(logits, batch.completion_ids.to(logits.device))
    ent = token_entropy(logits) if with_entropy else None
    return logp, ent


__all__ = ["RolloutBatch", "completion_logits", "completion_mask", "completions_batch", "end_token_ids", "sample_groups", "sequence_logprobs"]
