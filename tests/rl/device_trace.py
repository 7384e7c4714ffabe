"""A CPU stand-in for "the model is on a GPU": tag every tensor as on the model's device or on the host
and fail on an op that mixes the two.

Why: on a CPU-only machine the model's device *is* the host, so a tensor built without
`device=` (or never `.to(device)`-ed) works here and breaks on CUDA ("Expected all tensors to be on
the same device"). `DeviceTrace` (a `TorchFunctionMode`) follows where each tensor would be if the
model were elsewhere: the model's parameters and buffers are *device*; a `torch.device` read from
a tensor (`t.device`, `next(model.parameters()).device`) carries that tensor's place, so a tensor
created with `device=` such an object, or moved with `.to(it)` / `.to(other tensor)`, lands there;
tensors created without a device, `.cpu()`, `.to("cpu")` / a `torch.device("cpu")` made by hand
are *host*; every other op's result is device if any input is, else host. An op with both a device and a host input (0-dim host
tensors excepted, as CUDA accepts them) is recorded as a violation, with the Python frame that
called it. Ops CUDA allows across devices (indexing a device tensor with a host index or
assigning a host value into it, `copy_`) are not violations.

A move that changes nothing here (`.to(device)` of a CPU tensor returns that tensor) returns a
view instead, so the moved tensor and the original keep separate tags, as they would be separate
tensors on a GPU.

Limits: the device of `.to(torch.device("cpu"))` cannot be told from `.to(model_device)` on a CPU
machine (both are "device" here), and code that moves with a literal string other than "cpu" is
trusted. It checks the data flow of the paths it runs, not the ones it does not.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._pytree import tree_flatten

DEVICE, HOST = "device", "host"
_ATTR = "_venus_trace_place"

_CREATE = {
    torch.tensor, torch.as_tensor, torch.zeros, torch.ones, torch.full, torch.empty, torch.arange, torch.rand,
    torch.randn, torch.randint, torch.eye, torch.linspace, torch.from_numpy, torch.randperm,
}
_LIKE = {torch.zeros_like, torch.ones_like, torch.full_like, torch.empty_like, torch.rand_like, torch.randn_like}
_CROSS_OK = {torch.Tensor.__getitem__, torch.Tensor.__setitem__, torch.Tensor.copy_}
_NEW = {torch.Tensor.new_zeros, torch.Tensor.new_ones, torch.Tensor.new_full, torch.Tensor.new_empty,
        torch.Tensor.new_tensor}


def _tag(t: Any) -> str | None:
    return getattr(t, _ATTR, None) if isinstance(t, torch.Tensor) else None


def _set(out: Any, place: str | None) -> None:
    if place is None:
        return
    for t in tree_flatten(out)[0]:
        if isinstance(t, torch.Tensor):
            try:
                setattr(t, _ATTR, place)
            except (AttributeError, RuntimeError):
                pass


class DeviceTrace(TorchFunctionMode):
    def __init__(self, *models: torch.nn.Module) -> None:
        super().__init__()
        self.violations: list[str] = []
        self.ops = 0
        self._devices: dict[int, tuple[torch.device, str]] = {}  # id -> (the object, kept alive; its place)
        for m in models:
            for t in [*m.parameters(), *m.buffers()]:
                setattr(t, _ATTR, DEVICE)

    def _place_of(self, d: Any) -> str:
        """Where a `device=` / `.to()` argument points."""
        if isinstance(d, torch.device):
            known = self._devices.get(id(d))
            if known is not None and known[0] is d:
                return known[1]
            return HOST if d.type == "cpu" else DEVICE
        if isinstance(d, str):
            return HOST if d.split(":")[0] == "cpu" else DEVICE
        return DEVICE  # an int: a CUDA ordinal

    def _to_target(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> str | None:
        """Where `.to(...)` sends a tensor: DEVICE, HOST, or None (a dtype-only call keeps it)."""
        for a in (*args[1:], kwargs.get("device"), kwargs.get("other")):
            if isinstance(a, torch.Tensor):
                return _tag(a) or HOST
            if isinstance(a, (torch.device, str)) or (isinstance(a, int) and not isinstance(a, bool)):
                return self._place_of(a)
        return None

    def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        self.ops += 1
        name = getattr(func, "__name__", str(func))
        if isinstance(out, torch.device):  # `t.device`: remember whose it is
            place = _tag(args[0]) if args else None
            self._devices[id(out)] = (out, place or HOST)
            return out
        if func in _CREATE:
            dev = kwargs.get("device")
            _set(out, HOST if dev is None else self._place_of(dev))
            return out
        if func in _LIKE or func in _NEW:
            dev = kwargs.get("device")
            _set(out, (_tag(args[0]) or HOST) if dev is None else self._place_of(dev))
            return out
        if func in (torch.Tensor.cpu, torch.Tensor.to, torch.Tensor.cuda) and out is args[0]:
            out = out.view_as(out)  # a no-op move returns its input: give the moved tensor its own tag
        if func is torch.Tensor.cpu:
            _set(out, HOST)
            return out
        if func is torch.Tensor.to or func is torch.Tensor.cuda:
            target = DEVICE if func is torch.Tensor.cuda else self._to_target(args, kwargs)
            _set(out, target or _tag(args[0]))
            return out
        tensors = [t for t in tree_flatten((args, kwargs))[0] if isinstance(t, torch.Tensor)]
        tags = {_tag(t) for t in tensors if not (_tag(t) == HOST and t.dim() == 0)}
        if DEVICE in tags and HOST in tags and func not in _CROSS_OK:
            self.violations.append(f"{name}: device and host tensors mixed at {_caller()}")
        _set(out, DEVICE if DEVICE in tags else (HOST if tensors else None))
        return out


def _caller() -> str:
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if "venus_core" in path or "/tests/" in path:
            return f"{path.split('/venus_core/')[-1]}:{frame.f_lineno} ({frame.f_code.co_name})"
        frame = frame.f_back  # type: ignore[assignment]
    return "?"


@contextmanager
def device_trace(*models: torch.nn.Module) -> Iterator[DeviceTrace]:
    """Run the body with `DeviceTrace` over `models`; the caller asserts on `.violations`."""
    mode = DeviceTrace(*models)
    with mode:
        yield mode


__all__ = ["DEVICE", "HOST", "DeviceTrace", "device_trace"]
