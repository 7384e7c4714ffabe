"""Phone state <-> JSON, so success checks can read a device's state over a shell command.

Why: AndroidWorld judges success from app state (it reads the apps' databases over adb), never
from pixels. The simulated phone exposes its whole state the same way: the shell command
`venus-state` prints it as JSON, and the env decodes it back into a `PhoneState` on which the
synthetic task's own predicates run. App states are frozen dataclasses of tuples, strings,
numbers, booleans and None (see `apps/base.py`), so a tagged encoding round-trips exactly:
dataclasses carry `"__dc__": "module:QualName"`, tuples become lists and come back as tuples.

Decoding only instantiates dataclasses defined under `venus_core.data.synth` (a state string is
input from a device; it must not name arbitrary classes).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from typing import Any

from venus_core.data.synth.phone import PhoneState

ALLOWED_PREFIX = "venus_core.data.synth."
TAG = "__dc__"
MAX_STATE_CHARS = 4 * 1024 * 1024


class StateDecodeError(ValueError):
    """A state JSON is malformed or names a type outside the synthetic world."""


def _enc(obj: Any) -> Any:
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        cls = type(obj)
        out: dict[str, Any] = {TAG: f"{cls.__module__}:{cls.__qualname__}"}
        for f in dataclasses.fields(obj):
            out[f.name] = _enc(getattr(obj, f.name))
        return out
    if isinstance(obj, tuple):
        return [_enc(x) for x in obj]
    if obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    raise TypeError(f"state encoding: unsupported value of type {type(obj).__name__}: {obj!r}")


def encode_state(state: PhoneState) -> str:
    """Compact JSON of a `PhoneState` (deterministic: fields in declaration order)."""
    return json.dumps(_enc(state), ensure_ascii=False, separators=(",", ":"))


def _resolve(tag: Any, path: str) -> type:
    if not isinstance(tag, str) or ":" not in tag:
        raise StateDecodeError(f"{path}: bad type tag {tag!r}")
    module, qual = tag.split(":", 1)
    if not (module + ".").startswith(ALLOWED_PREFIX):
        raise StateDecodeError(f"{path}: type {tag!r} is outside {ALLOWED_PREFIX}*")
    try:
        obj: Any = importlib.import_module(module)
        for part in qual.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError):
        raise StateDecodeError(f"{path}: unknown type {tag!r}") from None
    if not (isinstance(obj, type) and dataclasses.is_dataclass(obj)):
        raise StateDecodeError(f"{path}: {tag!r} is not a dataclass")
    return obj


def _dec(obj: Any, path: str) -> Any:
    if isinstance(obj, dict):
        cls = _resolve(obj.get(TAG), path)
        names = {f.name for f in dataclasses.fields(cls)}
        extra = set(obj) - names - {TAG}
        if extra:
            raise StateDecodeError(f"{path}: unknown fields {sorted(extra)} for {cls.__name__}")
        kwargs = {k: _dec(v, f"{path}.{k}") for k, v in obj.items() if k != TAG}
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise StateDecodeError(f"{path}: cannot build {cls.__name__}: {exc}") from None
    if isinstance(obj, list):
        return tuple(_dec(x, f"{path}[{i}]") for i, x in enumerate(obj))
    return obj


def decode_state(text: str | bytes) -> PhoneState:
    """Inverse of `encode_state`; errors name the JSON path that is wrong."""
    if isinstance(text, bytes):
        text = text.decode("utf-8")
    if len(text) > MAX_STATE_CHARS:
        raise StateDecodeError(f"state JSON of {len(text)} chars exceeds {MAX_STATE_CHARS}")
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise StateDecodeError(f"state is not JSON: {exc}") from None
    state = _dec(raw, "$")
    if not isinstance(state, PhoneState):
        raise StateDecodeError(f"$: expected a PhoneState, got {type(state).__name__}")
    return state
