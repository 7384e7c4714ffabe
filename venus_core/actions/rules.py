"""Platform rule sets: which actions a phone and a browser accept.

Why: the same action vocabulary is shared by the mobile and web agents (one merged checkpoint in
UI-Venus-1.5), but a phone has no hover and a browser has no Home button. A model that emits a
web-only action on a phone must be told so, with the rule that failed, because rewards
(R_format / the online "unparseable action" penalty) and environments need a precise reason.

The two rule sets are registered in `ACTION_SPACES` as "mobile" and "web"; the registered object is
an `ActionSpace` (`.actions` lists the allowed action names, `.validate(action)` checks one).

Choices the paper leaves open (stated here, tested in tests/actions):
- PressEnter is allowed on both platforms (submit a form / confirm input on both).
- LongPress and Drag are allowed on both (press-and-hold / drag-and-drop exist with a mouse too).
- Web Scroll may carry start/end (where the pointer is) but needs only a direction; mobile Scroll
  needs start and end (the swipe). Direction/start→end consistency is not enforced: datasets use
  both conventions (finger direction vs. content direction).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from venus_core.actions.space import (
    ACTION_TYPES,
    PLATFORMS,
    Action,
    ActionValidationError,
    Launch,
    Scroll,
)
from venus_core.config.registry import ACTION_SPACES

WEB_ONLY: frozenset[str] = frozenset({"Hover", "DoubleClick", "Hotkey"})
MOBILE_ONLY: frozenset[str] = frozenset({"PressBack", "PressHome", "PressRecent"})


@dataclass(frozen=True)
class Rule:
    """One named platform rule: `check` returns None when satisfied, else the failure detail."""

    name: str
    description: str
    check: Callable[[Action], str | None]


def _only_on(names: frozenset[str], where: str) -> Callable[[Action], str | None]:
    def check(a: Action) -> str | None:
        return f"{a.NAME} is allowed only on {where}" if a.NAME in names else None

    return check


def _launch_takes(field: str) -> Callable[[Action], str | None]:
    def check(a: Action) -> str | None:
        if isinstance(a, Launch) and getattr(a, field) is None:
            other = "url" if field == "app" else "app"
            return f"Launch must use {field}=, got {other}="
        return None

    return check


def _mobile_scroll(a: Action) -> str | None:
    if isinstance(a, Scroll) and (a.start is None or a.end is None):
        return "Scroll on mobile needs start=(x,y) and end=(x,y) (the swipe), not only a direction"
    return None


@dataclass(frozen=True)
class ActionSpace:
    """The rule set of one platform."""

    name: str
    description: str
    rules: tuple[Rule, ...]

    @property
    def actions(self) -> tuple[str, ...]:
        """Names of the actions this platform accepts (Table 8 order)."""
        banned = WEB_ONLY if self.name == "mobile" else MOBILE_ONLY
        return tuple(n for n in ACTION_TYPES if n not in banned)

    def allows(self, name: str) -> bool:
        return name in self.actions

    def validate(self, action: Action) -> None:
        """Raise ActionValidationError naming the first rule `action` breaks."""
        if not isinstance(action, Action) or type(action).NAME not in ACTION_TYPES:
            raise ActionValidationError(self.name, "known action", f"not an action: {action!r}")
        for rule in self.rules:
            detail = rule.check(action)
            if detail is not None:
                raise ActionValidationError(self.name, rule.name, detail)


MOBILE = ActionSpace(
    name="mobile",
    description="phone (Android): Table 8 minus Hover / DoubleClick / Hotkey; Launch(app=)",
    rules=(
        Rule(
            "web-only action",
            "Hover, DoubleClick, Hotkey need a mouse/keyboard",
            _only_on(WEB_ONLY, "web"),
        ),
        Rule("mobile Launch takes app", "Launch(app='...') opens an app", _launch_takes("app")),
        Rule("mobile Scroll needs start and end", "a swipe from start to end", _mobile_scroll),
    ),
)

WEB = ActionSpace(
    name="web",
    description="browser: Table 8 minus PressBack / PressHome / PressRecent; Launch(url=)",
    rules=(
        Rule(
            "mobile-only action",
            "PressBack, PressHome, PressRecent are phone buttons",
            _only_on(MOBILE_ONLY, "mobile"),
        ),
        Rule("web Launch takes url", "Launch(url='...') opens a page", _launch_takes("url")),
    ),
)

SPACES: dict[str, ActionSpace] = {"mobile": MOBILE, "web": WEB}

ACTION_SPACES.register("mobile", MOBILE, description=MOBILE.description)
ACTION_SPACES.register("web", WEB, description=WEB.description)


def space_for(platform: str) -> ActionSpace:
    """The rule set of `platform`; an unknown platform is a ValueError (a caller bug)."""
    try:
        return SPACES[platform]
    except (KeyError, TypeError):
        raise ValueError(f"unknown platform {platform!r}; known: {', '.join(PLATFORMS)}") from None


def validate_action(action: Action, platform: str) -> None:
    """Raise ActionValidationError (naming the rule) unless `action` is allowed on `platform`."""
    space_for(platform).validate(action)
