"""Policies that act in online rollouts: the model being trained, and scripted ones.

`ModelPolicy` samples from π_θ in process (`rl.rollout.sample_groups`, one row per live episode)
and returns the sampled token ids, which the learner scores: re-tokenising decoded text would not
reproduce the sampled segmentation. Its `version` counts weight updates, so each trajectory
records the policy that produced it (staleness). A cluster swaps it for a policy on the vLLM
server behind the same protocol.

`ScriptedPolicy` answers from a plan per task (the synthetic world's planner: `synth_plan`), with
a seeded share of steps replaced by a malformed answer or a random click. It exercises the whole
machinery (devices, rewards, advantages, success checks) with a known success rate and no model,
for tests and the env-bound throughput benchmark.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from venus_core.actions import render_action
from venus_core.actions.space import Action, Click, Finished
from venus_core.envs.base import Task
from venus_core.models.prompts import build_messages
from venus_core.rl.online.rollout import Completion, StepRequest


class ModelPolicy:
    """π_θ sampled in process at `temperature` (the learner's log-probs use the same temperature)."""

    def __init__(self, model: Any, processor: Any, *, temperature: float, max_new_tokens: int, seed: int,
                 name: str = "policy") -> None:
        self.model = model
        self.processor = processor
        self.temperature = temperature
        self.max_new_tokens = max_new_tokens
        self.seed = seed
        self.name = name
        self.version = 0
        self.calls = 0

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        from venus_core.rl.rollout import sample_groups

        if not requests:
            return []
        prompts = [build_messages(r.image, r.prompt) for r in requests]
        batch = sample_groups(self.model, self.processor, prompts, 1, self.max_new_tokens,
                              temperature=self.temperature, seed=self.seed * 1_000_003 + self.calls)
        self.calls += 1
        lengths = batch.completion_mask.sum(dim=1).long().tolist()
        return [Completion(text, tuple(int(t) for t in batch.completion_ids[i, :n].tolist()))
                for i, (text, n) in enumerate(zip(batch.texts, lengths, strict=True))]


class PredictorPolicy:
    """An evaluator `Predictor` as a rollout policy: `LocalPredictor` (the checkpoint in process, greedy
    at temperature 0 with the evaluator's repetition penalty) or `OpenAIPredictor` (a vLLM / `venus
    serve` endpoint). Text only, no token ids: for rollouts nothing trains on (the data flywheel)."""

    def __init__(self, predictor: Any, *, max_new_tokens: int, name: str | None = None, version: int = 0) -> None:
        self.predictor = predictor
        self.max_new_tokens = max_new_tokens
        self.name = name or predictor.name
        self.version = version

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        from venus_core.eval.predictors import Query

        if not requests:
            return []
        queries = [Query(f"{r.episode}@{r.step}", r.image, r.prompt) for r in requests]
        return [Completion(text) for text in self.predictor.predict(queries, self.max_new_tokens)]


def answer_text(action: Action, think: str = "", conclusion: str = "") -> str:
    """A well-formed UI-Venus navigation answer for `action`."""
    return f"<think>{think}</think><action>{render_action(action)}</action><conclusion>{conclusion}</conclusion>"


class ScriptedPolicy:
    """Plays each task's plan; a `noise` share of steps is malformed (invalid) or a random click."""

    def __init__(self, plan: Callable[[Task], list[Action]], *, noise: float = 0.0, seed: int = 0,
                 name: str = "scripted") -> None:
        if not 0 <= noise <= 1:
            raise ValueError(f"noise must be in [0, 1], got {noise}")
        self.plan = plan
        self.noise = noise
        self.seed = seed
        self.name = name
        self.version = 0
        self._plans: dict[str, list[Action]] = {}

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        """Stateless per step: the noise draw depends on (seed, episode, step) only, so a resumed
        run, or a task drawn again, gets the same answers."""
        out = []
        for r in requests:
            rng = random.Random(f"{self.seed}:{r.episode}:{r.step}")
            if rng.random() < self.noise:
                out.append(Completion("<action>Click(box=(" if rng.random() < 0.5 else
                                      answer_text(Click(box=(rng.randint(0, 1000), rng.randint(0, 1000))))))
                continue
            task = r.task
            plan = self._plans.setdefault(task.success_check or task.goal, self.plan(task))
            k = r.step
            out.append(Completion(answer_text(plan[k] if k < len(plan) else Finished(content=task.answer))))
        return out


class PlannedSampling:
    """Samples every answer from `inner` (the model's real cost, its seeded RNG, its token ids) but
    acts with `scripted`'s text: a system whose episodes have a known length and success mix while the
    learner still trains on sampled tokens (the throughput benchmark, the exact-resume test).
    `version` and `calls` are the inner policy's, so checkpoints and weight syncs see through it."""

    def __init__(self, inner: ModelPolicy, scripted: ScriptedPolicy) -> None:
        self.inner, self.scripted, self.name = inner, scripted, f"planned-{inner.name}"

    @property
    def model(self) -> Any:
        return self.inner.model

    @property
    def version(self) -> int:
        return self.inner.version

    @version.setter
    def version(self, v: int) -> None:
        self.inner.version = v

    @property
    def calls(self) -> int:
        return self.inner.calls

    @calls.setter
    def calls(self, v: int) -> None:
        self.inner.calls = v

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        sampled = self.inner.act(requests)
        return [Completion(p.text, s.token_ids) for s, p in zip(sampled, self.scripted.act(requests), strict=True)]


__all__ = ["ModelPolicy", "PlannedSampling", "PredictorPolicy", "ScriptedPolicy", "answer_text"]
