"""Offline GRPO across processes: the policy's wrapper (DDP or FSDP2), full weights for rollouts,
and the few collectives the trainer needs (gather the rollouts' scores, sum the loss parts).

How a step is split (`rl.grpo.OfflineGRPO.step`): the global batch is `prompts_per_step` groups;
rank r samples, scores and trains on groups r, r + world, ... (`train.mixture.split_for_rank`, as
mid-training splits its samples). A group never straddles ranks: its advantages are normalised
over its own G rewards, so they are exact on the rank that holds it. Each group is sampled from
its own seed, so its completions are the same whichever rank (and whatever world size) samples it.
The loss is divided by the *global* batch's token count and multiplied by the world size, so when
DDP (or FSDP2's reduce-scatter) averages the gradients, the result is the one-process gradient of
the token-level mean over the whole batch (tests/rl/test_rl_distributed.py: two gloo processes end
with the one-process weights). Every rank runs every update pass, a rank whose share of a
minibatch is empty with a zero-weighted pass over one of its groups, so the collectives match.

Sharding for 8B / 30B-A3B: FSDP2 (`torch.distributed.fsdp.fully_shard`, `offline_rl.distributed.
backend: fsdp2`), not DeepSpeed ZeRO-3, because the RL step alternates generation with training in
one process. With FSDP2 the rollout unshards the policy once (`full_weights`: one all-gather per
layer, then decoding runs without collectives, so ranks whose completions end at different lengths
do not have to stay in lock-step), and training reshards it; ZeRO-3 gathers parameters inside its
forward hooks on every decoded token, across all ranks in lock-step, and its engine owns the
backward / step / accumulation that GRPO's own minibatch loop, LoRA reference (adapters switched
off) and zero-weighted passes need. FSDP2 is plain torch: our AdamW and `clip_grad_norm_` run on
its DTensors, it runs on gloo (so the CPU tests exercise it) and on NCCL, and it takes a device
mesh for hybrid sharding across nodes. Decoder layers and vision blocks (`_no_split_modules`) are
sharded one by one, then the root; on GPU the parameters are all-gathered in bf16 and gradients
reduced in fp32 over fp32 master weights. The frozen reference is sharded the same way (a 30B-A3B
reference would not fit whole on each GPU beside the policy). DDP (`backend: ddp`) replicates
everything and suits models that fit one GPU with their optimizer (2B; the tiny default on CPU).
Checkpoints of an FSDP2 run gather the whole weights and optimizer state on rank 0 and write
safetensors (`venus_core.train.fsdp2_checkpoint`); the exported model too (`full_state_dict`,
LoRA merged there: `rl.grpo.OfflineGRPO.export`).

Gradient checkpointing (`offline_rl.distributed.gradient_checkpointing`, auto = on GPU) trades a
second forward for activation memory; with it, the training log-prob pass runs as the plain
(prompt + completion) pass instead of the shared-prefix one, whose KV cache transformers turns
off under checkpointing.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
import torch.distributed as dist

from venus_core.train.distributed import DistEnv


def single_env(device: torch.device) -> DistEnv:
    """The environment of an ordinary one-process run."""
    return DistEnv(rank=0, world=1, local_rank=0, device=device, backend="single")


def _shard_units(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The modules FSDP2 shards one by one: the model's `_no_split_modules` (decoder layers,
    vision blocks), found also under a peft wrapper."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    names = set(getattr(base, "_no_split_modules", None) or [])
    if not names:
        raise ValueError(f"{type(base).__name__} names no _no_split_modules: cannot choose FSDP2 units")
    return [m for m in model.modules() if type(m).__name__ in names]


def fsdp2_shard(model: torch.nn.Module, env: DistEnv) -> torch.nn.Module:
    """Shard `model` in place with FSDP2 over all ranks; returns it (now an FSDPModule)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mesh = init_device_mesh(env.device.type, (env.world,))
    mp = (MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
          if env.device.type == "cuda" else MixedPrecisionPolicy())
    for unit in _shard_units(model):
        fully_shard(unit, mesh=mesh, mp_policy=mp)
    fully_shard(model, mesh=mesh, mp_policy=mp)
    return model


def wrap_policy(model: torch.nn.Module, env: DistEnv) -> torch.nn.Module:
    """The module the training passes call: `model` itself (single), its DDP wrapper, or `model`
    sharded in place (fsdp2). Build the optimizer after this (FSDP2 replaces the parameters)."""
    if env.backend == "ddp":
        from torch.nn.parallel import DistributedDataParallel

        return DistributedDataParallel(model, device_ids=[env.device.index] if env.device.type == "cuda" else None)
    if env.backend == "fsdp2":
        return fsdp2_shard(model, env)
    if env.backend != "single":
        raise ValueError(f"offline GRPO cannot run with backend {env.backend!r} (single, ddp or fsdp2)")
    return model


@contextlib.contextmanager
def full_weights(model: torch.nn.Module, env: DistEnv) -> Iterator[None]:
    """Inside, an FSDP2-sharded `model` holds its whole parameters (no collectives per forward);
    otherwise a no-op. Every rank must enter it."""
    if env.backend != "fsdp2":
        yield
        return
    from torch.distributed.fsdp import FSDPModule

    units = [m for m in model.modules() if isinstance(m, FSDPModule)]
    units[0].set_reshard_after_forward(False)  # type: ignore[operator]
    for m in units:
        m.unshard()  # type: ignore[operator]
    try:
        yield
    finally:
        for m in units:
            m.reshard()  # type: ignore[operator]
        units[0].set_reshard_after_forward(True)  # type: ignore[operator]


def gather(env: DistEnv, obj: Any) -> list[Any]:
    """`obj` of every rank, in rank order (pickled; small objects only)."""
    if env.world == 1:
        return [obj]
    out: list[Any] = [None] * env.world
    dist.all_gather_object(out, obj)
    return out


def all_sum(env: DistEnv, values: list[float]) -> list[float]:
    """Element-wise sum over ranks."""
    if env.world == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64, device=env.device if env.device.type == "cuda" else "cpu")
    dist.all_reduce(t)
    return [float(v) for v in t.tolist()]


def local_value(t: torch.Tensor) -> float:
    """A scalar that may be a DTensor (FSDP2's grad norm) as a float."""
    full = getattr(t, "full_tensor", None)
    return float(full() if callable(full) else t)


def full_state_dict(model: torch.nn.Module, env: DistEnv) -> dict[str, torch.Tensor] | None:
    """The whole weights of `model` on the CPU: on rank 0 (None on the others) under FSDP2, where
    every rank must call it; `model.state_dict()` otherwise."""
    if env.backend != "fsdp2":
        return None
    from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

    sd = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    return sd if env.is_main else None


__all__ = ["all_sum", "fsdp2_shard", "full_state_dict", "full_weights", "gather",
           "local_value", "single_env", "wrap_policy"]
