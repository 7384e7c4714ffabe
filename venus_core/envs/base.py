"""The environment interface every backend implements (Gymnasium-style, GUI-agent flavoured).

Why: the online RL workers and the online evaluator must not care whether a screenshot comes from
a real phone, an emulator pod, the simulated phone or a browser. So one small interface:
`reset(task) -> Observation`, `step(action) -> (Observation, done, info)`, `is_successful()`,
`close()`. Success is judged from the backend's *state* (AndroidWorld reads app databases), never
from pixels. Departures from Gymnasium: no reward in `step` (rewards are computed by
`venus_core.rewards` from trajectories), and `done` folds together termination (Finished /
CallUser) and truncation (`Task.max_steps`, ≈30 in UI-Venus); `info["truncated"]` tells them apart.

Actions a backend cannot perform raise `UnsupportedAction` (typed, with the backend and the
action name) instead of being silently dropped: a model emitting a web-only action on a phone
must be told, and the reward/penalty code needs the reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, Literal, Self

from PIL import Image

from venus_core.actions.space import Action

DEFAULT_MAX_STEPS = 30


class EnvError(RuntimeError):
    """An environment was misused (step before reset, after done or close) or its device failed."""


class UnsupportedAction(EnvError):
    """The backend cannot perform this action (e.g. Hover on a phone)."""

    def __init__(self, backend: str, action: str, reason: str) -> None:
        self.backend = backend
        self.action = action
        self.reason = reason
        super().__init__(f"{backend}: cannot perform {action}: {reason}")


@dataclass(frozen=True)
class Task:
    """One episode's goal.

    `success_check` names how success is judged, e.g. "synth:<level>:<seed>:<lang>" for a task of
    the synthetic world (the env rebuilds the episode and its state predicate from it); a real
    device backend resolves its own references. `answer` is the expected Finished(content=...)
    of an information-retrieval task ("" when the goal is a state change).
    """

    goal: str
    app: str | None = None
    success_check: str = ""
    max_steps: int = DEFAULT_MAX_STEPS
    difficulty: int = 0
    answer: str = ""
    lang: str = "en"

    def __post_init__(self) -> None:
        if not self.goal.strip():
            raise ValueError("Task.goal is empty")
        if not 1 <= self.max_steps <= 1000:
            raise ValueError(f"Task.max_steps: {self.max_steps} is outside 1..1000")


@dataclass(frozen=True)
class Observation:
    """What the agent sees: a screenshot of `size` (width, height) and backend extras."""

    screenshot: Image.Image
    size: tuple[int, int]
    platform: str
    extras: dict[str, Any] = field(default_factory=dict)


class Env(ABC):
    """A GUI environment backend (see the module docstring)."""

    name: str = ""
    platform: str = "mobile"
    # Whether `reset` / `step` / `is_successful` of *different* instances may run at the same time
    # from several threads: true where the work happens outside the interpreter (a browser's
    # processes), so a caller driving many envs in lock step waits for the slowest, not the sum.
    concurrent: bool = False
    # Episode state that `_guard` reads; each backend sets these in __init__ / reset / step.
    task: Task | None
    done: bool
    closed: bool

    @property
    @abstractmethod
    def supported_actions(self) -> frozenset[str]:
        """Names of the unified actions this backend performs (others raise UnsupportedAction)."""

    @abstractmethod
    def reset(self, task: Task) -> Observation:
        """Start an episode of `task`; returns the first observation."""

    @abstractmethod
    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        """Perform `action`; returns (observation, done, info)."""

    @abstractmethod
    def is_successful(self) -> bool:
        """Whether the current episode's goal holds, judged from backend state."""

    @property
    def has_success_rule(self) -> bool:
        """Whether `is_successful` can judge this env's episodes (a device without a configured
        check cannot; online RL then asks an MLLM judge, `online_rl.success`)."""
        return True

    @abstractmethod
    def close(self) -> None:
        """Release devices, servers and connections (idempotent)."""

    def _guard(self, op: Literal["reset", "step"]) -> None:
        """Raise `EnvError` when `op` is misuse: any call after close; a step before reset or
        after the episode ended. One place for these checks so every backend words them alike
        (callers and tests match on the messages)."""
        if self.closed:
            raise EnvError(f"{self.name}: {op} after close")
        if op == "step":
            if self.task is None:
                raise EnvError(f"{self.name}: step before reset")
            if self.done:
                raise EnvError(f"{self.name}: the episode is over (done); call reset")

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
