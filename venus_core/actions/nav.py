"""Navigation output, history lines and grounding points: the text formats around actions.

Why: UI-Venus-1.5 navigation answers are `<think>…</think><action>Fn(args)</action><conclusion>…
</conclusion>`, past steps are fed back as `Step i: <think>…</think><action>…</action>` lines (last
5), and grounding answers are a centre point `[x,y]` or `[-1,-1]` when the target is not on screen.
Rewards (R_format), data import and evaluation must agree on these exactly, so they live here
next to the action parser.

Choices: navigation parsing allows only whitespace outside the three tags (the format reward in the
paper requires the tags, chatter around them is a format failure); think and conclusion are stored
stripped. Grounding parsing is deliberately lenient, like the paper's evaluation parser: surrounding
text is allowed, and the first bracketed group of 2 or 4 numbers is the answer (a box gives its
centre, two adjacent points their midpoint).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, SerializeAsAny, field_validator, model_validator

from venus_core.actions.parse import parse_action, point_from_numbers
from venus_core.actions.render import render_action
from venus_core.actions.space import Action, ActionParseError, Platform, Point

MAX_NAV_CHARS = 65_536
MAX_POINT_CHARS = 16_384
MAX_THOUGHT_CHARS = 16_000
"""Longest think / conclusion: keeps a rendered step under MAX_NAV_CHARS (round trips hold)."""

TAGS = ("<think>", "</think>", "<action>", "</action>", "<conclusion>", "</conclusion>")


class NavStep(BaseModel):
    """One navigation answer: reasoning, the action, and a one-line conclusion (stored stripped)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    think: str
    action: SerializeAsAny[Action]
    conclusion: str

    @field_validator("think", "conclusion")
    @classmethod
    def _clean(cls, v: str) -> str:
        v = v.strip()
        if len(v) > MAX_THOUGHT_CHARS:
            raise ValueError(f"longer than {MAX_THOUGHT_CHARS} characters")
        for tag in TAGS:
            if tag in v:
                raise ValueError(f"must not contain the tag {tag}")
        return v

    @model_validator(mode="after")
    def _action_renders_inside_tag(self) -> NavStep:
        if "</action>" in render_action(self.action):
            raise ValueError("the action's text contains '</action>'")
        return self


def _split_tags(text: str) -> tuple[str, str, str] | None:
    """(think, action, conclusion) when `text` is exactly the three tags (whitespace around them).

    Linear scans with str.find rather than a lazy regex: each part ends at the first closing tag
    (a part may not contain tags, see NavStep), and adversarial inputs cannot make it backtrack.
    """
    rest = text.strip()
    parts: list[str] = []
    for name in ("think", "action", "conclusion"):
        open_tag, close_tag = f"<{name}>", f"</{name}>"
        if not rest.startswith(open_tag):
            return None
        end = rest.find(close_tag, len(open_tag))
        if end < 0:
            return None
        parts.append(rest[len(open_tag) : end])
        rest = rest[end + len(close_tag) :].lstrip()
    if rest:
        return None
    return parts[0], parts[1], parts[2]


def render_navigation(step: NavStep) -> str:
    """`<think>…</think><action>…</action><conclusion>…</conclusion>` for one step."""
    return (
        f"<think>{step.think}</think><action>{render_action(step.action)}</action>"
        f"<conclusion>{step.conclusion}</conclusion>"
    )


def parse_navigation(text: str, platform: Platform = "mobile") -> NavStep:
    """Parse a navigation answer; the action is checked against `platform`'s rules."""
    if not isinstance(text, str):
        raise ActionParseError(f"expected navigation text (str), got {type(text).__name__}")
    if len(text) > MAX_NAV_CHARS:
        raise ActionParseError(
            f"navigation text too long: {len(text)} > {MAX_NAV_CHARS} characters"
        )
    parts = _split_tags(text)
    if parts is None:
        missing = [t for t in TAGS if t not in text]
        why = (
            f"missing {', '.join(missing)}" if missing else "tags out of order or text outside them"
        )
        raise ActionParseError(
            "navigation answer must be <think>…</think><action>…</action><conclusion>…</conclusion>"
            f": {why}"
        )
    think, action_text, conclusion = parts
    action = parse_action(action_text, platform)
    try:
        return NavStep(think=think, action=action, conclusion=conclusion)
    except ValueError as exc:
        raise ActionParseError(f"navigation answer: {exc}") from None


