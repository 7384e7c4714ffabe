"""Conformance suite for environment backends (one parametrized module any backend can join).

A backend joins by adding a `Backend` to `BACKENDS`: how to build the env, how to read a
fingerprint of its state (to tell "changed" from "no-op"), where its on-screen targets are, and
which tasks (with ground-truth plans) it can run. Here it runs on the simulated phone twice: in
process, and served over TCP as an ADB device driven through the REAL Debian adb server + adbutils.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable, Hashable
from dataclasses import dataclass

import pytest

from venus_core.actions import (
    Action,
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    Wait,
)
from venus_core.data.synth.phone import to_norm
from venus_core.envs import (
    AdbServerProcess,
    EnvError,
    SimPhoneEnv,
    Task,
    UnsupportedAction,
    free_task,
    synth_plan,
    synth_task,
)
from venus_core.envs.android import AndroidEnv
from venus_core.envs.state_codec import decode_state

SIZE = (360, 640)
SEARCH = 40  # seeds tried per kind of task


@functools.lru_cache(maxsize=1)
def sim_tasks() -> tuple[Task, ...]:
    """A varied set found by property (the synthetic world's content may change): an information
    task, a one-step task, a task that types text, and a multi-app level-5 task."""
    kinds: dict[str, Callable[[Task, list[Action]], bool]] = {
        "info": lambda t, p: t.difficulty == 3 and bool(t.answer),
        "one-step": lambda t, p: t.difficulty == 3 and not t.answer and len(p) == 1,
        "typing": lambda t, p: t.difficulty == 4 and any(isinstance(a, Type) for a in p),
        "multi-app": lambda t, p: t.difficulty == 5 and len(p) <= 10,
    }
    found: list[Task] = []
    for kind, want in kinds.items():
        level = {"info": 3, "one-step": 3, "typing": 4, "multi-app": 5}[kind]
        for seed in range(SEARCH):
            task = synth_task(level, seed, size=SIZE)
            if want(task, synth_plan(task)):
                found.append(task)
                break
        else:
            raise AssertionError(f"no {kind} task among {SEARCH} seeds of level {level}")
    return tuple(found)


@dataclass
class Backend:
    name: str
    make: Callable[[], AndroidEnv]
    fingerprint: Callable[[AndroidEnv], Hashable]
    locate: Callable[[AndroidEnv, str], tuple[int, int]]
    tasks: Callable[[], tuple[Task, ...]]
    plan: Callable[[Task], list[Action]]
    free: Callable[[int], Task]  # a goal-less episode from a fixed start (the home screen)


def _sim_fingerprint(env: AndroidEnv) -> Hashable:
    return decode_state(env.run("venus-state").stdout)  # read through the device, as checks do


def _sim_locate(env: AndroidEnv, key: str) -> tuple[int, int]:
    """The centre of widget `key` (or of the first whose key starts with `key`, if it ends in ':')."""
    dev = env.device  # type: ignore[attr-defined]
    screen = dev.phone.view(dev.state, dev.ctx)
    widget = next(w for w in screen.widgets if w.key == key or
                  (key.endswith(":") and w.key.startswith(key)))
    return to_norm(*widget.center, dev.ctx)


def _sim_backend(transport: str, port: Callable[[], int | None]) -> Backend:
    return Backend(
        f"sim-{transport}",
        lambda: SimPhoneEnv(transport=transport, size=SIZE, adb_port=port()),  # type: ignore[arg-type]
        _sim_fingerprint, _sim_locate,
        sim_tasks, synth_plan, lambda max_steps: free_task(0, size=SIZE, max_steps=max_steps))


_ADB: list[AdbServerProcess] = []


def _adb_port() -> int:
    if not _ADB:
        _ADB.append(AdbServerProcess().start())
    return _ADB[0].port


BACKENDS = {"sim-inprocess": _sim_backend("inprocess", lambda: None),
            "sim-adb": _sim_backend("adb", _adb_port)}


@pytest.fixture(scope="module", autouse=True)
def _adb_server() -> None:
    yield
    while _ADB:
        _ADB.pop().stop()


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture(scope="module")
def env(backend: Backend) -> AndroidEnv:
    e = backend.make()
    yield e
    e.close()


@pytest.fixture()
def home(env: AndroidEnv, backend: Backend) -> AndroidEnv:
    env.reset(backend.free(30))
    return env


def test_reset_observation(env: AndroidEnv, backend: Backend) -> None:
    obs = env.reset(backend.free(30))
    assert obs.size == SIZE == obs.screenshot.size == env.size
    assert obs.platform == "mobile" and obs.extras["step"] == 0
    assert obs.extras["simulated"] is True and obs.extras["backend"] == "sim-phone"
    assert obs.extras["transport"] == backend.name.removeprefix("sim-")


# (label, preparation, action builder, expected effect); targets are located on the live screen
Case = tuple[str, list[Callable[[AndroidEnv, Backend], Action]],
             Callable[[AndroidEnv, Backend], Action], str]
CASES: list[Case] = [
    ("click icon", [], lambda e, b: Click(box=b.locate(e, "app:settings")), "change"),
    ("click nothing", [], lambda e, b: Click(box=(500, 900)), "noop"),
    ("long-press chat", [lambda e, b: Launch(app="Messages")],
     lambda e, b: LongPress(box=b.locate(e, "chat:")), "change"),
    ("long-press nothing", [], lambda e, b: LongPress(box=(500, 900)), "noop"),
    ("scroll list", [lambda e, b: Launch(app="Shop")],
     lambda e, b: Scroll(direction="up", start=(500, 800), end=(500, 350)), "change"),
    ("drag list", [lambda e, b: Launch(app="Shop")],
     lambda e, b: Drag(start=(500, 800), end=(500, 350)), "change"),
    ("scroll home", [], lambda e, b: Scroll(direction="up", start=(500, 800), end=(500, 350)),
     "noop"),
    ("type focused", [lambda e, b: Launch(app="Shop"),
                      lambda e, b: Click(box=b.locate(e, "field:search"))],
     lambda e, b: Type(content="red apple"), "change"),
    ("type unfocused", [], lambda e, b: Type(content="hello"), "noop"),
    ("enter submits", [lambda e, b: Launch(app="Shop"),
                       lambda e, b: Click(box=b.locate(e, "field:search")),
                       lambda e, b: Type(content="mug")], lambda e, b: PressEnter(), "change"),
    ("enter home", [], lambda e, b: PressEnter(), "noop"),
    ("back in app", [lambda e, b: Launch(app="Settings")], lambda e, b: PressBack(), "change"),
    ("back home", [], lambda e, b: PressBack(), "noop"),
    ("home in app", [lambda e, b: Launch(app="Settings")], lambda e, b: PressHome(), "change"),
    ("home home", [], lambda e, b: PressHome(), "noop"),
    ("recent (no recents screen)", [], lambda e, b: PressRecent(), "noop"),
    ("launch", [], lambda e, b: Launch(app="Settings"), "change"),
    ("launch unknown", [], lambda e, b: Launch(app="No Such App"), "noop"),
    ("wait", [], lambda e, b: Wait(), "noop"),
    ("finished", [], lambda e, b: Finished(content="x"), "noop"),
    ("call user", [], lambda e, b: CallUser(content="which?"), "noop"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_supported_action_effect(home: AndroidEnv, backend: Backend, case: Case) -> None:
    label, prep, build, expected = case
    for p in prep:
        home.step(p(home, backend))
    action = build(home, backend)
    assert type(action).NAME in home.supported_actions
    before = backend.fingerprint(home)
    _, done, info = home.step(action)
    after = backend.fingerprint(home)
    assert (after != before) == (expected == "change"), (label, info)
    assert done == isinstance(action, (Finished, CallUser))
    if label == "launch unknown":
        assert "unknown app" in info["error"]


@pytest.mark.parametrize("action", [
    Hover(box=(5, 5)), DoubleClick(box=(5, 5)), Hotkey(keys=("ctrl", "a")),
    Launch(url="https://x.synth.local/"), Scroll(direction="down"),
], ids=lambda a: type(a).NAME)
def test_unsupported_action_raises(home: AndroidEnv, backend: Backend, action: Action) -> None:
    steps, before = home.steps, backend.fingerprint(home)
    with pytest.raises(UnsupportedAction):
        home.step(action)
    assert home.steps == steps and backend.fingerprint(home) == before


def test_done_after_max_steps(env: AndroidEnv, backend: Backend) -> None:
    env.reset(backend.free(3))
    assert [env.step(Wait())[1] for _ in range(3)] == [False, False, True]
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Wait())


def test_success_after_ground_truth_plan(env: AndroidEnv, backend: Backend) -> None:
    for task in backend.tasks():
        env.reset(task)
        plan = backend.plan(task)
        assert plan and not env.is_successful(), task.goal
        for i, action in enumerate(plan):
            _, done, info = env.step(action)
            assert done == (i == len(plan) - 1 and isinstance(action, Finished)), info
        assert env.is_successful(), (task.goal, plan)


def test_wrong_answer_is_not_success(env: AndroidEnv, backend: Backend) -> None:
    task = next(t for t in backend.tasks() if t.answer)
    env.reset(task)
    plan = backend.plan(task)
    for action in plan[:-1]:
        env.step(action)
    env.step(Finished(content=task.answer + "0"))
    assert not env.is_successful()


def test_close_releases_resources(backend: Backend) -> None:
    env = backend.make()
    env.reset(backend.free(30))
    server = getattr(env, "server", None)
    env.close()
    env.close()  # idempotent
    with pytest.raises(EnvError, match="after close"):
        env.step(Wait())
    if server is not None:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        serials = [d.serial for d in env.shell.client.list()]  # type: ignore[attr-defined]
        assert server.serial not in serials
