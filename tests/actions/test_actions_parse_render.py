"""Canonical rendering and the action parser: every action, variants, odd quoting, errors."""

from __future__ import annotations

import pytest

from venus_core.actions import (
    MAX_ACTION_CHARS,
    ActionParseError,
    ActionValidationError,
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    Wait,
    parse_action,
    render_action,
)

CANONICAL = [
    (Click(box=(500, 300)), "Click(box=(500,300))", "mobile"),
    (Drag(start=(10, 20), end=(30, 40)), "Drag(start=(10,20),end=(30,40))", "mobile"),
    (
        Scroll(start=(500, 700), end=(500, 300), direction="up"),
        "Scroll(start=(500,700),end=(500,300),direction='up')",
        "mobile",
    ),
    (Scroll(direction="down"), "Scroll(direction='down')", "web"),
    (Scroll(start=(5, 6), direction="left"), "Scroll(start=(5,6),direction='left')", "web"),
    (Type(content="it's, (ok)"), "Type(content='it\\'s, (ok)')", "mobile"),
    (Launch(app="Settings"), "Launch(app='Settings')", "mobile"),
    (Launch(url="https://a.b/c?d=1"), "Launch(url='https://a.b/c?d=1')", "web"),
    (Wait(), "Wait()", "mobile"),
    (Finished(), "Finished(content='')", "mobile"),
    (Finished(content="42 °C"), "Finished(content='42 °C')", "mobile"),
    (CallUser(content="Which card?"), "CallUser(content='Which card?')", "mobile"),
    (LongPress(box=(0, 1000)), "LongPress(box=(0,1000))", "mobile"),
    (PressBack(), "PressBack()", "mobile"),
    (PressHome(), "PressHome()", "mobile"),
    (PressEnter(), "PressEnter()", "mobile"),
    (PressEnter(), "PressEnter()", "web"),
    (PressRecent(), "PressRecent()", "mobile"),
    (Hover(box=(1, 2)), "Hover(box=(1,2))", "web"),
    (DoubleClick(box=(3, 4)), "DoubleClick(box=(3,4))", "web"),
    (Hotkey(keys=("ctrl", "c")), "Hotkey(keys=['ctrl','c'])", "web"),
    (Hotkey(keys=("ctrl", "shift", "t")), "Hotkey(keys=['ctrl','shift','t'])", "web"),
]


@pytest.mark.parametrize(("action", "text", "platform"), CANONICAL, ids=lambda v: str(v)[:30])
def test_every_action_renders_canonically_and_parses_back(action, text, platform) -> None:  # type: ignore[no-untyped-def]
    assert render_action(action) == text
    assert parse_action(text, platform) == action


@pytest.mark.parametrize(
    ("text", "expected", "platform"),
    [
        ("  Click( box = ( 500 , 300 ) )\n", Click(box=(500, 300)), "mobile"),
        ("Click(box=[500,300])", Click(box=(500, 300)), "mobile"),
        ("Click((500,300))", Click(box=(500, 300)), "mobile"),
        ("Click(500, 300)", Click(box=(500, 300)), "mobile"),
        ("Click(box=(100,200,300,400))", Click(box=(200, 300)), "mobile"),
        ("Click(box=[100, 201, 300, 400])", Click(box=(200, 301)), "mobile"),  # 300.5 -> 301
        ("Click(100,200,300,400)", Click(box=(200, 300)), "mobile"),
        ("Click(box=(499.5, 300.49))", Click(box=(500, 300)), "mobile"),
        ("Click(box=(+1, 0.0))", Click(box=(1, 0)), "mobile"),
        ("LongPress(box=(1000.0,1000))", LongPress(box=(1000, 1000)), "mobile"),
        ('Type(content="say \\"hi\\"")', Type(content='say "hi"'), "mobile"),
        ('Type("hello")', Type(content="hello"), "mobile"),
        ("Type(content='a' 'b')", Type(content="ab"), "mobile"),
        ("Drag((1,2),(3,4))", Drag(start=(1, 2), end=(3, 4)), "mobile"),
        ("Drag((1,2),end=[3,4])", Drag(start=(1, 2), end=(3, 4)), "mobile"),
        ("Scroll((5,9),(5,1),'up')", Scroll(start=(5, 9), end=(5, 1), direction="up"), "mobile"),
        (
            "Scroll(direction='up', start=(5,9), end=(5,1))",
            Scroll(start=(5, 9), end=(5, 1), direction="up"),
            "mobile",
        ),
        ("Scroll('down')", Scroll(direction="down"), "web"),
        ('Launch("Chrome")', Launch(app="Chrome"), "mobile"),
        ("Launch('https://x.org')", Launch(url="https://x.org"), "web"),
        ("Finished()", Finished(content=""), "mobile"),
        ("Finished('done')", Finished(content="done"), "mobile"),
        ('Hotkey(keys=("ctrl","v"))', Hotkey(keys=("ctrl", "v")), "web"),
        ("Hotkey('ctrl','v')", Hotkey(keys=("ctrl", "v")), "web"),
        ("Hotkey(keys='ctrl+v')", Hotkey(keys=("ctrl", "v")), "web"),
        ("Hotkey(keys='+')", Hotkey(keys=("+",)), "web"),
        ("Hotkey(['enter'])", Hotkey(keys=("enter",)), "web"),
        # lenient fallback: unescaped quotes of the same kind inside a one-string action
        ("Type(content='it's')", Type(content="it's"), "mobile"),
        ('CallUser(content="the "blue" one?")', CallUser(content='the "blue" one?'), "mobile"),
        ("Finished('it's 5')", Finished(content="it's 5"), "mobile"),
    ],
)
def test_accepted_variants(text, expected, platform) -> None:  # type: ignore[no-untyped-def]
    assert parse_action(text, platform) == expected


