"""What every online evaluation target shares: reading its `key=value,...` text and opening its
parallel environments.

Why a module of its own: each environment family has its own target (`online_sim` for the
simulated phone, `online_web` for MiniWoB++) with its own keys and env class, but the item syntax,
the wording of a bad item's error (it names the target and the item) and the rule that a failed
env start closes the envs already started must be the same for all of them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from venus_core.envs.base import Env


def parse_items(text: str, rest: str,
                convert: Callable[[str, str], dict[str, Any]]) -> dict[str, Any]:
    """The fields set by the comma-separated `key=value` items of `rest` (the part of target
    `text` after the colon). `convert(key, value)` returns the fields one item sets and raises
    ValueError for an unknown key or a bad value; that error, or a missing `=`, is re-raised
    naming the target and the item."""
    values: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in rest.split(","))):
        key, sep, value = item.partition("=")
        try:
            if not sep:
                raise ValueError("expected key=value")
            values.update(convert(key, value))
        except ValueError as exc:
            raise ValueError(f"online target {text!r}: {item!r}: {exc}") from None
    return values


def open_envs(count: int, make: Callable[[], Env]) -> list[Env]:
    """`count` envs from `make`; if one fails to start, those already started are closed and the
    error propagates (no leaked devices or browser contexts). The caller closes the result."""
    out: list[Env] = []
    try:
        for _ in range(count):
            out.append(make())
    except BaseException:
        for env in out:
            env.close()
        raise
    return out
