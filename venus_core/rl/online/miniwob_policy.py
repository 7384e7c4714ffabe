"""The MiniWoB++ DOM oracles as a rollout policy: scripted execution where the web env has an oracle.

Why: a rollout may be executed by "a scripted oracle where the environment has one" (issue 24; the
data flywheel's `policy: oracle`). On the phone that is the synthetic world's planner
(`ScriptedPolicy(synth_plan)`), a plan computed from the task alone. A MiniWoB++ oracle
(`envs.miniwob_oracle`) instead reads the live page before each step (an autocomplete list that
opened, a dialog that moved), while a rollout policy sees only screenshots and the task. So this
policy keeps a shadow page per live episode: it generates the episode's page from the task's
reference (deterministic for the seed: `MiniWobEnv.reset` checks the goal), asks the oracle for its
next step, executes the step on the shadow page and answers with it; the env then executes the
same action on the real page, so both pages go through the same states. Where they would not (a
page that reacts to timing), the real page's reward decides, as for every policy.

An oracle that does not recognise its page, or has no step left while the episode goes on, answers
Finished (a failed episode, never a claimed success); a task without an oracle is an error before
anything runs. Shadow pages are contexts in the process's shared Chromium, reused across episodes;
at most `max_live` episodes keep one (the oldest is dropped: an episode lost on its device never
asks again).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any

from venus_core.actions.space import Finished
from venus_core.envs.base import EnvError
from venus_core.rl.online.policy import answer_text
from venus_core.rl.online.rollout import Completion, StepRequest


class MiniWobOraclePolicy:
    """Answers each MiniWoB++ episode with its DOM oracle's steps, replayed on a shadow page."""

    def __init__(self, *, make_env: Callable[[], Any] | None = None, max_live: int = 32,
                 name: str = "oracle:miniwob-dom") -> None:
        if make_env is None:
            from venus_core.envs.miniwob import MiniWobEnv

            def make_env() -> Any:
                return MiniWobEnv(wait_s=0.0)
        self.make_env = make_env
        self.max_live = max_live
        self.name = name
        self.version = 0
        self._idle: list[Any] = []
        self._live: dict[str, tuple[Any, Iterator[Any]]] = {}

    def _begin(self, r: StepRequest) -> tuple[Any, Iterator[Any]]:
        from venus_core.envs.miniwob import parse_ref
        from venus_core.envs.miniwob_oracle import Page, solver_for

        name, _ = parse_ref(r.task.success_check)
        solver = solver_for(name)  # ValueError naming the task when it has no oracle
        while len(self._live) >= self.max_live:
            self._end(next(iter(self._live)))
        env = self._idle.pop() if self._idle else self.make_env()
        env.reset(r.task)
        return env, solver(Page(env))

    def _end(self, episode: str) -> None:
        got = self._live.pop(episode, None)
        if got is not None:
            self._idle.append(got[0])

    def _answer(self, r: StepRequest) -> str:
        if r.step == 0 or r.episode not in self._live:
            self._end(r.episode)
            self._live[r.episode] = self._begin(r)
        env, steps = self._live[r.episode]
        try:
            step = next(steps)
            _, done, _ = env.step(step.action)
        except StopIteration:
            self._end(r.episode)
            return answer_text(Finished(content=""), "The oracle has no step left, but the task is not over.")
        except EnvError as exc:  # OracleError: the page is not what the oracle expects
            self._end(r.episode)
            return answer_text(Finished(content=""), f"The oracle cannot go on: {exc}"[:300])
        if done:
            self._end(r.episode)
        return answer_text(step.action, step.think, step.conclusion)

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        return [Completion(self._answer(r)) for r in requests]

    def close(self) -> None:
        for episode in list(self._live):
            self._end(episode)
        envs, self._idle = self._idle, []
        for env in envs:
            env.close()


__all__ = ["MiniWobOraclePolicy"]
