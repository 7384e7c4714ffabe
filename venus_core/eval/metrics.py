"""Scoring rules of the evaluation harnesses, shared by training-time held-out checks and `venus eval`.

Grounding (ScreenSpot harness as UI-Venus runs it): a prediction is correct iff the predicted point
lies inside the target box (inclusive); a refusal sample is correct iff the answer is `[-1,-1]`;
an answer that does not parse counts as wrong format (and wrong).

Offline navigation (AndroidControl / GUI-Odyssey style): *type match* when the predicted action
type equals the reference's; *step success* when, in addition, the arguments agree: point actions
inside the target element's box, or within 14 % of the screen diagonal when no box is given
(0.14 · √2 · 1000 ≈ 198 in the 0–1000 frame, measured on the normalized square); Scroll by
direction; Drag by both end points under the same rule; text (Type, CallUser, Finished) by token
F1 ≥ 0.5; Launch and Hotkey exactly (case-insensitive); argument-free actions by type alone.

Every rate comes with its sample count and a 95 % Wilson interval, because the held-out sets of
the embedded default are small and a difference smaller than the interval is not a result.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from venus_core.actions import Action, ActionParseError, Refusal, parse_action, parse_navigation, parse_point
from venus_core.rewards.grounding import point_in_box
from venus_core.rewards.text import token_f1

NAV_DISTANCE = 0.14 * math.sqrt(2) * 1000
"""14 % of the screen diagonal in the 0–1000 frame."""

_POINT_FIELDS = {"Click": "box", "LongPress": "box", "Hover": "box", "DoubleClick": "box"}


@dataclass(frozen=True)
class Rate:
    """k successes out of n, with a 95 % Wilson score interval."""

    k: int
    n: int

    @property
    def value(self) -> float:
        return self.k / self.n if self.n else 0.0

    @property
    def interval(self) -> tuple[float, float]:
        return wilson(self.k, self.n)

    def __str__(self) -> str:
        lo, hi = self.interval
        return f"{self.value:.1%} [{lo:.1%}, {hi:.1%}] (n={self.n})"

    def to_dict(self) -> dict[str, float | int]:
        lo, hi = self.interval
        return {"value": round(self.value, 4), "k": self.k, "n": self.n, "ci95_low": round(lo, 4), "ci95_high": round(hi, 4)}


def wilson(k: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """95 % Wilson score interval of a binomial proportion.

    >>> lo, hi = wilson(50, 100); round(lo, 3), round(hi, 3)
    (0.404, 0.596)
    >>> wilson(0, 0)
    (0.0, 1.0)
    """
    if n == 0:
        return (0.0, 1.0)
    if not 0 <= k <= n:
        raise ValueError(f"k={k} outside 0..n={n}")
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if k == 0 else max(0.0, centre - half)
    hi = 1.0 if k == n else min(1.0, centre + half)
    return (lo, hi)


@dataclass(frozen=True)
class GroundingOutcome:
    parsed: bool
    refused: bool
    correct: bool


def score_grounding(answer: str, box: tuple[int, int, int, int] | list[int] | None) -> GroundingOutcome:
    """Score one grounding answer against its target box (None = refusal sample).

    >>> score_grounding("[5,5]", (0, 0, 10, 10)).correct, score_grounding("[-1,-1]", None).correct
    (True, True)
    """
    try:
        point = parse_point(answer)
    except ActionParseError:
        return GroundingOutcome(False, False, False)
    refused = isinstance(point, Refusal)
    if box is None:
        return GroundingOutcome(True, refused, refused)
    return GroundingOutcome(True, refused, (not refused) and point_in_box(point, box))  # type: ignore[arg-type]


@dataclass(frozen=True)
class NavOutcome:
    parsed: bool
    type_match: bool
    step_success: bool
    predicted_type: str | None


def _points_agree(pred: tuple[int, int], ref: tuple[int, int], box: object) -> bool:
    if box is not None:
        return point_in_box(pred, box)  # type: ignore[arg-type]
    return math.hypot(pred[0] - ref[0], pred[1] - ref[1]) <= NAV_DISTANCE


def arguments_agree(pred: Action, ref: Action, target_box: object = None) -> bool:
    """Step-success argument rule for two actions of the same type (module docstring)."""
    name = ref.NAME
    if name in _POINT_FIELDS:
        f = _POINT_FIELDS[name]
        return _points_agree(getattr(pred, f), getattr(ref, f), target_box)
    if name == "Scroll":
        return pred.direction == ref.direction  # type: ignore[attr-defined]
    if name == "Drag":
        return _points_agree(pred.start, ref.start, None) and _points_agree(pred.end, ref.end, None)  # type: ignore[attr-defined]
    if name in ("Type", "CallUser", "Finished"):
        return token_f1(pred.content, ref.content) >= 0.5  # type: ignore[attr-defined]
    if name == "Launch":
        return ((pred.app or "").casefold(), (pred.url or "").casefold()) == (  # type: ignore[attr-defined]
            (ref.app or "").casefold(), (ref.url or "").casefold())  # type: ignore[attr-defined]
    if name == "Hotkey":
        return {k.casefold() for k in pred.keys} == {k.casefold() for k in ref.keys}  # type: ignore[attr-defined]
    return True


def predicted_action(answer: str, platform: str) -> Action | None:
    """The action of a navigation answer (tagged form first, then a bare action); None if neither parses.

    >>> predicted_action("<think>t</think><action>PressBack()</action><conclusion>c</conclusion>", "mobile").NAME
    'PressBack'
    >>> predicted_action("no action here", "mobile") is None
    True
    """
    try:
        return parse_navigation(answer, platform).action  # type: ignore[arg-type]
    except ActionParseError:
        try:
            return parse_action(answer, platform)  # type: ignore[arg-type]
        except ActionParseError:
            return None


def score_navigation(answer: str, reference_action: str, platform: str, target_box: object = None) -> NavOutcome:
    """Score one navigation answer (`<think>…<action>…<conclusion>…`, or a bare action) against
    the reference action string.

    >>> score_navigation("<think>t</think><action>Click(box=(500,500))</action><conclusion>c</conclusion>",
    ...                  "Click(box=(550,520))", "mobile").step_success
    True
    """
    ref = parse_action(reference_action, platform)  # type: ignore[arg-type]
    pred = predicted_action(answer, platform)
    if pred is None:
        return NavOutcome(False, False, False, None)
    type_match = pred.NAME == ref.NAME
    return NavOutcome(True, type_match, type_match and arguments_agree(pred, ref, target_box), pred.NAME)
