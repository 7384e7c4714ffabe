"""Planner plans replay to the goal; generators write valid, deterministic datasets."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from venus_core.actions.parse import parse_action
from venus_core.data.store import DatasetReader
from venus_core.data.synth import LEVELS, ViewContext, mixture_counts, sample_episode, synthesize
from venus_core.data.synth.describe import describe
from venus_core.data.synth.generate import _Ctx, sample_screen
from venus_core.data.synth.phone import norm_box


@pytest.mark.parametrize("level", [0, 1, 2, 3, 4, 5, 6])
@pytest.mark.parametrize("platform", ["mobile", "web"])
def test_plans_reach_goal_when_replayed(level: int, platform: str) -> None:
    for seed in range(6):
        ctx = ViewContext.for_output(platform, "en", 256, 256)
        ep = sample_episode(random.Random(seed * 31 + level), level, ctx)
        state = ep.start
        assert not ep.task.done(state)
        for m in ep.moves:
            from venus_core.actions.render import render_action

            action = parse_action(render_action(m.action), platform)  # canonical string replays
            state = ep.phone.step(state, action, ctx).state
        assert ep.task.done(state), ep.task.goal


@pytest.mark.slow
def test_long_chinese_tasks() -> None:
    for seed in range(3):
        ctx = ViewContext.for_output("mobile", "zh", 256, 448)
        ep = sample_episode(random.Random(seed), 5, ctx)
        assert len(ep.moves) >= 6
        state = ep.phone.run(ep.start, [m.action for m in ep.moves], ctx)
        assert ep.task.done(state)


def test_levels_and_mixture_counts() -> None:
    assert sorted(LEVELS) == [0, 1, 2, 3, 4, 5, 6]
    c = mixture_counts(1000)
    assert c == {"perception": 208, "vqa": 221, "grounding": 248, "navigation": 323}
    assert sum(mixture_counts(7).values()) == 7


def _digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}  # manifest.json included


def test_grounding_dataset_boxes_and_refusals(tmp_path: Path) -> None:
    m = synthesize("grounding", 40, 3, 7, tmp_path / "g", platform="both")
    assert m.records == 40
    recs = list(DatasetReader(tmp_path / "g"))
    assert any(r.refusal for r in recs) and any(not r.refusal for r in recs)
    for i, r in enumerate(recs):
        assert r.kind == "grounding"
        if r.box is not None:
            x1, y1, x2, y2 = r.box
            assert 0 <= x1 < x2 <= 1000 and 0 <= y1 < y2 <= 1000
        # regenerate the screen the sample came from and check the element / its absence
        rng = random.Random(f"7:grounding:3:{i}")
        c = _Ctx(rng, 3, "both", None)
        _, _, screen = sample_screen(rng, 3, c.view)
        named = [w for w in screen.widgets if r.instruction.endswith(describe(w, c.lang))]
        if r.refusal:
            assert not named, r.instruction
        else:
            assert any(norm_box(w.box, c.view) == r.box for w in named)


def test_navigation_and_mixture_deterministic(tmp_path: Path) -> None:
    a = synthesize("mixture", 24, 4, 3, tmp_path / "a", platform="mobile")
    b = synthesize("mixture", 24, 4, 3, tmp_path / "b", platform="mobile")
    assert a.counts_by_domain == {"perception": 5, "vqa": 5, "grounding": 6, "navigation": 8}
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    c = synthesize("mixture", 24, 4, 4, tmp_path / "c", platform="mobile")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    trajs = [r for r in DatasetReader(tmp_path / "a") if r.kind == "trajectory"]
    for t in trajs:
        assert t.steps[-1].action.startswith("Finished(")
        assert 3 <= len(t.steps) <= 6  # 2-5 moves + Finished
        for s in t.steps[:-1]:
            parse_action(s.action, "mobile")
        assert len(t.to_steps()) == len(t.steps)


def test_brief_think_drops_the_goal_and_nothing_else(tmp_path: Path) -> None:
    """think="brief": the same episodes (actions, boxes, images, conclusions), thinks that name the step
    without restating the goal; the default style is what it was."""
    goal = synthesize("navigation", 12, 3, 5, tmp_path / "goal")
    brief = synthesize("navigation", 12, 3, 5, tmp_path / "brief", think="brief")
    assert "think=brief" in brief.created_by and "think" not in goal.created_by
    a, b = list(DatasetReader(tmp_path / "goal")), list(DatasetReader(tmp_path / "brief"))
    assert [t.goal for t in a] == [t.goal for t in b]
    changed = 0
    for ta, tb in zip(a, b, strict=True):
        for sa, sb in zip(ta.steps, tb.steps, strict=True):
            assert (sa.action, sa.target_box, sa.image, sa.conclusion) == (sb.action, sb.target_box, sb.image, sb.conclusion)
            assert ta.goal not in sb.think and "The task is" not in sb.think
            if sa.action.startswith(("Click(", "LongPress(", "Launch(")):
                assert ta.goal in sa.think and sb.think.startswith(("I tap ", "I long-press ", "I open ", "点击", "长按", "打开"))
                changed += 1
            else:
                assert sa.think == sb.think
    assert changed >= 12
    with pytest.raises(ValueError, match="think 'long'"):
        synthesize("navigation", 1, 3, 5, tmp_path / "x", think="long")


def test_vqa_and_low_levels(tmp_path: Path) -> None:
    m = synthesize("vqa", 10, 1, 0, tmp_path / "v", platform="web")
    assert m.counts_by_domain == {"perception": 5, "vqa": 5}
    for r in DatasetReader(tmp_path / "v"):
        assert r.question and r.answer and r.image_size == (128, 128)
    n = synthesize("navigation", 5, 0, 0, tmp_path / "n")
    assert n.records == 5


def test_bad_arguments(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown kind"):
        synthesize("pictures", 1, 0, 0, tmp_path / "x")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="unknown level"):
        synthesize("grounding", 1, 9, 0, tmp_path / "x")


def test_progress_counts_every_record_of_every_domain(tmp_path: Path) -> None:
    calls: list[tuple[int, int | None]] = []
    m = synthesize("mixture", 12, 0, 5, tmp_path / "m", progress=lambda d, t: calls.append((d, t)))
    assert calls == [(k, 12) for k in range(1, 13)] and m.records == 12 and len(m.counts_by_domain) > 1
