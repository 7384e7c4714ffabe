"""Expanders turn seed prompts into concrete tasks; the `expanders` registry (plugin module).

An expander gets the round's seeds, how many tasks to propose and the feedback of the earlier
rounds (every executed task with its outcome, `Example`), and returns `Proposal`s: a goal, its
seed, and the start state it was instantiated on (`Candidate`), or none when its goal names no
start state the env can set up (the feasibility filter then rejects it with the reason).

Registered: `rules` (`rules_expander`: instantiates the seeds' parameters from the env's own
generator, biased toward tasks similar to verified ones) and `openai` (`openai_expander`: an
OpenAI-compatible model writes goals, the verified tasks are its in-context examples). An entry is
a factory `(spec: FlywheelSpec, *, space, embedder, **options) -> Expander`; this module imports
the implementations only when one is built, so validating a spec stays cheap.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from venus_core.config.registry import EXPANDERS

if TYPE_CHECKING:
    from venus_core.config.flywheel import FlywheelSpec
    from venus_core.flywheel.seeds import Seed
    from venus_core.flywheel.space import Candidate, Point


@dataclass(frozen=True)
class Proposal:
    """A proposed task: its goal, its seed's key, the start state it runs on (None: not instantiated)."""

    goal: str
    seed: str
    candidate: Candidate | None
    expander: str
    how: str = ""  # rules: exploit / explore / uniform; openai: model
    score: float | None = None  # rules: the estimated success chance it was ranked by


@dataclass(frozen=True)
class Example:
    """Feedback: a task executed in an earlier round and whether it was verified."""

    goal: str
    seed: str
    level: int
    point: Point | None
    verified: bool
    round: int


@dataclass
class ExpansionCost:
    """What expansion has cost so far: backend calls, tokens (None: the server sent no usage),
    requests that failed after their retries, and the first few reasons."""

    calls: int = 0
    prompt_tokens: int | None = 0
    completion_tokens: int | None = 0
    failures: int = 0
    reasons: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"calls": self.calls, "prompt_tokens": self.prompt_tokens,
                "completion_tokens": self.completion_tokens, "failures": self.failures,
                "failure_reasons": self.reasons[:5]}


class Expander(Protocol):
    name: str

    def expand(self, seeds: Sequence[Seed], n: int, round_: int, feedback: Sequence[Example]) -> list[Proposal]:
        """At most `n` proposals for this round."""
        ...

    def cost(self) -> ExpansionCost:
        """Cumulative cost."""
        ...

    def close(self) -> None: ...


def _rules(spec: FlywheelSpec, *, space: Any, embedder: Any = None, **_: Any) -> Expander:
    from venus_core.flywheel.rules_expander import RuleExpander

    return RuleExpander(space, embedder=embedder, explore=spec.explore, seed=spec.seed)


def _openai(spec: FlywheelSpec, *, space: Any, embedder: Any = None, **options: Any) -> Expander:
    from venus_core.flywheel.openai_expander import OpenAIExpander

    assert spec.expander_endpoint and spec.expander_model  # the spec validates this
    return OpenAIExpander(spec.expander_endpoint, spec.expander_model, space=space, examples=spec.expander_examples,
                          seed=spec.seed, **options)


EXPANDERS.register("rules", _rules, description="instantiates seed parameters from the env's generator, "
                   "biased toward tasks similar to verified ones (no model)")
EXPANDERS.register("openai", _openai, description="an OpenAI-compatible model writes tasks; verified tasks are "
                   "its in-context examples")


def make_expander(spec: FlywheelSpec, *, space: Any, embedder: Any = None, **options: Any) -> Expander:
    """The expander `spec.expander` names."""
    return EXPANDERS.get(spec.expander)(spec, space=space, embedder=embedder, **options)


__all__ = ["Example", "ExpansionCost", "Expander", "Proposal", "make_expander"]
