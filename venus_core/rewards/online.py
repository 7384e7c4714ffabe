"""Online RL trajectory reward (UI-Venus-1.5):
`R(τ) = 1[success]·R_comp·η^((T−T_min)/T_min) + Σ_t R_p(a_t)`, with `R_p = −λ` per unparseable
action and `T_min` the fewest steps among the *successful* trajectories of the rollout group.

It is a group function (T_min couples the trajectories of one task), so it is not registered as
a per-completion reward; the online trainer calls it once per group.
"""

from __future__ import annotations

from collections.abc import Sequence

from venus_core.config.spec import OnlineRewardSpec


def trajectory_rewards(
    successes: Sequence[bool],
    lengths: Sequence[int],
    invalid_actions: Sequence[int],
    params: OnlineRewardSpec,
) -> list[float]:
    """Rewards of one rollout group.

    >>> p = OnlineRewardSpec(completion=1.0, eta=0.5, invalid_penalty=0.1)
    >>> trajectory_rewards([True, True, False], [4, 8, 30], [0, 1, 3], p)
    [1.0, 0.4, -0.30000000000000004]
    """
    n = len(successes)
    if not (len(lengths) == len(invalid_actions) == n):
        raise ValueError("successes, lengths and invalid_actions must have the same length")
    if any(t < 1 for t in lengths):
        raise ValueError(f"trajectory lengths must be >= 1, got {list(lengths)}")
    if any(k < 0 for k in invalid_actions):
        raise ValueError("invalid action counts must be >= 0")
    ok_lengths = [t for t, s in zip(lengths, successes, strict=True) if s]
    t_min = min(ok_lengths) if ok_lengths else None
    out = []
    for s, t, k in zip(successes, lengths, invalid_actions, strict=True):
        r = 0.0
        if s and t_min is not None:
            r = params.completion * params.eta ** ((t - t_min) / t_min)
        out.append(r - params.invalid_penalty * k)
    return out
