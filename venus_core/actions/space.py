"""The action types of the unified action space (UI-Venus-1.5, Table 8).

Why: every part of the platform (data import, synthetic worlds, rewards, environments, evaluation)
talks about actions. If each kept its own idea of "a click", the same step would be scored, executed
and rendered differently. So there is one typed model per action, immutable and hashable, whose
fields are exactly the arguments of the textual form the model emits (`Click(box=(x,y))` ...).

Coordinates are integers in the 0–1000 normalized frame used by UI-Venus-1.5 / Qwen3-VL; an action
can only be built with in-range integer coordinates (pixel frames live in `coords`).

Invariants that hold on every platform live here (Launch takes exactly one of app/url, Scroll's
end needs a start, Hotkey has 1–3 distinct keys); platform rules (which actions a phone or a
browser accepts) live in `rules`. Departures from the paper: none in the types themselves; the
paper does not give `Finished` a default, we default its content to "" because most tasks finish
without an answer. Hotkey keys must be distinct (a repeated key is not a chord).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, model_validator

Point = tuple[int, int]
"""A point (x, y), integers in the 0–1000 normalized frame."""

Platform = Literal["mobile", "web"]
PLATFORMS: tuple[str, ...] = ("mobile", "web")

Direction = Literal["up", "down", "left", "right"]
DIRECTIONS: tuple[str, ...] = ("up", "down", "left", "right")

COORD_MAX = 1000
"""Largest coordinate of the normalized frame (inclusive)."""

MAX_CONTENT_CHARS = 2000
"""Longest free-text argument (Type / Finished / CallUser content, app, url): keeps every rendered
action well under the parser's input cap, so that parse(render(a)) == a always holds."""

MAX_HOTKEY_KEYS = 3

_Coord = Annotated[int, Field(ge=0, le=COORD_MAX, strict=True)]
_PointField = tuple[_Coord, _Coord]
_Text = Annotated[str, Field(max_length=MAX_CONTENT_CHARS, strict=True)]
_Key = Annotated[
    str, StringConstraints(min_length=1, max_length=32, strip_whitespace=False), Field(strict=True)
]

ParamKind = Literal["point", "text", "direction", "keys"]


class ActionParseError(ValueError):
    """Text is not a valid action / navigation step / grounding point; the message says why."""


class ActionValidationError(ActionParseError):
    """A well-formed action breaks a platform rule; `rule` names the rule that failed."""

    def __init__(self, platform: str, rule: str, detail: str) -> None:
        self.platform = platform
        self.rule = rule
        self.detail = detail
        super().__init__(f"{platform} action space, rule '{rule}': {detail}")


class Action(BaseModel):
    """Base of all actions: frozen, hashable, no extra fields.

    `NAME` is the function name of the textual form; `PARAMS` lists the arguments in their
    documented (positional) order with their kind, which drives parsing and rendering.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    NAME: ClassVar[str] = ""
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = ()


class Click(Action):
    NAME: ClassVar[str] = "Click"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("box", "point"),)
    box: _PointField


class Drag(Action):
    NAME: ClassVar[str] = "Drag"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("start", "point"), ("end", "point"))
    start: _PointField
    end: _PointField


class Scroll(Action):
    """Scroll. On mobile a swipe from `start` to `end`; on web a direction is enough."""

    NAME: ClassVar[str] = "Scroll"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (
        ("start", "point"),
        ("end", "point"),
        ("direction", "direction"),
    )
    direction: Direction
    start: _PointField | None = None
    end: _PointField | None = None

    @model_validator(mode="after")
    def _end_needs_start(self) -> Scroll:
        if self.end is not None and self.start is None:
            raise ValueError("Scroll: end given without start")
        return self


class Type(Action):
    NAME: ClassVar[str] = "Type"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("content", "text"),)
    content: _Text


class Launch(Action):
    """Open an app (mobile, `app=`) or a URL (web, `url=`): exactly one of the two, non-empty."""

    NAME: ClassVar[str] = "Launch"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("app", "text"), ("url", "text"))
    app: _Text | None = None
    url: _Text | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> Launch:
        given = [n for n in ("app", "url") if getattr(self, n) is not None]
        if len(given) != 1:
            raise ValueError(f"Launch takes exactly one of app= or url=, got {given or 'neither'}")
        if not getattr(self, given[0]).strip():
            raise ValueError(f"Launch: {given[0]} is empty")
        return self


class Wait(Action):
    NAME: ClassVar[str] = "Wait"


class Finished(Action):
    NAME: ClassVar[str] = "Finished"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("content", "text"),)
    content: _Text = ""


class CallUser(Action):
    NAME: ClassVar[str] = "CallUser"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("content", "text"),)
    content: _Text


class LongPress(Action):
    NAME: ClassVar[str] = "LongPress"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("box", "point"),)
    box: _PointField


class PressBack(Action):
    NAME: ClassVar[str] = "PressBack"


class PressHome(Action):
    NAME: ClassVar[str] = "PressHome"


class PressEnter(Action):
    NAME: ClassVar[str] = "PressEnter"


class PressRecent(Action):
    NAME: ClassVar[str] = "PressRecent"


class Hover(Action):
    NAME: ClassVar[str] = "Hover"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("box", "point"),)
    box: _PointField


class DoubleClick(Action):
    NAME: ClassVar[str] = "DoubleClick"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("box", "point"),)
    box: _PointField


class Hotkey(Action):
    """A key chord, e.g. keys=('ctrl', 'c'); 1 to 3 keys (Table 8), each non-blank, no repeats."""

    NAME: ClassVar[str] = "Hotkey"
    PARAMS: ClassVar[tuple[tuple[str, ParamKind], ...]] = (("keys", "keys"),)
    keys: Annotated[tuple[_Key, ...], Field(min_length=1, max_length=MAX_HOTKEY_KEYS)]

    @model_validator(mode="after")
    def _sane_keys(self) -> Hotkey:
        for k in self.keys:
            if not k.strip():
                raise ValueError("Hotkey: blank key")
        if len(set(self.keys)) != len(self.keys):
            raise ValueError(f"Hotkey: repeated key in {list(self.keys)}")
        return self


ACTION_TYPES: dict[str, type[Action]] = {
    cls.NAME: cls
    for cls in (
        Click,
        Drag,
        Scroll,
        Type,
        Launch,
        Wait,
        Finished,
        CallUser,
        LongPress,
        PressBack,
        PressHome,
        PressEnter,
        PressRecent,
        Hover,
        DoubleClick,
        Hotkey,
    )
}
"""Function name -> action class, in Table 8 order."""
