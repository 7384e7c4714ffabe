"""Fuzz the action parser, the navigation-output parser and the grounding-point parser.

Inputs: arbitrary unicode text; text built from the grammar's own tokens; canonical renderings of
valid actions with hostile edits; call-shaped text with hostile literals (NaN, inf, 5,000-digit
numbers, deep nesting). Documented errors: `ActionParseError` (and its subclass
`ActionValidationError`). An accepted action must be a fixpoint of render → parse, and an accepted
navigation answer must render back to an answer that parses to the same step.
"""

from __future__ import annotations

import pytest
from fuzz_helpers import BUDGETS, DEEP_JSON, HUGE_INT_TEXT, Budget, fuzz, mutated_text
from hypothesis import strategies as st

from venus_core.actions import (
    ActionParseError,
    ActionValidationError,
    CallUser,
    Click,
    Drag,
    Hotkey,
    Launch,
    NavStep,
    Scroll,
    Type,
    parse_action,
    parse_navigation,
    parse_point,
    render_action,
    render_navigation,
    render_point,
)

PLATFORMS = st.sampled_from(["mobile", "web"])
coord = st.integers(0, 1000)
point = st.tuples(coord, coord)
content = st.text(max_size=30)
VALID = st.one_of(
    st.builds(Click, box=point), st.builds(Drag, start=point, end=point),
    st.builds(Scroll, start=point, end=point, direction=st.sampled_from(["up", "down", "left", "right"])),
    st.builds(Type, content=content), st.builds(CallUser, content=content),
    st.builds(Launch, app=st.text(min_size=1, max_size=10).filter(str.strip)),
    st.builds(Hotkey, keys=st.lists(st.sampled_from(["ctrl", "c", "shift", "tab"]), min_size=1, max_size=3,
                                    unique=True).map(tuple)),
).map(render_action)
NAMES = st.sampled_from(["Click", "Type", "Scroll", "Drag", "Hotkey", "Launch", "Wait", "Finished",
                         "LongPress", "Hover", "DoubleClick", "PressBack", "CallUser", "click", "eval"])
LITERALS = st.sampled_from([
    "nan", "float('nan')", "1e999", "-1e999", HUGE_INT_TEXT, "0x10", "1_000", "True", "None", "...",
    "(1,)", "[" * 200 + "]" * 200, DEEP_JSON, "'a'*10**9", "b'x'", "f'{1}'", "lambda: 0", "{1: 2}",
    "(500,300)", "[500,300]", "'up'", "'ctrl+c'", "-0", "+5", "1000.5", "-1", "--1", "~1",
])
CALLS = st.builds(
    lambda name, args: f"{name}({', '.join(args)})", NAMES,
    st.lists(st.one_of(LITERALS, st.builds(lambda k, v: f"{k}={v}", st.sampled_from(
        ["box", "start", "end", "direction", "content", "keys", "app", "url", "x"]), LITERALS)), max_size=4),
)
TOKENS = st.sampled_from(["(", ")", "[", "]", ",", "=", "'", '"', "\\", "box", "content", "Click", "Type",
                          "1", "-1", "1000", " ", "\n", "\x00", "\ud800", "'''", "*", "**", "#", ":="])
ACTION_TEXT = st.one_of(
    st.text(max_size=200), st.lists(TOKENS, max_size=40).map("".join), CALLS,
    VALID.flatmap(mutated_text), VALID,
)
DOCUMENTED = (ActionParseError,)


def check_action(args: tuple[str, str]) -> str:
    text, platform = args
    try:
        action = parse_action(text, platform)  # type: ignore[arg-type]
    except ActionValidationError:
        return "ActionValidationError"
    except ActionParseError:
        return "ActionParseError"
    canonical = render_action(action)
    assert parse_action(canonical, platform) == action  # type: ignore[arg-type]
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_action_parser(budget: Budget) -> None:
    tally = fuzz("action parser", st.tuples(ACTION_TEXT, PLATFORMS), check_action, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["ActionParseError"] > 0


THOUGHT = st.one_of(st.text(max_size=40), st.sampled_from(["<think>", "</action>", "x" * 20_000, "\x00"]))
NAV_TEXT = st.one_of(
    st.builds(lambda t, a, c: f"<think>{t}</think><action>{a}</action><conclusion>{c}</conclusion>",
              THOUGHT, ACTION_TEXT, THOUGHT),
    st.builds(lambda t, a, c: f"<think>{t}</think><action>{a}</action><conclusion>{c}</conclusion>",
              THOUGHT, VALID, THOUGHT).flatmap(mutated_text),
    st.text(max_size=200),
    st.lists(st.sampled_from(["<think>", "</think>", "<action>", "</action>", "<conclusion>",
                              "</conclusion>", "Click(box=(1,2))", " ", "x"]), max_size=20).map("".join),
)


def check_navigation(args: tuple[str, str]) -> str:
    text, platform = args
    try:
        step = parse_navigation(text, platform)  # type: ignore[arg-type]
    except ActionParseError as exc:
        return type(exc).__name__
    assert isinstance(step, NavStep)
    assert parse_navigation(render_navigation(step), platform) == step  # type: ignore[arg-type]
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_navigation_output_parser(budget: Budget) -> None:
    tally = fuzz("navigation-output parser", st.tuples(NAV_TEXT, PLATFORMS), check_navigation, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["ActionParseError"] > 0


NUMBER_TEXT = st.one_of(st.integers(-5, 1005).map(str), st.floats(allow_nan=True).map(str), LITERALS,
                        st.sampled_from(["1e999", "9" * 400, ".5", "5.", "-.0", "+1"]))
POINT_TEXT = st.one_of(
    st.builds(lambda pre, nums, post, sq: f"{pre}{'[' if sq else '('}{','.join(nums)}{']' if sq else ')'}{post}",
              st.text(max_size=10), st.lists(NUMBER_TEXT, min_size=1, max_size=5), st.text(max_size=10),
              st.booleans()),
    point.map(lambda p: render_point(p)).flatmap(mutated_text),
    st.text(max_size=100),
)


def check_point(text: str) -> str:
    try:
        p = parse_point(text)
    except ActionParseError:
        return "ActionParseError"
    assert parse_point(render_point(p)) == p
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_grounding_point_parser(budget: Budget) -> None:
    tally = fuzz("grounding-point parser", POINT_TEXT, check_point, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["ActionParseError"] > 0


@pytest.mark.parametrize("sep", ["\x1c", "\x1d", "\x1e", "\x1f", "\x85", "\u2028", "\u3000"])
def test_point_numbers_around_unicode_whitespace(sep: str) -> None:
    """Found by atheris: the pattern's \\s matched U+001D, which float() refused (a bare ValueError)."""
    assert parse_point(f"[1{sep},{sep}2{sep}]") == (1, 2)
    with pytest.raises(ActionParseError):
        parse_point(f"teswe[0,-1{sep},2],-,4]")  # three numbers: no point