ODD_CONTENT = [
    "it's",
    'say "hi"',
    "a, b)",
    "(nested (parens))",
    "line1\nline2\r\n",
    "tab\there",
    "back\\slash",
    "\\n is not a newline",
    "ends with backslash\\",
    "'",
    '"',
    "''''",
    "",
    "搜索 北京天气",
    "emoji 🎉👍🏽 and 👨‍👩‍👧",
    "\x00\x07\x1b",
    "\u2028\u2029\x85",
    "=,=)(",
    "Click(box=(1,2))",
    "</action>",
]


@pytest.mark.parametrize("content", ODD_CONTENT)
def test_odd_quoting_round_trips(content: str) -> None:
    for action in (Type(content=content), Finished(content=content), CallUser(content=content)):
        text = render_action(action)
        assert "\n" not in text and "\r" not in text
        assert parse_action(text) == action
        assert render_action(parse_action(text)) == text


def test_printable_unicode_stays_literal() -> None:
    assert render_action(Type(content="北京 🎉")) == "Type(content='北京 🎉')"
    assert render_action(Type(content="a\nb")) == "Type(content='a\\nb')"
    assert render_action(Type(content="\x00")) == "Type(content='\\x00')"
    assert render_action(Type(content="\\")) == "Type(content='\\\\')"


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "empty"),
        ("   ", "empty"),
        ("click(box=(1,2))", "unknown action 'click'"),
        ("Tap(box=(1,2))", "unknown action"),
        ("Click", "expected a single call"),
        ("Click(box=(1,2)) Click(box=(3,4))", "not a call expression"),
        ("Click(box=(1,2)); Wait()", "not a call expression"),
        ("Click(box=(1001,5))", "out of range"),
        ("Click(box=(5,-1))", "out of range"),
        ("Click(box=(1000.4,5))", "out of range"),
        ("Click(box=(-1,-1))", "out of range"),
        ("Click(box=(1,2,3))", "2 numbers"),
        ("Click(box=(1,))", "2 numbers"),
        ("Click(box='(1,2)')", "expected a point"),
        ("Click(box=(x,2))", "expected a number"),
        ("Click(box=(True,2))", "expected a number"),
        ("Click(box=(1j,2))", "expected a number"),
        ("Click(box=(1e999,2))", "not finite"),
        ("Click(box=(1,2), x=3)", "unknown argument 'x'"),
        ("Click((1,2), box=(1,2))", "given twice"),
        ("Click(box=(1,2), box=(1,2))", "given twice"),
        ("Type(content='\\ud83d')", "Type.content"),  # a lone surrogate cannot be text
        ("Click(*p)", "*args"),
        ("Click(**kw)", "**kwargs"),
        ("Click()", "box"),
        ("Wait(1)", "unexpected positional"),
        ("Type(content=b'x')", "string literal"),
        ("Type(content=f'{x}')", "string literal"),
        ("Type(content=1)", "string literal"),
        ("Type('a', 'b')", "unexpected positional"),
        ("Scroll(start=(1,2),end=(3,4),direction='UP')", "direction must be one of"),
        ("Scroll(start=(1,2),end=(3,4),direction='diagonal')", "direction must be one of"),
        ("Launch(app='a', url='b')", "exactly one of app= or url="),
        ("Launch('a', 'b')", "one positional"),
        ("Hotkey(keys=['a','b','c','d'])", "at most 3"),
        ("Hotkey(keys=[])", "at least 1"),
        ("Hotkey(keys=['ctrl','ctrl'])", "repeated key"),
        ("obj.Click(box=(1,2))", "expected a single call"),
        ("Click(box=(1,2))(3)", "expected a single call"),
        ("Click(box=(" + "9" * 5000 + ",1))", "not a call expression"),
        ("Type(" + "(" * 500 + ")" * 500 + ")", "not a call expression"),
        ("Type(content='unterminated)", "not a call expression"),
    ],
)
def test_parse_errors_say_why(text: str, message: str) -> None:
    with pytest.raises(ActionParseError, match=r"(?i)" + __import__("re").escape(message)):
        parse_action(text, "web" if "Hotkey" in text else "mobile")


def test_rule_errors_are_validation_errors() -> None:
    with pytest.raises(ActionValidationError):
        parse_action("PressHome()", "web")


def test_input_length_is_capped_with_a_clear_error() -> None:
    with pytest.raises(ActionParseError, match="too long"):
        parse_action("Type(content='" + "a" * MAX_ACTION_CHARS + "')")
    with pytest.raises(ActionParseError, match="expected action text"):
        parse_action(None)  # type: ignore[arg-type]


def test_pathological_expressions_become_parse_errors() -> None:
    for text in ("1+" * 15000 + "1", "-" * 20000 + "1", "[" * 10000, "Click(box=(" + "(" * 300):
        with pytest.raises(ActionParseError):
            parse_action(text)


def test_render_rejects_non_actions() -> None:
    with pytest.raises(TypeError):
        render_action("Click(box=(1,2))")  # type: ignore[arg-type]
