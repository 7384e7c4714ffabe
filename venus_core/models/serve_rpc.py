"""`venus serve --dev-mode`: vLLM's dev-mode routes, so the vLLM weight-sync path is tested for real here.

Why: online RL on a cluster syncs weights into vLLM through `POST /collective_rpc` (dev mode,
`VLLM_SERVER_DEV_MODE=1`) calling a method of the worker extension
(`--worker-extension-cls venus_core.rl.online.vllm_worker.VenusWorkerExtension`), then
`POST /reset_prefix_cache`. vLLM needs a GPU; `venus serve` offers the same two routes with the same
request and reply shapes, and runs the same extension class, so `ServerPolicy(kind="vllm")` and
`VenusWorkerExtension` run here exactly as they will against vLLM (what differs is vLLM's own model
loader, which is not tested).

- The serving "worker" (`ServeWorker`) is what vLLM's worker is to the extension: `model_runner.model`
  is the served transformers model behind `LoadWeightsAdapter`, whose `load_weights(iterable of
  (name, tensor))` takes checkpoint (= state_dict) names like vLLM's models do. Unlike vLLM's loaders
  it takes every tensor before copying any, and refuses (WeightsError, nothing copied) an unknown
  name, another shape, a non-floating or non-finite tensor, or a parameter left out; it returns the
  parameter names loaded, as vLLM's do. `--worker-extension-cls` mixes the class in as vLLM does (the worker's own
  attributes may not be redefined).
- `POST /collective_rpc` `{"method": str, "args": [...], "kwargs": {...}, "timeout": s | null}` calls
  `method` on the worker on the generation thread between batches (`Batcher.exclusive`: no request
  sees half-loaded weights) and answers `{"results": [result]}` (one worker; dicts, lists and None as
  they are, anything else as its str, as vLLM does). An unknown or private method is a 400, an
  exception a 500 naming it, a timeout a 500 (the call may still finish).
- `POST /reset_prefix_cache`: 200, empty (there is no prefix cache here); counted.
Both exist only in dev mode (`--dev-mode` or `VLLM_SERVER_DEV_MODE=1`, vLLM's switch). They are
unauthenticated and let any client that reaches the port call worker methods (read a directory of
the server's filesystem into the model): loopback or a network policy only.
"""

from __future__ import annotations

import asyncio
import functools
import importlib
import json
import os
from collections import Counter
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from venus_core.models.serve_protocol import BadRequest, error_body
from venus_core.models.serve_weights import WeightsError, non_finite

if TYPE_CHECKING:
    import torch

    from venus_core.models.serve_batcher import Batcher

DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


def dev_mode_from_env(environ: dict[str, str] | None = None) -> bool:
    """`VLLM_SERVER_DEV_MODE` as vLLM reads it: an integer, non-zero is on (unset: off)."""
    value = (os.environ if environ is None else environ).get(DEV_MODE_ENV, "0").strip() or "0"
    try:
        return bool(int(value))
    except ValueError:
        raise ValueError(f"${DEV_MODE_ENV} must be an integer (0 or 1), got {value!r}") from None


class LoadWeightsAdapter:
    """A transformers model seen through vLLM's model interface: `load_weights(iterable)` by name."""

    def __init__(self, model: Any) -> None:
        self.model = model
        self.config = model.config

    def parameters(self) -> Any:
        return self.model.parameters()

    def named_parameters(self) -> Any:
        return self.model.named_parameters()

    def load_weights(self, weights: Any) -> set[str]:
        """Copy `(name, tensor)` pairs into the model by state_dict name, all or nothing; the names
        of the parameters loaded (tied names included)."""
        import torch

        targets = self.model.state_dict(keep_vars=True)
        staged: dict[str, torch.Tensor] = {}
        for name, tensor in weights:
            target = targets.get(name)
            if target is None:
                raise WeightsError(f"tensor {name} is not in the served model (first names: {sorted(targets)[:3]})")
            if name in staged:
                raise WeightsError(f"tensor {name} given twice")
            if tuple(tensor.shape) != tuple(target.shape):
                raise WeightsError(f"tensor {name} has shape {tuple(tensor.shape)}; the served model's is "
                                   f"{tuple(target.shape)}")
            if not tensor.is_floating_point() or not target.is_floating_point():
                raise WeightsError(f"tensor {name} is {tensor.dtype}; the served model's is {target.dtype}")
            why = non_finite(name, tensor)
            if why is not None:
                raise WeightsError(why)
            staged[name] = tensor
        if not staged:
            raise WeightsError("no tensors given")
        given = {id(targets[name]) for name in staged}
        missing = sorted(name for name, p in self.model.named_parameters() if id(p) not in given)
        if missing:
            raise WeightsError(f"{len(missing)} parameters of the served model are not in the checkpoint, "
                               f"e.g. {missing[:3]}")
        with torch.no_grad():
            for name, tensor in staged.items():
                targets[name].copy_(tensor.to(targets[name].device, targets[name].dtype))
        return {name for name, p in self.model.named_parameters(remove_duplicate=False) if id(p) in given}


