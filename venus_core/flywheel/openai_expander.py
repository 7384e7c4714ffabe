"""The `openai` expander: an OpenAI-compatible model writes concrete tasks from seeds (UI-Venus-1.5).

The paper's expansion: an MLLM gets a seed task prompt and writes concrete tasks; the verified
trajectories of earlier rounds are its in-context examples. The protocol is the data judge's (one
client for eval, rollouts, the judge and this: `models.openai_client`): vLLM in a cluster; on a
laptop `venus serve` or the scripted server of `scoring.testing_server`. The reply must be one JSON
object `{"tasks": [{"goal": str}, ...]}`; a reply that does not parse is retried like the judge's,
and a request that still fails is counted (cost `failures`, with the reason) and yields nothing.

Each goal is then instantiated on the env (`space.resolve`: a start state of the round whose task
has this goal); a goal the env cannot set up stays a proposal without a start state, which the
feasibility filter rejects with its reason. The model does not choose the start state: the paper's
MLLM writes tasks for an app it can see, this one writes goals only (text in, text out).

The API key, when the endpoint needs one, comes from $VENUS_EXPANDER_API_KEY.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any

from venus_core.flywheel.expanders import Example, ExpansionCost, Proposal
from venus_core.flywheel.seeds import Seed
from venus_core.models.openai_client import ChatClient, ChatError, ChatGaveUp

API_KEY_ENV = "VENUS_EXPANDER_API_KEY"
MAX_GOAL_CHARS = 300
SYSTEM = ("You write tasks for a GUI agent that operates a phone or a web page. Each task is one concrete goal the "
          "agent can complete on the app or page described. Reply with exactly one JSON object: "
          '{"tasks": [{"goal": "..."}]}.')


class ExpansionReplyError(ValueError):
    """The model's reply is not the task list asked for."""


def parse_tasks(text: str, n: int) -> list[str]:
    """The goals of a reply (at most `n`, blank and over-long ones refused)."""
    try:
        obj = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ExpansionReplyError(f"reply is not JSON: {exc}") from None
    tasks = obj.get("tasks") if isinstance(obj, dict) else None
    if not isinstance(tasks, list) or not tasks:
        raise ExpansionReplyError('reply has no non-empty "tasks" list')
    goals = []
    for i, t in enumerate(tasks):
        goal = t.get("goal") if isinstance(t, dict) else None
        if not isinstance(goal, str) or not goal.strip() or len(goal) > MAX_GOAL_CHARS:
            raise ExpansionReplyError(f"tasks[{i}].goal must be a non-blank string of at most {MAX_GOAL_CHARS} chars")
        goals.append(" ".join(goal.split()))
    return goals[:n]


def expansion_prompt(seed: Seed, n: int, verified: Sequence[str]) -> str:
    """The user turn: the seed, its examples, the verified tasks (in-context), the request."""
    where = (f"Web page: the MiniWoB++ task {seed.app}." if seed.env == "miniwob"
             else f"App: {seed.app} (curriculum level {seed.level}).")
    lines = [where, f"Task prompt: {seed.prompt}"]
    if seed.examples:
        lines += ["Examples of tasks of this kind:", *(f"- {g}" for g in seed.examples)]
    if verified:
        lines += ["Tasks the agent completed and a checker verified (write tasks like these):",
                  *(f"- {g}" for g in verified)]
    lines.append(f"Write {n} new concrete tasks of this kind.")
    return "\n".join(lines)


class OpenAIExpander:
    name = "openai"

    def __init__(self, endpoint: str, model: str, *, space: Any, examples: int = 8, seed: int = 0,
                 temperature: float = 1.0, max_tokens: int = 512, timeout_s: float = 60.0, max_retries: int = 2,
                 concurrency: int = 4, api_key: str | None = None, **client_options: Any) -> None:
        self.client = ChatClient(endpoint, model, api_key=api_key if api_key is not None else os.environ.get(API_KEY_ENV),
                                 concurrency=concurrency, timeout_s=timeout_s, max_retries=max_retries,
                                 retry_malformed=True, **client_options)
        self.model = model
        self.space = space
        self.examples = examples
        self.seed = seed
        self.temperature = temperature
        self.max_tokens = max_tokens
        self._failures: list[str] = []

    def in_context(self, seed: Seed, feedback: Sequence[Example]) -> list[str]:
        """Up to `examples` distinct verified goals, this seed's first, the latest rounds first."""
        ordered = sorted((e for e in feedback if e.verified), key=lambda e: (e.seed != seed.key, -e.round))
        return list(dict.fromkeys(e.goal for e in ordered))[: self.examples]

    def _ask(self, seed: Seed, n: int, round_: int, verified: list[str]) -> list[str] | str:
        prompt = expansion_prompt(seed, n, verified)
        body = {"model": self.model, "messages": [{"role": "system", "content": SYSTEM},
                                                  {"role": "user", "content": prompt}],
                "temperature": self.temperature, "max_tokens": self.max_tokens, "seed": self.seed * 1009 + round_,
                "response_format": {"type": "json_object"}}
        try:
            return self.client.request(body, label=f"expand {seed.key}", parse=lambda texts: parse_tasks(texts[0], n),
                                       retry_on=(ExpansionReplyError,))  # type: ignore[return-value]
        except ChatGaveUp as exc:
            return f"{seed.key}: gave up after {exc.attempts} attempts: {exc.last}"
        except ChatError as exc:
            return f"{seed.key}: {exc}"

    def expand(self, seeds: Sequence[Seed], n: int, round_: int, feedback: Sequence[Example]) -> list[Proposal]:
        if not seeds or n <= 0:
            return []
        for seed in seeds:
            self.space.check_seed(seed)
        per = [n // len(seeds) + (1 if i < n % len(seeds) else 0) for i in range(len(seeds))]
        asks = [(s, k) for s, k in zip(seeds, per, strict=True) if k > 0]
        replies = self.client.map(lambda sk: self._ask(sk[0], sk[1], round_, self.in_context(sk[0], feedback)), asks)
        out: list[Proposal] = []
        used: set[str] = set()
        for (seed, _), reply in zip(asks, replies, strict=True):
            if isinstance(reply, str):
                self._failures.append(reply)
                continue
            for goal in reply:
                c = self.space.resolve(goal, seed, round_, used)
                if c is not None:
                    used.add(c.key)
                out.append(Proposal(goal, seed.key, c, self.name, "model"))
        return out[:n]

    def cost(self) -> ExpansionCost:
        c = self.client
        no_usage = c.calls > 0 and not c.usage_replies
        return ExpansionCost(c.calls, None if no_usage else c.prompt_tokens, None if no_usage else c.completion_tokens,
                             len(self._failures), list(self._failures))

    def close(self) -> None:
        return None


__all__ = ["API_KEY_ENV", "ExpansionReplyError", "OpenAIExpander", "expansion_prompt", "parse_tasks"]
