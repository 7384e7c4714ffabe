"""UI-Venus-1.0 navigation extras: self-evolving trajectory history alignment and sparse action
enhancement, as pure functions over `NavigationStep` records (no model here).

History alignment: the thoughts in a training sample's history were written by whoever made the
data (annotators, another model), not by the policy, so at inference the history the model reads
(its own past thoughts) looks different from training. After each epoch the policy's rollouts
whose action matches the ground truth put their thoughts into a pool keyed by (episode, step);
the history thoughts of the training samples are then replaced by pooled ones. Which pooled
thought wins is a rule: `closest_length` (closest in length to the thought it replaces — our
default; the report does not say), `random`, or `highest_reward`.

Sparse action enhancement: rare but critical actions (LongPress, CallUser, PressRecent, Drag) are
too few to learn from; each such sample gets M extra variants whose history thoughts are drawn from
the pool, so the action is seen more often with varied context. Where the pool has no thought
for a history step the original is kept (a variant may then equal the original; it still
up-samples, and the count of distinct variants is reported).

Matching: "the action matches the ground truth" is the offline step-success rule of
`venus_core.eval.metrics.score_navigation` (type and arguments).
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from venus_core.actions import ActionParseError, parse_action, parse_navigation
from venus_core.data.schema import HistoryItem, NavigationStep
from venus_core.eval.metrics import score_navigation

Selection = Literal["closest_length", "random", "highest_reward"]


@dataclass(frozen=True)
class PooledThought:
    think: str
    reward: float


@dataclass
class ThoughtPool:
    """Thoughts of correct rollouts per (episode_id, step_index); at most `max_per_step` kept
    (the highest-reward ones)."""

    max_per_step: int = 16
    entries: dict[tuple[str, int], list[PooledThought]] = field(default_factory=dict)

    def add(self, episode_id: str, step_index: int, think: str, reward: float) -> None:
        if not think.strip():
            return
        bucket = self.entries.setdefault((episode_id, step_index), [])
        if any(t.think == think for t in bucket):
            return
        bucket.append(PooledThought(think, reward))
        bucket.sort(key=lambda t: -t.reward)
        del bucket[self.max_per_step :]

    def candidates(self, episode_id: str, step_index: int) -> list[PooledThought]:
        return list(self.entries.get((episode_id, step_index), []))

    def __len__(self) -> int:
        return sum(len(v) for v in self.entries.values())


def add_rollouts(pool: ThoughtPool, step: NavigationStep, completions: Sequence[str], rewards: Sequence[float]) -> int:
    """Pool the thoughts of `completions` (rollouts of `step`) whose action matches the ground
    truth; returns how many matched."""
    matched = 0
    for text, reward in zip(completions, rewards, strict=True):
        if not score_navigation(text, step.action, step.platform, step.target_box).step_success:
            continue
        try:
            think = parse_navigation(text, step.platform).think
        except ActionParseError:
            continue  # a bare action matched: it has no thought to pool
        pool.add(step.episode_id, step.step_index, think, float(reward))
        matched += 1
    return matched


def select_thought(candidates: Sequence[PooledThought], original: str, rule: Selection, rng: random.Random) -> str:
    """Pick the pooled thought that replaces `original` (candidates must be non-empty)."""
    if not candidates:
        raise ValueError("select_thought: no candidates")
    if rule == "closest_length":
        return min(candidates, key=lambda t: (abs(len(t.think) - len(original)), -t.reward, t.think)).think
    if rule == "highest_reward":
        return max(candidates, key=lambda t: (t.reward, -abs(len(t.think) - len(original)))).think
    if rule == "random":
        return rng.choice(list(candidates)).think
    raise ValueError(f"unknown selection rule {rule!r}; known: closest_length, random, highest_reward")


def _history_index(step: NavigationStep, j: int) -> int:
    return step.step_index - len(step.history) + j


def align_history(step: NavigationStep, pool: ThoughtPool, rule: Selection, rng: random.Random) -> tuple[NavigationStep, int]:
    """`step` with every history thought that has pooled candidates replaced; (new step, replaced)."""
    items: list[HistoryItem] = []
    replaced = 0
    for j, h in enumerate(step.history):
        cands = pool.candidates(step.episode_id, _history_index(step, j))
        if cands:
            think = select_thought(cands, h.think, rule, rng)
            replaced += think != h.think
            items.append(HistoryItem(think=think, action=h.action))
        else:
            items.append(h)
    return (step.model_copy(update={"history": items}) if replaced else step), replaced


def action_type(step: NavigationStep) -> str:
    return parse_action(step.action, step.platform).NAME


def action_mix(steps: Iterable[NavigationStep]) -> dict[str, int]:
    """Count of samples per action type, most common first."""
    return dict(Counter(action_type(s) for s in steps).most_common())


def sparse_variants(
    steps: Sequence[NavigationStep], pool: ThoughtPool, actions: Sequence[str], variants: int, rng: random.Random
) -> tuple[list[NavigationStep], int]:
    """M extra history variants of every sample whose action type is in `actions`.

    Each variant draws, per history step, a random pooled thought (or keeps the original);
    ids are `<id>#v<k>`. Returns (variants, how many differ from their original)."""
    rare = set(actions)
    out: list[NavigationStep] = []
    distinct = 0
    for s in steps:
        if action_type(s) not in rare:
            continue
        for k in range(variants):
            items = []
            for j, h in enumerate(s.history):
                cands = pool.candidates(s.episode_id, _history_index(s, j))
                think = rng.choice(cands).think if cands else h.think
                items.append(HistoryItem(think=think, action=h.action))
            distinct += items != list(s.history)
            out.append(s.model_copy(update={"history": items, "id": f"{s.id}#v{k + 1}"}))
    return out, distinct


__all__ = [
    "PooledThought", "Selection", "ThoughtPool", "action_mix", "action_type", "add_rollouts", "align_history",
    "select_thought", "sparse_variants",
]
