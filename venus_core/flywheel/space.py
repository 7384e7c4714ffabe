"""Where the flywheel's tasks are instantiated: start states of the simulated phone, per round.

Why: a proposed task is only useful if a device can be put into a start state where its goal is
defined and a success check can judge it. On the simulated phone a concrete task is a `synth:`
reference (level, seed, language, screen size): the synthetic world's generator draws the start
state and the goal, the planner proves it reachable, and the env judges success on its state. So
"instantiating a seed" means choosing start states whose goal fits the seed: the rules expander
chooses among them, the openai expander's goals are looked up in them (`resolve`).

Each round draws its own window of training seeds (`first_seed + round * per_round`, for every
level), through the task pool's static builder (`rl.online.sim_phone_tasks`, which rejects plans
longer than the step limit: those are counted as `unplannable`). A candidate's parameters, read by
the rules expander, are its goal and where its first planned action acts (the 0-1000 point of a
Click / LongPress / ..., None for other actions).

Feasibility (`infeasible`): a task must be a sim-phone task with a success check, a training seed,
a plan within the step limit and the devices' screen size; a proposal that names no start state is
infeasible with the reason.

`CandidateSpace` is what this space and the MiniWoB++ one (`web_space.MiniWobSpace`: pages of a
web task instead of boards of a level) share: the round windows and the lookups by seed.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

from venus_core.flywheel.seeds import Seed, normalise
from venus_core.rl.online.sources import TRAIN_SEEDS, PoolTask, Rejected, sim_phone_tasks

Point = tuple[int, int]


@dataclass(frozen=True)
class Candidate:
    """A concrete task a device can start: the pool task and its parameters."""

    task: PoolTask
    point: Point | None  # where the first planned action acts (0-1000 frame)

    @property
    def key(self) -> str:
        return self.task.key

    @property
    def goal(self) -> str:
        return self.task.task.goal

    @property
    def level(self) -> int:
        return int(self.task.task.difficulty)


def first_point(task: PoolTask) -> Point | None:
    from venus_core.envs.simphone import synth_plan

    plan = synth_plan(task.task)
    box = getattr(plan[0], "box", None) if plan else None
    return (int(box[0]), int(box[1])) if box is not None else None


class CandidateSpace(ABC):
    """What the sim-phone and the MiniWoB++ spaces share: the rounds' seed windows and the lookups by
    seed. A subclass has `first_seed`, `per_round`, `seed`, `env` and implements the abstract methods
    (`family`: the level on the phone, the task on the web)."""

    env: str
    first_seed: int
    per_round: int
    max_steps: int
    seed: int

    @abstractmethod
    def family(self, seed: Seed) -> object:
        """The task family a seed's candidates are drawn from."""

    @abstractmethod
    def where(self, window: range) -> str:
        """What a proposal without a start state was not found among (for its reason)."""

    @abstractmethod
    def refused(self, task: PoolTask) -> str | None:
        """The env's own checks of a task's success reference: why it cannot run, or None."""

    def infeasible(self, task: PoolTask | None, goal: str = "", round_: int = 0) -> str | None:
        """Why `task` cannot run on this flywheel's devices, or None when it can."""
        if task is None:
            return f"no {self.where(self.window(round_))} has the goal {goal!r}"
        if task.env != self.env:
            return f"env {task.env!r} is not {self.env!r}"
        why = self.refused(task)
        if why is None and task.expected_steps > self.max_steps:
            why = f"{task.expected_steps} expected steps exceed the step limit {self.max_steps}"
        return why

    @abstractmethod
    def candidates(self, family: object, round_: int) -> list[Candidate]:
        """The candidate start states of `family` in the round's seed window."""

    @abstractmethod
    def fits(self, seed: Seed) -> str | None:
        """Why this space cannot instantiate `seed` (its env already checked), or None."""

    def check_seed(self, seed: Seed) -> None:
        """Fail closed on a seed this space cannot instantiate."""
        why = (f"env {seed.env!r}; this flywheel runs on {self.env!r}" if seed.env != self.env else self.fits(seed))
        if why is not None:
            raise ValueError(f"seed {seed.key}: {why}")

    def window(self, round_: int) -> range:
        start = self.first_seed + round_ * self.per_round
        seeds = range(start, start + self.per_round)
        if seeds.start < TRAIN_SEEDS.start or seeds.stop > TRAIN_SEEDS.stop:
            raise ValueError(f"round {round_}: seeds {seeds.start}..{seeds.stop - 1} leave the training seeds "
                             f"{TRAIN_SEEDS.start}..{TRAIN_SEEDS.stop - 1}")
        return seeds

    def for_seed(self, seed: Seed, round_: int) -> list[Candidate]:
        """The round's candidates that instantiate `seed` (its family, its app, a goal fitting its prompt)."""
        self.check_seed(seed)
        return [c for c in self.candidates(self.family(seed), round_)
                if (c.task.task.app or "") == seed.app and seed.matches(c.goal)]

    def resolve(self, goal: str, seed: Seed, round_: int, used: set[str]) -> Candidate | None:
        """A start state of the round whose task has exactly this goal (case and spacing ignored) and
        is not in `used`; seeded choice among them; None when the generator has no such state."""
        want = normalise(goal)
        found = [c for c in self.candidates(self.family(seed), round_)
                 if normalise(c.goal) == want and c.key not in used]
        if not found:
            return None
        return random.Random(f"{self.seed}:{round_}:{want}:{len(used)}").choice(found)


