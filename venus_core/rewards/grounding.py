"""Grounding reward (UI-Venus-1.0/1.5): `R = w1·R_format + w2·R_point_in_box`.

The model answers with a point `[x,y]` in the 0–1000 frame, or `[-1,-1]` when the instruction
names something that is not on the screen (1.5's refusal samples). `R_format` is 1 when the
answer parses (a point or a refusal, in any form `parse_point` accepts). `R_point_in_box` is 1
when the point lies inside the target box (inclusive, as the ScreenSpot harness counts it); on a
refusal sample only `[-1,-1]` earns it, and a refusal on a positive sample earns 0.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from venus_core.actions import ActionParseError, Refusal, parse_point
from venus_core.config.registry import REWARDS
from venus_core.config.spec import RewardSpec
from venus_core.rewards.base import RewardResult


def point_in_box(point: tuple[int, int], box: tuple[int, int, int, int] | list[int]) -> bool:
    """Inclusive containment test.

    >>> point_in_box((5, 5), (0, 0, 10, 10)), point_in_box((11, 5), (0, 0, 10, 10))
    (True, False)
    """
    x1, y1, x2, y2 = box
    return x1 <= point[0] <= x2 and y1 <= point[1] <= y2


def grounding_reward(
    completion: str, reference: Mapping[str, Any], params: RewardSpec, progress: float = 0.0
) -> RewardResult:
    """Reward one grounding completion. `reference`: {"box": [x1,y1,x2,y2] | None}.

    A reference without a box (or with `"refusal": True`) is a refusal sample.

    >>> p = RewardSpec(format_weight=0.1, task_weight=0.9)
    >>> grounding_reward("[500,500]", {"box": [400, 400, 600, 600]}, p).total
    1.0
    >>> grounding_reward("[-1,-1]", {"box": [400, 400, 600, 600]}, p).total
    0.1
    >>> grounding_reward("[-1,-1]", {"box": None}, p).total
    1.0
    >>> grounding_reward("no idea", {"box": None}, p).total
    0.0
    """
    box = reference.get("box")
    refusal_sample = box is None or bool(reference.get("refusal", False))
    try:
        answer = parse_point(completion)
    except ActionParseError:
        return RewardResult(0.0, {"format": 0.0, "point_in_box": 0.0, "refusal": 0.0}, parsed=False)
    is_refusal = isinstance(answer, Refusal)
    if refusal_sample:
        hit = 1.0 if is_refusal else 0.0
    else:
        hit = 0.0 if is_refusal else float(point_in_box(answer, box))  # type: ignore[arg-type]
    total = params.format_weight * 1.0 + params.task_weight * hit
    return RewardResult(total, {"format": 1.0, "point_in_box": hit, "refusal": float(is_refusal)})


REWARDS.register("grounding", grounding_reward)
