"""Online evaluation targets: which environment, which tasks — for now the simulated phone.

Why a small target string: an agent spec's suite has one free `data` field, and the CLI one
option, so an online suite names its tasks as `sim-phone:levels=3-5,episodes=20,seed=100000`
(all keys optional; see `OnlineTarget`). Tasks are the synthetic world's curriculum tasks
(`venus_core.envs.synth_task`), levels taken round robin and seeds counting up from `seed`, so
the same target always means the same tasks. The default seed range starts far above the seeds
the embedded default trains on (small integers) to keep evaluation tasks held out.

Departure: UI-Venus reports AndroidWorld (116 tasks on an emulator). No emulator runs here; the
simulated phone is reached through the same AndroidEnv code path (over ADB with
`transport=adb`), and its results are labelled simulated.
"""

from __future__ import annotations

import atexit
import threading
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any

from venus_core.envs.base import DEFAULT_MAX_STEPS, Env, Task
from venus_core.eval.online_common import open_envs, parse_items

DEFAULT_TARGET = "sim-phone"
ENV_NAMES = ("sim-phone", "miniwob", "androidworld")  # miniwob: eval.online_web; androidworld: eval.online_aw


@dataclass(frozen=True)
class OnlineTarget:
    env: str = "sim-phone"
    levels: tuple[int, ...] = (3, 4, 5)
    episodes: int = 20
    seed: int = 100_000
    lang: str = "en"
    width: int = 0  # 0 x 0: each task on its level's curriculum screen size (`size_of`)
    height: int = 0
    max_steps: int = DEFAULT_MAX_STEPS
    transport: str = "inprocess"
    envs: int = 2

    def __str__(self) -> str:
        lv = "+".join(str(v) for v in self.levels)
        size = f"{self.width}x{self.height}" if self.width else "level"
        return (f"{self.env}:levels={lv},episodes={self.episodes},seed={self.seed},lang={self.lang},"
                f"size={size},max_steps={self.max_steps},transport={self.transport},envs={self.envs}")

    def size_of(self, level: int) -> tuple[int, int]:
        """The screen size of a task of `level`: `size=WxH` when given, else the curriculum's size for
        that level (`data.synth.levels`: 128 x 128 for levels 0-2), the size its training data, the
        held-out suites and online RL's phones use. A tiny model sees a 540 x 960 screen as a 3 x 5
        grid of visual tokens and a 128 x 128 one as 4 x 4: evaluating on a size it never trained on
        measured a different skill (docs/learning.md, attention supervision: level-1 success 87.0 % at
        128 x 128, 16.5 % at 540 x 960, n = 200 each)."""
        if self.width:
            return (self.width, self.height)
        from venus_core.data.synth.levels import level_spec

        return level_spec(level).mobile_size


def _levels(value: str) -> tuple[int, ...]:
    out: list[int] = []
    for part in value.replace("+", " ").split():
        lo, _, hi = part.partition("-")
        out += list(range(int(lo), int(hi) + 1)) if hi else [int(lo)]
    if not out:
        raise ValueError("levels is empty")
    return tuple(out)


def parse_target(text: str | None) -> Any:
    """`env[:key=value,...]` -> OnlineTarget; levels as `1-3` or `1+3`, size as `WxH`."""
    text = (text or DEFAULT_TARGET).strip()
    env, _, rest = text.partition(":")
    if env == "miniwob":
        from venus_core.eval.online_web import parse_miniwob_target

        return parse_miniwob_target(text)
    if env == "androidworld":
        from venus_core.eval.online_aw import parse_aw_target

        return parse_aw_target(text)
    if env not in ENV_NAMES:
        raise ValueError(f"online target {text!r}: unknown environment {env!r}; known: {', '.join(ENV_NAMES)}")
    known = {f.name for f in fields(OnlineTarget)}

    def convert(key: str, value: str) -> dict[str, Any]:
        if key == "levels":
            return {"levels": _levels(value)}
        if key == "size":
            if value.lower() == "level":
                return {"width": 0, "height": 0}
            w, h = value.lower().split("x")
            if int(w) < 1 or int(h) < 1:
                raise ValueError("size must be WxH with W, H >= 1, or 'level'")
            return {"width": int(w), "height": int(h)}
        if key in ("lang", "transport"):
            return {key: value}
        if key in known - {"env", "levels"}:
            return {key: int(value)}
        raise ValueError(f"unknown key; known: levels, size, {', '.join(sorted(known - {'env', 'levels'}))}")

    target = OnlineTarget(env=env, **parse_items(text, rest, convert))
    if target.transport not in ("inprocess", "adb"):
        raise ValueError(f"online target {text!r}: transport must be inprocess or adb")
    if target.episodes < 1 or target.envs < 1:
        raise ValueError(f"online target {text!r}: episodes and envs must be >= 1")
    return target


