"""Navigation answers, history lines and grounding points."""

from __future__ import annotations

import pytest

from venus_core.actions import (
    REFUSAL,
    ActionParseError,
    ActionValidationError,
    Click,
    Finished,
    Hover,
    NavStep,
    Refusal,
    Scroll,
    Type,
    Wait,
    parse_navigation,
    parse_point,
    render_history,
    render_navigation,
    render_point,
)


def test_navigation_renders_and_parses() -> None:
    step = NavStep(
        think="The search box is on top.",
        action=Click(box=(500, 80)),
        conclusion="Tapped the search box.",
    )
    text = render_navigation(step)
    assert text == (
        "<think>The search box is on top.</think><action>Click(box=(500,80))</action>"
        "<conclusion>Tapped the search box.</conclusion>"
    )
    assert parse_navigation(text) == step


def test_navigation_tolerates_whitespace_and_strips_thoughts() -> None:
    text = (
        '\n<think>\n  look for it\n</think>\n<action> Type(content="a\\nb") </action>\n'
        "<conclusion> typed </conclusion>\n"
    )
    step = parse_navigation(text)
    assert step == NavStep(think="look for it", action=Type(content="a\nb"), conclusion="typed")


def test_navigation_checks_the_platform() -> None:
    text = "<think>t</think><action>Hover(box=(1,2))</action><conclusion>c</conclusion>"
    assert parse_navigation(text, "web").action == Hover(box=(1, 2))
    with pytest.raises(ActionValidationError, match="web-only"):
        parse_navigation(text, "mobile")


def test_navigation_action_may_contain_angle_brackets() -> None:
    step = NavStep(think="t", action=Type(content="<b>x</b> </think>"), conclusion="c")
    assert parse_navigation(render_navigation(step)) == step


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "missing <think>"),
        ("Click(box=(1,2))", "missing <think>"),
        ("<think>t</think><action>Wait()</action>", "missing <conclusion>"),
        ("<action>Wait()</action><think>t</think><conclusion>c</conclusion>", "out of order"),
        (
            "I will tap. <think>t</think><action>Wait()</action><conclusion>c</conclusion>",
            "text outside",
        ),
        ("<think>t</think><action>Wait()</action><conclusion>c</conclusion> bye", "text outside"),
        ("<think>t</think>x<action>Wait()</action><conclusion>c</conclusion>", "text outside"),
        (
            "<think>t</think><action>Wait()</action><conclusion>c</conclusion><conclusion>d</conclusion>",
            "text outside",
        ),
        ("<think>t</think><action>Tap(1)</action><conclusion>c</conclusion>", "unknown action"),
        ("<think>t</think><action></action><conclusion>c</conclusion>", "empty action"),
        (
            "<think>a<action>b</think><action>Wait()</action><conclusion>c</conclusion>",
            "must not contain the tag <action>",
        ),
        (
            "<think>t</think><action>Wait()</action><conclusion>c" + "x" * 70000 + "</conclusion>",
            "too long",
        ),
    ],
)
def test_navigation_errors(text: str, message: str) -> None:
    with pytest.raises(ActionParseError, match=message):
        parse_navigation(text)


def test_navstep_rejects_tags_in_thoughts() -> None:
    with pytest.raises(ValueError, match="</think>"):
        NavStep(think="a</think>", action=Wait(), conclusion="c")
    with pytest.raises(ValueError, match="</action>"):
        NavStep(think="a", action=Type(content="</action>"), conclusion="c")


def test_history_numbers_over_the_whole_episode_and_keeps_last_5() -> None:
    steps = [(f"think {i}", Click(box=(i, i))) for i in range(1, 9)]
    lines = render_history(steps).split("\n")
    assert len(lines) == 5
    assert lines[0] == "Step 4: <think>think 4</think><action>Click(box=(4,4))</action>"
    assert lines[-1] == "Step 8: <think>think 8</think><action>Click(box=(8,8))</action>"
    assert [ln.split(":")[0] for ln in lines] == [f"Step {i}" for i in range(4, 9)]


def test_history_short_episode_last_zero_and_string_actions() -> None:
    assert render_history([]) == ""
    two = [("a", Wait()), ("b", "Scroll(start=(1,2),end=(1,1),direction='up')")]
    assert render_history(two) == (
        "Step 1: <think>a</think><action>Wait()</action>\n"
        "Step 2: <think>b</think><action>Scroll(start=(1,2),end=(1,1),direction='up')</action>"
    )
    assert render_history(two, last=0) == ""
    assert (
        render_history(two, last=1) == "Step 2: <think>b</think><action>"
        "Scroll(start=(1,2),end=(1,1),direction='up')</action>"
    )
    assert render_history([("x", Finished())] * 7, last=10).count("\n") == 6
    with pytest.raises(ValueError, match="last"):
        render_history(two, last=-1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("[500,300]", (500, 300)),
        (" [ 500 , 300 ] ", (500, 300)),
        ("(500,300)", (500, 300)),
        ("[100,200,300,400]", (200, 300)),
        ("[100,200],[300,400]", (200, 300)),
        ("[100,200], [301,400]", (201, 300)),  # 200.5 rounds half up
        ("[100,200] [300,400]", (200, 300)),
        ("The element is at [12.4, 99.5].", (12, 100)),
        ("I think it's here: (0, 1000) because...", (0, 1000)),
        ("Click(box=(500,300))", (500, 300)),
        ("step [1] then [250,750]", (250, 750)),
        ("[1,2,3] is not it, [4,5] is", (4, 5)),
        ("[10,20] and later [30,40,50,60]", (10, 20)),
        ("[10,20] then text [30,40]", (10, 20)),
        ("[-1,-1]", REFUSAL),
        ("Not on screen: [-1, -1]", REFUSAL),
        ("[-1.0,-1.0]", REFUSAL),
    ],
)
def test_parse_point_accepts(text: str, expected: object) -> None:
    assert parse_point(text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no point"),
        ("the button at the top", "no point"),
        ("[500]", "no point"),
        ("[1,2,3]", "no point"),
        ("[500,300)", "no point"),
        ("[1001,5]", "out of range"),
        ("[-1,5]", "out of range"),
        ("[-2,-2]", "out of range"),
        ("[5,5,2000,5]", "out of range"),
        ("[" + "9" * 400 + ",1]", "out of range"),
        ("[" + "1," * 5000, "no point"),
        ("x" * 20000, "too long"),
    ],
)
def test_parse_point_rejects(text: str, message: str) -> None:
    with pytest.raises(ActionParseError, match=message):
        parse_point(text)


def test_render_point() -> None:
    assert render_point((500, 300)) == "[500,300]"
    assert render_point(Refusal()) == "[-1,-1]"
    assert parse_point(render_point((0, 1000))) == (0, 1000)
    assert parse_point(render_point(REFUSAL)) == REFUSAL
    with pytest.raises(ValueError):
        render_point((1001, 0))
    with pytest.raises(ValueError):
        render_point((1.5, 2))  # type: ignore[arg-type]


def test_scroll_history_uses_canonical_action() -> None:
    line = render_history([("t", Scroll(direction="up"))])
    assert line == "Step 1: <think>t</think><action>Scroll(direction='up')</action>"
