"""`VenusWorkerExtension`: online-RL weight sync into a running vLLM server, from a checkpoint on disk.

Why: after every learner update the rollout server must sample from the new weights. vLLM's
OpenAI server has no from-disk reload route, but started with `VLLM_SERVER_DEV_MODE=1` it has
`POST /collective_rpc` (`{"method", "args", "kwargs", "timeout"}` -> `{"results": [...]}`, one
result per worker), and `--worker-extension-cls venus_core.rl.online.vllm_worker.VenusWorkerExtension`
mixes this class into vLLM's GPU worker, so `venus_load_weights(path)` runs inside every worker,
where `self.model_runner.model` is the served vLLM model and `self.device` its GPU. The model's
`load_weights(iterable of (HF name, tensor))` takes Hugging Face checkpoint names and shards them
itself (the usual RLHF weight-sync pattern). `ServerPolicy(kind="vllm")` calls it, then
`POST /reset_prefix_cache` (cached KV blocks were computed by the old weights).

`venus serve --dev-mode --worker-extension-cls ...` (`models.serve_rpc`) runs this same class on
its own serving "worker" (the loaded transformers model behind a `load_weights` adapter), which is
how it is tested here: vLLM cannot run on these machines, so the vLLM side itself is untested.

A load, in order (nothing served changes until step 3):
1. the directory is verified by the checks `venus serve` applies (`serve_weights.verify_checkpoint`):
   config.json of a supported architecture (the served model's, when the model exposes its HF
   config), safetensors weights, no pickle file anywhere, and a `SHA256SUMS` manifest — required
   here (the learner writes it last) — whose digests all match and which lists every weight file;
   with `$VENUS_WEIGHTS_ROOT` set, the directory must also lie under it;
2. every tensor is read once (`safe_open`, onto `self.device`): no name twice, no NaN / Inf;
3. the tensors are streamed again, one at a time, onto the device in the served dtype, into
   `model.load_weights`; when it returns the names it loaded (vLLM's models do) every parameter of
   the model must be among them, the check vLLM applies to a full load at start-up.
A refused checkpoint (1-2, or a `WeightsError` from the model's loader, which `venus serve`'s adapter
raises before copying anything) is answered `{"error", "unchanged": true}` and the served weights
are those of before. An error during step 3 may leave them half-updated: `{"error",
"unchanged": false}`, and the client must load a good checkpoint before sampling again. Errors are
returned, not raised, so their text reaches the client whatever the server makes of an exception.

Success: `{"path", "loaded": <tensors>, "version": <loads so far>, "digest": "sha256:<SHA256SUMS>"}`.
`venus_weights_version()` reports `{"version", "path", "digest", "dirty"}` of the last good load.

Importable without vLLM (torch and safetensors only when called): the rollout image installs
`venus_core` for it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from venus_core.models.serve_weights import WeightsError, non_finite, verify_checkpoint

WEIGHTS_ROOT_ENV = "VENUS_WEIGHTS_ROOT"
LOAD_METHOD = "venus_load_weights"
VERSION_METHOD = "venus_weights_version"
EXTENSION_CLS = "venus_core.rl.online.vllm_worker.VenusWorkerExtension"


def _weights_files(root: Path) -> list[Path]:
    return sorted(root.glob("*.safetensors"))


def _under_root(path: Path) -> None:
    """With `$VENUS_WEIGHTS_ROOT`, `path` (symlinks resolved) must lie under it."""
    root = os.environ.get(WEIGHTS_ROOT_ENV)
    if not root:
        return
    resolved, base = path.resolve(), Path(root).resolve()
    if resolved != base and base not in resolved.parents:
        raise WeightsError(f"{path}: outside ${WEIGHTS_ROOT_ENV} ({base}); this server loads weights only from there")


def _served_model_type(model: Any) -> str | None:
    """The served model's HF model_type when the model exposes its config (vLLM's models keep the
    HF config as `config`; `venus serve`'s adapter too); None: any supported architecture."""
    value = getattr(getattr(model, "config", None), "model_type", None)
    return value if isinstance(value, str) else None


def _served_dtype(model: Any) -> Any:
    """The one floating dtype of the model's parameters, or None (mixed or unknown: no cast)."""
    params = getattr(model, "parameters", None)
    if not callable(params):
        return None
    dtypes = {p.dtype for p in params() if p.is_floating_point()}
    return dtypes.pop() if len(dtypes) == 1 else None


def _device_name(device: Any) -> str:
    return "cpu" if device is None else str(device)


