"""The `rules` expander: instantiates seeds from the env's generator, biased by the verified tasks.

Why: on the embedded default there is no MLLM that can write tasks (the tiny policy model cannot:
docs/flywheel.md), so the paper's MLLM expansion cannot run. What the paper's in-context examples
do for an MLLM expander — steer the next round toward tasks like those that were verified — is done
here by an explicit estimate: each candidate start state that instantiates a seed
(`space.for_seed`) gets the kernel-weighted share of verified tasks among the executed ones
(Nadaraya-Watson regression with a prior):

    p(c) = (W0 * p_seed + sum_e k(c, e) * verified_e) / (W0 + sum_e k(c, e))
    k(c, e) = exp(-(1 - cos(goal_c, goal_e)) / H_GOAL) * exp(-|point_c - point_e|^2 / (2 H_POINT^2))

over every task `e` of the same seed (the task family: app and level) executed in earlier rounds,
verified or not. `cos` is the task pool's embedder (the goal similarity its dedupe uses), `point`
where the task's first planned action acts (the position factor is 1 when either task has none),
`p_seed` the seed's verified share with a Laplace prior, W0 = 1. Families are kept apart because
the same goal at the same place is another task in another family: measured with the bootstrap
policy, "Click the pink button" succeeded on level-1 boards and failed at the same place on
level-0 boards (one button of random size), and a kernel across levels sent a round's proposals
there (docs/flywheel.md). The round then takes the `1 - explore` share of its proposals with the
highest p (ties in a seeded random order) and the rest uniformly from the remaining candidates, so
families that were never tried keep being tried. Round 0 (no feedback) is uniform.

Nothing in it knows which tasks the policy can do: it learns only from the outcomes it is fed. If
the policy's success does not depend on a task's goal or position, the estimate is flat and the
success rate does not move (tests/flywheel/test_flywheel_rules_expander.py checks both cases).
What rises is the success of *generation*, by choosing tasks the current policy can do, as in the
paper's flywheel; it does not make the policy better (docs/flywheel.md).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any

import numpy as np

from venus_core.flywheel.expanders import Example, ExpansionCost, Proposal
from venus_core.flywheel.seeds import Seed
from venus_core.flywheel.space import Candidate, Point
from venus_core.rl.online.similarity import Embedder, HashingEmbedder

H_GOAL = 0.05  # goal kernel bandwidth in (1 - cosine): cos 0.95 -> weight 1/e
H_POINT = 100.0  # position kernel bandwidth in the 0-1000 frame (a 3 x 3 board cell is ~320 wide)
PRIOR_WEIGHT = 1.0


class RuleExpander:
    name = "rules"

    def __init__(self, space: Any, *, embedder: Embedder | None = None, explore: float = 0.25, seed: int = 0) -> None:
        if not 0 <= explore <= 1:
            raise ValueError(f"explore must be in [0, 1], got {explore}")
        self.space = space
        self.embedder = embedder or HashingEmbedder()
        self.explore = explore
        self.seed = seed
        self._vectors: dict[str, np.ndarray] = {}
        self._cost = ExpansionCost()
        self.last: dict[str, Any] = {}  # the last round's selection summary (for the report)

    def _embed(self, goals: Sequence[str]) -> np.ndarray:
        todo = [g for g in dict.fromkeys(goals) if g not in self._vectors]
        if todo:
            for g, v in zip(todo, self.embedder.embed(todo), strict=True):
                self._vectors[g] = np.asarray(v, dtype=np.float64)
        return np.stack([self._vectors[g] for g in goals])

    def estimate(self, candidates: Sequence[Candidate], feedback: Sequence[Example],
                 seeds: Sequence[str] | None = None) -> np.ndarray:
        """p(c) of the module docstring, one per candidate; `seeds[i]` is candidate i's seed key (None:
        every candidate and example in one family)."""
        if not candidates:
            return np.zeros(0)
        fam_c = list(seeds) if seeds is not None else [""] * len(candidates)
        fam_e = [e.seed for e in feedback] if seeds is not None else [""] * len(feedback)
        y = np.array([e.verified for e in feedback], dtype=np.float64)
        same = np.array([[a == b for b in fam_e] for a in fam_c], dtype=np.float64).reshape(len(fam_c), len(fam_e))
        prior = (same @ y + 1.0) / (same.sum(axis=1) + 2.0)  # the family's verified share, Laplace prior
        if not len(y):
            return prior
        cos = self._embed([c.goal for c in candidates]) @ self._embed([e.goal for e in feedback]).T
        k = np.exp(-(1.0 - np.clip(cos, -1.0, 1.0)) / H_GOAL) * same
        k *= _point_kernel([c.point for c in candidates], [e.point for e in feedback])
        return (PRIOR_WEIGHT * prior + k @ y) / (PRIOR_WEIGHT + k.sum(axis=1))

    def expand(self, seeds: Sequence[Seed], n: int, round_: int, feedback: Sequence[Example]) -> list[Proposal]:
        pool: dict[str, tuple[Candidate, str]] = {}
        for seed in seeds:
            for c in self.space.for_seed(seed, round_):
                pool.setdefault(c.key, (c, seed.key))
        items = list(pool.values())
        rng = random.Random(f"{self.seed}:rules:{round_}")
        if not items or n <= 0:
            self.last = {"candidates": len(items), "exploit": 0, "explore": 0}
            return []
        if not feedback:
            picked = rng.sample(range(len(items)), min(n, len(items)))
            self.last = {"candidates": len(items), "exploit": 0, "explore": 0, "uniform": len(picked)}
            return [self._proposal(items[i], "uniform", None) for i in picked]
        scores = self.estimate([c for c, _ in items], feedback, [seed for _, seed in items])
        tiebreak = [rng.random() for _ in items]
        order = sorted(range(len(items)), key=lambda i: (-scores[i], tiebreak[i]))
        n = min(n, len(items))
        n_explore = int(round(n * self.explore))
        exploit = order[: n - n_explore]
        rest = order[n - n_explore:]
        explore = rng.sample(rest, min(n_explore, len(rest)))
        self.last = {"candidates": len(items), "exploit": len(exploit), "explore": len(explore),
                     "mean_score_all": round(float(scores.mean()), 4),
                     "mean_score_exploit": round(float(scores[exploit].mean()), 4) if exploit else None}
        return ([self._proposal(items[i], "exploit", float(scores[i])) for i in exploit]
                + [self._proposal(items[i], "explore", float(scores[i])) for i in explore])

    def _proposal(self, item: tuple[Candidate, str], how: str, score: float | None) -> Proposal:
        c, seed = item
        return Proposal(c.goal, seed, c, self.name, how, None if score is None else round(score, 4))

    def cost(self) -> ExpansionCost:
        return self._cost

    def close(self) -> None:
        return None


def _point_kernel(a: Sequence[Point | None], b: Sequence[Point | None]) -> np.ndarray:
    """exp(-d^2 / (2 H_POINT^2)) between every pair; 1 where either point is missing."""
    pa = np.array([p if p is not None else (np.nan, np.nan) for p in a], dtype=np.float64)
    pb = np.array([p if p is not None else (np.nan, np.nan) for p in b], dtype=np.float64)
    d2 = ((pa[:, None, :] - pb[None, :, :]) ** 2).sum(axis=2)
    return np.where(np.isnan(d2), 1.0, np.exp(-np.nan_to_num(d2) / (2 * H_POINT**2)))


__all__ = ["H_GOAL", "H_POINT", "PRIOR_WEIGHT", "RuleExpander"]
