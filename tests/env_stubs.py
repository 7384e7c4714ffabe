"""A backend-less `Env` for tests of code around environments (the misuse guard, env openers).

Shared from tests/ (on sys.path through tests/conftest.py) so each such test does not re-declare
the five abstract members. It only has episode state and a recorded `close`; reset and step are
not for use (they fail the test if called)."""

from __future__ import annotations

from typing import Any

from venus_core.actions.space import Action
from venus_core.envs.base import Env, Observation, Task


class BareEnv(Env):
    """Episode state (`task`, `done`, `closed`) set by the test; `close` appends to `log`."""

    def __init__(self, name: str = "bare", log: list[str] | None = None) -> None:
        self.name = name
        self.log = log if log is not None else []
        self.task: Task | None = None
        self.done = False
        self.closed = False

    @property
    def supported_actions(self) -> frozenset[str]:
        return frozenset()

    def reset(self, task: Task) -> Observation:
        raise AssertionError("BareEnv.reset is not for use")

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        raise AssertionError("BareEnv.step is not for use")

    def is_successful(self) -> bool:
        raise AssertionError("BareEnv.is_successful is not for use")

    def close(self) -> None:
        self.closed = True
        self.log.append(f"closed {self.name}")
