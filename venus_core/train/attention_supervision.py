"""Attention supervision: an auxiliary loss that makes the positions predicting a click's coordinates
look at the screen where the click lands.

Why (measured, docs/learning.md "The navigation answer does not look at the screen"): the tiny model
picks the named button on held-out level-0/1 screens in the grounding format, but in the navigation
format its clicks were a function of the instruction's colour word alone (live level 0: every "green"
goal clicked the same point). Its last layer's attention from the position before the first
coordinate digit put 0.54 of its mass on the 16 visual tokens with the grounding prompt (~115 tokens)
and 0.02 with the navigation prompt (~990 tokens): ~900 text tokens between the screenshot and the
answer take the mass, and the few coordinate tokens of an answer never pulled it back. The loss is
−log of the head-averaged attention mass, at the positions that predict the coordinate digits of an
answer's first point (`[x,y]` of grounding, `box=(x,y)` of Click / LongPress / DoubleClick / Hover),
on the visual token whose cell holds that point, in one decoder layer; added to the answer loss with
`weight`. Training does not need eager attention for it (`recording`): every layer keeps the sdpa
kernel, and the supervised layer's attention function also computes the softmax rows of the few
supervised query positions from the same query and key states (a handful of rows of the score
matrix instead of all of it in every layer). Measured on a venus-tiny level-2 navigation batch (16
rows of 1,010-1,178 tokens, 2 threads, forward + backward): 1.79 s with eager attention and the
padding mask, 0.93 s recorded without the mask (`benchmarks/sft_step.py`, 2026-12-07); the loss and
gradients equal the eager ones up to float order (tested).
Measured: 400 supervised steps from the shipped bootstrap took live level-1 success on 128 x 128 boards
from 14.5 % to 87.0 % (n = 200; the same steps without the term: 16.5 %).

Departure: nothing like this is in the UI-Venus reports; a pre-trained Qwen3-VL already reads the
screen across long prompts. It stands in for that pre-training at toy scale and is off by default
(`mid_train.attention_supervision.weight: 0`).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from venus_core.config.training import AttentionSupervisionSpec

IGNORE_INDEX = -100
POINT = re.compile(r"(?:box=\(|^\[)(\d+),\s*(\d+)")
"""The answer's first point: a grounding answer `[x,y]`, or a click-like action's `box=(x,y)`."""


def _attn_configs(model: nn.Module) -> list[object]:
    return [m.config for m in model.modules() if hasattr(getattr(m, "config", None), "_attn_implementation")]


RECORDING = "venus_sdpa_rows"
"""The attention implementation `recording` switches the text model to: sdpa, plus the softmax rows of
the supervised positions in the supervised layer (registered with transformers' attention and mask
interfaces; the mask is sdpa's)."""

_active: list["_Recorder"] = []  # the recorder of the forward pass under way (one at a time)


def _mean_nll(masses: list[torch.Tensor]) -> torch.Tensor:
    """Mean over rows of −log(head-mean attention mass on the target), averaged over the row's queries."""
    return torch.stack([-torch.log(m.clamp_min(1e-6)).mean() for m in masses]).mean()


class _Recorder:
    """The supervised rows of one forward pass: targets in, the head-mean mass on each target out.
    Under gradient checkpointing the supervised layer runs its forward again in the backward pass, and
    must record again there (the recomputation has to repeat the forward's operations): masses past
    the first `len(targets)` are those repeats, which the loss, read before the backward pass, never sees."""

    def __init__(self, layer: int, targets: list[tuple[int, list[int], int]]) -> None:
        self.layer, self.targets = layer, targets
        self.masses: list[torch.Tensor] = []  # per target: [queries], the head-mean probability of its key

    def record(self, module: nn.Module, query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None,
               scaling: float) -> None:
        groups = int(getattr(module, "num_key_value_groups", 1))
        for b, queries, target in self.targets:
            q = query[b, :, queries, :]  # [heads, Q, d]
            k = key[b].repeat_interleave(groups, dim=0) if groups > 1 else key[b]  # [heads, S, d]
            scores = torch.matmul(q, k.transpose(-1, -2)).float() * scaling  # [heads, Q, S]
            if mask is None:  # causal: a query attends to the keys up to its own position
                pos = torch.tensor(queries, device=scores.device)[:, None]
                blocked = torch.arange(k.shape[-2], device=scores.device)[None, :] > pos
                scores = scores.masked_fill(blocked[None], float("-inf"))
            else:
                rows = mask[b, 0, queries, : k.shape[-2]]  # [Q, S]
                scores = (scores.masked_fill(~rows[None], float("-inf")) if rows.dtype == torch.bool
                          else scores + rows[None].float())
            self.masses.append(torch.softmax(scores, dim=-1)[:, :, target].mean(0))


def _sdpa_recording(module: nn.Module, query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                    attention_mask: torch.Tensor | None, **kwargs: Any) -> tuple[torch.Tensor, None]:
    rec = _active[-1] if _active else None
    if rec is not None and getattr(module, "layer_idx", None) == rec.layer:
        rec.record(module, query, key, attention_mask, float(kwargs.get("scaling") or query.shape[-1] ** -0.5))
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(RECORDING, _sdpa_recording)
AttentionMaskInterface.register(RECORDING, sdpa_mask)


@contextmanager
def eager_attention(model: nn.Module) -> Iterator[None]:
    """Run `model` with eager attention inside the block (the kernel that returns probabilities)."""
    configs = _attn_configs(model)
    before = [c._attn_implementation for c in configs]  # type: ignore[attr-defined]
    for c in configs:
        c._attn_implementation = "eager"  # type: ignore[attr-defined]
    try:
        yield
    finally:
        for c, b in zip(configs, before, strict=True):
            c._attn_implementation = b  # type: ignore[attr-defined]


class AttentionSupervision:
    """Builds the (row, query positions, target key position) triples of a batch and the loss."""

    def __init__(self, spec: AttentionSupervisionSpec, tokenizer: object, image_token_id: int, merge: int) -> None:
        if spec.weight <= 0:
            raise ValueError("attention supervision with weight 0: leave it off instead")
        self.spec = spec
        self.tokenizer = tokenizer
        self.image_token_id = int(image_token_id)
        self.merge = int(merge)

    def targets(self, input_ids: torch.Tensor, labels: torch.Tensor,
                image_grid_thw: torch.Tensor | None) -> list[tuple[int, list[int], int]]:
        """Per row with a point answer and one image: (row, positions predicting its digits, the
        target visual token's position). Rows without either are left out."""
        if image_grid_thw is None:
            return []
        out: list[tuple[int, list[int], int]] = []
        img_row = 0
        for b in range(input_ids.shape[0]):
            pos = (input_ids[b] == self.image_token_id).nonzero().flatten()
            if len(pos) == 0:
                continue
            grid = image_grid_thw[img_row]
            img_row += 1
            ans = (labels[b] != IGNORE_INDEX).nonzero().flatten().tolist()
            text, starts = "", []
            for p in ans:
                starts.append(len(text))
                text += self.tokenizer.decode([int(labels[b, p])])  # type: ignore[attr-defined]
            m = POINT.search(text)
            if m is None:
                continue
            gh, gw = int(grid[1]) // self.merge, int(grid[2]) // self.merge
            if len(pos) != gh * gw:
                raise ValueError(f"row {b}: {len(pos)} visual tokens but the image grid is {gh} x {gw}")
            x, y = int(m[1]), int(m[2])
            col, row = min(gw - 1, x * gw // 1000), min(gh - 1, y * gh // 1000)
            queries = [ans[i] - 1 for i, s in enumerate(starts) if m.start(1) <= s < m.end(2)]
            if queries:
                out.append((b, queries, int(pos[row * gw + col])))
        return out

    @contextmanager
    def recording(self, model: nn.Module, targets: list[tuple[int, list[int], int]]) -> Iterator["_Recorder"]:
        """Inside the block the model's text decoder runs `RECORDING` (sdpa, plus the supervised rows of
        the supervised layer); `recorded_loss` of what it yields after the forward pass is the loss
        `loss` would give from eager attention probabilities. Keep the backward pass inside the block
        when the model checkpoints activations (its recomputation must record too). The kernel is
        restored on exit. Inside, the kernel is sdpa whatever the spec asked for (a flash_attention_2
        spec too: the recorded rows read sdpa's mask), so supervised forward passes cost sdpa's memory."""
        text = getattr(model.config, "text_config", model.config)
        layers = int(text.num_hidden_layers)
        layer = self.spec.layer % layers
        rec = _Recorder(layer, targets)
        before = text._attn_implementation
        text._attn_implementation = RECORDING
        _active.append(rec)
        try:
            yield rec
        finally:
            _active.remove(rec)
            text._attn_implementation = before

    @staticmethod
    def recorded_loss(rec: "_Recorder") -> torch.Tensor | None:
        """The loss of `loss`, from a `recording` forward pass; None when no row had a point answer."""
        if not rec.targets:
            return None
        if len(rec.masses) != len(rec.targets):
            raise RuntimeError(f"attention supervision: recorded {len(rec.masses)} of {len(rec.targets)} targets "
                               "(the supervised layer did not run its attention through the recording kernel)")
        return _mean_nll(rec.masses)

    def loss(self, attentions: tuple[torch.Tensor, ...], input_ids: torch.Tensor, labels: torch.Tensor,
             image_grid_thw: torch.Tensor | None) -> torch.Tensor | None:
        """Mean over rows of −log(head-mean attention mass on the target token), averaged over the
        row's digit positions; None when no row has a point answer. (From eager attention
        probabilities, `output_attentions=True`: the reference `recording` is tested against.)"""
        att = attentions[self.spec.layer]
        masses = [att[b, :, queries, key].float().mean(0)
                  for b, queries, key in self.targets(input_ids, labels, image_grid_thw)]
        return _mean_nll(masses) if masses else None


__all__ = ["AttentionSupervision", "POINT", "eager_attention"]
