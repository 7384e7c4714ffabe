"""The sim-phone env: AndroidEnv driving the simulated phone, over the real ADB protocol or in process.

Why: the laptop/CI default for online RL and evaluation (docs/architecture.md) is the synthetic world
reached exactly as a phone is. With `transport="adb"` the simulated phone is served over TCP
(`sim_server`), a private Debian `adb` server connects to it, and AndroidEnv drives it through
adbutils: the production code path end to end. With `transport="inprocess"` the same AndroidEnv
runs the device's shell in process (fast, for throughput-bound rollouts and unit tests).

Tasks of the synthetic world are referenced by `success_check = "synth:level=L,seed=S,lang=X,
size=WxH"` (`synth:free,...` = free play on a fresh phone): the env rebuilds the episode (`sample_episode` is deterministic for a seed and a view
context), loads its start state into the device (the one side channel: a real device's task setup
would install data with adb), and judges success like AndroidWorld: it reads the state through a
shell command (`venus-state`, the analogue of reading app databases) and runs the task's own
predicates on it; an information task must also end with Finished(content=answer).
"""

from __future__ import annotations

import random
import shlex
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

from venus_core.actions.space import Action, Finished
from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.i18n import STRINGS, ViewContext
from venus_core.data.synth.tasks import Episode, get_phone, sample_episode
from venus_core.envs.android import AndroidEnv
from venus_core.envs.base import DEFAULT_MAX_STEPS, EnvError, Observation, Task
from venus_core.envs.shells import AdbServerProcess, AdbShell, DeviceShell, LocalShell
from venus_core.envs.sim_device import SimDevice, package_of
from venus_core.envs.sim_server import SimAdbServer
from venus_core.envs.state_codec import decode_state

SYNTH_PREFIX = "synth:"


@dataclass(frozen=True)
class SynthRef:
    """A synthetic task reference; `level=None` is free play (fresh phone, home screen, no goal)."""

    level: int | None
    seed: int
    lang: str
    size: tuple[int, int]

    def __str__(self) -> str:
        head = "free" if self.level is None else f"level={self.level}"
        return f"{SYNTH_PREFIX}{head},seed={self.seed},lang={self.lang}," \
            f"size={self.size[0]}x{self.size[1]}"

    @classmethod
    def parse(cls, ref: str) -> SynthRef:
        if not ref.startswith(SYNTH_PREFIX):
            raise EnvError(f"success_check {ref!r} is not a synthetic task reference "
                           f"({SYNTH_PREFIX}...)")
        parts = ref[len(SYNTH_PREFIX):].split(",")
        free = parts[0] == "free"
        try:
            kv = dict(p.split("=", 1) for p in parts[1 if free else 0:])
            w, h = kv["size"].split("x")
            out = cls(None if free else int(kv["level"]), int(kv["seed"]), kv["lang"],
                      (int(w), int(h)))
        except (KeyError, ValueError) as exc:
            raise EnvError(f"success_check {ref!r}: expected {SYNTH_PREFIX}level=L|free,seed=S,"
                           f"lang=en|zh,size=WxH ({exc})") from None
        if out.lang not in ("en", "zh"):
            raise EnvError(f"success_check {ref!r}: lang must be en or zh")
        return out

    @property
    def ctx(self) -> ViewContext:
        return ViewContext.for_output("mobile", self.lang, *self.size)  # type: ignore[arg-type]


@lru_cache(maxsize=256)
def synth_episode(ref: str) -> Episode:
    """The episode a synthetic task reference names (deterministic; cached)."""
    r = SynthRef.parse(ref)
    if r.level is None:
        raise EnvError(f"{ref!r} is a free-play reference: it has no episode")
    return sample_episode(random.Random(r.seed), r.level, r.ctx)


def load_synth_task(device: SimDevice, ref: str, goal: str | None = None) -> None:
    """Put `device` into the start state of the synthetic task `ref` (a fresh phone for free play).

    The in-process env calls it directly; a device reached only over ADB runs it as its shell
    command `venus-load REF` (the analogue of AndroidWorld's task initialisation endpoint)."""
    r = SynthRef.parse(ref)
    if r.size != device.size or r.lang != device.ctx.lang:
        raise EnvError(f"task {ref!r} was made for {r.size} / {r.lang}; "
                       f"this device is {device.size} / {device.ctx.lang}")
    if r.level is None:
        phone = get_phone()
        device.load(phone, phone.initial(random.Random(r.seed)))
        return
    ep = synth_episode(ref)
    if goal is not None and ep.task.goal != goal:
        raise EnvError(f"task {ref!r}: goal {goal!r} does not match the rebuilt episode's {ep.task.goal!r}")
    device.load(ep.phone, ep.start)


def synth_task(level: int, seed: int, *, lang: str = "en", size: tuple[int, int] = (540, 960),
               max_steps: int = DEFAULT_MAX_STEPS) -> Task:
    """A Task of the synthetic world (curriculum `level`, sampled with `seed`) for a screen `size`."""
    ref = str(SynthRef(level, seed, lang, size))
    ep = synth_episode(ref)
    app = next((a for a in ep.task.apps), None) or ep.start.foreground
    return Task(goal=ep.task.goal, app=app, success_check=ref, max_steps=max_steps,
                difficulty=level, answer=ep.task.answer, lang=lang)


