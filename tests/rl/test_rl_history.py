"""History alignment and sparse action enhancement (pure, no model)."""

from __future__ import annotations

import random

import pytest

from venus_core.data.schema import HistoryItem, NavigationStep, Provenance
from venus_core.rl.history import (
    PooledThought,
    ThoughtPool,
    action_mix,
    add_rollouts,
    align_history,
    select_thought,
    sparse_variants,
)

IMG = "sha256:" + "0" * 64
PROV = Provenance(source="test", source_id="x")


def _step(i: int, action: str, history: list[tuple[str, str]], episode: str = "e1") -> NavigationStep:
    return NavigationStep(
        id=f"{episode}:{i}", image=IMG, image_size=(128, 128), platform="mobile", goal="do it",
        history=[HistoryItem(think=t, action=a) for t, a in history], think="now", action=action,
        conclusion="done", step_index=i, episode_id=episode, provenance=PROV,
    )


def _nav(think: str, action: str) -> str:
    return f"<think>{think}</think><action>{action}</action><conclusion>c</conclusion>"


def test_add_rollouts_keeps_only_matching_actions() -> None:
    pool = ThoughtPool()
    step = _step(0, "Click(box=(500,500))", [])
    texts = [_nav("tap the centre", "Click(box=(510,505))"), _nav("go back", "PressBack()"),
             "garbage", "Click(box=(500,500))", _nav("tap the centre", "Click(box=(500,500))")]
    matched = add_rollouts(pool, step, texts, [1.0, 0.0, 0.0, 0.9, 0.8])
    # the bare action matches but has no thought; the duplicate thought is pooled once
    assert matched == 2
    assert [t.think for t in pool.candidates("e1", 0)] == ["tap the centre"]


def test_selection_rules() -> None:
    cands = [PooledThought("short", 0.2), PooledThought("a much longer thought here", 0.9), PooledThought("medium one", 0.5)]
    rng = random.Random(0)
    assert select_thought(cands, "ten chars!", "closest_length", rng) == "medium one"
    assert select_thought(cands, "ten chars!", "highest_reward", rng) == "a much longer thought here"
    picks = {select_thought(cands, "x", "random", random.Random(s)) for s in range(20)}
    assert picks == {c.think for c in cands}
    with pytest.raises(ValueError, match="no candidates"):
        select_thought([], "x", "random", rng)


def test_align_history_replaces_pooled_steps_only() -> None:
    pool = ThoughtPool()
    pool.add("e1", 0, "policy thought zero", 1.0)
    # step 2 shows history of steps 0 and 1; only step 0 has a pooled thought
    step = _step(2, "PressBack()", [("annotator zero", "Click(box=(100,100))"), ("annotator one", "PressHome()")])
    new, replaced = align_history(step, pool, "closest_length", random.Random(0))
    assert replaced == 1
    assert [h.think for h in new.history] == ["policy thought zero", "annotator one"]
    assert [h.action for h in new.history] == [h.action for h in step.history]
    same, none = align_history(_step(1, "PressBack()", [], "e2"), pool, "random", random.Random(0))
    assert none == 0


def test_history_indices_follow_step_index_with_truncated_history() -> None:
    pool = ThoughtPool()
    pool.add("e1", 3, "pooled for step three", 1.0)
    # step 5 with a 2-item history: items are episode steps 3 and 4
    step = _step(5, "PressBack()", [("orig three", "PressHome()"), ("orig four", "PressHome()")])
    new, _ = align_history(step, pool, "highest_reward", random.Random(0))
    assert [h.think for h in new.history] == ["pooled for step three", "orig four"]


def test_sparse_variants_upsample_rare_actions_and_change_the_mix() -> None:
    pool = ThoughtPool()
    pool.add("e1", 0, "pooled a", 1.0)
    pool.add("e1", 0, "pooled b", 0.5)
    steps = [_step(1, "LongPress(box=(300,300))", [("orig", "Click(box=(100,100))")]),
             _step(0, "Click(box=(100,100))", []), _step(0, "PressHome()", [], "e3")]
    before = action_mix(steps)
    variants, distinct = sparse_variants(steps, pool, ["LongPress", "CallUser"], 4, random.Random(1))
    assert len(variants) == 4 and distinct == 4
    assert {v.id for v in variants} == {f"e1:1#v{k}" for k in range(1, 5)}
    assert {v.history[0].think for v in variants} <= {"pooled a", "pooled b"}
    after = action_mix(steps + variants)
    assert before == {"LongPress": 1, "Click": 1, "PressHome": 1}
    assert after["LongPress"] == 5 and after["Click"] == 1


def test_sparse_variants_without_pool_are_plain_copies() -> None:
    steps = [_step(1, "LongPress(box=(300,300))", [("orig", "Click(box=(100,100))")])]
    variants, distinct = sparse_variants(steps, ThoughtPool(), ["LongPress"], 3, random.Random(0))
    assert len(variants) == 3 and distinct == 0
    assert all(v.history == steps[0].history for v in variants)


def test_pool_keeps_best_per_step() -> None:
    pool = ThoughtPool(max_per_step=2)
    for i, r in enumerate([0.1, 0.9, 0.5]):
        pool.add("e", 0, f"t{i}", r)
    pool.add("e", 0, "   ", 1.0)
    assert [t.think for t in pool.candidates("e", 0)] == ["t1", "t2"] and len(pool) == 2