class ModelRunner:
    """What the extension reaches as `self.model_runner`."""

    def __init__(self, model: Any) -> None:
        self.model = LoadWeightsAdapter(model)


class ServeWorker:
    """The one serving worker of `venus serve` (vLLM's worker, as the extension sees it)."""

    INSTANCE_ATTRS = ("model_runner", "device")

    def __init__(self, model: Any) -> None:
        self.model_runner = ModelRunner(model)
        self.device = next(model.parameters()).device


def load_extension(qualname: str) -> type:
    """`pkg.mod.Class` -> the class; ValueError naming what is wrong."""
    module_name, _, attr = qualname.rpartition(".")
    if not module_name or not attr:
        raise ValueError(f"worker extension {qualname!r} is not a qualified class name (pkg.module.Class)")
    try:
        cls = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"worker extension {qualname!r} cannot be imported: {exc}") from None
    if not isinstance(cls, type):
        raise ValueError(f"worker extension {qualname!r} is a {type(cls).__name__}, not a class")
    return cls


def make_worker(model: Any, extension: str | type | None = None) -> ServeWorker:
    """A `ServeWorker` over `model`, with the extension class mixed in (vLLM's rule: the extension
    may not redefine an attribute of the worker)."""
    if extension is None:
        return ServeWorker(model)
    ext = load_extension(extension) if isinstance(extension, str) else extension
    clash = sorted(a for a in dir(ext) if not a.startswith("__")
                   and (hasattr(ServeWorker, a) or a in ServeWorker.INSTANCE_ATTRS))
    if clash:
        raise ValueError(f"worker extension {ext.__name__} redefines worker attribute(s) {clash}")
    cls = type(f"ServeWorker_{ext.__name__}", (ServeWorker, ext), {})
    return cls(model)  # type: ignore[no-any-return]


def _jsonable(result: Any) -> Any:
    return result if result is None or isinstance(result, (dict, list)) else str(result)


def _internal(message: str) -> JSONResponse:
    return JSONResponse(error_body(message, None, "internal_server_error", 500), status_code=500)


def add_dev_routes(app: FastAPI, batcher: Batcher, worker: ServeWorker) -> None:
    """POST /collective_rpc and POST /reset_prefix_cache on `app` (module docstring)."""
    calls: Counter[str] = Counter()
    app.state.dev_calls = calls

    def bad(param: str | None, message: str) -> JSONResponse:
        exc = BadRequest(param, message)
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.post("/collective_rpc")
    async def collective_rpc(request: Request) -> Response:
        try:
            body = json.loads(await request.body())
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            return bad(None, f"request body is not valid JSON: {exc}")
        if not isinstance(body, dict):
            return bad(None, f"request body must be a JSON object, got {type(body).__name__}")
        method, args, kwargs = body.get("method"), body.get("args", []), body.get("kwargs", {})
        timeout = body.get("timeout")
        if not isinstance(method, str) or not method:
            return bad("method", "is required: the name of a worker method")
        if not isinstance(args, list) or not isinstance(kwargs, dict):
            return bad("args", "args must be a list and kwargs an object")
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout <= 0):
            return bad("timeout", f"must be a number of seconds > 0 or null, got {timeout!r}")
        fn = getattr(worker, method, None) if not method.startswith("_") else None
        if not callable(fn):
            return bad("method", f"the worker has no method {method!r} (is --worker-extension-cls set?)")
        calls["collective_rpc"] += 1
        job = batcher.exclusive(functools.partial(fn, *args, **kwargs))
        try:
            result = await (job if timeout is None else asyncio.wait_for(job, float(timeout)))
        except TimeoutError:
            return _internal(f"collective_rpc {method}: timed out after {timeout} s (the call may still finish)")
        except Exception as exc:  # the method failed: reported, the server goes on
            return _internal(f"collective_rpc {method} failed: {type(exc).__name__}: {str(exc)[:500]}")
        return JSONResponse({"results": [_jsonable(result)]})

    @app.post("/reset_prefix_cache")
    async def reset_prefix_cache() -> Response:
        calls["reset_prefix_cache"] += 1
        return Response(status_code=200)


__all__ = ["DEV_MODE_ENV", "LoadWeightsAdapter", "ServeWorker", "add_dev_routes", "dev_mode_from_env",
           "load_extension", "make_worker"]
