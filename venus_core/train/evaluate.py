"""Held-out evaluation during and after mid-training: greedy decoding scored by `venus_core.eval.metrics`.

Grounding: hit rate (point in box, over target samples), refusal accuracy (`[-1,-1]` on refusal
samples), parse rate (all samples). Navigation: type match, step success, parse rate. QA domains are
not scored here (their answers need a judge); their loss still counts in training.

Decoding is greedy with repetition penalty 1.0, not the 1.05 of the UI-Venus evaluation: a penalty
discourages repeating digits, which is wrong for coordinates such as `[500,500]` and measurably
hurt the tiny model. Every rate carries its count and Wilson 95 % interval.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from transformers import PreTrainedModel, ProcessorMixin

from venus_core.data import GroundingSample, NavigationStep
from venus_core.eval.metrics import Rate, score_grounding, score_navigation
from venus_core.models.generation import generate
from venus_core.train.data import Item

GROUNDING_TOKENS = 16
NAVIGATION_TOKENS = 160


def _answers(model: PreTrainedModel, processor: ProcessorMixin, items: Sequence[Item], max_new: int, batch: int) -> list[str]:
    out: list[str] = []
    for i in range(0, len(items), batch):
        chunk = items[i : i + batch]
        out += generate(model, processor, [it.example().messages for it in chunk], max_new, 0.0, 1.0)
    return out


def evaluate_held_out(
    model: PreTrainedModel,
    processor: ProcessorMixin,
    held_out: dict[str, list[Item]],
    *,
    limit: int = 200,
    batch_size: int = 16,
) -> dict[str, Rate]:
    """Rates on at most `limit` held-out samples per scored domain (the first ones, a fixed set)."""
    was_training = model.training
    model.eval()
    rates: dict[str, Rate] = {}
    try:
        with torch.no_grad():
            g = [it for it in held_out.get("grounding", []) if isinstance(it.record, GroundingSample)][:limit]
            if g:
                boxes = [it.record.box for it in g]  # type: ignore[union-attr]
                answers = _answers(model, processor, g, GROUNDING_TOKENS, batch_size)
                outs = [score_grounding(a, box) for a, box in zip(answers, boxes)]
                targets = [o for o, box in zip(outs, boxes) if box is not None]
                refusals = [o for o, box in zip(outs, boxes) if box is None]
                rates["grounding/hit"] = Rate(sum(o.correct for o in targets), len(targets))
                rates["grounding/refusal"] = Rate(sum(o.correct for o in refusals), len(refusals))
                rates["grounding/parse"] = Rate(sum(o.parsed for o in outs), len(outs))
            n = [it for it in held_out.get("navigation", []) if isinstance(it.record, NavigationStep)][:limit]
            if n:
                answers = _answers(model, processor, n, NAVIGATION_TOKENS, batch_size)
                nav = [
                    score_navigation(a, it.record.action, it.record.platform, it.record.target_box)  # type: ignore[union-attr]
                    for a, it in zip(answers, n)
                ]
                rates["navigation/type"] = Rate(sum(o.type_match for o in nav), len(nav))
                rates["navigation/step"] = Rate(sum(o.step_success for o in nav), len(nav))
                rates["navigation/parse"] = Rate(sum(o.parsed for o in nav), len(nav))
    finally:
        model.train(was_training)
    return rates


def answer_losses(model: PreTrainedModel, processor: ProcessorMixin, items: Sequence[Item], batch_size: int = 16) -> list[float]:
    """Mean cross-entropy over the answer tokens of each item (teacher forcing, no decoding)."""
    from venus_core.models.batches import IGNORE_INDEX, collate

    was_training = model.training
    model.eval()
    out: list[float] = []
    try:
        with torch.no_grad():
            for i in range(0, len(items), batch_size):
                batch = collate([it.example() for it in items[i : i + batch_size]], processor)
                labels = batch.pop("labels")[:, 1:]
                logits = model(**batch).logits[:, :-1].float()
                ce = torch.nn.functional.cross_entropy(
                    logits.reshape(-1, logits.shape[-1]), labels.reshape(-1), ignore_index=IGNORE_INDEX, reduction="none"
                ).view(labels.shape)
                mask = labels != IGNORE_INDEX
                out += (ce.sum(1) / mask.sum(1).clamp(min=1)).tolist()
    finally:
        model.train(was_training)
    return out


def mean_interval(values: Sequence[float]) -> tuple[float, float, float]:
    """(mean, low, high): normal-approximation 95 % interval of the mean."""
    if not values:
        raise ValueError("mean_interval of no values")
    n = len(values)
    mean = sum(values) / n
    sd = (sum((v - mean) ** 2 for v in values) / max(1, n - 1)) ** 0.5
    half = 1.959964 * sd / n**0.5
    return mean, mean - half, mean + half


def rates_to_metrics(rates: dict[str, Rate], prefix: str = "eval/") -> dict[str, float]:
    """Flat metrics for a Tracker: value and interval bounds of each rate."""
    out: dict[str, float] = {}
    for k, r in rates.items():
        lo, hi = r.interval
        out[f"{prefix}{k}"] = r.value
        out[f"{prefix}{k}_ci_low"] = lo
        out[f"{prefix}{k}_ci_high"] = hi
    return out


def rates_to_dict(rates: dict[str, Rate]) -> dict[str, Any]:
    return {k: r.to_dict() for k, r in rates.items()}


__all__ = ["answer_losses", "evaluate_held_out", "mean_interval", "rates_to_dict", "rates_to_metrics"]
