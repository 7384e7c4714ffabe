from __future__ import annotations

import doctest

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import venus_core.rewards.grounding as grounding_mod
import venus_core.rewards.navigation as navigation_mod
import venus_core.rewards.online as online_mod
import venus_core.rewards.text as text_mod
from venus_core.config.registry import REWARDS
from venus_core.config.spec import OnlineRewardSpec, RewardSpec
from venus_core.rewards import grounding_reward, score_batch, token_f1, trajectory_rewards

P = RewardSpec(format_weight=0.1, task_weight=0.9, coord_tight=40, coord_loose=80, scroll_tolerance=100)
NAV = REWARDS.get("navigation_mobile")
WEB = REWARDS.get("navigation_web")


def nav(action: str, think: str = "t", conclusion: str = "c") -> str:
    return f"<think>{think}</think><action>{action}</action><conclusion>{conclusion}</conclusion>"


@pytest.mark.parametrize("module", [grounding_mod, navigation_mod, online_mod, text_mod])
def test_doctests(module: object) -> None:
    result = doctest.testmod(module)  # type: ignore[arg-type]
    assert result.attempted > 0 and result.failed == 0


# ---- grounding

@pytest.mark.parametrize(
    ("completion", "ref", "total", "hit"),
    [
        ("[500,500]", {"box": [400, 400, 600, 600]}, 1.0, 1.0),
        ("[600,600]", {"box": [400, 400, 600, 600]}, 1.0, 1.0),  # inclusive edge
        ("[601,600]", {"box": [400, 400, 600, 600]}, 0.1, 0.0),
        ("the answer is (450, 410)", {"box": [400, 400, 600, 600]}, 1.0, 1.0),
        ("[400,400,600,600]", {"box": [450, 450, 550, 550]}, 1.0, 1.0),  # box -> centre
        ("[-1,-1]", {"box": [400, 400, 600, 600]}, 0.1, 0.0),  # refusal on a positive earns 0
        ("[-1,-1]", {"box": None}, 1.0, 1.0),
        ("[500,500]", {"box": None}, 0.1, 0.0),
        ("[-1,-1]", {"box": [1, 1, 2, 2], "refusal": True}, 1.0, 1.0),
    ],
)
def test_grounding_cases(completion: str, ref: dict, total: float, hit: float) -> None:
    r = grounding_reward(completion, ref, P)
    assert r.total == pytest.approx(total) and r.terms["point_in_box"] == hit and r.parsed


def test_grounding_unparseable_is_zero() -> None:
    r = grounding_reward("I think it is the blue one", {"box": [0, 0, 10, 10]}, P)
    assert r.total == 0.0 and not r.parsed and r.terms["format"] == 0.0


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60), st.integers(0, 900), st.integers(0, 900))
def test_grounding_reward_is_bounded(text: str, x: int, y: int) -> None:
    r = grounding_reward(text, {"box": [x, y, x + 50, y + 50]}, P)
    assert 0.0 <= r.total <= P.format_weight + P.task_weight


# ---- navigation

def test_format_requires_the_three_tags_in_order() -> None:
    ok = NAV(nav("Click(box=(500,500))"), {"action": "Click(box=(500,500))"}, P)
    assert ok.terms["format"] == 1.0 and ok.total == pytest.approx(0.1 + 0.9 * 2)
    swapped = "<action>Click(box=(500,500))</action><think>t</think><conclusion>c</conclusion>"
    r = NAV(swapped, {"action": "Click(box=(500,500))"}, P)
    assert r.terms["format"] == 0.0


@pytest.mark.parametrize(
    ("pred", "ref", "arg"),
    [
        ("Click(box=(500,500))", "Click(box=(530,500))", 1.0),  # d=30 < 40
        ("Click(box=(500,500))", "Click(box=(560,500))", 0.5),  # 40 <= d=60 < 80
        ("Click(box=(500,500))", "Click(box=(590,500))", 0.0),  # d=90
        ("LongPress(box=(100,100))", "LongPress(box=(100,130))", 1.0),
        ("Type(content='buy milk')", "Type(content='buy the milk')", 1.0),  # F1 0.8
        ("Type(content='hello')", "Type(content='goodbye')", 0.0),
        ("Finished(content='')", "Finished(content='')", 1.0),
        ("CallUser(content='42 degrees')", "CallUser(content='it is 42 degrees')", 1.0),
        ("Launch(app='Settings')", "Launch(app='settings')", 1.0),
        ("Launch(app='Shop')", "Launch(app='settings')", 0.0),
        ("PressBack()", "PressBack()", 1.0),
        ("Scroll(start=(500,800),end=(500,200),direction='up')", "Scroll(start=(500,810),end=(500,220),direction='up')", 1.5),
        ("Scroll(start=(500,800),end=(500,600),direction='up')", "Scroll(start=(500,810),end=(500,220),direction='up')", 1.0),
        ("Scroll(start=(100,100),end=(100,50),direction='up')", "Scroll(start=(500,810),end=(500,220),direction='up')", 0.5),
        ("Scroll(start=(500,800),end=(500,200),direction='down')", "Scroll(start=(500,810),end=(500,220),direction='up')", 0.5),
        ("Scroll(start=(100,100),end=(100,50),direction='down')", "Scroll(start=(500,810),end=(500,220),direction='up')", 0.0),
        ("Drag(start=(100,100),end=(300,300))", "Drag(start=(100,120),end=(300,360))", 0.75),
    ],
)
def test_mobile_argument_credit(pred: str, ref: str, arg: float) -> None:
    r = NAV(nav(pred), {"action": ref}, P)
    assert r.terms["type"] == 1.0 and r.terms["arg"] == pytest.approx(arg)
    assert r.total == pytest.approx(0.1 + 0.9 * (1.0 + arg))


