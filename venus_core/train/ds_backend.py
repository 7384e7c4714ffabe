"""DeepSpeed ZeRO-2/3 engine for mid-training on GPUs (`mid_train.distributed.backend: deepspeed`).

Why a separate module: DeepSpeed owns the optimizer step, gradient accumulation, clipping, bf16 and
its own sharded checkpoint format, so the trainer hands it our AdamW and cosine schedule once and
then only calls `backward` / `step`. Under ZeRO-3 the parameters are partitioned across ranks: every
rank must take part in forward passes (held-out evaluation runs on all ranks; greedy decoding of
the same prompts keeps them in lock-step) and in gathering the weights for the final HF checkpoint.

Not exercised here: DeepSpeed imports on a CPU-only machine but its engine needs an accelerator, so
this path is only run on GPU nodes; the CPU suite checks the generated config (`deepspeed_config`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from venus_core.config.training import MidTrainSpec
from venus_core.train.distributed import DistEnv, deepspeed_config


class DeepSpeedRun:
    """A model wrapped in a DeepSpeed engine with our optimizer and schedule."""

    def __init__(self, model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                 scheduler: torch.optim.lr_scheduler.LRScheduler, cfg: MidTrainSpec, env: DistEnv) -> None:
        import deepspeed

        self.cfg = cfg
        self.env = env
        self.engine, self.optimizer, _, self.scheduler = deepspeed.initialize(
            model=model, optimizer=optimizer, lr_scheduler=scheduler, config=deepspeed_config(cfg, env.world)
        )

    @property
    def zero3(self) -> bool:
        return self.cfg.distributed.zero_stage == 3

    def micro_step(self, batch: dict[str, torch.Tensor]) -> float:
        """Forward + backward of one micro-batch; the engine steps at accumulation boundaries."""
        dtype = torch.bfloat16 if deepspeed_config(self.cfg, self.env.world)["bf16"]["enabled"] else torch.float32
        moved = {k: (v.to(self.engine.device, dtype) if v.is_floating_point() else v.to(self.engine.device))
                 for k, v in batch.items()}
        loss = self.engine(**moved).loss  # the engine divides by gradient_accumulation_steps
        self.engine.backward(loss)
        self.engine.step()
        return float(loss.detach())

    def grad_norm(self) -> float:
        norm = self.engine.get_global_grad_norm()
        return float(norm) if norm is not None else float("nan")

    def save(self, ckpt_dir: str | Path, step: int, client_state: dict[str, Any]) -> None:
        """All ranks: DeepSpeed's sharded checkpoint (optimizer partitions included) + `latest` tag."""
        self.engine.save_checkpoint(str(ckpt_dir), tag=f"step-{step:08d}", client_state={"step": step, **client_state})

    def load(self, ckpt_dir: str | Path) -> dict[str, Any] | None:
        path, client = self.engine.load_checkpoint(str(ckpt_dir))
        return client if path is not None else None


@contextlib.contextmanager
def full_weights(model: torch.nn.Module, run: DeepSpeedRun | None) -> Iterator[None]:
    """Inside, every parameter is whole on every rank (ZeRO-3 gathers them; otherwise a no-op).
    Every rank must enter it."""
    if run is None or not run.zero3:
        yield
        return
    import deepspeed

    with deepspeed.zero.GatheredParameters(list(model.parameters()), modifier_rank=None):
        yield


__all__ = ["DeepSpeedRun", "full_weights"]
