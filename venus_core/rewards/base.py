"""What a reward function returns, and the signature every registered reward has.

A registered reward is a pure function
`reward(completion: str, reference: Mapping, params: RewardSpec, progress: float) -> RewardResult`:
no I/O, no model, deterministic. `progress` in [0, 1] is the share of training done (tolerance
schedules read it). `RewardResult.terms` carries every term (format, type, coord, content, ...)
so trainers can log them per step: a total alone hides which part the policy is learning.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from venus_core.config.spec import RewardSpec


@dataclass(frozen=True)
class RewardResult:
    total: float
    terms: dict[str, float] = field(default_factory=dict)
    parsed: bool = True  # False when the completion could not be parsed at all


class RewardFn(Protocol):
    def __call__(
        self, completion: str, reference: Mapping[str, Any], params: RewardSpec, progress: float = 0.0
    ) -> RewardResult: ...


def score_batch(
    fn: RewardFn,
    completions: Sequence[str],
    references: Sequence[Mapping[str, Any]],
    params: RewardSpec,
    progress: float = 0.0,
) -> list[RewardResult]:
    """Apply `fn` pairwise; lengths must match (a mismatch is a bug upstream, not data to skip)."""
    if len(completions) != len(references):
        raise ValueError(f"{len(completions)} completions but {len(references)} references")
    return [fn(c, r, params, progress) for c, r in zip(completions, references, strict=True)]
