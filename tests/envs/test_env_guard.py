"""`Env._guard`, the one misuse check every backend's reset/step calls: its exact messages.

Backends and callers match on these texts (the conformance suite runs them through real
backends); here a bare `Env` subclass pins each case without a device or browser."""

from __future__ import annotations

from typing import Any

import pytest

from venus_core.actions.space import Action
from venus_core.envs.base import Env, EnvError, Observation, Task


class _Bare(Env):
    name = "bare"

    def __init__(self) -> None:
        self.task: Task | None = None
        self.done = False
        self.closed = False

    @property
    def supported_actions(self) -> frozenset[str]:
        return frozenset()

    def reset(self, task: Task) -> Observation:
        raise AssertionError("not used")

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        raise AssertionError("not used")

    def is_successful(self) -> bool:
        return False

    def close(self) -> None:
        self.closed = True


def test_step_before_reset_then_running_then_done() -> None:
    env = _Bare()
    env._guard("reset")  # a fresh env may reset
    with pytest.raises(EnvError, match=r"^bare: step before reset$"):
        env._guard("step")
    env.task = Task(goal="g")
    env._guard("step")  # running episode: allowed
    env.done = True
    with pytest.raises(EnvError, match=r"^bare: the episode is over \(done\); call reset$"):
        env._guard("step")
    env._guard("reset")  # a finished episode may be reset


@pytest.mark.parametrize("op", ["reset", "step"])
def test_anything_after_close(op: str) -> None:
    env = _Bare()
    env.task = Task(goal="g")
    env.close()
    with pytest.raises(EnvError, match=rf"^bare: {op} after close$"):
        env._guard(op)  # type: ignore[arg-type]