@dataclass
class SimPhoneSpace(CandidateSpace):
    """Candidate start states of the sim phone for `levels` at one screen `size`."""

    levels: Sequence[int]
    size: tuple[int, int]
    per_round: int
    first_seed: int
    max_steps: int
    lang: str = "en"
    seed: int = 0
    env: str = "sim-phone"
    state_checks: bool = True  # the env exposes its state: rules verify (False: the judge must)
    unplannable: dict[int, int] = field(default_factory=dict)  # round -> candidates rejected by the builder
    _cache: dict[tuple[int, int], list[Candidate]] = field(default_factory=dict)

    def family(self, seed: Seed) -> int:
        return seed.level

    def fits(self, seed: Seed) -> str | None:
        if seed.level not in self.levels:
            return (f"level {seed.level} is not among flywheel.levels {list(self.levels)} (the devices serve one "
                    f"screen size, {self.size[0]}x{self.size[1]})")
        return None

    def candidates(self, level: object, round_: int) -> list[Candidate]:
        """The round's start states of `level` (cached), in seed order."""
        assert isinstance(level, int)
        got = self._cache.get((level, round_))
        if got is None:
            bad: Rejected = []
            tasks = sim_phone_tasks([level], self.window(round_), lang=self.lang, size=self.size,
                                    max_steps=self.max_steps, rejected=bad)
            self.unplannable[round_] = self.unplannable.get(round_, 0) + len(bad)
            got = self._cache[(level, round_)] = [Candidate(t, first_point(t)) for t in tasks]
        return got

    def where(self, window: range) -> str:
        return f"start state of the sim phone (levels {list(self.levels)}, seeds {window.start}..{window.stop - 1})"

    def refused(self, task: PoolTask) -> str | None:
        from venus_core.envs.base import EnvError
        from venus_core.envs.simphone import SynthRef

        try:
            ref = SynthRef.parse(task.task.success_check)
        except EnvError as exc:
            return f"no rule success check: {exc}"
        if ref.level is None:
            return "free play: no goal predicate"
        if ref.seed not in TRAIN_SEEDS:
            return f"seed {ref.seed} is an evaluation / held-out seed"
        if ref.size != tuple(self.size):
            return f"made for {ref.size[0]}x{ref.size[1]} screens; the devices are {self.size[0]}x{self.size[1]}"
        return None

__all__ = ["Candidate", "CandidateSpace", "Point", "SimPhoneSpace", "first_point"]
