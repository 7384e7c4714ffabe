"""Batched generation: left padding gives the same greedy answers as one-by-one decoding."""

from __future__ import annotations

import pytest
import torch

from venus_core.models.batches import Example, collate
from venus_core.models.generation import generate
from venus_core.models.prompts import build_messages, grounding_prompt, navigation_prompt

from models_helpers import screen


def _chats() -> list[list[dict]]:
    return [
        build_messages(screen((250, 0, 0)), grounding_prompt("red")),
        build_messages(screen((0, 0, 250), (96, 160)), navigation_prompt("Open the 设置 app", [], "mobile")),
        build_messages(screen((0, 250, 0)), "Describe"),
    ]


def test_batched_greedy_equals_one_by_one(tiny) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    chats = _chats()
    batched = generate(model, processor, chats, max_new_tokens=6)
    assert len(batched) == 3 and all(isinstance(t, str) and t for t in batched)
    single = [generate(model, processor, [c], max_new_tokens=6)[0] for c in chats]
    assert batched == single
    assert generate(model, processor, chats, max_new_tokens=6) == batched  # greedy is deterministic
    assert generate(model, processor, [], max_new_tokens=3) == []


def test_sampling_is_seeded_and_arguments_checked(tiny) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    chats = _chats()[:2]
    a = generate(model, processor, chats, max_new_tokens=5, temperature=1.0, seed=3)
    assert a == generate(model, processor, chats, max_new_tokens=5, temperature=1.0, seed=3)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, processor, chats, max_new_tokens=0)
    with pytest.raises(ValueError, match="temperature"):
        generate(model, processor, chats, max_new_tokens=2, temperature=-1)


@pytest.mark.slow
def test_tiny_model_learns_a_grounding_answer_and_generates_it(tiny_dir) -> None:  # type: ignore[no-untyped-def]
    from venus_core.config.spec import ModelSpec
    from venus_core.models.loading import load_model

    model, processor = load_model(tiny_dir, ModelSpec())
    torch.manual_seed(0)
    examples = [
        Example(build_messages(screen((250, 0, 0)), grounding_prompt("the button")), "[250,375]"),
        Example(build_messages(screen((0, 0, 250)), grounding_prompt("the button")), "[-1,-1]"),
    ]
    batch = collate(examples, processor)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    model.train()
    for _ in range(60):
        opt.zero_grad()
        model(**batch).loss.backward()
        opt.step()
    model.eval()
    out = generate(model, processor, [e.messages for e in examples], max_new_tokens=12, repetition_penalty=1.0)
    assert out == ["[250,375]", "[-1,-1]"]
