"""Checkpoints of the offline GRPO job: save every `save_every` steps, resume exactly.

Why in the runtime layer: the trainer (`venus_core.rl.grpo.OfflineGRPO.train`) exposes its loop
position through `on_step` / `resume`, and `NavigationEpochs` its state through `state_dict`; what
to save, where and how often is the job's decision. The files are those of
`venus_core.train.checkpoint` (atomic `step-N/` directories and a `latest` pointer): weights
(LoRA-wrapped when LoRA is on, so they load back into the same wrapped model), optimizer, RNG
states, and in `state.json` the loop position and the navigation state (aligned histories, sparse
variants, thought pool, its RNG). The frozen reference model is not saved: it is the starting
checkpoint, which the job loads again from `--model`.

Exactness: rollouts are seeded per step and group and the epoch order comes from the saved
shuffle RNG, so a run killed after a checkpoint and resumed ends with the same weights as an
uninterrupted run.

Distributed runs: every rank holds the same navigation state (the hooks see the whole batch).
Under DDP every rank also holds the same weights and optimizer state (the gradients are averaged),
so rank 0 writes the checkpoint while the others wait at a barrier, and every rank restores from
it. Under FSDP2 each rank holds a shard: every rank joins the gather of the whole weights and
optimizer state to rank 0, which writes the same safetensors + JSON files
(`venus_core.train.fsdp2_checkpoint`, with every rank's RNG states); on restore rank 0 reads and
verifies the checkpoint and broadcasts it into the shards. The two layouts name the optimizer's
parameters differently, so a checkpoint resumes under the kind of backend that wrote it.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from venus_core.rl.grpo import OfflineGRPO
from venus_core.rl.navigation import NavigationEpochs
from venus_core.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from venus_core.train.distributed import DistEnv
from venus_core.train.fsdp2_checkpoint import latest_fsdp2_checkpoint, load_fsdp2_checkpoint, save_fsdp2_checkpoint


class StoppedAt(RuntimeError):
    """Raised by `--stop-at N` (tests) after step N, as a kill would end the job."""

    def __init__(self, step: int) -> None:
        super().__init__(f"stopped after step {step}")
        self.step = step


class Checkpointing:
    """Saves and restores one offline GRPO run under `root` (inert when `root` is None)."""

    def __init__(self, root: Path | None, trainer: OfflineGRPO, epochs: NavigationEpochs | None, every: int,
                 stop_at: int | None = None, env: DistEnv | None = None) -> None:
        self.env = env if env is not None else trainer.env
        self.root = root
        self.trainer = trainer
        self.epochs = epochs
        self.every = every
        self.stop_at = stop_at
        self.last: dict[str, Any] | None = None
        self.saved_step = -1

    def restore(self) -> dict[str, Any] | None:
        """Load the latest checkpoint into the trainer; the loop position to resume from, or None."""
        if self.root is None:
            return None
        if self.env.backend == "fsdp2":  # rank 0 alone reads the directory and shares what it holds
            path = latest_fsdp2_checkpoint(self.root, self.env)
            if path is None:
                return None
            state = load_fsdp2_checkpoint(path, self.trainer.model, self.trainer.optimizer, self.env)
        else:
            path = latest_checkpoint(self.root)
            if path is None:
                return None
            state = load_checkpoint(path, self.trainer.model, self.trainer.optimizer)
        if self.epochs is not None:
            if "navigation" not in state:
                raise ValueError(f"checkpoint {path} has no navigation state: it is not from this domain's job")
            self.epochs.load_state_dict(state["navigation"])
        if self.env.is_main:
            print(f"[offline_rl] resumed from {path} (step {state['loop']['step']})", file=sys.stderr, flush=True)
        self.saved_step = int(state["loop"]["step"])
        return dict(state["loop"])

    def _save(self, loop: dict[str, Any]) -> None:
        assert self.root is not None
        extra: dict[str, Any] = {"loop": loop}
        if self.epochs is not None:
            extra["navigation"] = self.epochs.state_dict()
        if self.env.backend == "fsdp2":  # every rank joins the gather; rank 0 writes
            save_fsdp2_checkpoint(self.root, int(loop["step"]), self.trainer.model, self.trainer.optimizer, extra,
                                  self.env)
        elif self.env.is_main:
            save_checkpoint(self.root, int(loop["step"]), self.trainer.model, self.trainer.optimizer, extra)
        self.env.barrier()
        self.saved_step = int(loop["step"])

    def on_step(self, loop: dict[str, Any]) -> None:
        self.last = loop
        if self.root is not None and loop["step"] % self.every == 0:
            self._save(loop)
        if self.stop_at is not None and loop["step"] >= self.stop_at:
            raise StoppedAt(int(loop["step"]))

    def final(self) -> None:
        """Checkpoint the last step too, so a restart after training only redoes the evaluation."""
        if self.root is not None and self.last is not None and self.saved_step != self.last["step"]:
            self._save(self.last)
