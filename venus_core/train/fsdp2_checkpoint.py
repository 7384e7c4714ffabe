"""Checkpoints of an FSDP2-sharded run: whole weights and optimizer state gathered on rank 0 and
written as safetensors + JSON, restored by broadcasting them back from rank 0 into the shards.

Why not torch.distributed.checkpoint's own files (`dcp.save`: one `.distcp` file per rank and a
`.metadata` file): that metadata file is a pickle, and the project's rule is that a checkpoint
holds safetensors and JSON only and is verified before anything reads it (`models.integrity`).
So the sharded state is turned into whole tensors with `torch.distributed.checkpoint.state_dict.
get_state_dict(full_state_dict=True, cpu_offload=True)` (every rank joins the all-gathers, one
tensor at a time; only rank 0 keeps the result, on its CPU), and rank 0 writes the files of
`train.checkpoint` in its atomic `step-N/` directories with SHA256SUMS:

- `model.safetensors`: the whole weights, under the names of the unwrapped model's state dict;
- `optimizer.safetensors` + `optimizer.json`: the whole optimizer state, keyed by parameter name
  (DSD's layout, not the parameter indices of `Optimizer.state_dict`);
- `rng.safetensors` (`rank<r>.torch`, `rank<r>.cuda<i>`) and, in `state.json`, `rng`: every rank's
  RNG states (LoRA dropout draws from each rank's own generator), gathered to rank 0;
- `state.json`: `layout: "fsdp2-full"`, the world size, the step and what the trainer adds.

Restoring: rank 0 alone checks the directory's files and verifies it (SHA256SUMS, no pickles, sound
safetensors headers), reads it, checks the names and shapes against the model, then
`set_model_state_dict` and `set_optimizer_state_dict` (`full_state_dict=True, broadcast_from_rank0=
True`) send each tensor to every rank, which keeps its shard. The other ranks read nothing from
disk, so a checkpoint that only rank 0's node can see (a ReadWriteOnce volume) resumes a
multi-node run too. The files do not depend on the world size: a run may resume on another number
of ranks (each rank then takes rank 0's RNG states; the rollouts are seeded per group, so only
dropout draws differ, and the gradients' reduction order, so it is exact only on the same number).
A failure on rank 0 (a bad file, a full disk) is broadcast, so every rank raises instead of
waiting in a collective.

Cost: rank 0's CPU memory holds the whole state while it writes or reads. For an 8B model
(Qwen3-VL-8B, ~8.8 B parameters) with AdamW: bf16 weights (`model.dtype: bfloat16`, the 8B
spec) 17.6 GB + two moment tensors 35 GB ≈ 53 GB; float32 master weights 35 + 70 ≈ 105 GB (less
with `freeze_vision`, whose frozen tower has no optimizer state). The 8B spec's offline_rl pod has
900 GiB. safetensors writes from the tensors' memory without a copy. GPU memory grows by one whole
tensor at a time. Sharded DCP files would spread that over the ranks; at 30B-A3B (~180 GB of bf16
weights and AdamW moments) this still fits one node's memory.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from safetensors.torch import load_file, save_file

from venus_core.models.integrity import verify_checkpoint_dir
from venus_core.train.checkpoint import (FILES, latest_checkpoint, read_optimizer, read_state, rng_state,
                                         set_rng_state, write_checkpoint_dir, write_optimizer)
from venus_core.train.distributed import DistEnv

LAYOUT = "fsdp2-full"

RankRng = tuple[dict[str, Any], dict[str, torch.Tensor]]
"""One rank's RNG states: (Python / NumPy, JSON-able; torch CPU / CUDA tensors), as `rng_state`."""


def _options(**kw: bool) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kw)