def render_history(steps: Sequence[tuple[str, Action | str]], last: int = 5) -> str:
    """History lines `Step i: <think>…</think><action>…</action>` for the last `last` steps.

    `i` counts from 1 over the whole episode (so the first shown line of a 9-step history is
    "Step 5"); an action given as a string is used as is (already canonical). Lines joined by "\\n".
    """
    if isinstance(last, bool) or not isinstance(last, int) or last < 0:
        raise ValueError(f"last must be a non-negative integer, got {last!r}")
    first = max(0, len(steps) - last)
    lines = []
    for i in range(first, len(steps)):
        think, action = steps[i]
        text = action if isinstance(action, str) else render_action(action)
        lines.append(f"Step {i + 1}: <think>{think.strip()}</think><action>{text.strip()}</action>")
    return "\n".join(lines)


@dataclass(frozen=True)
class Refusal:
    """The grounding answer `[-1,-1]`: the instruction's target is not on this screen."""

    def __repr__(self) -> str:
        return "Refusal()"


REFUSAL = Refusal()

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)"
_GROUP = re.compile(
    rf"\[\s*(?P<sq>{_NUM}\s*(?:,\s*{_NUM}\s*){{1,3}})\]|\(\s*(?P<rd>{_NUM}\s*(?:,\s*{_NUM}\s*){{1,3}})\)"
)
_BETWEEN_POINTS = re.compile(r"\s*,?\s*")


def _numbers(m: re.Match[str]) -> list[float]:
    # str.strip, not float's own: the pattern's \s also matches Unicode separators such as
    # U+001D, which float() refuses (found by atheris: "[0,-1\x1d,2]" raised a bare ValueError)
    return [float(v.strip()) for v in (m["sq"] or m["rd"]).split(",")]


def parse_point(text: str) -> Point | Refusal:
    """A grounding answer -> point (0–1000) or Refusal.

    Accepts `[x,y]`, `[x1,y1,x2,y2]` (centre), `[x1,y1],[x2,y2]` (midpoint), `(x,y)` anywhere in the
    text; `[-1,-1]` is a refusal. Anything else (no group, 3 numbers, out of range) raises
    ActionParseError.
    """
    if not isinstance(text, str):
        raise ActionParseError(f"expected grounding text (str), got {type(text).__name__}")
    if len(text) > MAX_POINT_CHARS:
        raise ActionParseError(
            f"grounding text too long: {len(text)} > {MAX_POINT_CHARS} characters"
        )
    groups = [m for m in _GROUP.finditer(text) if len(_numbers(m)) in (2, 4)]
    if not groups:
        raise ActionParseError(f"no point [x,y] / box [x1,y1,x2,y2] in {text[:80]!r}")
    first = groups[0]
    nums = _numbers(first)
    if nums == [-1.0, -1.0]:
        return REFUSAL
    if len(nums) == 2 and len(groups) > 1:
        nxt = groups[1]
        if len(_numbers(nxt)) == 2 and _BETWEEN_POINTS.fullmatch(text, first.end(), nxt.start()):
            nums = nums + _numbers(nxt)
    return point_from_numbers(nums, "grounding point")


def render_point(p: Point | Refusal) -> str:
    """ "[x,y]" for a point, "[-1,-1]" for a refusal."""
    if isinstance(p, Refusal):
        return "[-1,-1]"
    x, y = p
    for v in (x, y):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1000:
            raise ValueError(f"point coordinate {v!r} is not an integer in 0..1000")
    return f"[{x},{y}]"
