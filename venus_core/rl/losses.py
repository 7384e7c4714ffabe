"""GRPO building blocks as pure tensor functions: advantages, clipped ratio loss, k3 KL, entropy.

Why pure functions: each piece is checked against hand-computed values (tests/rl/test_rl_losses.py)
and shared by the offline trainer and, later, the online (trajectory-level) trainer.

Shapes: N = completions in the batch (prompts × group size), T = completion tokens (right-padded),
V = vocabulary. `mask` is 1.0 on real completion tokens (including the closing `<|im_end|>`).

Choices and departures:
- Group-normalized advantage `A_i = (r_i − mean_g) / (std_g + eps)` with the *population* std
  (the UI-Venus reports do not say which; TRL uses the sample std). A group whose rewards are all
  equal carries no signal: `group_advantages` flags it and the trainer skips it and counts it,
  instead of feeding zero advantages through the loss.
- Token-level aggregation: the loss is averaged over all real tokens of the batch (DAPO /
  "token-level" GRPO), not per sequence then per batch as in the original GRPO paper, so long
  completions are not down-weighted per token.
- KL to the reference uses the k3 estimator `exp(ref − logp) − (ref − logp) − 1` per token
  (unbiased, non-negative), added to the loss with coefficient β, as in GRPO.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


def group_advantages(rewards: torch.Tensor, eps: float = 1e-6) -> tuple[torch.Tensor, torch.Tensor]:
    """Group-normalized advantages.

    rewards: [P, G] (P prompts, G completions each) -> (advantages [P, G], zero_variance [P] bool).
    Rows with zero variance get advantage 0 and are flagged.
    """
    if rewards.dim() != 2 or rewards.shape[1] < 2:
        raise ValueError(f"rewards must be [prompts, group>=2], got shape {tuple(rewards.shape)}")
    if eps <= 0:
        raise ValueError(f"eps must be > 0, got {eps}")
    r = rewards.to(torch.float64)
    mean = r.mean(dim=1, keepdim=True)  # [P, 1]
    std = r.std(dim=1, unbiased=False, keepdim=True)  # [P, 1]
    zero = (r.max(dim=1).values - r.min(dim=1).values) == 0  # [P]
    adv = (r - mean) / (std + eps)  # [P, G]
    adv = torch.where(zero.unsqueeze(1), torch.zeros_like(adv), adv)
    return adv.to(rewards.dtype if rewards.is_floating_point() else torch.float32), zero


def k3_kl(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token k3 estimate of KL(π_θ ‖ π_ref): exp(ref − logp) − (ref − logp) − 1.

    logp, ref_logp: [N, T] log-probabilities of the sampled tokens -> [N, T] (≥ 0).
    """
    d = ref_logp - logp
    return torch.exp(d) - d - 1.0


def token_entropy(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the next-token distribution: logits [N, T, V] -> [N, T] (nats)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    # tokens masked to -inf have p = 0 and contribute 0, not 0 · -inf = nan; the -inf is replaced
    # before the product so the backward pass stays finite too (a `where` after it would not)
    safe = torch.where(torch.isfinite(logp), logp, torch.zeros_like(logp))
    return -(logp.exp() * safe).sum(dim=-1)


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """Log-probabilities of `tokens` under `logits`: logits [N, T, V], tokens [N, T] -> [N, T]."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    return logp.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)


def clipped_surrogate(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, clip_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO clipped objective per token, as a loss (to minimise).

    logp, old_logp: [N, T]; advantages: [N] -> (loss [N, T], clipped [N, T] bool), where
    loss = −min(ρ·A, clip(ρ, 1−ε, 1+ε)·A), ρ = exp(logp − old_logp), and `clipped` marks tokens
    where the clipped branch is the active one (its gradient is zero).
    """
    if clip_eps <= 0:
        raise ValueError(f"clip_eps must be > 0, got {clip_eps}")
    adv = advantages.unsqueeze(1)  # [N, 1]
    ratio = torch.exp(logp - old_logp)  # [N, T]
    unclipped = ratio * adv
    clipped_ratio = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + clip_eps)
    clipped = clipped_ratio * adv
    loss = -torch.minimum(unclipped, clipped)
    active = ((ratio > 1.0 + clip_eps) & (adv > 0)) | ((ratio < 1.0 - clip_eps) & (adv < 0))
    return loss, active


