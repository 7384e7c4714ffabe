"""Benchmark: online RL throughput — env-steps/s and learner idle share, synchronous vs decoupled rollouts.

Three figures per device count K (simulated phones leased through the device gateway, driven over
the real ADB protocol, as the online_rl job runs them):
- env-bound: a scripted policy (the planner's actions, no model), `collect_groups` only — the rate
  the devices alone sustain;
- synchronous (staleness 0): the tiny model generates every step's answer (real sampling cost) and
  the learner updates after each batch;
- decoupled (staleness 1): the same, with the rollout worker collecting the next batch while the
  learner updates.
In the two model runs the executed action is the planner's, with a 30 % share replaced by a
malformed answer or a random click (the sampled tokens are kept and trained on), so episodes have
the same length distribution whatever the untrained model writes and groups have reward variance: the figures measure the
system (generation + devices + updates), not the policy's skill. The learner idle share is the time
the learner waits for a batch over the run's wall time.

    OMP_NUM_THREADS=2 python benchmarks/online_rollouts.py [--devices 1,2,4,8] [--steps 4] [--tasks 4] [--group 4]

Prints a Markdown table and the ratios the online RL issue targets (decoupled / env-bound >= 0.8,
decoupled / synchronous >= 1.5).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[1]
SIZE = (256, 256)
NOISE = 0.3  # share of planned steps replaced by a malformed answer or a random click: groups differ, so
             # the learner has work (with the plan alone every group succeeds and is skipped)


def env_bound(k: int, tasks: list[Any], group: int, rounds: int) -> float:
    from venus_core.envs import synth_plan
    from venus_core.rl.online.devices import SimPhoneFarm
    from venus_core.rl.online.policy import ScriptedPolicy
    from venus_core.rl.online.rollout import collect_groups

    with SimPhoneFarm(k, size=SIZE) as farm:
        source = farm.env_source()
        collect_groups(tasks[:1], 1, source, ScriptedPolicy(synth_plan), devices=k)  # warm-up
        t0, steps = time.perf_counter(), 0
        for _ in range(rounds):
            _, stats = collect_groups(tasks, group, source, ScriptedPolicy(synth_plan), devices=k)
            steps += stats.env_steps
        return steps / (time.perf_counter() - t0)


def model_run(k: int, staleness: int, model_dir: Path, tasks: list[Any], group: int, steps: int) -> dict[str, float]:
    from venus_core.config import load_spec
    from venus_core.envs import synth_plan
    from venus_core.models.loading import load_model
    from venus_core.rl.online.devices import SimPhoneFarm
    from venus_core.rl.online.loop import OnlineRL
    from venus_core.rl.online.policy import PlannedSampling, ScriptedPolicy
    from venus_core.rl.online.tasks import TaskPool
    from venus_core.train.tracker import NullTracker

    spec = load_spec(ROOT / "agents" / "venus-tiny", [
        f"online_rl.devices={k}", f"online_rl.staleness={staleness}", f"online_rl.group_size={group}",
        f"online_rl.tasks_per_step={len(tasks)}", "online_rl.kl.adaptive=false", "online_rl.max_new_tokens=48",
        "online_rl.temperature=1.0"])
    torch.manual_seed(0)
    model, processor = load_model(str(model_dir), spec.model)
    with SimPhoneFarm(k, size=SIZE) as farm:
        source = farm.env_source()
        pool = TaskPool(tasks, spec.online_rl.task_pool.model_copy(update={"held_out": 0}), seed=0)
        trainer = OnlineRL(model, processor, spec.online_rl, pool, source, NullTracker())
        for name in ("policy", "rollout_policy"):  # separate objects when decoupled (the worker's model copy)
            setattr(trainer, name, PlannedSampling(getattr(trainer, name), ScriptedPolicy(synth_plan, noise=NOISE, seed=1)))
        t0 = time.perf_counter()
        history = trainer.train(steps)
        wall = time.perf_counter() - t0
    env_steps = sum(h["rollout/env_steps"] for h in history)
    wait = trainer.totals["learner_wait_ms"] / 1000 if staleness else sum(h["time/rollout_s"] for h in history)
    return {"env_steps_per_s": env_steps / wall, "learner_idle": wait / wall, "wall_s": wall,
            "updates": float(trainer.learner.updates)}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--devices", default="1,2,4,8")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--tasks", type=int, default=4)
    ap.add_argument("--group", type=int, default=4)
    args = ap.parse_args()
    from venus_core.config.spec import ModelSpec
    from venus_core.models.tiny import build_tiny
    from venus_core.rl.online import sim_phone_tasks

    tasks = sim_phone_tasks([4], range(args.tasks), size=SIZE)  # 2-5 step plans
    work = Path(tempfile.mkdtemp(prefix="venus-bench-online-"))
    model_dir = build_tiny(ModelSpec().tiny, work / "tiny")
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    print(f"# online rollouts, {time.strftime('%Y-%m-%d')}, commit {rev}, {os.cpu_count()} CPUs, "
          f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '-')}, torch threads {torch.get_num_threads()}")
    print(f"# {' '.join(sys.argv)}  (tasks {args.tasks} x group {args.group} per step, {args.steps} steps)\n")
    print("| devices | env-bound steps/s | sync steps/s | sync learner idle | decoupled steps/s | decoupled learner idle "
          "| decoupled / env-bound | decoupled / sync |")
    print("|---|---|---|---|---|---|---|---|")
    for k in (int(x) for x in args.devices.split(",")):
        bound = env_bound(k, tasks, args.group, rounds=2)
        sync = model_run(k, 0, model_dir, tasks, args.group, args.steps)
        dec = model_run(k, 1, model_dir, tasks, args.group, args.steps)
        print(f"| {k} | {bound:.1f} | {sync['env_steps_per_s']:.2f} | {sync['learner_idle']:.2f} | "
              f"{dec['env_steps_per_s']:.2f} | {dec['learner_idle']:.2f} | {dec['env_steps_per_s'] / bound:.3f} | "
              f"{dec['env_steps_per_s'] / sync['env_steps_per_s']:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
