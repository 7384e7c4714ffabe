"""Where the flywheel's web tasks are instantiated: MiniWoB++ pages, per task and round.

Why: the issue asks for seeds per app / site; on the web the sites are MiniWoB++ tasks, which
online RL's web domain already plays (`runtime.online_rl`: `MiniWobEnv` browser contexts in process,
tasks `miniwob:<task>,seed=<S>`, success = the page's own JS reward). A concrete web task is one
page: the task's generator, seeded through `Math.seedrandom`, draws the layout and the utterance
(the goal). So instantiating a seed means choosing page seeds of its task whose goal fits the
seed's prompt, as `SimPhoneSpace` chooses boards of a level (`CandidateSpace`: the same round
windows of training seeds and lookups).

Each round generates its own window of page seeds (`first_seed + round * per_round`, for every
task) on one page of its own (`MiniWobEnv.make_task`, one page load each: ~0.1-0.2 s on the
project's loaded 2-core machine) through the task pool's static builder (`rl.online.miniwob_tasks`).
A candidate's parameters, read by the rules expander, are its goal and where the task's DOM oracle
(`envs.miniwob_oracle`) would act first: the oracle reads the fresh page's DOM and computes its
first step without executing anything (one JS evaluation), so the point is cheap; it is None for a
task without an oracle, a first action without a point (Type, Wait) or a page the oracle does not
recognise (counted per round: `no_point`). A candidate's start fingerprint is the page's layout
(`MiniWobEnv.page_fingerprint`), so the pool's dedupe treats two seeds that build the same page
as one task, and the same goal on another layout as another task.

Expected steps: the oracle's solved episode on seed 0 (`miniwob_collect.oracle_steps`, as online
RL's web pool), one figure per task (click-checkboxes varies with the seed: an estimate there). A
task without an oracle has no step count: it is assumed to fit the step limit (the report says
which tasks are assumed). A task whose oracle needs more steps than the limit has no feasible page:
its window is counted as `unplannable` without loading pages.

Held out (`held_out`): online RL's web held-out tasks (`online_rl.web_tasks` round robin, seeds
from `HELD_OUT_SEED_START`), built with the same fingerprints; evaluation seeds (100000+) are
outside every window (`TRAIN_SEEDS`).

Feasibility (`infeasible`): a task must be a MiniWoB++ page of one of the space's tasks, on a
training seed, within the step limit; a proposal that names no page is infeasible with the reason.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from venus_core.flywheel.seeds import Seed
from venus_core.flywheel.space import Candidate, CandidateSpace, Point
from venus_core.rl.online.sources import TRAIN_SEEDS, PoolTask, Rejected, miniwob_held_out_tasks, miniwob_tasks

ENV = "miniwob"
ORACLE_STEP_LIMIT = 50  # the oracles' step counts are measured under this limit, then compared with the flywheel's


@dataclass
class MiniWobSpace(CandidateSpace):
    """Candidate pages of the MiniWoB++ `tasks`, generated on `page` (a `MiniWobEnv` the caller owns)."""

    page: Any  # MiniWobEnv
    tasks: Sequence[str]
    per_round: int
    first_seed: int
    max_steps: int
    seed: int = 0
    env: str = ENV
    state_checks: bool = True  # the page's reward is a rule on env state
    steps: dict[str, int] = field(default_factory=dict)  # expected steps per task (the oracle's), or assumed
    assumed: list[str] = field(default_factory=list)  # tasks without an oracle: steps assumed = max_steps
    unplannable: dict[int, int] = field(default_factory=dict)  # round -> candidates over the step limit
    generated: dict[int, dict[str, float]] = field(default_factory=dict)  # round -> pages, no_point, seconds
    _cache: dict[tuple[str, int], list[Candidate]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        from venus_core.envs.miniwob import task_names
        from venus_core.envs.miniwob_collect import oracle_steps
        from venus_core.envs.miniwob_oracle import SOLVERS

        if not self.tasks:
            raise ValueError("the MiniWoB++ flywheel needs at least one task")
        unknown = [t for t in self.tasks if t not in task_names()]
        if unknown:
            raise ValueError(f"unknown MiniWoB task(s) {unknown} ({len(task_names())} known)")
        self.tasks = list(dict.fromkeys(self.tasks))
        with_oracle = [t for t in self.tasks if t in SOLVERS]
        self.steps = {**oracle_steps(self.page, with_oracle, ORACLE_STEP_LIMIT), **self.steps}
        self.assumed = [t for t in self.tasks if t not in self.steps]
        self.steps.update({t: self.max_steps for t in self.assumed})

    def family(self, seed: Seed) -> str:
        return seed.app

    def fits(self, seed: Seed) -> str | None:
        if seed.app not in self.tasks:
            return f"MiniWoB task {seed.app!r} is not among the flywheel's tasks {list(self.tasks)}"
        if seed.level != 0:
            return f"level {seed.level}; MiniWoB++ seeds have no curriculum level (0)"
        return None

    def _stat(self, round_: int, key: str, value: float) -> None:
        row = self.generated.setdefault(round_, {"pages": 0, "no_point": 0, "seconds": 0.0})
        row[key] = round(row[key] + value, 2)

    def _first_point(self, name: str) -> Point | None:
        """Where the task's oracle would act first on the fresh page (None: no oracle / no point)."""
        from venus_core.envs.miniwob_oracle import SOLVERS, OracleError, Page

        if name not in SOLVERS:
            return None
        try:
            step = next(SOLVERS[name](Page(self.page)))
        except (OracleError, StopIteration):
            return None
        box = getattr(step.action, "box", None)
        return (int(box[0]), int(box[1])) if box is not None else None

    def _make(self, name: str, seed: int, info: dict[str, tuple[Point | None, str]], max_steps: int | None = None
              ) -> Any:
        task = self.page.make_task(name, seed, max_steps=max_steps or self.max_steps)
        info[task.success_check] = (self._first_point(name), self.page.page_fingerprint())
        return task

    def candidates(self, name: object, round_: int) -> list[Candidate]:
        """The round's pages of task `name` (cached), in seed order."""
        assert isinstance(name, str)
        got = self._cache.get((name, round_))
        if got is not None:
            return got
        window = self.window(round_)
        if self.steps[name] > self.max_steps:  # no page of it can be solved within the limit: none loaded
            self.unplannable[round_] = self.unplannable.get(round_, 0) + len(window)
            got = self._cache[(name, round_)] = []
            return got
        t0 = time.perf_counter()
        info: dict[str, tuple[Point | None, str]] = {}
        bad: Rejected = []
        tasks = miniwob_tasks([name], window, lambda n, s: self._make(n, s, info),
                              expected_steps=lambda t: self.steps[name], start=lambda t: info[t.success_check][1],
                              rejected=bad)
        got = [Candidate(t, info[t.task.success_check][0]) for t in tasks]
        self.unplannable[round_] = self.unplannable.get(round_, 0) + len(bad)
        self._stat(round_, "pages", len(window))
        self._stat(round_, "no_point", sum(c.point is None for c in got))
        self._stat(round_, "seconds", time.perf_counter() - t0)
        self._cache[(name, round_)] = got
        return got

    def sample(self, n: int = 8) -> list[PoolTask]:
        """Pages of every task on training seeds 0..n-1 (what `seeds.pool_seeds` derives templates from;
        made under the oracles' step limit, so that a task over the flywheel's limit still gets its seed
        and its pages are then counted as unplannable, not left out)."""
        info: dict[str, tuple[Point | None, str]] = {}
        return miniwob_tasks(self.tasks, range(n), lambda name, s: self._make(name, s, info, ORACLE_STEP_LIMIT),
                             expected_steps=lambda t: self.steps[t.app or ""], start=lambda t: info[t.success_check][1])

    def held_out(self, names: Sequence[str], n: int) -> list[PoolTask]:
        """Online RL's web held-out tasks: `names` round robin on seeds HELD_OUT_SEED_START + i."""
        from venus_core.envs.miniwob_collect import oracle_steps

        missing = [t for t in dict.fromkeys(names) if t not in self.steps]
        steps = {**self.steps, **(oracle_steps(self.page, missing, ORACLE_STEP_LIMIT) if missing else {})}
        return miniwob_held_out_tasks(names, n, lambda name, s: self.page.make_task(name, s, max_steps=self.max_steps),
                                      steps, start=lambda _: self.page.page_fingerprint(), env=self.env)

    def where(self, window: range) -> str:
        return f"page of the MiniWoB tasks {list(self.tasks)} (seeds {window.start}..{window.stop - 1})"

    def refused(self, task: PoolTask) -> str | None:
        from venus_core.envs.base import EnvError
        from venus_core.envs.miniwob import parse_ref

        try:
            name, seed = parse_ref(task.task.success_check)
        except EnvError as exc:
            return f"no rule success check: {exc}"
        if name not in self.tasks:
            return f"MiniWoB task {name!r} is not among the flywheel's tasks {list(self.tasks)}"
        if seed not in TRAIN_SEEDS:
            return f"seed {seed} is an evaluation / held-out seed"
        return None

__all__ = ["ENV", "MiniWobSpace"]