@dataclass(frozen=True)
class GRPOLoss:
    """The scalar loss and its parts (detached, token means over the mask)."""

    loss: torch.Tensor  # scalar, with grad
    policy: float
    kl: float
    entropy: float
    clip_fraction: float


def masked_mean(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of x [N, T] over mask [N, T] (1 = counted); 0 when the mask is empty."""
    total = mask.sum()
    return (x * mask).sum() / total.clamp(min=1.0)


_masked_mean = masked_mean


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float,
    kl_coef: float,
    entropy: torch.Tensor | None = None,
    entropy_coef: float = 0.0,
    tokens: float | None = None,
) -> GRPOLoss:
    """Token-level GRPO loss: mean over real tokens of clipped surrogate + β·k3 − λ·entropy.

    logp, old_logp, ref_logp, entropy, mask: [N, T]; advantages: [N] -> GRPOLoss.
    `tokens`: divide the sums by this token count instead of the mask's: with the batch split
    across ranks, the global batch's count, so the loss (and every part) is this rank's share of
    the global token mean and the shares of all ranks add up to the one-process values.
    `ref_logp` may be None only when kl_coef is 0; `entropy` only when entropy_coef is 0.
    Every tensor is brought to `logp`'s device (the policy's): the mask and advantages are built
    on the CPU, a reference on another GPU returns its log-probs there.
    """
    if logp.shape != mask.shape or old_logp.shape != mask.shape:
        raise ValueError(f"logp {tuple(logp.shape)}, old_logp {tuple(old_logp.shape)} and mask {tuple(mask.shape)} differ")
    if advantages.shape != (logp.shape[0],):
        raise ValueError(f"advantages must be [{logp.shape[0]}], got {tuple(advantages.shape)}")
    dev = logp.device
    mask = mask.to(dev, logp.dtype)
    if tokens is not None and tokens <= 0:
        raise ValueError(f"tokens must be > 0, got {tokens}")

    def masked_mean(x: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return _masked_mean(x, m) if tokens is None else (x * m).sum() / tokens
    old_logp = old_logp.to(dev)
    if ref_logp is not None:
        ref_logp = ref_logp.to(dev)
    if entropy is not None:
        entropy = entropy.to(dev)
    pg, active = clipped_surrogate(logp, old_logp, advantages.to(dev, logp.dtype), clip_eps)
    per_token = pg
    kl_value = 0.0
    if kl_coef > 0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs ref_logp")
        kl = k3_kl(logp, ref_logp)
        per_token = per_token + kl_coef * kl
        kl_value = float(masked_mean(kl.detach(), mask))
    elif ref_logp is not None:
        kl_value = float(masked_mean(k3_kl(logp.detach(), ref_logp), mask))
    ent_value = 0.0
    if entropy is not None:
        ent_value = float(masked_mean(entropy.detach(), mask))
        if entropy_coef > 0:
            per_token = per_token - entropy_coef * entropy
    elif entropy_coef > 0:
        raise ValueError("entropy_coef > 0 needs the entropy tensor")
    loss = masked_mean(per_token, mask)
    return GRPOLoss(
        loss=loss,
        policy=float(masked_mean(pg.detach(), mask)),
        kl=kl_value,
        entropy=ent_value,
        clip_fraction=float(masked_mean(active.to(mask.dtype), mask)),
    )


__all__ = [
    "GRPOLoss", "clipped_surrogate", "group_advantages", "grpo_loss", "k3_kl", "masked_mean",
    "token_entropy", "token_logprobs",
]
