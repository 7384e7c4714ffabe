"""Checkpoints of the online RL job: save every `online_rl.save_every` steps, resume exactly.

What a checkpoint holds (`venus_core.train.checkpoint` files, atomic `step-N/` directories): the
policy's weights, the optimizer, the reference policy's weights (`ref.safetensors`: it moves during
training, so it cannot be reloaded from `--model`), the RNG states, and in `state.json` the task
pool's state (curriculum shares, EMAs, set-aside tasks, its RNG), the learner's and the policy's
counters (updates, reference moves, sampling calls: rollouts are seeded per call), the adaptive-KL
checks, the running totals and the held-out result from before training (not played again).

Exactness: with `staleness: 0` the rollouts of a step depend only on this state (the simulated
phones and MiniWoB pages are rebuilt from each task's seed, sampling is seeded per call), so a run
killed after a checkpoint and resumed ends with the weights of the uninterrupted run (tested).
With a decoupled worker the batch it had collected ahead is lost with the process; the resumed run
collects it again with the checkpoint's weights, so it continues correctly but not bit for bit.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path
from typing import Any

from venus_core.rl.online.loop import OnlineRL
from venus_core.runtime.rl_checkpoint import StoppedAt
from venus_core.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


class OnlineCheckpointing:
    """Saves and restores one online RL run under `root` (inert when `root` is None)."""

    def __init__(self, root: Path | None, trainer: OnlineRL, every: int, stop_at: int | None = None) -> None:
        self.root, self.trainer, self.every, self.stop_at = root, trainer, every, stop_at
        self.saved_step = -1
        self.before: dict[str, Any] | None = None  # the held-out result from before training

    def _extras(self) -> dict[str, Any]:
        ref = self.trainer.learner.ref
        return {"ref": ref} if ref is not None else {}

    def restore(self) -> int:
        """Load the latest checkpoint into the trainer; the step to continue from (0: none)."""
        if self.root is None:
            return 0
        path = latest_checkpoint(self.root)
        if path is None:
            return 0
        t, learner = self.trainer, self.trainer.learner
        state = load_checkpoint(path, learner.model, learner.optimizer, extra_models=self._extras())
        if "online" not in state:
            raise ValueError(f"checkpoint {path} has no online RL state: it is not from an online_rl job")
        o = state["online"]
        t.pool.load_state_dict(o["pool"])
        learner.updates, learner.ref_moves = int(o["updates"]), int(o["ref_moves"])
        t.policy.version, t.policy.calls = int(o["policy_version"]), int(o["policy_calls"])
        t.ref_rate, t.checks = o["ref_rate"], list(o["checks"])
        t.totals = Counter({k: int(v) for k, v in o["totals"].items()})
        if t.judge is not None and "judge" in o:
            t.judge.load_state_dict(o["judge"])
        self.before = o.get("before")
        self.saved_step = int(state["step"])
        if t.spec.rollout_server:  # the server still serves the weights the run started with
            t.sync_server()
        print(f"[online_rl] resumed from {path} (step {self.saved_step})", file=sys.stderr, flush=True)
        return self.saved_step

    def save(self, step: int) -> None:
        assert self.root is not None
        t = self.trainer
        online = {"pool": t.pool.state_dict(), "updates": t.learner.updates, "ref_moves": t.learner.ref_moves,
                  "policy_version": t.policy.version, "policy_calls": t.policy.calls, "ref_rate": t.ref_rate,
                  "checks": t.checks, "totals": dict(t.totals), "before": self.before}
        if t.judge is not None:
            online["judge"] = t.judge.state_dict()
        save_checkpoint(self.root, step, t.learner.model, t.learner.optimizer, {"online": online},
                        extra_models=self._extras())
        self.saved_step = step

    def on_step(self, step: int) -> None:
        if self.root is not None and step % self.every == 0:
            self.save(step)
        if self.stop_at is not None and step >= self.stop_at:
            raise StoppedAt(step)

    def final(self, step: int) -> None:
        if self.root is not None and self.saved_step != step:
            self.save(step)


__all__ = ["OnlineCheckpointing"]
