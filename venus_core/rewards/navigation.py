"""Navigation reward (UI-Venus-1.5 offline RL): `R = w1·R_format + w2·R_action`.

`R_format` is 1 when the completion has `<think>`, `<action>` and `<conclusion>` in that order and
the action parses and is legal on the platform. `R_action = R_type + R_arg`, where `R_type` is 1
when the action type matches the reference and `R_arg` (only when the type matches) is:

- point actions (Click, LongPress, Hover, DoubleClick): α within the tight tolerance δ2 (or inside
  the reference's target element box when one is given), 0.5α within the loose tolerance δ1, else
  0 (UI-Venus-1.0). Tolerances grow linearly from 1× to `coord_relax_to`× over training
  (`progress`), the 1.5 report's "tolerance relaxed over training".
- Scroll: 1.5β when start and end are within δ3 and the direction is right, β when the start is
  within δ3 and the direction is right, 0.5β when only one of those holds, else 0. A web scroll
  given by direction alone earns 1.5β for the right direction (nothing else can be compared).
- Drag: α times the mean of the start and end point credits.
- Type / CallUser / Finished: γ when token F1 ≥ `f1_threshold` (UI-Venus-1.0).
- Launch (app or url, case-insensitive), Hotkey (same set of keys): γ on an exact match.
- Argument-free actions (Wait, Press*): γ when the type matches. Departure: the papers leave
  these at R_type alone; without it, they are worth half of every other correct step and the
  policy is pushed away from pressing Back or Enter when it should.

Departure (`unparsed_type_credit`, on by default): an action that names the reference's type but
does not parse - a coordinate outside the 0–1000 frame, a broken argument - earns R_type alone
(format 0, argument 0) instead of 0. With the reports' rule, on a step whose right action the
policy writes malformed, every well-formed wrong action out-scores the right type, and GRPO
learns to avoid the right type: on venus-tiny, whose mid-trained Click coordinates were often out
of frame (`Click(box=(178,15000))`), mobile GRPO turned 38 of 40 held-out Click steps into
`Finished` (docs/learning.md). Format and arguments still need a parseable action.

Distances are Euclidean in the 0–1000 frame. Weights and tolerances come from the spec
(`RewardSpec`); the reports publish the formulas but not the numbers.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from typing import Any

from venus_core.actions import (
    Action,
    ActionParseError,
    CallUser,
    Drag,
    Finished,
    Hotkey,
    Launch,
    Scroll,
    Type,
    parse_action,
    parse_navigation,
)
from venus_core.config.registry import REWARDS
from venus_core.config.spec import RewardSpec
from venus_core.rewards.base import RewardResult
from venus_core.rewards.grounding import point_in_box
from venus_core.rewards.text import token_f1

_TAGS_IN_ORDER = re.compile(
    r"<think>.*?</think>\s*<action>.*?</action>\s*<conclusion>.*?</conclusion>", re.DOTALL
)
_ACTION_NAME = re.compile(r"<action>\s*([A-Za-z]+)\s*\(")
_POINT_FIELD = {"Click": "box", "LongPress": "box", "Hover": "box", "DoubleClick": "box"}


def _distance(a: tuple[int, int], b: tuple[int, int]) -> float:
    return math.hypot(a[0] - b[0], a[1] - b[1])


def relax_factor(params: RewardSpec, progress: float) -> float:
    """Tolerance multiplier: 1 at the start of training, `coord_relax_to` at the end."""
    p = min(max(progress, 0.0), 1.0)
    return 1.0 + (params.coord_relax_to - 1.0) * p


def point_credit(
    pred: tuple[int, int],
    ref: tuple[int, int],
    params: RewardSpec,
    progress: float = 0.0,
    target_box: Any = None,
) -> float:
    """1, 0.5 or 0 (times nothing: callers scale by α).

    >>> p = RewardSpec(coord_tight=40, coord_loose=80)
    >>> point_credit((500, 500), (520, 500), p), point_credit((500, 500), (560, 500), p)
    (1.0, 0.5)
    >>> point_credit((500, 500), (600, 500), p)
    0.0
    """
    f = relax_factor(params, progress)
    d = _distance(pred, ref)
    if d < params.coord_tight * f or (target_box is not None and point_in_box(pred, target_box)):
        return 1.0
    if d < params.coord_loose * f:
        return 0.5
    return 0.0


def scroll_credit(pred: Scroll, ref: Scroll, params: RewardSpec, progress: float = 0.0) -> float:
    """Scroll credit in units of β: 1.5, 1, 0.5 or 0 (UI-Venus-1.0)."""
    direction_ok = pred.direction == ref.direction
    if ref.start is None or pred.start is None:
        return 1.5 if direction_ok else 0.0
    tol = params.scroll_tolerance * relax_factor(params, progress)
    start_ok = _distance(pred.start, ref.start) < tol
    end_ok = (
        pred.end is not None and ref.end is not None and _distance(pred.end, ref.end) < tol
    )
    if start_ok and end_ok and direction_ok:
        return 1.5
    if start_ok and direction_ok:
        return 1.0
    if start_ok or direction_ok:
        return 0.5
    return 0.0


def argument_credit(
    pred: Action, ref: Action, params: RewardSpec, progress: float = 0.0, target_box: Any = None
) -> float:
    """R_arg for two actions of the same type (already weighted by α, β or γ)."""
    name = ref.NAME
    if name in _POINT_FIELD:
        field = _POINT_FIELD[name]
        return params.alpha * point_credit(
            getattr(pred, field), getattr(ref, field), params, progress, target_box
        )
    if isinstance(ref, Scroll):
        assert isinstance(pred, Scroll)
        return params.beta * scroll_credit(pred, ref, params, progress)
    if isinstance(ref, Drag):
        assert isinstance(pred, Drag)
        start = point_credit(pred.start, ref.start, params, progress)
        end = point_credit(pred.end, ref.end, params, progress)
        return params.alpha * (start + end) / 2
    if isinstance(ref, Type | CallUser | Finished):
        f1 = token_f1(pred.content, ref.content)  # type: ignore[attr-defined]
        return params.gamma if f1 >= params.f1_threshold else 0.0
    if isinstance(ref, Launch):
        assert isinstance(pred, Launch)
        same = (pred.app or "").casefold() == (ref.app or "").casefold() and (
            pred.url or ""
        ).casefold() == (ref.url or "").casefold()
        return params.gamma if same else 0.0
    if isinstance(ref, Hotkey):
        assert isinstance(pred, Hotkey)
        same = {k.casefold() for k in pred.keys} == {k.casefold() for k in ref.keys}
        return params.gamma if same else 0.0
    return params.gamma  # argument-free action of the right type (see module docstring)


def navigation_reward_for(platform: str):  # noqa: ANN201 - returns a RewardFn
    def navigation_reward(
        completion: str, reference: Mapping[str, Any], params: RewardSpec, progress: float = 0.0
    ) -> RewardResult:
        """Reward one navigation completion. `reference`: {"action": str, "target_box": box | None}."""
        ref = parse_action(reference["action"], platform)  # a bad reference is a data bug: raise
        target_box = reference.get("target_box")
        try:
            step = parse_navigation(completion, platform)
        except ActionParseError:
            named = _ACTION_NAME.search(completion) if params.unparsed_type_credit else None
            type_ok = 1.0 if named is not None and named.group(1) == ref.NAME else 0.0
            return RewardResult(
                params.task_weight * type_ok,
                {"format": 0.0, "type": type_ok, "arg": 0.0, "action": type_ok},
                parsed=False,
            )
        fmt = 1.0 if _TAGS_IN_ORDER.search(completion) else 0.0
        pred = step.action
        type_ok = 1.0 if pred.NAME == ref.NAME else 0.0
        arg = argument_credit(pred, ref, params, progress, target_box) if type_ok else 0.0
        action = type_ok + arg
        total = params.format_weight * fmt + params.task_weight * action
        return RewardResult(total, {"format": fmt, "type": type_ok, "arg": arg, "action": action})

    navigation_reward.__name__ = f"navigation_reward_{platform}"
    navigation_reward.__qualname__ = navigation_reward.__name__
    navigation_reward.__doc__ = f"Navigation reward on the {platform} action space (see module docstring)."
    return navigation_reward


navigation_mobile = REWARDS.register("navigation_mobile", navigation_reward_for("mobile"))
navigation_web = REWARDS.register("navigation_web", navigation_reward_for("web"))
