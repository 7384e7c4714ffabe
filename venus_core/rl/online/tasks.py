"""The online-RL task pool: which tasks the rollout workers play, and how often.

Why: UI-Venus-1.5 trains online on a pool of static tasks (templated per app / site) plus tasks
inferred from offline trajectories, deduplicated by semantic similarity and bucketed by expected
steps (easy <= 10, medium 11-20, hard > 20); MobileRL (AdaGRPO) and ARPO set tasks that keep
failing aside and retry them later. `TaskPool` schedules such a pool; the tasks come from
`sources` (static sim-phone / MiniWoB++ tasks, inferred tasks, the held-out set) and are
deduplicated with `similarity`. This module re-exports both, so callers import from here.

Rules (the numbers are `TaskPoolSpec` fields):
- Sampling: a bucket is drawn by the current shares, renormalised over buckets that have active
  tasks, then a task uniformly among that bucket's active tasks not yet drawn in this call
  (repeats only once the bucket is exhausted). Tasks back from the set-aside list come first.
- Curriculum: each `record` updates its bucket's success-rate EMA (`ema_alpha`); once a bucket has
  `min_groups` groups and its EMA is >= `promote_at`, every further group it records moves
  `promote_step` of share to the next harder bucket that has tasks, never taking the bucket below
  `min_share`. Shares only move toward harder buckets (the floor keeps easy tasks in the mix).
- Set-aside: `fail_limit` consecutive all-fail groups set a task aside for `retry_after` sample()
  calls; it then comes back on probation (one more all-fail group sets it aside again). A success
  clears the streak, and reactivates a task that is aside. If every task is aside, those aside
  longest come back early so that sampling never stalls (counted as retries).
- Held out: the pool refuses a training task whose key equals, or whose goal is more similar than
  `dedupe_similarity` to, a held-out task's (reported as held-out collisions).
- Dedupe scope (`dedupe_scope`): "start" (default) compares goals only between tasks that start
  from the same state (`PoolTask.start`, a fingerprint of the start state; unknown = compared
  with all), since the synthetic world's seeds draw different boards and app contents and the
  same goal there is another episode (level 3, 200 seeds and 16 held-out tasks: 200 kept, against
  51 kept and 92 held-out collisions when every goal is compared with every goal, which "goal"
  still does).

Departures from the paper: goal similarity is surface (hashed n-grams, see `similarity`), not
semantic. A pool larger than `spec.size` keeps a seeded subset per bucket by the initial shares
(the rest is reported as `over_size`). The paper does not say how shares move; the rule above is
ours. `state_dict` holds the RNG state, so a resumed pool samples exactly as the original would.
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, get_args

from venus_core.config.training import TaskPoolSpec
from venus_core.rl.online.similarity import Embedder, HashingEmbedder, dedupe
from venus_core.rl.online.sources import (
    BUCKETS,
    HELD_OUT_SEED_START,
    SYNTH_GENERATOR_GAP,
    TRAIN_SEEDS,
    Bucket,
    PoolTask,
    Rejected,
    Source,
    bucket_of,
    dynamic_tasks,
    held_out_tasks,
    miniwob_tasks,
    pool_task,
    sim_phone_tasks,
)

STATE_VERSION = 1


@dataclass
class _Stats:
    streak: int = 0  # consecutive all-fail groups
    aside_at: int | None = None  # sample() call count when set aside
    retried: int = 0
    groups: int = 0
    successes: int = 0
    rollouts: int = 0


def _largest_remainder(total: int, shares: Mapping[str, float]) -> dict[str, int]:
    raw = {b: total * s for b, s in shares.items()}
    out = {b: int(x) for b, x in raw.items()}
    for b in sorted(raw, key=lambda b: -(raw[b] - int(raw[b])))[: total - sum(out.values())]:
        out[b] += 1
    return out


class TaskPool:
    """The scheduled task pool (see the module docstring for its rules)."""

    def __init__(self, tasks: Sequence[PoolTask], spec: TaskPoolSpec, *, seed: int,
                 embedder: Embedder | None = None, held_out: Sequence[PoolTask] = ()) -> None:
        self.spec = spec
        self.seed = seed
        self._held_out = list(held_out)
        held_keys = {t.key for t in self._held_out}
        kept, dropped = dedupe(tasks, embedder or HashingEmbedder(), spec.dedupe_similarity,
                               against=self._held_out, scope=spec.dedupe_scope)
        kept, over = self._select(kept)
        if not kept:
            raise ValueError(f"TaskPool: no tasks left of {len(tasks)} after the dedupe and "
                             f"held-out checks")
        self._dedupe = {
            "input": len(tasks), "kept": len(kept),
            "duplicates": [self._drop(t, k, s) for t, k, s in dropped if k not in held_keys],
            "held_out_collisions": [self._drop(t, k, s) for t, k, s in dropped if k in held_keys],
            "over_size": [t.key for t in over]}
        self._tasks = {t.key: t for t in kept}
        self._present = [b for b in BUCKETS if any(t.bucket == b for t in kept)]
        self._rng = random.Random(seed)
        self._calls = 0
        self._shares: dict[str, float] = {b: float(getattr(spec, b)) for b in BUCKETS}
        self._ema: dict[str, float | None] = dict.fromkeys(BUCKETS)
        self._groups = dict.fromkeys(BUCKETS, 0)
        self._stats = {k: _Stats() for k in self._tasks}
        self._queue: list[str] = []  # back from set-aside, drawn first

    @staticmethod
    def _drop(t: PoolTask, key: str, sim: float) -> dict[str, Any]:
        return {"key": t.key, "duplicate_of": key, "similarity": round(sim, 4)}

    def _select(self, tasks: list[PoolTask]) -> tuple[list[PoolTask], list[PoolTask]]:
        if len(tasks) <= self.spec.size:
            return tasks, []
        by = {b: [i for i, t in enumerate(tasks) if t.bucket == b] for b in BUCKETS}
        shares = {b: float(getattr(self.spec, b)) for b in BUCKETS}
        quota = _largest_remainder(self.spec.size, shares)
        take = {b: min(quota[b], len(by[b])) for b in BUCKETS}
        order = sorted(BUCKETS, key=lambda b: -shares[b])
        while sum(take.values()) < self.spec.size:
            b = next(b for b in order if take[b] < len(by[b]))
            take[b] += 1
        rng = random.Random(f"select:{self.seed}")
        chosen = {i for b in BUCKETS for i in rng.sample(by[b], take[b])}
        return ([t for i, t in enumerate(tasks) if i in chosen],
                [t for i, t in enumerate(tasks) if i not in chosen])

    @property
    def held_out(self) -> list[PoolTask]:
        return list(self._held_out)

    @property
    def tasks(self) -> list[PoolTask]:
        return list(self._tasks.values())

    def get(self, key: str) -> PoolTask:
        return self._tasks[key]

    def is_aside(self, key: str) -> bool:
        return self._stats[key].aside_at is not None

    def _return(self, key: str) -> None:
        st = self._stats[key]
        st.aside_at, st.retried, st.streak = None, st.retried + 1, self.spec.fail_limit - 1
        self._queue.append(key)

    def sample(self, n: int) -> list[PoolTask]:
        """`n` tasks (module docstring); reproducible from the seed and the recorded history."""
        if n < 0:
            raise ValueError(f"sample: n must be >= 0, got {n}")
        self._calls += 1
        for key, st in self._stats.items():
            if st.aside_at is not None and self._calls > st.aside_at + self.spec.retry_after:
                self._return(key)
        active = [k for k, st in self._stats.items() if st.aside_at is None]
        if not active:  # everything is aside: the longest-aside come back early
            first = min(st.aside_at for st in self._stats.values() if st.aside_at is not None)
            for key in [k for k, st in self._stats.items() if st.aside_at == first]:
                self._return(key)
            active = [k for k, st in self._stats.items() if st.aside_at is None]
        out = [self._tasks[k] for k in self._queue[:n]]
        self._queue = self._queue[n:]
        used = {t.key for t in out}
        by = {b: [k for k in active if self._tasks[k].bucket == b] for b in BUCKETS}
        live = [b for b in BUCKETS if by[b]]
        weights = [self._shares[b] for b in live]
        if sum(weights) <= 0:
            weights = [1.0] * len(live)
        while len(out) < n:
            b = self._rng.choices(live, weights=weights)[0]
            fresh = [k for k in by[b] if k not in used]
            key = self._rng.choice(fresh or by[b])
            used.add(key)
            out.append(self._tasks[key])
        return out

    def record(self, key: str, successes: Sequence[bool]) -> None:
        """One rollout group's outcomes for task `key`: EMA, curriculum shift, set-aside streak."""
        if key not in self._tasks:
            raise KeyError(f"record: {key!r} is not in the pool")
        if not successes:
            raise ValueError(f"record({key!r}): empty group")
        st, b, spec = self._stats[key], self._tasks[key].bucket, self.spec
        won = sum(bool(s) for s in successes)
        st.groups, st.successes = st.groups + 1, st.successes + won
        st.rollouts += len(successes)
        rate = won / len(successes)
        prev = self._ema[b]
        self._ema[b] = rate if prev is None else \
            (1 - spec.ema_alpha) * prev + spec.ema_alpha * rate
        self._groups[b] += 1
        if won:
            st.streak, st.aside_at = 0, None
        else:
            st.streak += 1
            if st.aside_at is None and st.streak >= spec.fail_limit:
                st.aside_at = self._calls
                self._queue = [k for k in self._queue if k != key]
        harder = [h for h in self._present if BUCKETS.index(h) > BUCKETS.index(b)]
        ema = self._ema[b]
        if harder and ema is not None and self._groups[b] >= spec.min_groups \
                and ema >= spec.promote_at:
            move = min(spec.promote_step, self._shares[b] - spec.min_share)
            if move > 0:
                self._shares[b] -= move
                self._shares[harder[0]] += move

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state; `load_state_dict` on a pool of the same tasks resumes it exactly."""
        version, internal, gauss = self._rng.getstate()
        return {"version": STATE_VERSION, "seed": self.seed, "keys": sorted(self._tasks),
                "calls": self._calls, "rng": [version, list(internal), gauss],
                "shares": dict(self._shares), "ema": dict(self._ema), "groups": dict(self._groups),
                "queue": list(self._queue),
                "stats": {k: vars(st).copy() for k, st in self._stats.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state.get("version") != STATE_VERSION:
            raise ValueError(f"TaskPool state version {state.get('version')!r} != {STATE_VERSION}")
        if sorted(state["keys"]) != sorted(self._tasks):
            extra = set(state["keys"]) ^ set(self._tasks)
            raise ValueError(f"TaskPool state is of another pool ({len(extra)} keys differ, "
                             f"e.g. {sorted(extra)[:3]})")
        version, internal, gauss = state["rng"]
        self._rng.setstate((version, tuple(internal), gauss))
        self.seed, self._calls = state["seed"], state["calls"]
        self._shares = {b: float(state["shares"][b]) for b in BUCKETS}
        self._ema = {b: state["ema"][b] for b in BUCKETS}
        self._groups = {b: int(state["groups"][b]) for b in BUCKETS}
        self._queue = list(state["queue"])
        self._stats = {k: _Stats(**state["stats"][k]) for k in self._tasks}

    def report(self) -> dict[str, Any]:
        """Counts per bucket (total = active + set_aside), shares, success EMAs, dedupe counts."""
        live = [b for b in BUCKETS if any(st.aside_at is None and self._tasks[k].bucket == b
                                          for k, st in self._stats.items())]
        norm = sum(self._shares[b] for b in live) or 1.0
        buckets = {}
        for b in BUCKETS:
            sts = [st for k, st in self._stats.items() if self._tasks[k].bucket == b]
            aside = sum(st.aside_at is not None for st in sts)
            buckets[b] = {"total": len(sts), "active": len(sts) - aside, "set_aside": aside,
                          "retried": sum(st.retried > 0 for st in sts),
                          "retries": sum(st.retried for st in sts), "groups": self._groups[b],
                          "share": round(self._shares[b], 6),
                          "sampling_share": round(self._shares[b] / norm, 6) if b in live else 0.0,
                          "success_ema": self._ema[b]}
        d = self._dedupe
        return {"total": len(self._tasks), "held_out": len(self._held_out),
                "sample_calls": self._calls,
                "active": sum(v["active"] for v in buckets.values()),
                "set_aside": sum(v["set_aside"] for v in buckets.values()),
                "set_aside_keys": sorted(k for k, st in self._stats.items()
                                         if st.aside_at is not None),
                "shares": {b: buckets[b]["share"] for b in BUCKETS}, "buckets": buckets,
                "sources": {s: sum(t.source == s for t in self._tasks.values())
                            for s in get_args(Source)},
                "dedupe": {**d, "duplicates_count": len(d["duplicates"]),
                           "held_out_collisions_count": len(d["held_out_collisions"]),
                           "over_size_count": len(d["over_size"])}}


__all__ = ["BUCKETS", "HELD_OUT_SEED_START", "STATE_VERSION", "SYNTH_GENERATOR_GAP", "TRAIN_SEEDS",
           "Bucket", "Embedder", "HashingEmbedder", "PoolTask", "Rejected", "Source", "TaskPool",
           "bucket_of", "dedupe", "dynamic_tasks", "held_out_tasks", "miniwob_tasks", "pool_task",
           "sim_phone_tasks"]
