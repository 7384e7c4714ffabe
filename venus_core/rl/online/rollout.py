"""Full-trajectory rollouts for online RL: G episodes per task, in parallel across K environments.

What one `collect_groups` call does: every (task, replica) pair is an episode; K env slots run
episodes side by side; each round the policy answers one batch (one query per live episode: the
screenshot and the UI-Venus navigation prompt with the goal and the episode's own last
`history_len` (think, action) steps), the actions are executed on all slots in parallel, and a
slot whose episode ended takes the next one. Success is the environment's verdict from device
state (`Env.is_successful`), read when the episode ends (Finished / CallUser, or the task's step
limit), where the env has a rule for it (`Env.has_success_rule`); the screen at the end is kept for
an MLLM judge, which `verdicts.EpisodeJudge` asks afterwards where the spec wants it.

Choices the papers leave open, made here (and the same as the online evaluator's):
- an answer that does not parse, or an action the backend cannot perform, is an *invalid step*:
  nothing runs, it counts toward the step limit and the trajectory's invalid-action penalty, and it
  is not added to the history;
- every env call (reset, step, success check) runs on the slot's own worker thread under
  `call_timeout` seconds, so a device that stops answering cannot hang the run. A call that fails
  or times out *loses* the trajectory: the env goes back to its source as broken (a leased device
  is quarantined and another is leased), and the slot continues with a fresh env. A lost
  trajectory is dropped from its group, not re-sampled: the group's advantages are computed over
  the trajectories that survived (the learner skips a group with fewer than two). An episode whose
  *reset* failed has cost no policy work and is queued again once. Every loss is counted.
"""

from __future__ import annotations

import re
import time
from collections import Counter, deque
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field
from typing import Any, Protocol

from PIL import Image

from venus_core.actions import render_action
from venus_core.envs.base import Env, Observation, Task, UnsupportedAction
from venus_core.eval.metrics import predicted_action
from venus_core.models.prompts import navigation_prompt
from venus_core.rl.online.devices import EnvSource
from venus_core.rl.online.tasks import PoolTask

_TAG = re.compile(r"<(think|conclusion)>(.*?)</\1>", re.S)


@dataclass(frozen=True)
class StepRequest:
    """One policy query: the live episode's screenshot and its navigation prompt."""

    episode: str  # "<task key>#<replica>"
    image: Image.Image
    prompt: str
    task: Task
    step: int = 0  # steps the episode has taken so far


@dataclass(frozen=True)
class Completion:
    """A policy's answer; `token_ids` are the sampled ids (None for scripted policies) and
    `logprobs` their log-probabilities under the sampling distribution, when the backend reports
    them (a generation server does; they become the steps' behaviour log-probs)."""

    text: str
    token_ids: tuple[int, ...] | None = None
    logprobs: tuple[float, ...] | None = None


class Policy(Protocol):
    name: str
    version: int

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]: ...


@dataclass
class StepRecord:
    image: Image.Image
    prompt: str
    completion: Completion
    action: str | None  # the rendered action when it parsed
    valid: bool
    error: str = ""
    behaviour_logp: list[float] | None = None  # per completion token, under the weights that sampled it


@dataclass
class Trajectory:
    task: PoolTask
    replica: int
    policy_version: int
    index: int = 0  # the task's position in its collect_groups call
    steps: list[StepRecord] = field(default_factory=list)
    history: list[tuple[str, str]] = field(default_factory=list)
    success: bool = False
    truncated: bool = False
    done: bool = False
    lost: str | None = None  # why the trajectory was dropped (device failure, timeout, no verdict)
    final_image: Image.Image | None = None  # the screen when the episode ended (the judge's last frame)
    has_rule: bool = True  # whether the env could check success from its state
    rule_success: bool | None = None  # the rule's verdict, once a judge has been asked too (`verdicts`)
    judge_success: bool | None = None  # the judge's verdict, where it was asked

    @property
    def length(self) -> int:
        return len(self.steps)

    @property
    def invalid(self) -> int:
        return sum(not s.valid for s in self.steps)

    @property
    def episode(self) -> str:
        return f"{self.task.key}#{self.replica}"


@dataclass
class RolloutStats:
    episodes: int = 0
    env_steps: int = 0  # actions executed on an env (valid steps)
    policy_steps: int = 0  # answers produced (valid or not)
    rounds: int = 0
    reset_retries: int = 0  # episodes run again on a fresh env after their reset failed
    replaced: int = 0  # broken envs replaced by fresh ones
    retired: list[str] = field(default_factory=list)  # slots that got no replacement, and why
    wall_s: float = 0.0
    policy_s: float = 0.0
    env_s: float = 0.0
    losses: Counter[str] = field(default_factory=Counter)  # lost trajectories by where it failed
    lost: list[tuple[str, str]] = field(default_factory=list)  # (episode, reason) of each loss

    def to_dict(self) -> dict[str, Any]:
        return {"episodes": self.episodes, "env_steps": self.env_steps, "policy_steps": self.policy_steps,
                "rounds": self.rounds, "reset_retries": self.reset_retries,
                "replaced": self.replaced, "retired": list(self.retired), "wall_s": round(self.wall_s, 3), "policy_s": round(self.policy_s, 3),
                "env_s": round(self.env_s, 3), "lost": sum(self.losses.values()), "lost_by": dict(self.losses),
                "lost_reasons": [f"{e}: {r}"[:200] for e, r in self.lost[:10]]}


