"""Online evaluation on AndroidWorld servers: the target `androidworld:urls=U1+U2,tasks=A+B,per_type=N,...`.

Why: AndroidWorld (116 parametrised tasks on an emulator) is UI-Venus's online mobile benchmark;
its containerized server exposes the episode loop and the task scores over HTTP
(`venus_core.envs.androidworld`). One server drives one emulator, so the target names the servers
(`urls`, `+`-separated: emulator pods reached directly or through the device gateway's forwarder)
and each is one parallel env. Tasks are read from the first server's suite: `per_type` instances
of each task type in `tasks` (all of the suite's types when omitted), in the suite's order, with
their goals from the server. Success is AndroidWorld's own score, never pixels. No AndroidWorld
emulator can run on the laptop; the path is tested against a fake server speaking its API.

Keys: urls (default http://127.0.0.1:5000), tasks, per_type (1), episodes (0 = all selected
tasks), max_steps (30, UI-Venus's limit), timeout (60 s per request).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from venus_core.envs.base import Env, Task
from venus_core.eval.online_common import open_envs, parse_items

ENV = "androidworld"


@dataclass(frozen=True)
class AndroidWorldTarget:
    env: str = ENV
    urls: tuple[str, ...] = ("http://127.0.0.1:5000",)
    tasks: tuple[str, ...] = ()
    per_type: int = 1
    episodes: int = 0  # 0: every selected task; else the first `episodes` of them
    max_steps: int = 30
    timeout: float = 60.0

    def __str__(self) -> str:
        return (f"{self.env}:urls={'+'.join(self.urls)},tasks={'+'.join(self.tasks)},per_type={self.per_type},"
                f"episodes={self.episodes},max_steps={self.max_steps},timeout={self.timeout:g}")


def parse_aw_target(text: str) -> AndroidWorldTarget:
    env, _, rest = text.strip().partition(":")
    if env != ENV:
        raise ValueError(f"online target {text!r}: not an {ENV} target")
    known = {f.name for f in fields(AndroidWorldTarget)} - {"env"}

    def convert(key: str, value: str) -> dict[str, Any]:
        if key in ("urls", "tasks"):
            items = tuple(v.strip() for v in value.split("+") if v.strip())
            if not items:
                raise ValueError(f"{key} is empty")
            if key == "urls" and not all(u.startswith(("http://", "https://")) for u in items):
                raise ValueError("urls must be http(s) URLs")
            return {key: items}
        if key == "timeout":
            return {"timeout": float(value)}
        if key in known:
            return {key: int(value)}
        raise ValueError(f"unknown key; known: {', '.join(sorted(known))}")

    target = AndroidWorldTarget(**parse_items(text, rest, convert))
    if target.episodes < 0 or target.per_type < 1 or not 1 <= target.max_steps <= 1000 or target.timeout <= 0:
        raise ValueError(f"online target {text!r}: per_type >= 1, max_steps 1..1000, timeout > 0")
    return target


def aw_envs(target: AndroidWorldTarget) -> list[Env]:
    """One env per server URL; the caller closes them."""
    from venus_core.envs.androidworld import AndroidWorldEnv

    urls = iter(target.urls)
    return open_envs(len(target.urls), lambda: AndroidWorldEnv(next(urls), timeout=target.timeout))


def aw_tasks(target: AndroidWorldTarget, env: Env | None = None) -> list[Task]:
    """The target's tasks from the (first) server's suite, in suite order."""
    from venus_core.envs.androidworld import AndroidWorldEnv

    own = env is None
    server: Any = AndroidWorldEnv(target.urls[0], timeout=target.timeout) if env is None else env
    try:
        tasks = server.suite_tasks(per_type=target.per_type, max_steps=target.max_steps)
    finally:
        if own:
            server.close()
    if target.tasks:
        missing = sorted(set(target.tasks) - {t.success_check.split(":")[1] for t in tasks})
        if missing:
            raise ValueError(f"online target {target}: task types {missing} are not in the server's suite")
        tasks = [t for t in tasks if t.success_check.split(":")[1] in target.tasks]
    return tasks[: target.episodes] if target.episodes else tasks