def with_limit(target: Any, limit: int | None) -> Any:
    return target if limit is None else replace(target, episodes=limit)


def target_tasks(target: Any) -> list[Task]:
    """The target's tasks, in order (deterministic)."""
    from venus_core.envs import synth_task
    from venus_core.eval.online_aw import AndroidWorldTarget, aw_tasks
    from venus_core.eval.online_web import MiniWobTarget, miniwob_tasks

    if isinstance(target, MiniWobTarget):
        return miniwob_tasks(target)
    if isinstance(target, AndroidWorldTarget):
        return aw_tasks(target)

    return [synth_task(lv, target.seed + i, lang=target.lang, size=target.size_of(lv), max_steps=target.max_steps)
            for i, lv in enumerate(task_levels(target))]


def task_levels(target: OnlineTarget) -> list[int]:
    """The level of each of the target's episodes, in order: its levels round robin."""
    return [target.levels[i % len(target.levels)] for i in range(target.episodes)]


def task_size(task: Task) -> tuple[int, int]:
    """The screen size a synthetic task was made for (its success_check reference)."""
    from venus_core.envs.simphone import SynthRef

    return SynthRef.parse(task.success_check).size


def fits(env: Env, task: Task) -> bool:
    """Whether `env` can run `task`: a simulated phone only runs tasks made for its screen size."""
    device = getattr(env, "device", None)
    if device is None or not task.success_check.startswith("synth:"):
        return True
    return tuple(device.size) == task_size(task)


_IDLE: dict[str, list[Env]] = {}  # envs an evaluation gave back healthy, by target, for the next model
_IDLE_LOCK = threading.Lock()
_ATEXIT = [False]


def _reusable(target: Any) -> bool:
    """Envs whose every episode starts from `reset` alone: in-process phones, MiniWoB++ browser contexts
    (an AndroidWorld server or a phone over adb keep state this process does not own)."""
    from venus_core.eval.online_web import MiniWobTarget

    return isinstance(target, MiniWobTarget) or (isinstance(target, OnlineTarget) and target.transport == "inprocess")


@contextmanager
def target_envs(target: Any) -> Iterator[list[Env]]:
    """`make_envs(target)`, or the envs an earlier evaluation of the same target left idle in this
    process. Opening 16 browser contexts costs ~5-8 s, paid by every model of an evaluate stage
    before; an episode starts from `reset` either way (a context already ran several episodes within
    one evaluation), so the results are the same. Envs go back idle only when the evaluation ended
    without an error and none is closed; otherwise they are closed. `close_idle_envs` (also at exit)
    closes what is left."""
    key = str(target) if _reusable(target) else None
    with _IDLE_LOCK:
        envs = _IDLE.pop(key, None) if key is not None else None
    if envs is None:
        envs = make_envs(target)
    healthy = False
    try:
        yield envs
        healthy = True
    finally:
        if healthy and key is not None and not any(e.closed for e in envs):
            with _IDLE_LOCK:
                spare = _IDLE.pop(key, None)  # another thread's, given back meanwhile: one set kept
                _IDLE[key] = envs
                if not _ATEXIT[0]:  # registered after the browser host's own handler: runs before it
                    atexit.register(close_idle_envs)
                    _ATEXIT[0] = True
            for env in spare or []:
                env.close()
        else:
            for env in envs:
                env.close()


def close_idle_envs() -> None:
    """Close every env `target_envs` keeps idle in this process."""
    with _IDLE_LOCK:
        sets = list(_IDLE.values())
        _IDLE.clear()
    for envs in sets:
        for env in envs:
            env.close()


def make_envs(target: Any) -> list[Env]:
    """`target.envs` environments (never more than there are episodes); the caller closes them."""
    from venus_core.envs import SimPhoneEnv
    from venus_core.eval.online_aw import AndroidWorldTarget, aw_envs
    from venus_core.eval.online_web import MiniWobTarget, miniwob_envs

    if isinstance(target, MiniWobTarget):
        return miniwob_envs(target)
    if isinstance(target, AndroidWorldTarget):
        return aw_envs(target)

    # one group of envs per screen size the target's tasks use, each no larger than its task count
    counts = Counter(target.size_of(lv) for lv in task_levels(target))
    envs: list[Env] = []
    try:
        for size, n in counts.items():
            envs += open_envs(min(target.envs, n),
                              lambda size=size: SimPhoneEnv(transport=target.transport, size=size,  # type: ignore[arg-type,misc]
                                                            lang=target.lang, wait_s=0.0))
    except BaseException:
        for env in envs:
            env.close()
        raise
    return envs