class _Slot:
    """One env and the worker thread its calls run on."""

    def __init__(self, source: EnvSource, stats: RolloutStats) -> None:
        self.source = source
        self.env: Env | None = None  # None: no env could be had (slot retired)
        for attempt in range(2):  # a failed start (device, tunnel or adb server lost) gets one more try
            try:
                self.env = source.acquire()
                break
            except Exception as exc:  # noqa: BLE001 - no device for this slot: the run goes on with fewer
                if attempt == 1:
                    stats.retired.append(f"{type(exc).__name__}: {exc}"[:200])
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="venus-rollout-env")
        self.traj: Trajectory | None = None
        self.obs: Observation | None = None
        self.reset_tries = 0

    def submit(self, fn: Any, *args: Any) -> Future[Any]:
        return self.pool.submit(fn, *args)

    def replace(self, reason: str, stats: RolloutStats) -> None:
        """Give the env back as broken and continue on a fresh one (a hung call keeps its thread);
        when the source has none to give, the slot retires (counted) and the others go on."""
        self.pool.shutdown(wait=False, cancel_futures=True)
        env, self.env = self.env, None
        if env is not None:
            self.source.release(env, failed=reason)
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="venus-rollout-env")
        try:
            self.env = self.source.acquire()
            stats.replaced += 1
        except Exception as exc:  # noqa: BLE001 - no device to replace it with: run on with fewer
            stats.retired.append(f"{type(exc).__name__}: {exc}"[:200])

    def close(self) -> None:
        self.pool.shutdown(wait=False, cancel_futures=True)
        if self.env is not None:
            self.source.release(self.env)
            self.env = None


def answer_texts(answer: str) -> tuple[str, str]:
    """(think, conclusion) of a tagged navigation answer ("" where a tag is missing)."""
    found = {m.group(1): m.group(2).strip() for m in _TAG.finditer(answer)}
    return found.get("think", ""), found.get("conclusion", "")


def _result(fut: Future[Any], timeout: float) -> tuple[Any, str | None]:
    """(value, None) or (None, why) for a call that raised or timed out."""
    try:
        return fut.result(timeout=timeout), None
    except FutureTimeout:
        return None, "timeout"
    except UnsupportedAction:
        raise
    except Exception as exc:  # noqa: BLE001 - any device failure loses the trajectory, with its reason
        return None, f"{type(exc).__name__}: {exc}"


def collect_groups(
    tasks: Sequence[PoolTask],
    group_size: int,
    source: EnvSource,
    policy: Policy,
    *,
    devices: int,
    history_len: int = 5,
    call_timeout: float = 30.0,
) -> tuple[list[list[Trajectory]], RolloutStats]:
    """Run `group_size` episodes of every task on up to `devices` envs; groups in task order.

    Returns, per task, its trajectories that were not lost (replica order), and the stats."""
    if group_size < 1 or devices < 1:
        raise ValueError(f"collect_groups: group_size and devices must be >= 1, got {group_size}, {devices}")
    t_start = time.perf_counter()
    stats = RolloutStats()
    queue: deque[tuple[int, int]] = deque((i, r) for i in range(len(tasks)) for r in range(group_size))
    finished: dict[tuple[int, int], Trajectory] = {}
    slots: list[_Slot] = []
    try:
        for _ in range(min(devices, len(queue))):
            slots.append(_Slot(source, stats))
        while True:
            for slot in slots:
                if slot.env is not None and slot.traj is None and queue:
                    _start(slot, tasks, queue, finished, stats, policy, call_timeout)
            live = [s for s in slots if s.traj is not None]
            if not live:
                while queue:  # every slot retired: what is left cannot run now
                    i, r = queue.popleft()
                    traj = Trajectory(tasks[i], r, policy.version, i, lost="no device available")
                    stats.losses["no_device"] += 1
                    stats.lost.append((traj.episode, traj.lost or ""))
                    finished[(i, r)] = traj
                break
            _round(live, policy, stats, finished, history_len, call_timeout)
    finally:
        for slot in slots:
            slot.close()
    groups: list[list[Trajectory]] = []
    for i in range(len(tasks)):
        trajs = [finished[(i, r)] for r in range(group_size) if (i, r) in finished]
        groups.append([t for t in trajs if t.lost is None])
    stats.wall_s = time.perf_counter() - t_start
    return groups, stats


