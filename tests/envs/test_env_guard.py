"""`Env._guard`, the one misuse check every backend's reset/step calls: its exact messages.

Backends and callers match on these texts (the conformance suite runs them through real
backends); here a backend-less env (tests/env_stubs.py) pins each case without a device or
browser."""

from __future__ import annotations

import pytest
from env_stubs import BareEnv

from venus_core.envs.base import EnvError, Task


def test_step_before_reset_then_running_then_done() -> None:
    env = BareEnv()
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
    env = BareEnv()
    env.task = Task(goal="g")
    env.close()
    with pytest.raises(EnvError, match=rf"^bare: {op} after close$"):
        env._guard(op)  # type: ignore[arg-type]
