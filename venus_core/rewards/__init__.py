"""Pure reward functions, registered by name in `REWARDS` (the agent spec names them).

Registered: `grounding`, `navigation_mobile`, `navigation_web`. The online trajectory reward is
a group function (`trajectory_rewards`), called by the online trainer.
"""

from venus_core.rewards.base import RewardFn, RewardResult, score_batch
from venus_core.rewards.grounding import grounding_reward, point_in_box
from venus_core.rewards.navigation import navigation_mobile, navigation_web
from venus_core.rewards.online import trajectory_rewards
from venus_core.rewards.text import token_f1, tokenize

__all__ = [
    "RewardFn", "RewardResult", "grounding_reward", "navigation_mobile", "navigation_web",
    "point_in_box", "score_batch", "token_f1", "tokenize", "trajectory_rewards",
]