def free_task(seed: int, *, lang: str = "en", size: tuple[int, int] = (540, 960),
              max_steps: int = DEFAULT_MAX_STEPS, goal: str = "Explore the phone") -> Task:
    """Free play on the simulated phone: the fresh phone of `seed` on its home screen, no goal
    predicate (`is_successful` raises). For exploration rollouts and action-effect tests."""
    return Task(goal=goal, success_check=str(SynthRef(None, seed, lang, size)),
                max_steps=max_steps, lang=lang)


def synth_plan(task: Task) -> list[Action]:
    """The planner's ground-truth actions for a synthetic task (plus Finished for answers)."""
    ep = synth_episode(task.success_check)
    actions = [m.action for m in ep.moves]
    if ep.task.answer:
        actions.append(Finished(content=ep.task.answer))
    return actions


def synth_packages() -> dict[str, str]:
    """App name (registry name and titles in both languages) -> package of the simulated phone."""
    out: dict[str, str] = {}
    for entry in SYNTH_APPS:
        en, zh = STRINGS[entry.obj.title_key]
        for key in (entry.name, en, zh):
            out[key] = package_of(entry.name)
    return out


def _synth_success(env: AndroidEnv, task: Task) -> bool:
    if SynthRef.parse(task.success_check).level is None:
        raise EnvError(f"{task.success_check!r}: a free-play task has no success check")
    ep = synth_episode(task.success_check)
    state = decode_state(env.run("venus-state").stdout)
    if not ep.task.done(state):
        return False
    if ep.task.answer:
        return env.answer is not None and \
            env.answer.strip().casefold() == ep.task.answer.strip().casefold()
    return True


class SimPhoneEnv(AndroidEnv):
    """AndroidEnv over the simulated phone (see the module docstring); labelled simulated."""

    name = "sim-phone"

    def __init__(self, *, transport: Literal["adb", "inprocess"] = "adb",
                 size: tuple[int, int] = (540, 960), lang: str = "en", theme: str = "light-blue",
                 adb_port: int | None = None, adb_keyboard: bool = True, seed: int = 0,
                 swipe_ms: int = 1000, long_press_ms: int = 500, wait_s: float = 0.0,
                 png_cache: int = 16) -> None:
        if transport not in ("adb", "inprocess"):
            raise ValueError(f"SimPhoneEnv.transport: {transport!r} is not 'adb' or 'inprocess'")
        phone = get_phone()
        self.device = SimDevice(phone, phone.initial(random.Random(seed)), size=size, lang=lang,
                                theme=theme, adb_keyboard=adb_keyboard, png_cache=png_cache)
        self.transport = transport
        self.server: SimAdbServer | None = None
        self.adb_server: AdbServerProcess | None = None
        shell: DeviceShell
        try:
            if transport == "adb":
                self.server = SimAdbServer(self.device).start()
                if adb_port is None:
                    self.adb_server = AdbServerProcess().start()
                    adb_port = self.adb_server.port
                shell = AdbShell(self.server.serial, port=adb_port, connect=True)
            else:
                shell = LocalShell(self.device)
            super().__init__(shell=shell, packages=synth_packages(), swipe_ms=swipe_ms,
                             long_press_ms=long_press_ms, wait_s=wait_s, settle_s=0.0,
                             adb_keyboard=adb_keyboard, success_check=_synth_success,
                             simulated=True)
        except BaseException:
            self._release()
            raise

    def prepare(self, task: Task) -> None:
        load_synth_task(self.device, task.success_check, task.goal)

    def observe(self) -> Observation:
        obs = super().observe()
        obs.extras["transport"] = self.transport
        return obs

    def _release(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None
        if self.adb_server is not None:
            self.adb_server.stop()
            self.adb_server = None

    def close(self) -> None:
        try:
            if hasattr(self, "shell"):
                super().close()
        finally:
            self._release()


class RemoteSimPhoneEnv(AndroidEnv):
    """A simulated phone reached only through ADB (e.g. leased through the device gateway).

    Unlike `SimPhoneEnv` it holds no device object: the task's start state is loaded by the
    device's own `venus-load REF` shell command, and success is read back with `venus-state`,
    so every byte goes over the ADB protocol, as it would to an emulator pod."""

    name = "sim-phone"

    def __init__(self, serial: str, *, adb_port: int, swipe_ms: int = 1000, long_press_ms: int = 500,
                 wait_s: float = 0.0) -> None:
        super().__init__(shell=AdbShell(serial, port=adb_port, connect=True), packages=synth_packages(),
                         swipe_ms=swipe_ms, long_press_ms=long_press_ms, wait_s=wait_s, settle_s=0.0,
                         adb_keyboard=True, success_check=_synth_success, simulated=True)

    def prepare(self, task: Task) -> None:
        self.run(f"venus-load {shlex.quote(task.success_check)}")
