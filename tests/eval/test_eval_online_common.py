"""`eval.online_common`: the item parser and env opener every online target uses (the sim-phone
and MiniWoB targets are tested through them in test_eval_online / test_eval_online_web)."""

from __future__ import annotations

from typing import Any

import pytest
from env_stubs import BareEnv

from venus_core.envs.base import Env
from venus_core.eval.online_common import open_envs, parse_items


def _ints(key: str, value: str) -> dict[str, Any]:
    if key not in ("a", "b"):
        raise ValueError("unknown key; known: a, b")
    return {key: int(value)}


def test_parse_items_collects_fields_and_skips_empty_items() -> None:
    assert parse_items("t:a=1,,b=2, a=3 ", "a=1,,b=2, a=3 ", _ints) == {"a": 3, "b": 2}
    assert parse_items("t", "", _ints) == {}


@pytest.mark.parametrize(("rest", "why"), [("a", "expected key=value"), ("c=1", "unknown key"),
                                           ("a=x", "invalid literal")])
def test_parse_items_errors_name_target_and_item(rest: str, why: str) -> None:
    with pytest.raises(ValueError, match=rf"^online target 't:{rest}': '{rest}': {why}"):
        parse_items(f"t:{rest}", rest, _ints)


def test_open_envs_closes_the_started_ones_when_one_fails() -> None:
    log: list[str] = []
    made = iter(range(5))

    def make() -> Env:
        i = next(made)
        if i == 2:
            raise OSError("no device")
        return BareEnv(f"e{i}", log)

    with pytest.raises(OSError, match="no device"):
        open_envs(4, make)
    assert log == ["closed e0", "closed e1"]
    envs = open_envs(2, lambda: BareEnv("ok", log))
    assert len(envs) == 2 and log == ["closed e0", "closed e1"]