def check_tensors(files: list[Path], device: Any) -> int:
    """Step 2: read every tensor once; WeightsError on a repeated name or a non-finite value. The
    number of tensors."""
    from safetensors import safe_open

    seen: dict[str, str] = {}
    for file in files:
        with safe_open(str(file), framework="pt", device=_device_name(device)) as f:
            for name in f.keys():
                if name in seen:
                    raise WeightsError(f"{file.parent}: tensor {name} is in both {seen[name]} and {file.name}")
                seen[name] = file.name
                why = non_finite(name, f.get_tensor(name))
                if why is not None:
                    raise WeightsError(f"{file}: {why}")
    if not seen:
        raise WeightsError(f"{files[0].parent if files else '?'}: the checkpoint holds no tensors")
    return len(seen)


def stream_tensors(files: list[Path], device: Any, dtype: Any = None) -> Iterator[tuple[str, Any]]:
    """(name, tensor) one at a time, on `device`, floating tensors cast to `dtype` (when given)."""
    from safetensors import safe_open

    for file in files:
        with safe_open(str(file), framework="pt", device=_device_name(device)) as f:
            for name in f.keys():
                tensor = f.get_tensor(name)
                if dtype is not None and tensor.is_floating_point() and tensor.dtype != dtype:
                    tensor = tensor.to(dtype)
                yield name, tensor


class VenusWorkerExtension:
    """Mixed into vLLM's worker (`--worker-extension-cls`): reload the served weights from a verified
    checkpoint directory (module docstring). Needs `self.model_runner.model.load_weights` and
    `self.device`, which vLLM's GPU worker has."""

    def _venus_state(self) -> dict[str, Any]:
        state = self.__dict__.get("_venus_weights")
        if state is None:
            state = {"version": 0, "path": None, "digest": None, "dirty": False}
            self.__dict__["_venus_weights"] = state
        return state

    def venus_weights_version(self) -> dict[str, Any]:
        """`{"version", "path", "digest", "dirty"}`: the last good load (version 0: none yet); `dirty`
        when a later load failed halfway and the served weights are a mix."""
        return dict(self._venus_state())

    def venus_load_weights(self, path: str) -> dict[str, Any]:
        """Load the checkpoint directory `path` into the served model (module docstring)."""
        state = self._venus_state()
        model = self.model_runner.model  # type: ignore[attr-defined]
        device = getattr(self, "device", None)
        root = Path(str(path))
        t0 = time.perf_counter()

        def refused(why: str, unchanged: bool = True) -> dict[str, Any]:
            tail = "the served weights are unchanged" if unchanged else (
                "the served weights may be partially updated: load a good checkpoint before sampling")
            if not unchanged:
                state["dirty"] = True
            return {"path": str(path), "error": f"{why}; {tail}", "unchanged": unchanged,
                    "version": state["version"]}

        try:
            _under_root(root)
            digest = verify_checkpoint(root, _served_model_type(model), require_manifest=True)
            files = _weights_files(root)
            count = check_tensors(files, device)
        except WeightsError as exc:
            return refused(str(exc))
        except (OSError, RuntimeError, ValueError) as exc:  # an unreadable safetensors file, say
            return refused(f"{root}: cannot read the checkpoint: {type(exc).__name__}: {str(exc)[:500]}")
        try:
            loaded = model.load_weights(stream_tensors(files, device, _served_dtype(model)))
        except WeightsError as exc:  # refused by the model's loader before anything was copied
            return refused(str(exc))
        except Exception as exc:  # vLLM's loaders copy as they go: a failure can leave a mix
            return refused(f"{root}: load_weights failed: {type(exc).__name__}: {str(exc)[:500]}", unchanged=False)
        if isinstance(loaded, (set, frozenset)) and callable(getattr(model, "named_parameters", None)):
            missing = sorted({name for name, _ in model.named_parameters()} - set(loaded))
            if missing:
                return refused(f"{root}: the checkpoint did not cover {len(missing)} parameters of the served "
                               f"model, e.g. {missing[:3]}", unchanged=False)
        state.update(version=state["version"] + 1, path=str(path), digest=digest, dirty=False)
        return {"path": str(path), "loaded": count, "version": state["version"], "digest": digest,
                "seconds": round(time.perf_counter() - t0, 3)}


__all__ = ["EXTENSION_CLS", "LOAD_METHOD", "VERSION_METHOD", "WEIGHTS_ROOT_ENV", "VenusWorkerExtension",
           "check_tensors", "stream_tensors"]
