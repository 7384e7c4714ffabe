"""Property tests: round trips, canonical idempotence, and 'only ActionParseError' on any text."""

from __future__ import annotations

from _action_strategies import mobile_actions, platform_actions, points, texts, web_actions
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from venus_core.actions import (
    ACTION_TYPES,
    REFUSAL,
    Action,
    ActionParseError,
    NavStep,
    parse_action,
    parse_navigation,
    parse_point,
    render_action,
    render_history,
    render_navigation,
    render_point,
)

# thoughts without line breaks (str.splitlines separators), so that lines can be counted
ONE_LINE = st.text(
    st.characters(exclude_characters="\r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"), max_size=10
).map(str.strip)
FAST = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@FAST
@given(platform_actions)
def test_parse_render_round_trip(pa: tuple[str, Action]) -> None:
    platform, action = pa
    text = render_action(action)
    back = parse_action(text, platform)  # type: ignore[arg-type]
    assert back == action and type(back) is type(action)
    assert render_action(back) == text


@FAST
@given(st.one_of(mobile_actions, web_actions))
def test_every_generated_action_type_is_covered(action: Action) -> None:
    assert type(action) is ACTION_TYPES[action.NAME]
    text = render_action(action)
    assert text.startswith(action.NAME + "(") and text.endswith(")")
    assert "\n" not in text and "\r" not in text  # one line: safe inside history lines


def noisy_spelling(action: Action, ws: str) -> str:
    """Another valid spelling: spaces, list points, Python repr strings, keywords reversed."""
    parts = []
    for name, kind in type(action).PARAMS:
        v = getattr(action, name)
        if v is None:
            continue
        if kind == "point":
            arg = f"[{v[0]},{ws}{v[1]}]"
        elif kind == "keys":
            arg = repr(list(v))
        else:
            arg = repr(v)
        parts.append(f"{name}{ws}={ws}{arg}")
    return f"{ws}{action.NAME}({ws}{(',' + ws).join(reversed(parts))}{ws}){ws}"


@FAST
@given(platform_actions, st.sampled_from(["", " ", "\n", "\t", "  \n "]))
def test_parse_is_canonicalising_and_idempotent(pa: tuple[str, Action], ws: str) -> None:
    """A noisy spelling parses to the same action; its canonical text is a fixpoint."""
    platform, action = pa
    canon = render_action(action)
    parsed = parse_action(noisy_spelling(action, ws), platform)  # type: ignore[arg-type]
    assert parsed == action
    assert render_action(parsed) == canon
    assert render_action(parse_action(canon, platform)) == canon  # type: ignore[arg-type]


@FAST
@given(points)
def test_list_and_float_spellings_canonicalise(p: tuple[int, int]) -> None:
    x, y = p
    for text in (
        f"Click(box=[{x}, {y}])",
        f"Click(box=({float(x)},{y}.0))",
        f"Click({x},{y})",
        f"Click(box=({x},{y},{x},{y}))",
    ):
        assert render_action(parse_action(text)) == f"Click(box=({x},{y}))"


@FAST
@given(texts)
def test_type_content_round_trips_through_double_quotes(content: str) -> None:
    # a model emitting Python's repr (double quotes when the text holds a single quote) parses too
    assert parse_action(f"Type(content={content!r})").content == content  # type: ignore[attr-defined]


@FAST
@given(
    st.text(max_size=60).filter(lambda s: not any(t in s for t in ("<", ">"))),
    platform_actions,
    st.text(max_size=60).filter(lambda s: not any(t in s for t in ("<", ">"))),
)
def test_navigation_round_trip(think: str, pa: tuple[str, Action], conclusion: str) -> None:
    platform, action = pa
    if "</action>" in render_action(action):
        return
    step = NavStep(think=think, action=action, conclusion=conclusion)
    text = render_navigation(step)
    assert parse_navigation(text, platform) == step  # type: ignore[arg-type]
    assert render_navigation(parse_navigation(text, platform)) == text  # type: ignore[arg-type]


@FAST
@given(st.lists(st.tuples(ONE_LINE, mobile_actions), max_size=12), st.integers(0, 8))
def test_history_numbering(steps: list[tuple[str, Action]], last: int) -> None:
    text = render_history(steps, last=last)
    lines = text.split("\n") if text else []
    shown = min(last, len(steps))
    # rendered actions are one line (newlines escaped), so lines are exactly the steps shown
    assert len(lines) == shown
    for k, line in enumerate(lines):
        i = len(steps) - shown + k
        think, action = steps[i]
        assert (
            line == f"Step {i + 1}: <think>{think}</think><action>{render_action(action)}</action>"
        )


@FAST
@given(st.one_of(points, st.just(REFUSAL)))
def test_point_round_trip(p: object) -> None:
    assert parse_point(render_point(p)) == p  # type: ignore[arg-type]


# Arbitrary text, plus text built from the grammar's own tokens (reaches deeper parser paths).
TOKENS = st.sampled_from(
    [
        "Click",
        "Type",
        "Scroll",
        "Hotkey",
        "Launch",
        "(",
        ")",
        "[",
        "]",
        ",",
        "=",
        "'",
        '"',
        "\\",
        "box",
        "content",
        "keys",
        "direction",
        "1",
        "-1",
        "1000",
        "1e9",
        "0.5",
        " ",
        "\n",
        "up",
        "<think>",
        "</think>",
        "<action>",
        "</action>",
        "<conclusion>",
        "</conclusion>",
        "*",
        "**",
        "lambda",
        "{",
        "}",
        "f'",
        "b'",
        "\x00",
        "\ud800",
        "'''",
        "#",
        ":=",
    ]
)
ANY_TEXT = st.one_of(st.text(max_size=200), st.lists(TOKENS, max_size=40).map("".join))


@settings(max_examples=300, deadline=None)
@given(ANY_TEXT, st.sampled_from(["mobile", "web"]))
def test_arbitrary_text_only_raises_parse_errors(text: str, platform: str) -> None:
    for parse in (
        lambda t: parse_action(t, platform),  # type: ignore[arg-type]
        lambda t: parse_navigation(t, platform),  # type: ignore[arg-type]
        parse_point,
    ):
        try:
            result = parse(text)
        except ActionParseError:
            continue
        assert result is not None
