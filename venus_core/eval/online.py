"""Online navigation evaluation: the model acts in a live environment until the task ends.

Protocol (AndroidWorld-style, as UI-Venus evaluates online): each task starts from its reset state;
at every step the model sees the current screenshot and the 1.5 navigation prompt with the goal and
its *own* last 5 (think, action) steps, decodes greedily (repetition penalty 1.05), and the action
is executed; the episode ends on Finished / CallUser or at the task's step limit (≈ 30). Success is
the environment's verdict from device state (`Env.is_successful`), never from pixels.

Choices the paper leaves open, made here: an answer that does not parse, or an action the backend
cannot perform (`UnsupportedAction`), is an *invalid step*: nothing is executed, the step counts
toward the limit, it is not added to the history, and it is reported (invalid-step rate). Several
environments run in lock step so that the model answers one batch per round (one query per live
episode); episodes and their results keep the task order. Environments whose work happens outside
the interpreter (`Env.concurrent`: browser pages) execute a round's actions, resets and success
checks at the same time, one thread per env; which env takes which task stays the same.

Reported: task success rate (overall, per difficulty level and per app), invalid-step rate, the
share of episodes cut by the step limit and mean steps of successful episodes. The embedded
default runs the simulated phone (`sim-phone`): its numbers are *simulated* and never shown
beside published AndroidWorld numbers (the result carries no benchmark).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from venus_core.actions import render_action
from venus_core.envs.base import Env, Observation, Task, UnsupportedAction
from venus_core.eval.draw import annotate, data_url
from venus_core.eval.metrics import Rate, predicted_action
from venus_core.eval.predictors import Predictor, Query
from venus_core.eval.results import EvalResult, rate, rates_by
from venus_core.models.prompts import navigation_prompt

ONLINE_MAX_NEW_TOKENS = 256
FRAME_SIDE = 320
_TAG = re.compile(r"<(think|conclusion)>(.*?)</\1>", re.S)


@dataclass
class _Episode:
    index: int
    task: Task
    obs: Observation
    history: list[tuple[str, str]] = field(default_factory=list)
    steps: list[dict[str, Any]] = field(default_factory=list)
    frames: list[str] = field(default_factory=list)
    step_count: int = 0
    invalid: int = 0
    done: bool = False
    truncated: bool = False


def _texts(answer: str) -> tuple[str, str]:
    found = {m.group(1): m.group(2).strip() for m in _TAG.finditer(answer)}
    return found.get("think", ""), found.get("conclusion", "")


def _advance(env: Env, ep: _Episode, answer: str, keep_frames: bool) -> None:
    """Execute one answer in `env` and record the step (module docstring for invalid steps)."""
    action = predicted_action(answer, env.platform)
    think, conclusion = _texts(answer)
    record: dict[str, Any] = {"step": ep.step_count, "answer": answer, "think": think, "conclusion": conclusion,
                              "action": render_action(action) if action is not None else None, "valid": action is not None}
    frame = ep.obs.screenshot
    ep.step_count += 1
    if action is not None:
        try:
            ep.obs, done, info = env.step(action)
        except UnsupportedAction as exc:
            record.update(valid=False, error=str(exc))
        else:
            ep.history.append((think, render_action(action)))
            ep.done, ep.truncated = done, bool(info.get("truncated"))
            if info.get("error"):
                record["error"] = str(info["error"])
    if not record["valid"]:
        ep.invalid += 1
    if not ep.done and ep.step_count >= ep.task.max_steps:  # invalid steps count toward the limit too
        ep.done, ep.truncated = True, True
    if keep_frames:
        ep.frames.append(data_url(annotate(frame, pred_action=action, correct=record["valid"], max_side=FRAME_SIDE)))
    ep.steps.append(record)


def _result(ep: _Episode, env: Env) -> dict[str, Any]:
    success = env.is_successful()
    return {"id": f"task-{ep.index}", "goal": ep.task.goal, "app": ep.task.app, "difficulty": ep.task.difficulty,
            "success_check": ep.task.success_check, "success": success, "steps": ep.step_count,
            "invalid_steps": ep.invalid, "truncated": ep.truncated, "max_steps": ep.task.max_steps,
            "trajectory": ep.steps, "frames": ep.frames}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    steps = sum(s["steps"] for s in samples)
    invalid = sum(s["invalid_steps"] for s in samples)
    won = [s["steps"] for s in samples if s["success"]]
    summary: dict[str, Any] = {
        "success": rate(samples, "success").to_dict(),
        "invalid_steps": {"count": invalid, **Rate(invalid, steps).to_dict()},
        "truncated": rate(samples, "truncated").to_dict(),
        "mean_steps_success": round(sum(won) / len(won), 2) if won else None,
        "by_difficulty": rates_by(samples, "difficulty", "success"),
    }
    by_app = rates_by(samples, "app", "success")
    if by_app:
        summary["by_app"] = by_app
    return summary


def evaluate_online(
    envs: Sequence[Env],
    tasks: Sequence[Task],
    predictor: Predictor,
    *,
    suite: str = "online",
    target: str = "",
    max_new_tokens: int = ONLINE_MAX_NEW_TOKENS,
    frames_episodes: int = 3,
    progress: Callable[[int, int | None], None] | None = None,
    fits: Callable[[Env, Task], bool] | None = None,
) -> EvalResult:
    """Run every task to its end on `envs` (lock step, one task per env at a time) and score it.

    `fits(env, task)`: which envs can run a task (e.g. a simulated phone of the task's screen size);
    a free env takes the first queued task it fits. Every task must fit one of the envs.

    Screens of the first `frames_episodes` episodes are kept (annotated, small JPEG data URLs)
    for the report's viewer. `target` names the environment / task set in the result.
    `progress(episodes finished, tasks)` is called as each episode ends.
    """
    if not envs:
        raise ValueError("evaluate_online: no environments")
    if not tasks:
        raise ValueError("evaluate_online: no tasks")
    platforms = {e.platform for e in envs}
    if len(platforms) != 1:
        raise ValueError(f"evaluate_online: environments of several platforms {sorted(platforms)}")
    fit = fits or (lambda env, task: True)
    for i, task in enumerate(tasks):
        if not any(fit(env, task) for env in envs):
            raise ValueError(f"evaluate_online: task {i} ({task.goal!r}, {task.success_check}) fits none of the "
                             f"{len(envs)} environments")
    queue = list(enumerate(tasks))
    running: dict[int, _Episode] = {}
    finished: dict[int, dict[str, Any]] = {}
    pool = ThreadPoolExecutor(len(envs), thread_name_prefix="env") if len(envs) > 1 and all(
        e.concurrent for e in envs) else None

    def each(fn: Callable[[int], Any], slots: list[int]) -> list[Any]:
        """fn(slot) for every slot, in slot order: at the same time on concurrent envs."""
        return list(pool.map(fn, slots)) if pool is not None else [fn(slot) for slot in slots]

    def start(slots: list[int]) -> None:
        """Give each slot (in order) the first queued task it fits, then reset those envs."""
        assigned: dict[int, tuple[int, Task]] = {}
        for slot in slots:
            k = next((k for k, (_, task) in enumerate(queue) if fit(envs[slot], task)), None)
            if k is not None:  # else nothing left that this env can run
                assigned[slot] = queue.pop(k)
        observations = each(lambda slot: envs[slot].reset(assigned[slot][1]), list(assigned))
        for (slot, (index, task)), obs in zip(assigned.items(), observations, strict=True):
            running[slot] = _Episode(index, task, obs)

    def advance(slot: int, answer: str) -> dict[str, Any] | None:
        ep = running[slot]
        _advance(envs[slot], ep, answer, keep_frames=ep.index < frames_episodes)
        return _result(ep, envs[slot]) if ep.done else None

    try:
        start(list(range(len(envs))))
        while running:  # one round: a batch of answers, one action per running env
            slots = sorted(running)
            queries = []
            for slot in slots:
                ep = running[slot]
                prompt = navigation_prompt(ep.task.goal, ep.history, envs[slot].platform)  # type: ignore[arg-type]
                queries.append(Query(f"task-{ep.index}:{ep.step_count}", ep.obs.screenshot, prompt))
            answers = predictor.predict(queries, max_new_tokens)
            if len(answers) != len(queries):
                raise RuntimeError(f"predictor {predictor.name!r} returned {len(answers)} answers for "
                                   f"{len(queries)} queries")
            by_slot = dict(zip(slots, answers, strict=True))
            ended = []
            for slot, result in zip(slots, each(lambda slot: advance(slot, by_slot[slot]), slots), strict=True):
                if result is not None:
                    finished[running.pop(slot).index] = result
                    ended.append(slot)
                    if progress is not None:
                        progress(len(finished), len(tasks))
            if queue and ended:
                start(ended)
    finally:
        if pool is not None:
            pool.shutdown(wait=True)
    samples = [finished[i] for i in range(len(tasks))]
    settings: dict[str, Any] = {"target": target, "envs": len(envs), "max_new_tokens": max_new_tokens,
                                "backend": type(predictor).__name__, "simulated": any(getattr(e, "simulated", False)
                                                                                      for e in envs)}
    for name in ("temperature", "repetition_penalty", "batch_size"):
        if hasattr(predictor, name):
            settings[name] = getattr(predictor, name)
    return EvalResult(evaluator="online", suite=suite, model=predictor.name, data=target or envs[0].name,
                      summary=summarize(samples), samples=samples, benchmark=None,
                      sources={envs[0].name: len(samples)}, settings=settings)
