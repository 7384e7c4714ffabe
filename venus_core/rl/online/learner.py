"""Full-trajectory GRPO (UI-Venus-1.5 online RL): one reward per trajectory, broadcast to its steps.

Per rollout group (the G trajectories of one task): `R(τ) = 1[success]·R_comp·η^((T−T_min)/T_min)
+ Σ_t R_p(a_t)` (`rewards.online.trajectory_rewards`), the advantage `(R_i − mean)/(std + ε)` of
the group, and that advantage on every completion token of every step of trajectory i. The loss is
the token-level clipped surrogate plus β·k3 KL to a reference policy minus λ_t·entropy, averaged
over all completion tokens of the update (micro-batches are weighted by their token share, so the
gradient is that of one batch). The entropy coefficient is annealed `λ_t = λ0·σ^k`, k = updates
// `every`. The reference is a copy of the starting policy, moved toward the policy
(`π_ref ← (1−α)π_ref + απ_θ`, parameter-wise) when the caller finds the policy beats it on the
held-out tasks by `margin` (`move_reference`).

Departures, deliberate: one optimizer update per rollout batch, so the ratio is 1 on its first
pass (TRL's default) unless the steps carry behaviour log-probs (decoupled rollouts: the batch
was sampled by older weights, and the ratio and its clip are taken against those); groups whose rewards
are all equal (zero variance) or that kept fewer than two trajectories after device losses are
skipped and counted; a step without sampled token ids (a scripted or replayed answer) is not
trained on, and counted.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from venus_core.config.training import OnlineRLSpec
from venus_core.models.placement import model_device, reference_device
from venus_core.models.prompts import build_messages
from venus_core.rewards.online import trajectory_rewards
from venus_core.rl.grpo import freeze_vision
from venus_core.rl.losses import grpo_loss
from venus_core.rl.online.rollout import StepRecord, Trajectory
from venus_core.rl.rollout import completions_batch, sequence_logprobs


@dataclass(frozen=True)
class GroupScore:
    rewards: list[float]
    advantages: list[float]
    skipped: str | None  # "zero_variance" | "too_few" | None


def score_group(group: Sequence[Trajectory], spec: OnlineRLSpec, eps: float = 1e-6) -> GroupScore:
    """Rewards and advantages of one group's surviving trajectories."""
    rewards = trajectory_rewards([t.success for t in group], [max(1, t.length) for t in group],
                                 [t.invalid for t in group], spec.reward) if group else []
    if len(group) < 2:
        return GroupScore(rewards, [0.0] * len(group), "too_few")
    r = torch.tensor(rewards, dtype=torch.float64)
    std = float(r.std(unbiased=False))
    if std < 1e-12:
        return GroupScore(rewards, [0.0] * len(group), "zero_variance")
    return GroupScore(rewards, [float(a) for a in (r - r.mean()) / (std + eps)], None)


def _behaviour(chunk: Sequence[tuple[StepRecord, float]], like: torch.Tensor) -> torch.Tensor:
    """The rows' behaviour log-probs as a [N, T] tensor shaped like `like` (0 past each row's end)."""
    out = torch.zeros_like(like, requires_grad=False)
    for i, (st, _) in enumerate(chunk):
        vals = torch.tensor(st.behaviour_logp or [], dtype=like.dtype, device=like.device)
        if len(vals) != len(st.completion.token_ids or ()):
            raise ValueError(f"a step has {len(vals)} behaviour log-probs for {len(st.completion.token_ids or ())} "
                             "sampled tokens")
        out[i, : len(vals)] = vals
    return out


