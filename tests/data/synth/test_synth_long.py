"""Long composite tasks, app scripts and information questions of the synthetic world."""

from __future__ import annotations

import hashlib
import random
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from venus_core.actions.parse import parse_action
from venus_core.actions.render import render_action
from venus_core.data.store import DatasetReader
from venus_core.data.synth import ViewContext, sample_episode, synthesize
from venus_core.data.synth.apps.base import Op
from venus_core.data.synth.planner import PlanningError
from venus_core.data.synth.script import run_script
from venus_core.data.synth.tasks import PLAN_LENGTH, Episode, get_phone

MOBILE = ViewContext.for_output("mobile", "en", 288, 512)
WEB_ZH = ViewContext.for_output("web", "zh", 512, 288)


def _replay(ep: Episode) -> None:
    """Replay the plan's canonical action strings; the goal (and the answer) must hold."""
    state = ep.start
    assert not ep.task.done(state)
    for m in ep.moves:
        action = parse_action(render_action(m.action), ep.ctx.platform)
        res = ep.phone.step(state, action, ep.ctx)
        assert res.changed and res.state == m.state, (render_action(m.action), res.info)
        state = res.state
    assert ep.task.done(state), ep.task.goal
    if ep.task.answer:
        assert ep.task.answer_in(state) == ep.task.answer
        assert any(ep.task.answer in t for t in ep.phone.view(state, ep.ctx).texts())


def test_step_counts_per_level() -> None:
    """Level 6 plans are 20+ steps; across levels 3-6 plans span 1 to 20+ steps."""
    report = {}
    for level in (3, 4, 5, 6):
        counts = sorted(len(sample_episode(random.Random(seed), level,
                                           MOBILE if seed % 2 else WEB_ZH).moves)
                        for seed in range(16))
        report[level] = (counts[0], statistics.median(counts), counts[-1])
        lo, hi = PLAN_LENGTH[level]
        assert lo <= counts[0] and counts[-1] <= hi, (level, counts)
    print("plan steps min/median/max per level:", report)
    assert report[3][0] == 1 and report[6][0] >= 20 and report[6][1] >= 25
    assert report[5][2] < 20 <= report[6][0]


@pytest.mark.parametrize("ctx", [MOBILE, WEB_ZH], ids=["mobile-en", "web-zh"])
def test_long_plans_replay(ctx: ViewContext) -> None:
    for seed in range(5):
        ep = sample_episode(random.Random(1000 + seed), 6, ctx)
        assert len(ep.moves) >= 20 and len(ep.task.apps) >= 2
        _replay(ep)


def test_questions_are_checked_against_state() -> None:
    seen: dict[int, int] = {}
    replies = set()
    for level in (3, 4, 5, 6):
        for seed in range(40):
            ep = sample_episode(random.Random(seed), level, MOBILE if seed % 2 else WEB_ZH)
            if not ep.task.answer:
                continue
            seen[level] = seen.get(level, 0) + 1
            replies.add(ep.task.final_action().NAME)
            assert ep.task.final_action().content == ep.task.answer
            _replay(ep)
            if level >= 5 and seen[level] > 3:
                break
    assert set(seen) == {3, 4, 5, 6}, seen
    assert replies == {"Finished", "CallUser"}


def test_wrong_answer_is_detected() -> None:
    """The answer is read from the state: a state holding another value gives another answer."""
    for seed in range(60):
        ep = sample_episode(random.Random(seed), 6, MOBILE)
        final = ep.phone.run(ep.start, [m.action for m in ep.moves], MOBILE)
        if ep.task.answer and final.foreground == "settings":
            break
    else:
        pytest.skip("no settings question in the seed range")
    st = final.app("settings")
    other = final.with_app("settings", replace(st, battery=(st.battery % 100) + 1,
                                               model=st.model + " Pro",
                                               version=st.version + ".1"))
    assert ep.task.answer_in(final) == ep.task.answer
    assert ep.task.answer_in(other) != ep.task.answer


@pytest.mark.parametrize("ctx", [MOBILE, WEB_ZH], ids=["mobile-en", "web-zh"])
def test_every_app_script_reaches_its_goal(ctx: ViewContext) -> None:
    phone = get_phone()
    ran = 0
    for seed in range(6):
        rng = random.Random(seed)
        state = phone.initial(rng)
        for name, app in phone.apps.items():
            for at in app.tasks(state.app(name), rng, ctx.lang):
                if not at.script:
                    continue
                moves = run_script(phone, state, at.script, ctx, rng)
                end = moves[-1].state if moves else state
                assert at.check(end.app(name)), (name, at.goal)
                assert all(m(end.app(name)) for m in at.milestones), (name, at.goal)
                if at.kind == "info":
                    assert at.answer_of is not None and at.answer_of(end.app(name)) == at.answer
                ran += 1
    assert ran > 100


def test_script_errors() -> None:
    phone = get_phone()
    state = phone.initial(random.Random(0))
    with pytest.raises(PlanningError, match="not on screen"):
        run_script(phone, state, (Op("open", "settings"), Op("tap", "no:such")), MOBILE,
                   random.Random(0))
    with pytest.raises(PlanningError, match="not installed"):
        run_script(phone, state, (Op("open", "camera"),), MOBILE, random.Random(0))
    with pytest.raises(ValueError, match="unknown op kind 'fly'"):
        run_script(phone, state, (Op("fly", "x"),), MOBILE, random.Random(0))
    with pytest.raises(PlanningError, match="empty script"):
        run_script(phone, state, (), MOBILE, random.Random(0))


def _digest(path: Path) -> dict[str, str]:
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(path.rglob("*")) if p.is_file()}


def test_long_level_dataset_deterministic(tmp_path: Path) -> None:
    a = synthesize("navigation", 2, 6, 11, tmp_path / "a", platform="both")
    b = synthesize("navigation", 2, 6, 11, tmp_path / "b", platform="both")
    assert a.records == 2 and _digest(tmp_path / "a") == _digest(tmp_path / "b")
    for t in DatasetReader(tmp_path / "a"):
        assert len(t.steps) >= 21 and t.meta["level"] == 6
        assert t.steps[-1].action.startswith(("Finished(", "CallUser("))
        assert t.steps[0].image_size in ((288, 512), (512, 288))
        for s in t.steps[:-1]:
            parse_action(s.action, t.platform)
