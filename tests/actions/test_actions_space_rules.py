"""Action types, their invariants, and the mobile / web platform rules."""

from __future__ import annotations


import pytest
from pydantic import ValidationError

from venus_core.actions import (
    ACTION_TYPES,
    MOBILE,
    WEB,
    ActionParseError,
    ActionSpace,
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
    validate_action,
)
from venus_core.config.registry import ACTION_SPACES

TABLE_8 = [
    "Click",
    "Drag",
    "Scroll",
    "Type",
    "Launch",
    "Wait",
    "Finished",
    "CallUser",
    "LongPress",
    "PressBack",
    "PressHome",
    "PressEnter",
    "PressRecent",
    "Hover",
    "DoubleClick",
    "Hotkey",
]


def test_action_types_are_exactly_table_8() -> None:
    assert list(ACTION_TYPES) == TABLE_8
    for name, cls in ACTION_TYPES.items():
        assert cls.NAME == name


def test_actions_are_frozen_hashable_and_typed_equal() -> None:
    a = Click(box=(500, 300))
    with pytest.raises(ValidationError):
        a.box = (1, 2)  # type: ignore[misc]
    assert a == Click(box=(500, 300)) and hash(a) == hash(Click(box=(500, 300)))
    assert Click(box=(1, 2)) != Hover(box=(1, 2))
    assert {Wait(), Wait(), PressBack()} == {Wait(), PressBack()}


@pytest.mark.parametrize(
    "build",
    [
        lambda: Click(box=(1001, 0)),
        lambda: Click(box=(-1, 0)),
        lambda: Click(box=(1.5, 2)),  # floats are rounded by the parser, never by the model
        lambda: Click(box=("1", 2)),
        lambda: Click(box=(1, 2, 3)),
        lambda: Click(),
        lambda: Click(box=(1, 2), extra=1),
        lambda: Launch(),
        lambda: Launch(app="a", url="b"),
        lambda: Launch(app="  "),
        lambda: Scroll(direction="sideways"),
        lambda: Scroll(direction="up", end=(1, 2)),
        lambda: Hotkey(keys=()),
        lambda: Hotkey(keys=("ctrl", "alt", "shift", "t")),
        lambda: Hotkey(keys=("ctrl", "ctrl")),
        lambda: Hotkey(keys=(" ",)),
        lambda: Type(content="x" * 2001),
        lambda: Type(),
        lambda: CallUser(),
    ],
)
def test_invalid_actions_are_rejected(build) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError):
        build()


def test_valid_edge_actions() -> None:
    assert Hotkey(keys=["ctrl", "shift", "t"]).keys == ("ctrl", "shift", "t")
    assert Finished().content == ""
    assert Scroll(direction="down").start is None
    assert Click(box=(0, 1000)).box == (0, 1000)


def test_registry_holds_both_rule_sets() -> None:
    # Registries load only their own kind's plugins, so this reads the action spaces alone.
    assert {"mobile", "web"} <= set(ACTION_SPACES.names())
    assert ACTION_SPACES.get("mobile") is MOBILE and ACTION_SPACES.get("web") is WEB
    assert isinstance(MOBILE, ActionSpace)
    assert set(MOBILE.actions) == set(TABLE_8) - {"Hover", "DoubleClick", "Hotkey"}
    assert set(WEB.actions) == set(TABLE_8) - {"PressBack", "PressHome", "PressRecent"}
    assert MOBILE.allows("PressEnter") and WEB.allows("PressEnter")
    assert not MOBILE.allows("Hover") and not WEB.allows("PressHome")


BOTH = [
    Click(box=(1, 2)),
    Drag(start=(1, 2), end=(3, 4)),
    Scroll(start=(5, 6), end=(5, 1), direction="up"),
    Type(content="hi"),
    Wait(),
    Finished(),
    CallUser(content="which one?"),
    LongPress(box=(1, 2)),
    PressEnter(),
]


@pytest.mark.parametrize("action", BOTH, ids=lambda a: a.NAME)
def test_shared_actions_pass_on_both_platforms(action) -> None:  # type: ignore[no-untyped-def]
    validate_action(action, "mobile")
    validate_action(action, "web")


@pytest.mark.parametrize(
    ("action", "platform", "rule"),
    [
        (Hover(box=(1, 2)), "mobile", "web-only action"),
        (DoubleClick(box=(1, 2)), "mobile", "web-only action"),
        (Hotkey(keys=("ctrl", "c")), "mobile", "web-only action"),
        (PressBack(), "web", "mobile-only action"),
        (PressHome(), "web", "mobile-only action"),
        (PressRecent(), "web", "mobile-only action"),
        (Launch(url="https://example.com"), "mobile", "mobile Launch takes app"),
        (Launch(app="Settings"), "web", "web Launch takes url"),
        (Scroll(direction="up"), "mobile", "mobile Scroll needs start and end"),
        (Scroll(start=(1, 2), direction="up"), "mobile", "mobile Scroll needs start and end"),
    ],
)
def test_platform_rules_name_the_failed_rule(action, platform, rule) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ActionValidationError) as info:
        validate_action(action, platform)
    assert info.value.rule == rule and info.value.platform == platform
    assert rule in str(info.value) and action.NAME in str(info.value)
    assert isinstance(info.value, ActionParseError)


def test_platform_specific_actions_pass_where_allowed() -> None:
    for a in (
        Hover(box=(1, 2)),
        DoubleClick(box=(1, 2)),
        Hotkey(keys=("ctrl", "c")),
        Launch(url="https://example.com"),
        Scroll(direction="up"),
        Scroll(start=(1, 2), direction="left"),
    ):
        validate_action(a, "web")
    for a in (PressBack(), PressHome(), PressRecent(), Launch(app="Settings")):
        validate_action(a, "mobile")


def test_parse_applies_platform_rules() -> None:
    with pytest.raises(ActionValidationError, match="web-only"):
        parse_action("Hover(box=(1,2))", "mobile")
    assert parse_action("Hover(box=(1,2))", "web") == Hover(box=(1, 2))
    with pytest.raises(ActionValidationError, match="start and end"):
        parse_action("Scroll(direction='down')")
    assert parse_action("Scroll(direction='down')", "web") == Scroll(direction="down")


def test_unknown_platform_is_a_caller_error() -> None:
    with pytest.raises(ValueError, match="unknown platform 'desktop'") as info:
        validate_action(Wait(), "desktop")  # type: ignore[arg-type]
    assert not isinstance(info.value, ActionParseError)
    with pytest.raises(ValueError, match="unknown platform"):
        parse_action("Wait()", "tv")  # type: ignore[arg-type]


def test_validate_rejects_non_actions() -> None:
    with pytest.raises(ActionValidationError, match="not an action"):
        MOBILE.validate("Click(box=(1,2))")  # type: ignore[arg-type]