class TrajectoryGRPO:
    """The online learner; `update(groups)` is one optimizer step on the groups' trajectories."""

    def __init__(self, model: Any, processor: Any, spec: OnlineRLSpec, *, micro_batch: int = 8) -> None:
        if micro_batch < 1:
            raise ValueError(f"micro_batch must be >= 1, got {micro_batch}")
        self.model = model
        self.processor = processor
        self.spec = spec
        self.micro_batch = micro_batch
        self.frozen_vision = freeze_vision(model) if spec.freeze_vision else 0
        self.ref: Any = None
        if spec.kl.coef > 0:
            # With the policy, or on the next GPU of a multi-GPU node in one process
            # (`placement.reference_device`: an 8B policy with AdamW fills an 80 GB GPU); its
            # log-probs are moved to the policy's device in `grpo_loss`, and `move_reference`
            # brings the policy's weights to it. AdamW's state is made next to each parameter.
            self.ref = copy.deepcopy(model).eval()
            self.ref.to(reference_device(model_device(model)))
            for p in self.ref.parameters():
                p.requires_grad_(False)
        self.params = [p for p in model.parameters() if p.requires_grad]
        if not self.params:
            raise ValueError("nothing to train: every parameter is frozen")
        self.optimizer = torch.optim.AdamW(self.params, lr=spec.lr, betas=(0.9, 0.98), weight_decay=0.0)
        self.updates = 0
        self.ref_moves = 0

    def entropy_coef(self) -> float:
        e = self.spec.entropy
        return e.lambda0 * e.sigma ** (self.updates // e.every)

    def update(self, groups: Sequence[Sequence[Trajectory]]) -> dict[str, float]:
        """Score the groups and take one optimizer step on their trajectories' steps."""
        spec = self.spec
        scores = [score_group(g, spec) for g in groups]
        rows: list[tuple[StepRecord, float]] = []
        untrainable = 0
        for group, sc in zip(groups, scores, strict=True):
            if sc.skipped is not None:
                continue
            for traj, adv in zip(group, sc.advantages, strict=True):
                for st in traj.steps:
                    if st.completion.token_ids:
                        rows.append((st, adv))
                    else:
                        untrainable += 1
        flat = [r for sc in scores for r in sc.rewards]
        m: dict[str, float] = {
            "groups/total": float(len(groups)),
            "groups/zero_variance": float(sum(sc.skipped == "zero_variance" for sc in scores)),
            "groups/too_few": float(sum(sc.skipped == "too_few" for sc in scores)),
            "reward/mean": sum(flat) / len(flat) if flat else 0.0,
            "rows": float(len(rows)), "rows/untrainable": float(untrainable),
            "entropy_coef": self.entropy_coef(), "updated": 0.0,
        }
        if not rows:
            return m | {"loss": 0.0, "kl": float("nan"), "entropy": float("nan"), "grad_norm": 0.0}
        total_tokens = sum(len(st.completion.token_ids or ()) for st, _ in rows)
        coef = self.entropy_coef()
        self.model.train()
        self.optimizer.zero_grad(set_to_none=True)
        acc = {"loss": 0.0, "policy_loss": 0.0, "kl": 0.0, "entropy": 0.0, "clip_fraction": 0.0}
        for i in range(0, len(rows), self.micro_batch):
            chunk = rows[i : i + self.micro_batch]
            batch = completions_batch(self.processor, [build_messages(st.image, st.prompt) for st, _ in chunk],
                                      [st.completion.token_ids or () for st, _ in chunk])
            ref_lp = None
            if self.ref is not None:
                with torch.no_grad():
                    ref_lp = sequence_logprobs(self.ref, batch, temperature=spec.temperature)[0]
            logp, ent = sequence_logprobs(self.model, batch, temperature=spec.temperature, with_entropy=True)
            old = _behaviour(chunk, logp) if all(st.behaviour_logp is not None for st, _ in chunk) else logp.detach()
            adv = torch.tensor([a for _, a in chunk], dtype=logp.dtype, device=logp.device)
            out = grpo_loss(logp, old, ref_lp, adv, batch.completion_mask,
                            clip_eps=spec.clip_eps, kl_coef=spec.kl.coef, entropy=ent, entropy_coef=coef)
            w = float(batch.completion_mask.sum()) / total_tokens
            (out.loss * w).backward()
            for k, v in (("loss", float(out.loss.detach())), ("policy_loss", out.policy), ("kl", out.kl),
                         ("entropy", out.entropy), ("clip_fraction", out.clip_fraction)):
                acc[k] += w * v
        gn = float(torch.nn.utils.clip_grad_norm_(self.params, 1.0))
        if not math.isfinite(gn):
            self.optimizer.zero_grad(set_to_none=True)
            raise FloatingPointError(f"online RL update {self.updates + 1}: gradient norm is {gn}")
        self.optimizer.step()
        self.model.eval()
        self.updates += 1
        if self.ref is None:
            acc["kl"] = float("nan")
        return m | acc | {"grad_norm": gn, "updated": 1.0, "tokens": float(total_tokens)}

    @torch.no_grad()
    def move_reference(self) -> None:
        """π_ref ← (1−α)·π_ref + α·π_θ (no-op without a reference)."""
        if self.ref is None:
            return
        a = self.spec.kl.alpha
        for pr, pp in zip(self.ref.parameters(), self.model.parameters(), strict=True):
            pr.mul_(1 - a).add_(pp.detach().to(pr.device), alpha=a)
        self.ref_moves += 1

    def state_dict(self) -> dict[str, Any]:
        return {"model": self.model.state_dict(), "ref": None if self.ref is None else self.ref.state_dict(),
                "optimizer": self.optimizer.state_dict(), "updates": self.updates, "ref_moves": self.ref_moves}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        if self.ref is not None and state["ref"] is not None:
            self.ref.load_state_dict(state["ref"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.updates, self.ref_moves = int(state["updates"]), int(state["ref_moves"])


__all__ = ["GroupScore", "TrajectoryGRPO", "score_group"]
