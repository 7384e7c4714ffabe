"""Distributed launch of the trainers: single process, DDP under `torchrun`, DeepSpeed ZeRO on GPUs.

Why one entry point: the same `python -m venus_core.runtime.mid_train ...` runs on a laptop (one
process, CPU), under `torchrun --nproc_per_node N` (DDP; gloo on CPU, NCCL on GPUs) and with
DeepSpeed ZeRO-2/3 on a GPU node; the backend is read from `MidTrainSpec.distributed` and the
environment torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK). Offline GRPO uses the same `setup` with
`offline_rl.distributed` (backends single, ddp and fsdp2: `venus_core.rl.distributed`).

DeepSpeed: `deepspeed_config` generates the JSON config from the spec (batch sizes, accumulation,
clipping, precision, ZeRO stage). DeepSpeed imports on a CPU-only machine but cannot train there
(its engine needs an accelerator); the CPU test suite checks the generated config only.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist

from venus_core.config.training import MidTrainSpec, RLDistributedSpec
from venus_core.models.placement import resolve_device


@dataclass(frozen=True)
class DistEnv:
    """Where this process sits: rank, world size, local rank and its device."""

    rank: int
    world: int
    local_rank: int
    device: torch.device
    backend: str  # "single", "ddp", "deepspeed" or (offline GRPO) "fsdp2"

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        if self.world > 1 and dist.is_initialized():
            dist.barrier()

    def all_ok(self, ok: bool) -> bool:
        """Whether `ok` holds on every rank (a collective: every rank must call it). Where a rank
        fails alone, a plain barrier after it would hang the others; this tells them instead."""
        if self.world <= 1 or not dist.is_initialized():
            return ok
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32, device=self.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN)
        return bool(flag.item())


def _env_int(name: str, default: int) -> int:
    raw = os.environ.get(name)
    if raw is None or raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"environment variable {name}={raw!r} is not an integer") from None


def setup(spec: MidTrainSpec | RLDistributedSpec, device: str | torch.device = "auto") -> DistEnv:
    """Initialise the process group when launched by torchrun (or when the spec asks for it).

    `spec`: the mid-training section, or offline GRPO's `offline_rl.distributed`. `device` "auto" is
    the local rank's GPU, else the CPU (`models.placement.resolve_device`); NCCL when it is a GPU,
    gloo otherwise. fsdp2 in one process is the single backend (nothing to shard over)."""
    world = _env_int("WORLD_SIZE", 1)
    rank = _env_int("RANK", 0)
    local = _env_int("LOCAL_RANK", 0)
    wanted = spec.backend if isinstance(spec, RLDistributedSpec) else spec.distributed.backend
    device = resolve_device(device)
    cuda = device.type == "cuda"
    if cuda:
        torch.cuda.set_device(device)
    if wanted == "deepspeed":
        if not cuda:
            raise RuntimeError("distributed.backend=deepspeed needs GPUs; use backend auto/ddp on CPU")
        backend = "deepspeed"
    elif wanted == "single" and world > 1:
        raise RuntimeError(f"distributed.backend=single but WORLD_SIZE={world}: launch without torchrun")
    elif wanted == "fsdp2":
        backend = "fsdp2" if world > 1 else "single"
    elif wanted == "ddp" or (wanted == "auto" and world > 1):
        backend = "ddp" if world > 1 else "single"
    else:
        backend = "single"
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if cuda else "gloo", rank=rank, world_size=world)
    return DistEnv(rank, world, local, device, backend)


def teardown(*, synchronize: bool = False) -> None:
    """Destroy the process group (a no-op in one process).

    `synchronize`: the job ended normally on every rank, so the ranks meet at a barrier first. A rank
    that destroys its group and exits while another still finishes its last collectives can leave
    that one hanging at exit (measured 2026-12-04: 1 of 65 two-rank gloo runs of tests/rl/grpo_dist_worker.py
    hung after rank 1 had exited; also pytorch/pytorch#75097). On an error path leave it False: the
    other ranks may be blocked in a different collective, and a barrier would hang this rank too."""
    if dist.is_initialized():
        if synchronize and dist.get_world_size() > 1:
            dist.barrier()
        dist.destroy_process_group()


def precision_dtype(spec: MidTrainSpec, device: torch.device) -> torch.dtype:
    """MidTrainSpec.precision -> compute dtype: auto = bf16 on GPU, fp32 on CPU."""
    if spec.precision == "bf16":
        return torch.bfloat16
    if spec.precision == "fp32":
        return torch.float32
    return torch.bfloat16 if device.type == "cuda" else torch.float32


def deepspeed_config(spec: MidTrainSpec, world_size: int) -> dict[str, Any]:
    """DeepSpeed JSON config of a mid-training run (ZeRO stage, batch sizes, clipping, precision).

    The optimizer and schedule stay ours (AdamW with the spec's betas, cosine with floor) and are
    passed to `deepspeed.initialize`; the config carries what the engine itself must know.
    """
    if world_size < 1:
        raise ValueError(f"world_size must be >= 1, got {world_size}")
    stage = spec.distributed.zero_stage
    zero: dict[str, Any] = {
        "stage": stage,
        "overlap_comm": True,
        "contiguous_gradients": True,
        "reduce_bucket_size": 5e8,
    }
    if stage >= 2:
        zero["allgather_bucket_size"] = 5e8
    if stage == 3:
        zero.update({
            "stage3_prefetch_bucket_size": 5e7,
            "stage3_param_persistence_threshold": 1e5,
            "stage3_gather_16bit_weights_on_model_save": True,
        })
    bf16 = spec.precision in ("auto", "bf16")  # DeepSpeed runs on GPUs only: auto means bf16
    return {
        "train_micro_batch_size_per_gpu": spec.batch_size,
        "gradient_accumulation_steps": spec.grad_accum,
        "train_batch_size": spec.batch_size * spec.grad_accum * world_size,
        "gradient_clipping": spec.max_grad_norm,
        "bf16": {"enabled": bf16},
        "fp16": {"enabled": False},
        "zero_optimization": zero,
        "steps_per_print": spec.eval_every,
        "wall_clock_breakdown": False,
    }


def _transformers_model(model: torch.nn.Module) -> Any:
    return model.get_base_model() if hasattr(model, "get_base_model") else model  # under a peft wrapper


def enable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """transformers' activation checkpointing (non-reentrant), also under a peft wrapper. (DeepSpeed's own
    `activation_checkpointing` section would act only on models that call `deepspeed.checkpointing`; a
    transformers model checkpoints through this switch, under any backend.)"""
    base = _transformers_model(model)
    if hasattr(base, "activation_checkpointing_enable"):  # transformers >= 5.x's name
        base.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
    else:
        base.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if hasattr(base, "enable_input_require_grads"):
        base.enable_input_require_grads()  # LoRA: frozen embeddings would cut the graph


def disable_gradient_checkpointing(model: torch.nn.Module) -> None:
    """Undo `enable_gradient_checkpointing` (before the model decodes or is handed on)."""
    base = _transformers_model(model)
    if hasattr(base, "activation_checkpointing_disable"):
        base.activation_checkpointing_disable()
    else:
        base.gradient_checkpointing_disable()


__all__ = ["DistEnv", "deepspeed_config", "disable_gradient_checkpointing", "enable_gradient_checkpointing", "precision_dtype", "setup", "teardown"]