def _start(slot: _Slot, tasks: Sequence[PoolTask], queue: deque[tuple[int, int]],
           finished: dict[tuple[int, int], Trajectory], stats: RolloutStats, policy: Policy,
           call_timeout: float) -> None:
    while queue and slot.env is not None:
        i, r = queue.popleft()
        traj = Trajectory(tasks[i], r, policy.version, i)
        t0 = time.perf_counter()
        obs, err = _result(slot.submit(slot.env.reset, tasks[i].task), call_timeout)
        stats.env_s += time.perf_counter() - t0
        if err is None:
            slot.traj, slot.obs, slot.reset_tries = traj, obs, 0
            stats.episodes += 1
            return
        slot.replace(f"reset failed: {err}", stats)
        if slot.reset_tries == 0:  # no policy work lost yet: run this episode again
            slot.reset_tries += 1
            stats.reset_retries += 1
            queue.appendleft((i, r))
        else:
            slot.reset_tries = 0
            traj.lost = f"reset failed: {err}"
            stats.losses["reset"] += 1
            stats.lost.append((traj.episode, traj.lost))
            finished[(i, r)] = traj


def _round(live: list[_Slot], policy: Policy, stats: RolloutStats, finished: dict[tuple[int, int], Trajectory],
           history_len: int, call_timeout: float) -> None:
    requests = []
    for s in live:
        assert s.traj is not None and s.obs is not None and s.env is not None
        prompt = navigation_prompt(s.traj.task.task.goal, s.traj.history[-history_len:], s.env.platform)  # type: ignore[arg-type]
        requests.append(StepRequest(s.traj.episode, s.obs.screenshot, prompt, s.traj.task.task, s.traj.length))
    t0 = time.perf_counter()
    answers = policy.act(requests)
    stats.policy_s += time.perf_counter() - t0
    if len(answers) != len(requests):
        raise RuntimeError(f"policy {policy.name!r} returned {len(answers)} answers for {len(requests)} requests")
    stats.rounds += 1
    stats.policy_steps += len(answers)
    t1 = time.perf_counter()
    pending: list[tuple[_Slot, StepRecord, Future[Any] | None]] = []
    for s, req, ans in zip(live, requests, answers, strict=True):
        assert s.env is not None
        action = predicted_action(ans.text, s.env.platform)
        rec = StepRecord(req.image, req.prompt, ans, render_action(action) if action is not None else None,
                         action is not None, behaviour_logp=list(ans.logprobs) if ans.logprobs is not None else None)
        pending.append((s, rec, s.submit(s.env.step, action) if action is not None else None))
    for s, rec, fut in pending:
        traj = s.traj
        assert traj is not None
        traj.steps.append(rec)
        done = False
        if fut is not None:
            try:
                out, err = _result(fut, call_timeout)
            except UnsupportedAction as exc:
                rec.valid, rec.error, out, err = False, str(exc), None, None
            if err is not None:
                _lose(s, finished, stats, "step", err)
                continue
            if out is not None:
                s.obs, done, info = out
                stats.env_steps += 1
                think, _ = answer_texts(rec.completion.text)
                traj.history.append((think, rec.action or ""))
                traj.truncated = bool(info.get("truncated"))
                if info.get("error"):
                    rec.error = str(info["error"])
        if not done and traj.length >= traj.task.task.max_steps:  # invalid steps count toward the limit
            done, traj.truncated = True, True
        if done:
            assert s.env is not None and s.obs is not None
            traj.final_image, traj.has_rule = s.obs.screenshot, s.env.has_success_rule
            ok = False
            if traj.has_rule:  # without one the verdict is the judge's (`verdicts.EpisodeJudge`)
                ok, err = _result(s.submit(s.env.is_successful), call_timeout)
                if err is not None:
                    _lose(s, finished, stats, "success_check", err)
                    continue
            traj.success, traj.done = bool(ok), True
            finished[(traj.index, traj.replica)] = traj
            s.traj, s.obs = None, None
    stats.env_s += time.perf_counter() - t1


def _lose(slot: _Slot, finished: dict[tuple[int, int], Trajectory], stats: RolloutStats, where: str, err: str) -> None:
    traj = slot.traj
    assert traj is not None
    traj.lost = f"{where}: {err}"
    stats.losses[where] += 1
    stats.lost.append((traj.episode, traj.lost))
    finished[(traj.index, traj.replica)] = traj
    slot.traj, slot.obs = None, None
    slot.replace(traj.lost, stats)


__all__ = ["Completion", "Policy", "RolloutStats", "StepRecord", "StepRequest", "Trajectory", "answer_texts",
           "collect_groups"]
