"""Resumable training checkpoints: atomic directories of weights, optimizer, scheduler and RNG state.

Why: a mid-training job on a preemptible node must continue exactly where it stopped. A checkpoint
is a directory `step-NNNNNNNN/` written under a temporary name, every file fsynced, then renamed
into place (rename is atomic on POSIX), after which the `latest` pointer is replaced the same way;
a crash at any moment leaves either the previous checkpoint or the new one, never a torn one.

Contents, safetensors and JSON only (nothing is unpickled on load): `model.safetensors` (weights),
`optimizer.safetensors` (the optimizer state's tensors) with `optimizer.json` (the rest of its
state dict, tensors named by key), `rng.safetensors` (torch CPU / CUDA generator states),
`state.json` (step, scheduler state, data sampler position, Python and NumPy RNG states, anything
else the trainer adds), then `SHA256SUMS` over all of them (`models.integrity`). `load_checkpoint`
verifies the directory before reading it: a pickle file (the earlier `optimizer.pt` / `rng.pt`
format too), a missing or mismatching manifest, or a lying safetensors header is an error naming
the file. Only rank 0 writes; under DDP every rank holds the same weights and optimizer state.
FSDP2-sharded runs write the same files from whole state gathered on rank 0
(`train.fsdp2_checkpoint`; their state.json says `layout: fsdp2-full`, which this loader refuses:
the optimizer there is keyed by parameter name and the RNG states are per rank).
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from safetensors.torch import load_model as st_load_model
from safetensors.torch import save_model as st_save_model

from venus_core.models.integrity import verify_checkpoint_dir, write_manifest

LATEST = "latest"
_PREFIX = "step-"
_NAME = re.compile(r"^step-\d{8}$")
FILES = ("model.safetensors", "optimizer.safetensors", "optimizer.json", "rng.safetensors", "state.json")


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON-able Python/NumPy RNG states, tensor RNG states of torch CPU and CUDA)."""
    py = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()  # type: ignore[misc]
    plain = {
        "python": [py[0], list(py[1]), py[2]],
        "numpy": [name, np.asarray(keys).tolist(), int(pos), int(has_gauss), float(cached)],
    }
    tensors = {"torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, s in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"cuda{i}"] = s
    return plain, tensors


def set_rng_state(plain: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    v, state, gauss = plain["python"]
    random.setstate((v, tuple(state), gauss))
    name, keys, pos, has_gauss, cached = plain["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    torch.set_rng_state(tensors["torch"])
    cuda = [tensors[k] for k in sorted(k for k in tensors if k.startswith("cuda"))]
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(cuda)


def _encode(value: Any, key: str, tensors: dict[str, torch.Tensor]) -> Any:
    """A JSON form of an optimizer state-dict value; tensors go to `tensors` under `key`."""
    if isinstance(value, torch.Tensor):
        tensors[key] = value.detach().cpu().contiguous()
        return {"__tensor__": key}
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return {"__tuple__": [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]}
    if isinstance(value, list):
        return [_encode(v, f"{key}.{i}", tensors) for i, v in enumerate(value)]
    if isinstance(value, dict) and all(isinstance(k, (int, str)) for k in value):
        return {"__items__": [[k, _encode(v, f"{key}.{k}", tensors)] for k, v in value.items()]}
    raise TypeError(f"optimizer state {key}: a {type(value).__name__} cannot be saved as safetensors + JSON")


def _decode(value: Any, tensors: dict[str, torch.Tensor], where: Path) -> Any:
    if isinstance(value, list):
        return [_decode(v, tensors, where) for v in value]
    if isinstance(value, dict):
        if set(value) == {"__tensor__"}:
            if value["__tensor__"] not in tensors:
                raise ValueError(f"{where}: optimizer.json names tensor {value['__tensor__']!r}, "
                                 "which optimizer.safetensors does not hold")
            return tensors[value["__tensor__"]]
        if set(value) == {"__tuple__"}:
            return tuple(_decode(v, tensors, where) for v in value["__tuple__"])
        if set(value) == {"__items__"}:
            return {k: _decode(v, tensors, where) for k, v in value["__items__"]}
        raise ValueError(f"{where}: optimizer.json holds an object of unknown form (keys {sorted(value)[:3]})")
    return value


def write_optimizer(directory: Path, state: dict[str, Any]) -> None:
    """An optimizer state dict as `optimizer.safetensors` (its tensors) + `optimizer.json` (the rest)."""
    tensors: dict[str, torch.Tensor] = {}
    encoded = _encode(state, "optimizer", tensors)
    save_file(tensors, str(directory / "optimizer.safetensors"))
    (directory / "optimizer.json").write_text(json.dumps(encoded), encoding="utf-8")


def read_optimizer(path: Path) -> dict[str, Any]:
    """The optimizer state dict `write_optimizer` wrote in checkpoint `path` (already verified)."""
    try:
        raw = json.loads((path / "optimizer.json").read_text(encoding="utf-8"))
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"checkpoint {path}: optimizer.json is not valid JSON: {exc}") from None
    return _decode(raw, load_file(str(path / "optimizer.safetensors")), path)  # type: ignore[no-any-return]


def read_state(path: Path) -> dict[str, Any]:
    """state.json of checkpoint `path` (already verified)."""
    try:
        return json.loads((path / "state.json").read_text(encoding="utf-8"))  # type: ignore[no-any-return]
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"checkpoint {path}: state.json is not valid JSON: {exc}") from None


def write_checkpoint_dir(root: str | Path, step: int, write: Callable[[Path], None], *, keep: int = 2) -> Path:
    """Checkpoint `step` under `root`, atomically: `write(tmp)` fills a temporary directory, then
    SHA256SUMS, fsync, rename into place, the `latest` pointer; keep the newest `keep`."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    final = root / f"{_PREFIX}{step:08d}"
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{final.name}-", dir=root))
    try:
        write(tmp)
        write_manifest(tmp)
        for f in tmp.iterdir():
            _fsync(f)
        _fsync(tmp)
        if final.exists():
            shutil.rmtree(final)
        os.replace(tmp, final)
        _fsync(root)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    pointer_tmp = root / f".{LATEST}.tmp"
    pointer_tmp.write_text(final.name, encoding="utf-8")
    _fsync(pointer_tmp)
    os.replace(pointer_tmp, root / LATEST)
    _fsync(root)
    old = sorted(p for p in root.iterdir() if p.is_dir() and p.name.startswith(_PREFIX))[:-keep] if keep > 0 else []
    for p in old:
        shutil.rmtree(p, ignore_errors=True)
    return final


def save_checkpoint(
    root: str | Path,
    step: int,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state: dict[str, Any],
    *,
    keep: int = 2,
    extra_models: dict[str, torch.nn.Module] | None = None,
) -> Path:
    """Write checkpoint `step` under `root` atomically; keep the newest `keep` checkpoints.
    `extra_models` (e.g. an RL reference policy) are saved beside the weights as `<name>.safetensors`."""

    def write(tmp: Path) -> None:
        st_save_model(model, str(tmp / "model.safetensors"))
        for name, extra in (extra_models or {}).items():
            st_save_model(extra, str(tmp / f"{name}.safetensors"))
        write_optimizer(tmp, optimizer.state_dict())
        plain_rng, tensor_rng = rng_state()
        save_file({k: v.contiguous() for k, v in tensor_rng.items()}, str(tmp / "rng.safetensors"))
        (tmp / "state.json").write_text(json.dumps({"step": step, "rng": plain_rng, **state}), encoding="utf-8")

    return write_checkpoint_dir(root, step, write, keep=keep)


def latest_checkpoint(root: str | Path) -> Path | None:
    """The checkpoint the `latest` pointer names (None when there is none)."""
    root = Path(root)
    pointer = root / LATEST
    if not pointer.is_file():
        return None
    name = pointer.read_text(encoding="utf-8", errors="replace").strip()
    if not _NAME.match(name):  # never a path: "../elsewhere" or "/abs" would leave the root
        raise ValueError(f"{pointer}: names {name[:80]!r}, not a checkpoint directory name (step-NNNNNNNN)")
    path = root / name
    if not (path / "state.json").is_file():
        raise FileNotFoundError(f"{pointer} names {path.name}, which is missing or incomplete")
    return path


def load_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer | None,
                    *, extra_models: dict[str, torch.nn.Module] | None = None) -> dict[str, Any]:
    """Restore weights, optimizer and RNG state from `path` after verifying it (module doc);
    returns its state.json (step, sampler, ...)."""
    path = Path(path)
    extras = extra_models or {}
    for name in (*FILES, *(f"{n}.safetensors" for n in extras)):
        if not (path / name).is_file():
            raise FileNotFoundError(f"checkpoint {path}: {name} is missing")
    verify_checkpoint_dir(path, require_manifest=True)
    state = read_state(path)
    if "layout" in state:  # e.g. "fsdp2-full": parameter-name keyed optimizer, per-rank RNG (train.fsdp2_checkpoint)
        raise ValueError(f"checkpoint {path} was written by a {state['layout']!r} run: resume it with that backend")
    missing, unexpected = st_load_model(model, str(path / "model.safetensors"), strict=False)
    if missing or unexpected:
        raise ValueError(f"checkpoint {path}: weights do not match the model (missing {missing}, unexpected {unexpected})")
    for name, extra in extras.items():
        missing, unexpected = st_load_model(extra, str(path / f"{name}.safetensors"), strict=False)
        if missing or unexpected:
            raise ValueError(f"checkpoint {path}: {name}.safetensors does not match (missing {missing}, "
                             f"unexpected {unexpected})")
    if optimizer is not None:
        optimizer.load_state_dict(read_optimizer(path))
    set_rng_state(state["rng"], load_file(str(path / "rng.safetensors")))
    return state


__all__ = ["FILES", "latest_checkpoint", "load_checkpoint", "read_optimizer", "read_state", "rng_state",
           "save_checkpoint", "set_rng_state", "write_checkpoint_dir", "write_optimizer"]
