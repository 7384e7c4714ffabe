"""Online evaluation on MiniWoB++ (web): the target `miniwob:tasks=A+B,episodes=N,seed=S,...`.

Why: the web agent is judged the way the phone agent is (`online_sim`): live episodes, the
environment's own verdict. MiniWoB++ pages judge themselves (their JS reward), so an online web
suite is a list of MiniWoB task names; episodes take the tasks round robin with seeds counting up
from `seed` (held out: the oracle data uses small seeds, the default here starts at 100000), so the
same target always means the same episodes. `online_sim.parse_target` / `target_tasks` /
`make_envs` dispatch here for targets that start with `miniwob`, so `venus eval online --target
miniwob:...`, the `online_sim` eval suite and `venus run evaluate --online` accept them unchanged.

Keys (all optional): tasks (`+`-separated; default: the tasks that have an oracle, known to run
here), episodes (20), seed (100000), max_steps (10: every default task needs at most 7 steps),
envs (2 parallel browser contexts), scale (2: 320x420 screenshots), episode_ms (MiniWoB's timer;
default 10 minutes, so that model latency does not fail an episode). Results are real browser
runs (not simulated) but MiniWoB is not UI-Venus's web benchmark; the result carries no benchmark.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields
from typing import Any

from venus_core.envs.base import Env, Task
from venus_core.eval.online_common import open_envs, parse_items

ENV = "miniwob"
DEFAULT_SEED = 100_000


def _default_tasks() -> tuple[str, ...]:
    from venus_core.envs.miniwob_oracle import SOLVERS

    return tuple(sorted(SOLVERS))


@dataclass(frozen=True)
class MiniWobTarget:
    env: str = ENV
    tasks: tuple[str, ...] = ()
    episodes: int = 20
    seed: int = DEFAULT_SEED
    max_steps: int = 10
    envs: int = 2
    scale: float = 2.0
    episode_ms: int = 600_000

    def __str__(self) -> str:
        return (f"{self.env}:tasks={'+'.join(self.tasks)},episodes={self.episodes},seed={self.seed},"
                f"max_steps={self.max_steps},envs={self.envs},scale={self.scale:g},"
                f"episode_ms={self.episode_ms}")


def parse_miniwob_target(text: str) -> MiniWobTarget:
    """`miniwob[:key=value,...]` -> MiniWobTarget (see the module docstring for the keys)."""
    from venus_core.envs.miniwob import task_names

    env, _, rest = text.strip().partition(":")
    if env != ENV:
        raise ValueError(f"online target {text!r}: not a {ENV} target")
    known = {f.name for f in fields(MiniWobTarget)} - {"env"}

    def convert(key: str, value: str) -> dict[str, Any]:
        if key == "tasks":
            names = tuple(t.strip() for t in value.replace(" ", "+").split("+") if t.strip())
            unknown = [t for t in names if t not in task_names()]
            if not names or unknown:
                raise ValueError(f"unknown MiniWoB task(s) {unknown}" if unknown else "no tasks")
            return {"tasks": names}
        if key == "scale":
            return {"scale": float(value)}
        if key in known:
            return {key: int(value)}
        raise ValueError(f"unknown key; known: {', '.join(sorted(known))}")

    target = MiniWobTarget(**{"tasks": _default_tasks(), **parse_items(text, rest, convert)})
    if target.episodes < 1 or target.envs < 1 or not 1 <= target.max_steps <= 1000:
        raise ValueError(f"online target {text!r}: episodes and envs must be >= 1, max_steps 1..1000")
    return target


def miniwob_tasks(target: MiniWobTarget, env: Env | None = None) -> list[Task]:
    """The target's tasks in order; goals are read from the generated pages (on `env`, or on a
    temporary env in the shared browser, once per process and target: a page's goal depends only
    on its task and seed, and generating 32 pages costs ~7 s, which an evaluation of several
    models on the same target would otherwise pay per model)."""
    if env is None:
        return list(_miniwob_tasks(target))
    return [env.make_task(target.tasks[i % len(target.tasks)], target.seed + i,  # type: ignore[attr-defined]
                          max_steps=target.max_steps) for i in range(target.episodes)]


@functools.lru_cache(maxsize=8)
def _miniwob_tasks(target: MiniWobTarget) -> tuple[Task, ...]:
    from venus_core.envs.miniwob import MiniWobEnv

    page = MiniWobEnv(scale=target.scale, episode_ms=target.episode_ms)
    try:
        return tuple(miniwob_tasks(target, page))
    finally:
        page.close()


def miniwob_envs(target: MiniWobTarget) -> list[Env]:
    """`target.envs` MiniWoB envs (never more than episodes), one shared browser; caller closes."""
    from venus_core.envs.miniwob import MiniWobEnv

    return open_envs(min(target.envs, target.episodes),
                     lambda: MiniWobEnv(scale=target.scale, episode_ms=target.episode_ms, wait_s=1.0))
