"""Reinforcement learning: GRPO losses, rollouts, the offline GRPO trainer, navigation extras.

Modules: `losses` (pure tensor functions: group advantages, clipped ratio, k3 KL, entropy),
`rollout` (G sampled completions per prompt with their token ids; per-token log-probs), `grpo`
(the offline trainer, LoRA and vision freezing), `prompts` (records -> prompts, held-out checks),
`history` (UI-Venus-1.0 history alignment and sparse action enhancement) and `navigation` (the
epoch hooks that apply them during a navigation GRPO job).
"""
