"""The online RL loop: sample tasks, roll out groups on live envs, update, move the reference.

One optimizer step: `tasks_per_step` tasks from the pool (curriculum shares), `group_size` full
trajectories of each on `devices` envs (`rollout.collect_groups`), the pool told each group's
outcomes (curriculum, set-aside), one `TrajectoryGRPO.update`. Every `kl.check_every` steps (with
`kl.adaptive`) the policy and the reference play the held-out tasks greedily; when the policy's
success rate beats the reference's by `kl.margin`, the reference moves toward the policy
(UI-Venus-1.5's adaptive KL) and its rate is measured again.

Success is the env's rule unless `online_rl.success` asks for the MLLM judge (`verdicts.EpisodeJudge`,
after each batch is collected and before the pool and the learner see it; the held-out checks stay
on rules, an independent measure of what the judge's rewards taught).

`staleness = 0` is synchronous: each step collects its batch with the weights of the last update,
then updates. `staleness >= 1` decouples them (`decoupled.RolloutWorker`): a worker thread with its
own copy of the model collects batches ahead (at most `staleness` updates old), the learner
publishes a weight snapshot after every update, and the ratio is taken against the behaviour
log-probs the worker recorded. The worker is paused while the held-out tasks are played (they use
the same devices).

With `rollout_server` the rollouts are sampled by an OpenAI-compatible server (vLLM in a cluster,
`venus serve` here; `policy_http.ServerPolicy`), whose answers carry the sampled ids and their
log-probs (the behaviour log-probs); after every update the learner's weights are saved as a
verified checkpoint (safetensors + SHA256SUMS) in `weights_dir`, which the server must be able to
read, and the server loads them (`sync_server`; `rollout_server_kind` says how: venus serve's
/v1/load_weights, or vLLM's /collective_rpc into `vllm_worker.VenusWorkerExtension`).
"""

from __future__ import annotations

import copy
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from venus_core.config.training import OnlineRLSpec
from venus_core.eval.online import evaluate_online
from venus_core.eval.predictors import LocalPredictor
from venus_core.eval.results import EvalResult
from venus_core.rl.online.decoupled import RolloutWorker, copy_weights
from venus_core.rl.online.devices import EnvSource
from venus_core.rl.online.learner import TrajectoryGRPO
from venus_core.rl.online.policy import ModelPolicy
from venus_core.rl.online.rollout import RolloutStats, Trajectory, collect_groups
from venus_core.rl.online.verdicts import EpisodeJudge
from venus_core.rl.rollout import completions_batch, sequence_logprobs
from venus_core.rl.online.tasks import PoolTask, TaskPool
from venus_core.train.tracker import Tracker

EVAL_MAX_NEW_TOKENS = 96


def evaluate_tasks(model: Any, processor: Any, tasks: Sequence[PoolTask], source: EnvSource, *, devices: int,
                   max_new_tokens: int = EVAL_MAX_NEW_TOKENS, name: str = "policy", suite: str = "online",
                   repetition_penalty: float = 1.05, batch_size: int = 16) -> EvalResult:
    """Greedy episodes of `tasks` on envs from `source` (the online evaluator's protocol); each
    sample carries its task's pool bucket. Envs go back broken if the evaluation raised."""
    envs = [source.acquire() for _ in range(max(1, min(devices, len(tasks))))]
    failed: str | None = None
    try:
        predictor = LocalPredictor(model, processor, name=name, temperature=0.0,
                                   repetition_penalty=repetition_penalty, batch_size=batch_size)
        result = evaluate_online(envs, [t.task for t in tasks], predictor, suite=suite, target=tasks[0].env,
                                 max_new_tokens=max_new_tokens, frames_episodes=0)
    except BaseException as exc:
        failed = f"evaluation failed: {type(exc).__name__}: {exc}"
        raise
    finally:
        for env in envs:
            source.release(env, failed=failed)
    for sample, t in zip(result.samples, tasks, strict=True):
        sample["bucket"], sample["key"] = t.bucket, t.key
    return result


def success_rate(result: EvalResult) -> float:
    return float(result.summary["success"]["value"])