def test_wrong_type_earns_no_argument_credit() -> None:
    r = NAV(nav("LongPress(box=(500,500))"), {"action": "Click(box=(500,500))"}, P)
    assert r.terms == {"format": 1.0, "type": 0.0, "arg": 0.0, "action": 0.0}


def test_target_box_gives_full_credit_inside_a_large_element() -> None:
    ref = {"action": "Click(box=(500,500))", "target_box": [300, 450, 700, 550]}
    r = NAV(nav("Click(box=(650,500))"), ref, P)  # d=150 but inside the element
    assert r.terms["arg"] == 1.0


def test_tolerance_relaxes_over_training() -> None:
    relaxing = P.model_copy(update={"coord_relax_to": 2.0})
    ref = {"action": "Click(box=(560,500))"}
    assert NAV(nav("Click(box=(500,500))"), ref, relaxing, 0.0).terms["arg"] == 0.5
    assert NAV(nav("Click(box=(500,500))"), ref, relaxing, 1.0).terms["arg"] == 1.0


def test_web_actions_and_direction_only_scroll() -> None:
    assert WEB(nav("Scroll(direction='down')"), {"action": "Scroll(direction='down')"}, P).terms["arg"] == 1.5
    assert WEB(nav("Scroll(direction='up')"), {"action": "Scroll(direction='down')"}, P).terms["arg"] == 0.0
    assert WEB(nav("Hotkey(keys=['ctrl','c'])"), {"action": "Hotkey(keys=['c','ctrl'])"}, P).terms["arg"] == 1.0
    assert WEB(nav("Hover(box=(10,10))"), {"action": "Hover(box=(10,30))"}, P).terms["arg"] == 1.0


def test_illegal_action_on_platform_is_a_format_failure() -> None:
    r = NAV(nav("Hover(box=(10,10))"), {"action": "Click(box=(10,10))"}, P)  # Hover is web-only
    assert r.total == 0.0 and not r.parsed


def test_unparseable_action_of_the_right_type_earns_type_credit_only() -> None:
    ref = {"action": "Click(box=(178,150))"}
    r = NAV(nav("Click(box=(178,15000))"), ref, P)  # y outside the 0-1000 frame: does not parse
    assert not r.parsed
    assert r.terms == {"format": 0.0, "type": 1.0, "arg": 0.0, "action": 1.0}
    assert r.total == pytest.approx(0.9)
    wrong = NAV(nav("Finished(content='')"), ref, P)  # well formed, wrong type: format only
    assert wrong.total == pytest.approx(0.1) and wrong.total < r.total
    assert NAV(nav("LongPress(box=(1,15000))"), ref, P).total == 0.0  # another type: nothing
    assert NAV("Click(box=(178,15000))", ref, P).total == 0.0  # no <action> tag: nothing
    strict = P.model_copy(update={"unparsed_type_credit": False})
    assert NAV(nav("Click(box=(178,15000))"), ref, strict).total == 0.0  # the reports' rule


def test_bad_reference_raises() -> None:
    with pytest.raises(ValueError):
        NAV(nav("Wait()"), {"action": "Teleport()"}, P)


@settings(max_examples=150, deadline=None)
@given(st.text(max_size=120))
def test_navigation_reward_never_raises_on_model_output(text: str) -> None:
    r = NAV(text, {"action": "Click(box=(500,500))"}, P)
    assert 0.0 <= r.total <= P.format_weight + P.task_weight * 2.5


def test_score_batch_checks_lengths() -> None:
    out = score_batch(grounding_reward, ["[1,1]", "[-1,-1]"], [{"box": [0, 0, 5, 5]}, {"box": None}], P)
    assert [r.total for r in out] == [1.0, 1.0]
    with pytest.raises(ValueError, match="2 completions but 1 references"):
        score_batch(grounding_reward, ["a", "b"], [{"box": None}], P)


# ---- text and online

def test_token_f1_mixed_languages() -> None:
    assert token_f1("打开设置", "打开 设置") == 1.0
    assert token_f1("Hello, world!", "hello world") == 1.0
    assert token_f1("abc", "") == 0.0


def test_trajectory_rewards() -> None:
    p = OnlineRewardSpec(completion=1.0, eta=0.5, invalid_penalty=0.25)
    assert trajectory_rewards([True, True], [5, 10], [0, 0], p) == [1.0, 0.5]
    assert trajectory_rewards([False, False], [5, 10], [1, 0], p) == [-0.25, 0.0]
    with pytest.raises(ValueError):
        trajectory_rewards([True], [0], [0], p)
    with pytest.raises(ValueError):
        trajectory_rewards([True, False], [1], [0], p)
