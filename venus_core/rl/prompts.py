"""Dataset records -> RL prompts (`PromptItem`) and the held-out checks run before and after GRPO.

Why here: the prompt a policy is trained on must be the one it is evaluated and deployed with, so
both go through `venus_core.models.batches.record_to_example` (the UI-Venus-1.5 prompts). The
reward reference carries exactly what the registered reward reads: grounding `{"box", "refusal"}`,
navigation `{"action", "target_box"}`. Held-out scoring uses `venus_core.eval.metrics` (the
ScreenSpot / AndroidControl rules) with greedy decoding, so "before → after" numbers are the same
numbers `venus eval` reports.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedModel, ProcessorMixin

from venus_core.data.schema import GroundingSample, NavigationStep
from venus_core.eval.metrics import Rate, score_grounding, score_navigation
from venus_core.models.batches import OpenImage, record_to_example
from venus_core.models.generation import generate
from venus_core.rl.grpo import PromptItem


def grounding_item(record: GroundingSample, open_image: OpenImage) -> PromptItem:
    ex = record_to_example(record, open_image)
    box = list(record.box) if record.box is not None else None
    return PromptItem(ex.messages, {"box": box, "refusal": record.refusal}, record.id)


def navigation_item(step: NavigationStep, open_image: OpenImage) -> PromptItem:
    ex = record_to_example(step, open_image)
    box = list(step.target_box) if step.target_box is not None else None
    return PromptItem(ex.messages, {"action": step.action, "target_box": box}, step.id)


def _answers(model: PreTrainedModel, processor: ProcessorMixin, items: Sequence[PromptItem],
             max_new_tokens: int, batch_size: int, repetition_penalty: float) -> list[str]:
    out: list[str] = []
    for i in range(0, len(items), batch_size):
        chunk = items[i : i + batch_size]
        out.extend(generate(model, processor, [it.messages for it in chunk], max_new_tokens,
                            temperature=0.0, repetition_penalty=repetition_penalty))
    return out


def evaluate_grounding(
    model: PreTrainedModel, processor: ProcessorMixin, records: Sequence[GroundingSample], open_image: OpenImage,
    *, max_new_tokens: int = 16, batch_size: int = 32, repetition_penalty: float = 1.05,
) -> dict[str, Any]:
    """Greedy answers on `records`: {"hit": Rate, "parsed": Rate} (ScreenSpot rule)."""
    items = [grounding_item(r, open_image) for r in records]
    answers = _answers(model, processor, items, max_new_tokens, batch_size, repetition_penalty)
    outcomes = [score_grounding(a, r.box) for a, r in zip(answers, records, strict=True)]
    n = len(outcomes)
    return {"hit": Rate(sum(o.correct for o in outcomes), n), "parsed": Rate(sum(o.parsed for o in outcomes), n)}


def evaluate_navigation(
    model: PreTrainedModel, processor: ProcessorMixin, steps: Sequence[NavigationStep], open_image: OpenImage,
    *, max_new_tokens: int = 128, batch_size: int = 16, repetition_penalty: float = 1.05,
) -> dict[str, Any]:
    """Greedy answers on `steps`: {"type_match", "step_success", "parsed"} as Rates, and
    "step_success/<Type>" per ground-truth action type (Click, Finished, the rare CallUser, …): an
    overall step success can come from `Finished` steps alone."""
    from venus_core.actions import parse_action

    items = [navigation_item(s, open_image) for s in steps]
    answers = _answers(model, processor, items, max_new_tokens, batch_size, repetition_penalty)
    outcomes = [score_navigation(a, s.action, s.platform, s.target_box) for a, s in zip(answers, steps, strict=True)]
    n = len(outcomes)
    types = [parse_action(s.action, s.platform).NAME for s in steps]
    by_type = {f"step_success/{t}": Rate(sum(o.step_success for o, u in zip(outcomes, types) if u == t), types.count(t))
               for t in sorted(set(types))}
    return {
        "type_match": Rate(sum(o.type_match for o in outcomes), n),
        "step_success": Rate(sum(o.step_success for o in outcomes), n),
        "parsed": Rate(sum(o.parsed for o in outcomes), n),
        **by_type,
    }


__all__ = ["evaluate_grounding", "evaluate_navigation", "grounding_item", "navigation_item"]