def _share(env: DistEnv, obj: Any) -> Any:
    """Rank 0's `obj` on every rank."""
    box = [obj if env.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


def _raise_shared(env: DistEnv, error: BaseException | None, what: str) -> None:
    """Every rank raises when rank 0 failed (`error`), so none waits in the next collective."""
    message = _share(env, None if error is None else f"{type(error).__name__}: {error}")
    if error is not None:
        raise error
    if message is not None:
        raise RuntimeError(f"rank 0 failed to {what}: {message}")


def save_fsdp2_checkpoint(root: str | Path, step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          state: dict[str, Any], env: DistEnv, *, keep: int = 2) -> Path:
    """Write checkpoint `step` under `root` (module doc); every rank must call it. Returns its path."""
    from torch.distributed.checkpoint.state_dict import get_state_dict

    weights, optim = get_state_dict(model, optimizer, options=_options(cpu_offload=True))  # {} except on rank 0
    rngs: list[RankRng | None] = [None] * env.world if env.is_main else []
    dist.gather_object(rng_state(), rngs if env.is_main else None, dst=0)
    final = Path(root) / f"step-{step:08d}"
    error: BaseException | None = None
    if env.is_main:

        def write(tmp: Path) -> None:
            save_file({k: v.contiguous() for k, v in weights.items()}, str(tmp / "model.safetensors"))
            write_optimizer(tmp, optim)
            tensors = {f"rank{r}.{k}": v.contiguous() for r, rng in enumerate(rngs) if rng for k, v in rng[1].items()}
            save_file(tensors, str(tmp / "rng.safetensors"))
            meta = {"step": step, "layout": LAYOUT, "world": env.world, "rng": [rng[0] for rng in rngs if rng]}
            (tmp / "state.json").write_text(json.dumps({**state, **meta}), encoding="utf-8")

        try:
            final = write_checkpoint_dir(root, step, write, keep=keep)
        except (OSError, ValueError, TypeError, RuntimeError) as exc:
            error = exc
    _raise_shared(env, error, f"write checkpoint {final}")
    return final


def latest_fsdp2_checkpoint(root: str | Path, env: DistEnv) -> Path | None:
    """The checkpoint `root`'s `latest` pointer names, as rank 0 sees it, on every rank."""
    found: Path | None = None
    error: BaseException | None = None
    if env.is_main:
        try:
            found = latest_checkpoint(root)
        except (OSError, ValueError) as exc:
            error = exc
    _raise_shared(env, error, f"find the latest checkpoint under {root}")
    return _share(env, found)  # type: ignore[no-any-return]


def _read(path: Path, model: torch.nn.Module) -> tuple[dict[str, Any], dict[str, torch.Tensor], dict[str, Any],
                                                        list[RankRng]]:
    """(state.json, weights, optimizer state, RNG states per rank) of `path`, checked (rank 0)."""
    for name in FILES:
        if not (path / name).is_file():
            raise FileNotFoundError(f"checkpoint {path}: {name} is missing")
    verify_checkpoint_dir(path, require_manifest=True)
    state = read_state(path)
    if state.get("layout") != LAYOUT:
        raise ValueError(f"checkpoint {path} is not an FSDP2 checkpoint (layout {state.get('layout')!r}): "
                         "resume it with the backend that wrote it (single / ddp)")
    weights = load_file(str(path / "model.safetensors"))
    want = {k: tuple(v.shape) for k, v in model.state_dict().items()}  # DTensors report their whole shape
    got = {k: tuple(v.shape) for k, v in weights.items()}
    if want != got:
        wrong = sorted(k for k in want.keys() & got.keys() if want[k] != got[k])
        raise ValueError(f"checkpoint {path}: weights do not match the model (missing "
                         f"{sorted(want.keys() - got.keys())[:5]}, unexpected {sorted(got.keys() - want.keys())[:5]}, "
                         f"other shapes {wrong[:5]})")
    optim = read_optimizer(path)
    trainable = {n for n, p in model.named_parameters() if p.requires_grad}
    named = {n for g in optim.get("param_groups", []) for n in g.get("params", [])}
    if named != trainable:
        raise ValueError(f"checkpoint {path}: optimizer.json's parameters are not the model's trainable ones "
                         f"(missing {sorted(trainable - named)[:5]}, unexpected {sorted(named - trainable)[:5]})")
    tensors = load_file(str(path / "rng.safetensors"))
    rngs = [(plain, {k.split(".", 1)[1]: v for k, v in tensors.items() if k.startswith(f"rank{r}.")})
            for r, plain in enumerate(state["rng"])]
    if not rngs or any("torch" not in t for _, t in rngs):
        raise ValueError(f"checkpoint {path}: rng.safetensors lacks a rank's torch generator state")
    return state, weights, optim, rngs


def load_fsdp2_checkpoint(path: str | Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                          env: DistEnv) -> dict[str, Any]:
    """Restore an FSDP2-sharded `model` and its `optimizer` from `path` (module doc); every rank must
    call it. Returns the checkpoint's state.json on every rank."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict, set_optimizer_state_dict

    path = Path(path)
    weights: dict[str, torch.Tensor] = {}
    optim: dict[str, Any] = {}
    found: tuple[dict[str, Any], list[RankRng], list[str]] | None = None
    error: BaseException | None = None
    if env.is_main:
        try:
            state, weights, optim, rngs = _read(path, model)
            found = (state, rngs, sorted(optim.get("state", {})))
        except (OSError, ValueError) as exc:
            error = exc
    _raise_shared(env, error, f"read checkpoint {path}")
    state, rngs, stepped = _share(env, found)
    # Two calls, not set_state_dict: that one takes the empty model state dict of ranks > 0 for
    # "optimizer only" and skips the model's broadcast there (torch 2.13), leaving rank 0 waiting.
    # strict=False: rank 0 checked the names and shapes (`_read`); DSD's strict mode would refuse a
    # trainable parameter without optimizer state (no gradient yet when saved), which is legitimate.
    options = _options(broadcast_from_rank0=True, strict=False)
    set_model_state_dict(model, weights, options=options)
    set_optimizer_state_dict(model, optimizer, optim, options=options)
    # set_state_dict first gives every parameter a state (one zero-gradient step at lr 0); a
    # parameter that had none when saved must have none, or its first real step's bias correction
    # would count that step
    has_state = set(stepped)
    for name, param in model.named_parameters():
        if name not in has_state:
            optimizer.state.pop(param, None)
    set_rng_state(*(rngs[env.rank] if len(rngs) == env.world else rngs[0]))
    return state


__all__ = ["LAYOUT", "latest_fsdp2_checkpoint", "load_fsdp2_checkpoint", "save_fsdp2_checkpoint"]