class OnlineRL:
    """Owns the policy, the learner and the loop; the job owns the model files and the report."""

    def __init__(self, model: Any, processor: Any, spec: OnlineRLSpec, pool: TaskPool, source: EnvSource,
                 tracker: Tracker, *, eval_batch_size: int = 16, weights_dir: Path | None = None,
                 judge: EpisodeJudge | None = None) -> None:
        self.spec = spec
        self.judge = judge  # decides the episodes' success where online_rl.success asks for the MLLM judge
        self.pool = pool
        self.source = source
        self.tracker = tracker
        self.processor = processor
        self.eval_batch_size = eval_batch_size
        self.policy = ModelPolicy(model, processor, temperature=spec.temperature,
                                  max_new_tokens=spec.max_new_tokens, seed=spec.seed)
        self.learner = TrajectoryGRPO(model, processor, spec, micro_batch=spec.micro_batch)
        self.totals: Counter[str] = Counter()
        self.rollout_policy: Any = self.policy
        self.worker: RolloutWorker[Any] | None = None
        self._snapshot: tuple[int, dict[str, Any]] | None = None
        self._pool_lock = threading.Lock()
        self.weights_dir = weights_dir
        if spec.rollout_server:
            from venus_core.rl.online.policy_http import ServerPolicy, learner_token_ids

            if weights_dir is None:
                raise ValueError("online_rl.rollout_server needs a weights directory the server can read")
            self.rollout_policy = ServerPolicy(spec.rollout_server, spec.rollout_model, temperature=spec.temperature,
                                               max_new_tokens=spec.max_new_tokens, seed=spec.seed, name="rollout-server",
                                               concurrency=max(8, spec.devices),
                                               timeout=spec.call_timeout_s * 4, kind=spec.rollout_server_kind,
                                               **learner_token_ids(model, processor))
            self.sync_server()
        elif spec.staleness > 0:  # the worker's copy stays on the learner's device (weights are copied on-device)
            self.rollout_policy = ModelPolicy(copy.deepcopy(model).eval(), processor, temperature=spec.temperature,
                                              max_new_tokens=spec.max_new_tokens, seed=spec.seed, name="rollout")
        self.ref_rate: float | None = None
        self.checks: list[dict[str, Any]] = []
        self.samples: list[dict[str, Any]] = []  # a few trajectories per step, for the report

    def evaluate(self, model: Any, tasks: Sequence[PoolTask], name: str) -> EvalResult:
        return evaluate_tasks(model, self.processor, tasks, self.source, devices=self.spec.devices,
                              max_new_tokens=self.spec.max_new_tokens, name=name, batch_size=self.eval_batch_size)

    def sync_server(self) -> None:
        """Weight sync by checkpoint: the learner's weights saved (safetensors + SHA256SUMS, written
        last) where the rollout server reads them, and loaded there between its batches."""
        from venus_core.models.loading import save_model
        from venus_core.models.serve_weights import write_manifest

        assert self.weights_dir is not None
        t0 = time.perf_counter()
        out = self.weights_dir / f"v{self.learner.updates:05d}"
        save_model(self.policy.model, self.processor, out)
        write_manifest(out)
        self.rollout_policy.load_weights(out)  # type: ignore[attr-defined]
        self.rollout_policy.version = self.learner.updates
        self.totals["weight_syncs"] += 1
        self.totals["weight_sync_ms"] += int(1000 * (time.perf_counter() - t0))
        import shutil

        for previous in self.weights_dir.glob("v[0-9]*"):  # the server has moved on: keep one copy on disk
            if previous != out and previous.is_dir():
                shutil.rmtree(previous, ignore_errors=True)

    def collect(self, version: int) -> tuple[list[list[Trajectory]], RolloutStats]:
        """One batch of groups with the rollout policy (on the worker thread when decoupled)."""
        spec, policy = self.spec, self.rollout_policy
        if (self.worker is not None and self._snapshot is not None and self._snapshot[0] > policy.version
                and not spec.rollout_server):
            snap_version, weights = self._snapshot
            policy.model.load_state_dict(weights)
            policy.version = snap_version
        with self._pool_lock:
            tasks = self.pool.sample(spec.tasks_per_step)
        groups, stats = collect_groups(tasks, spec.group_size, self.source, policy, devices=spec.devices,
                                       history_len=spec.history_len, call_timeout=spec.call_timeout_s)
        if self.judge is not None:  # episodes without a verdict are lost, like a failed device's
            groups = self.judge.decide(groups, stats)
        with self._pool_lock:
            for t, g in zip(tasks, groups, strict=True):
                if g:
                    self.pool.record(t.key, [x.success for x in g])
        if self.worker is not None and not spec.rollout_server:  # a server reports its own log-probs
            self._behaviour_logprobs(groups)
        return groups, stats

    @torch.no_grad()
    def _behaviour_logprobs(self, groups: Sequence[Sequence[Trajectory]]) -> None:
        """Score each sampled completion under the weights that sampled it (off-policy ratio)."""
        from venus_core.models.prompts import build_messages

        steps = [st for g in groups for t in g for st in t.steps if st.completion.token_ids]
        for i in range(0, len(steps), self.spec.micro_batch):
            chunk = steps[i : i + self.spec.micro_batch]
            batch = completions_batch(self.processor, [build_messages(st.image, st.prompt) for st in chunk],
                                      [st.completion.token_ids or () for st in chunk])
            lp, _ = sequence_logprobs(self.rollout_policy.model, batch, temperature=self.spec.temperature)
            for st, row, n in zip(chunk, lp, batch.completion_mask.sum(dim=1).long().tolist(), strict=True):
                st.behaviour_logp = row[:n].float().cpu().tolist()  # one transfer per row, not one per token

    def step(self, step: int) -> dict[str, float]:
        t0 = time.perf_counter()
        staleness = 0.0
        if self.worker is not None:
            stamped = self.worker.get(self.learner.updates)
            (groups, stats), staleness = stamped.batch, float(self.learner.updates - stamped.version)
        else:
            groups, stats = self.collect(self.learner.updates)
        t1 = time.perf_counter()
        m = self.learner.update(groups)
        self.policy.version += int(m["updated"])
        if self.spec.rollout_server and m["updated"]:
            self.sync_server()
        elif self.worker is not None:
            self._snapshot = (self.learner.updates, copy_weights(self.policy.model))
            self.worker.publish(self.learner.updates)
            m["rollout/learner_wait_s"] = t1 - t0
        m.update(self._rollout_metrics(groups, stats.to_dict()))
        m.update({"time/rollout_s": t1 - t0, "time/update_s": time.perf_counter() - t1, "staleness": staleness,
                  "time/step_s": time.perf_counter() - t0, "policy_version": float(self.policy.version)})
        with self._pool_lock:
            shares = self.pool.report()["shares"]
        for b, share in shares.items():
            m[f"pool/share/{b}"] = float(share)
        if self.judge is not None:
            m.update(self.judge.metrics())
        if groups and groups[0]:
            self.samples.append(_trajectory_summary(step, groups[0][0]))
        self.tracker.log_metrics(m, step)
        return m

    def _rollout_metrics(self, groups: Sequence[Sequence[Trajectory]], stats: dict[str, Any]) -> dict[str, float]:
        trajs = [t for g in groups for t in g]
        m: dict[str, float] = {"rollout/episodes": float(stats["episodes"]), "rollout/env_steps": float(stats["env_steps"]),
                               "rollout/lost": float(stats["lost"]), "rollout/wall_s": float(stats["wall_s"])}
        if stats["wall_s"] > 0:
            m["rollout/env_steps_per_s"] = stats["env_steps"] / stats["wall_s"]
        for k in ("episodes", "env_steps", "lost"):
            self.totals[k] += int(stats[k])
        for k, v in stats["lost_by"].items():
            self.totals[f"lost/{k}"] += int(v)
        if trajs:
            m["success_rate"] = sum(t.success for t in trajs) / len(trajs)
            steps = sum(t.length for t in trajs)
            m["invalid_rate"] = sum(t.invalid for t in trajs) / max(1, steps)
            m["episode_len/mean"] = steps / len(trajs)
            for b in ("easy", "medium", "hard"):
                sub = [t for t in trajs if t.task.bucket == b]
                if sub:
                    m[f"success_rate/{b}"] = sum(t.success for t in sub) / len(sub)
        for k, v in self.source.stats.items():
            m[f"devices/{k}"] = float(v)
        return m

    def check_reference(self, step: int, held_out: Sequence[PoolTask]) -> dict[str, Any] | None:
        """Adaptive KL: compare policy and reference on `held_out`; move the reference on a win."""
        kl = self.spec.kl
        if not (kl.adaptive and kl.coef > 0 and held_out and self.learner.ref is not None):
            return None
        if self.ref_rate is None:
            self.ref_rate = success_rate(self.evaluate(self.learner.ref, held_out, "reference"))
        rate = success_rate(self.evaluate(self.policy.model, held_out, "policy"))
        moved = rate >= self.ref_rate + kl.margin
        row = {"step": step, "policy": rate, "reference": self.ref_rate, "moved": moved}
        if moved:
            self.learner.move_reference()
            self.ref_rate = success_rate(self.evaluate(self.learner.ref, held_out, "reference"))
            row["reference_after"] = self.ref_rate
        self.checks.append(row)
        self.tracker.log_metrics({"kl_ref/policy_success": rate, "kl_ref/reference_success": row["reference"],
                                  "kl_ref/moves": float(self.learner.ref_moves)}, step)
        return row

    def train(self, steps: int, *, held_out: Sequence[PoolTask] = (), start: int = 0,
              on_step: Callable[[int], None] | None = None) -> list[dict[str, float]]:
        history = []
        if self.spec.staleness > 0 and steps > start:
            self.worker = RolloutWorker(self.collect, self.spec.staleness,
                                        get_timeout=max(600.0, 20 * self.spec.call_timeout_s)).start()
        t0 = time.perf_counter()
        try:
            for step in range(start, steps):
                history.append(self.step(step))
                if self.spec.kl.adaptive and (step + 1) % self.spec.kl.check_every == 0 and step + 1 < steps:
                    if self.worker is not None:
                        self.worker.pause()
                    try:
                        self.check_reference(step + 1, held_out)
                    finally:
                        if self.worker is not None:
                            self.worker.resume()
                if on_step is not None:
                    on_step(step + 1)
        finally:
            if self.worker is not None:
                self.worker.stop()
                self.totals["dropped_stale"] += self.worker.dropped_stale
                self.totals["learner_wait_ms"] += int(1000 * self.worker.wait_s)
                self.worker = None
        self.totals["train_ms"] += int(1000 * (time.perf_counter() - t0))
        return history


def _trajectory_summary(step: int, t: Trajectory) -> dict[str, Any]:
    return {"step": step, "task": t.task.key, "goal": t.task.task.goal, "success": t.success, "length": t.length,
            "invalid": t.invalid, "actions": [s.action if s.valid else f"invalid: {s.completion.text[:80]!r}"
                                              for s in t.steps]}


__all__ = ["OnlineRL", "evaluate_tasks", "success_rate"]
