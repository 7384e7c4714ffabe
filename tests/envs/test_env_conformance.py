"""Conformance suite for environment backends (one parametrized module any backend can join).

A backend joins by adding a `Backend` to `BACKENDS`: how to build the env, how to read a
fingerprint of its state (to tell "changed" from "no-op"), where its on-screen targets are, and
which tasks (with ground-truth solutions) it can run, which actions should change its state and
which it must refuse. Here it runs on the simulated phone twice (in process, and served over TCP as
an ADB device driven through the REAL Debian adb server + adbutils) and on the web env: MiniWoB++
pages in a REAL headless Chromium (Playwright), solved by the DOM-aware oracles.
"""

from __future__ import annotations

import functools
import socket
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field

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
    Env,
    EnvError,
    MiniWobEnv,
    SimPhoneEnv,
    Task,
    UnsupportedAction,
    free_task,
    synth_plan,
    synth_task,
)
from venus_core.envs.miniwob_oracle import Page, solver_for
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


# (label, start task or None for the backend's free task, preparation, action builder, effect);
# targets are located on the live screen
Step = Callable[[Env, "Backend"], Action]
Case = tuple[str, "Callable[[Env, Backend], Task] | None", list[Step], Step, str]


@dataclass
class Backend:
    name: str
    make: Callable[[], Env]
    fingerprint: Callable[[Env], Hashable]
    locate: Callable[[Env, str], tuple[int, int]]
    tasks: Callable[[Env], tuple[Task, ...]]
    solve: Callable[[Env, Task], Iterator[Action]]  # ground truth, step by step on the live env
    spoil: Callable[[Env, Task], Iterator[Action]]  # a near-miss of the ground truth (no success)
    free: Callable[[Env, int], Task]  # a fixed start episode (home screen / a task page), max_steps
    ends_episode: Callable[[Action], bool]  # whether the last ground-truth action ends the episode
    cases: list[Case]
    unsupported: list[Action]
    platform: str
    env_name: str
    size: tuple[int, int]
    extras: dict[str, object] = field(default_factory=dict)
    released: Callable[[Env], None] = lambda env: None  # asserts resources are gone after close


# ---- simulated phone ---------------------------------------------------------------------------


def _sim_fingerprint(env: Env) -> Hashable:
    return decode_state(env.run("venus-state").stdout)  # type: ignore[attr-defined]


def _sim_locate(env: Env, key: str) -> tuple[int, int]:
    """The centre of widget `key` (or of the first whose key starts with `key`, if it ends in ':')."""
    dev = env.device  # type: ignore[attr-defined]
    screen = dev.phone.view(dev.state, dev.ctx)
    widget = next(w for w in screen.widgets if w.key == key or
                  (key.endswith(":") and w.key.startswith(key)))
    return to_norm(*widget.center, dev.ctx)


SIM_CASES: list[Case] = [
    ("click icon", None, [], lambda e, b: Click(box=b.locate(e, "app:settings")), "change"),
    ("click nothing", None, [], lambda e, b: Click(box=(500, 900)), "noop"),
    ("long-press chat", None, [lambda e, b: Launch(app="Messages")],
     lambda e, b: LongPress(box=b.locate(e, "chat:")), "change"),
    ("long-press nothing", None, [], lambda e, b: LongPress(box=(500, 900)), "noop"),
    ("scroll list", None, [lambda e, b: Launch(app="Shop")],
     lambda e, b: Scroll(direction="up", start=(500, 800), end=(500, 350)), "change"),
    ("drag list", None, [lambda e, b: Launch(app="Shop")],
     lambda e, b: Drag(start=(500, 800), end=(500, 350)), "change"),
    ("scroll home", None, [], lambda e, b: Scroll(direction="up", start=(500, 800), end=(500, 350)),
     "noop"),
    ("type focused", None, [lambda e, b: Launch(app="Shop"),
                            lambda e, b: Click(box=b.locate(e, "field:search"))],
     lambda e, b: Type(content="red apple"), "change"),
    ("type unfocused", None, [], lambda e, b: Type(content="hello"), "noop"),
    ("enter submits", None, [lambda e, b: Launch(app="Shop"),
                             lambda e, b: Click(box=b.locate(e, "field:search")),
                             lambda e, b: Type(content="mug")], lambda e, b: PressEnter(), "change"),
    ("enter home", None, [], lambda e, b: PressEnter(), "noop"),
    ("back in app", None, [lambda e, b: Launch(app="Settings")], lambda e, b: PressBack(), "change"),
    ("back home", None, [], lambda e, b: PressBack(), "noop"),
    ("home in app", None, [lambda e, b: Launch(app="Settings")], lambda e, b: PressHome(), "change"),
    ("home home", None, [], lambda e, b: PressHome(), "noop"),
    ("recent (no recents screen)", None, [], lambda e, b: PressRecent(), "noop"),
    ("launch", None, [], lambda e, b: Launch(app="Settings"), "change"),
    ("launch unknown", None, [], lambda e, b: Launch(app="No Such App"), "noop"),
    ("wait", None, [], lambda e, b: Wait(), "noop"),
    ("finished", None, [], lambda e, b: Finished(content="x"), "noop"),
    ("call user", None, [], lambda e, b: CallUser(content="which?"), "noop"),
]


def _sim_spoil(env: Env, task: Task) -> Iterator[Action]:
    plan = synth_plan(task)
    yield from plan[:-1]
    yield Finished(content=task.answer + "0")


def _sim_backend(transport: str, port: Callable[[], int | None]) -> Backend:
    return Backend(
        f"sim-{transport}",
        lambda: SimPhoneEnv(transport=transport, size=SIZE, adb_port=port()),  # type: ignore[arg-type]
        _sim_fingerprint, _sim_locate,
        tasks=lambda env: tuple(t for t in sim_tasks()),
        solve=lambda env, task: iter(synth_plan(task)),
        spoil=_sim_spoil,
        free=lambda env, max_steps: free_task(0, size=SIZE, max_steps=max_steps),
        ends_episode=lambda a: isinstance(a, Finished),
        cases=SIM_CASES,
        unsupported=[Hover(box=(5, 5)), DoubleClick(box=(5, 5)), Hotkey(keys=("ctrl", "a")),
                     Launch(url="https://x.synth.local/"), Scroll(direction="down")],
        platform="mobile", env_name="sim-phone", size=SIZE,
        extras={"simulated": True, "transport": transport})


# ---- web: MiniWoB++ in headless Chromium -----------------------------------------------------

WEB_SIZE = (320, 420)
WEB_TASKS = ("click-button", "enter-text", "click-checkboxes", "use-autocomplete")
# what the page shows (the task area, its inputs, focus, scroll offsets, the task's own state);
# MiniWoB's click tracer attribute (data-tampered) is instrumentation, not page state
_WEB_FP = """() => {
  const wrap = (document.getElementById('wrap') || document.body).cloneNode(true);
  wrap.querySelectorAll('[data-tampered]').forEach((e) => e.removeAttribute('data-tampered'));
  const all = Array.from(document.querySelectorAll('*'));
  return JSON.stringify({url: location.href, html: wrap.innerHTML,
    values: Array.from(document.querySelectorAll('input,textarea,select'))
      .map((e) => [e.value, e.checked]),
    focus: all.indexOf(document.activeElement),
    scroll: [window.scrollX, window.scrollY].concat(all.filter((e) => e.scrollTop || e.scrollLeft)
      .map((e) => e.id + ':' + e.scrollTop + ',' + e.scrollLeft)),
    wob: typeof WOB_DONE_GLOBAL === 'undefined' ? null
      : [WOB_DONE_GLOBAL, WOB_RAW_REWARD_GLOBAL, WOB_EPISODE_ID]});
}"""


def _web_fingerprint(env: Env) -> Hashable:
    return env.evaluate(_WEB_FP)  # type: ignore[attr-defined]


def _web_locate(env: Env, selector: str) -> tuple[int, int]:
    page = Page(env)  # type: ignore[arg-type]
    return page.click(page.one(selector), "", "").action.box  # type: ignore[attr-defined]


def _on(name: str, seed: int = 0) -> Callable[[Env, Backend], Task]:
    return lambda env, b: env.make_task(name, seed)  # type: ignore[attr-defined]


def _oracle(env: Env, task: Task) -> Iterator[Action]:
    for step in solver_for(task.app or "")(Page(env)):  # type: ignore[arg-type]
        yield step.action


def _web_spoil(env: Env, task: Task) -> Iterator[Action]:
    """The oracle with every typed text misspelt (only for tasks that type)."""
    for action in _oracle(env, task):
        yield Type(content=action.content + "q") if isinstance(action, Type) else action


def _web_released(env: Env) -> None:
    assert env.page.is_closed()  # type: ignore[attr-defined]


WEB_CASES: list[Case] = [
    ("click button", None, [], lambda e, b: Click(box=b.locate(e, "#area button")), "change"),
    ("click nothing", None, [], lambda e, b: Click(box=(500, 100)), "noop"),
    ("double-click button", None, [], lambda e, b: DoubleClick(box=b.locate(e, "#area button")),
     "change"),
    ("double-click nothing", None, [], lambda e, b: DoubleClick(box=(500, 100)), "noop"),
    ("hover tab", _on("click-tab"), [], lambda e, b: Hover(box=b.locate(e, "#area ul li")),
     "change"),
    ("hover nothing", _on("click-tab"), [], lambda e, b: Hover(box=(500, 100)), "noop"),
    ("long-press button", None, [], lambda e, b: LongPress(box=b.locate(e, "#area button")),
     "change"),
    ("long-press nothing", None, [], lambda e, b: LongPress(box=(500, 100)), "noop"),
    ("scroll text", _on("scroll-text", 3), [],
     lambda e, b: Scroll(direction="up", start=b.locate(e, "#text-area")), "change"),
    ("scroll static page", None, [], lambda e, b: Scroll(direction="up"), "noop"),
    ("drag item", _on("drag-items"), [],
     lambda e, b: Drag(start=b.locate(e, "#sortable li"), end=(500, 950)), "change"),
    ("drag nothing", None, [], lambda e, b: Drag(start=(500, 60), end=(600, 80)), "noop"),
    ("type focused", _on("enter-text"), [lambda e, b: Click(box=b.locate(e, "#tt"))],
     lambda e, b: Type(content="abc"), "change"),
    ("type unfocused", _on("enter-text"), [], lambda e, b: Type(content="abc"), "noop"),
    ("hotkey in field", _on("enter-text"), [lambda e, b: Click(box=b.locate(e, "#tt")),
                                            lambda e, b: Type(content="ab")],
     lambda e, b: Hotkey(keys=("backspace",)), "change"),
    ("hotkey unfocused", None, [], lambda e, b: Hotkey(keys=("ctrl", "a")), "noop"),
    ("enter in textarea", _on("copy-paste"), [lambda e, b: Click(box=b.locate(e, "#to-copy"))],
     lambda e, b: PressEnter(), "change"),
    ("enter unfocused", None, [], lambda e, b: PressEnter(), "noop"),
    ("launch url", None, [], lambda e, b: Launch(url="data:text/html,<p>elsewhere</p>"), "change"),
    ("launch invalid url", None, [], lambda e, b: Launch(url="notascheme:x"), "noop"),
    ("wait", None, [], lambda e, b: Wait(), "noop"),
    ("finished", None, [], lambda e, b: Finished(content="x"), "noop"),
    ("call user", None, [], lambda e, b: CallUser(content="which?"), "noop"),
]

WEB = Backend(
    "web-miniwob", lambda: MiniWobEnv(wait_s=0.05), _web_fingerprint, _web_locate,
    tasks=lambda env: tuple(env.make_task(n, 1) for n in WEB_TASKS),  # type: ignore[attr-defined]
    solve=_oracle, spoil=_web_spoil,
    free=lambda env, max_steps: env.make_task("click-button", 0, max_steps=max_steps),  # type: ignore[attr-defined]
    ends_episode=lambda a: True,
    cases=WEB_CASES,
    unsupported=[PressBack(), PressHome(), PressRecent(), Launch(app="Settings"),
                 Hotkey(keys=("hyper", "x"))],
    platform="web", env_name="miniwob", size=WEB_SIZE, extras={"simulated": False},
    released=_web_released)

_ADB: list[AdbServerProcess] = []


def _adb_port() -> int:
    if not _ADB:
        _ADB.append(AdbServerProcess().start())
    return _ADB[0].port


BACKENDS = {"sim-inprocess": _sim_backend("inprocess", lambda: None),
            "sim-adb": _sim_backend("adb", _adb_port),
            "web-miniwob": WEB}
_ENVS: dict[str, Env] = {}


def _env_of(name: str) -> Env:
    if name not in _ENVS:
        _ENVS[name] = BACKENDS[name].make()
    return _ENVS[name]


@pytest.fixture(scope="module", autouse=True)
def _resources() -> None:
    yield
    for env in _ENVS.values():
        env.close()
    _ENVS.clear()
    while _ADB:
        _ADB.pop().stop()


@pytest.fixture(scope="module", params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest) -> Backend:
    return BACKENDS[request.param]


@pytest.fixture()
def env(backend: Backend) -> Env:
    return _env_of(backend.name)


def test_reset_observation(env: Env, backend: Backend) -> None:
    obs = env.reset(backend.free(env, 30))
    assert obs.size == backend.size == obs.screenshot.size == env.size  # type: ignore[attr-defined]
    assert obs.platform == backend.platform == env.platform and obs.extras["step"] == 0
    assert obs.extras["backend"] == backend.env_name
    for key, value in backend.extras.items():
        assert obs.extras[key] == value, key


CASE_IDS = [(b, c) for b in sorted(BACKENDS) for c in range(len(BACKENDS[b].cases))]


@pytest.mark.parametrize("which", CASE_IDS, ids=[f"{b}-{BACKENDS[b].cases[c][0]}" for b, c in CASE_IDS])
def test_supported_action_effect(which: tuple[str, int]) -> None:
    backend = BACKENDS[which[0]]
    label, start, prep, build, expected = backend.cases[which[1]]
    home = _env_of(backend.name)
    home.reset(start(home, backend) if start is not None else backend.free(home, 30))
    for p in prep:
        home.step(p(home, backend))
    action = build(home, backend)
    assert type(action).NAME in home.supported_actions
    before = backend.fingerprint(home)
    _, done, info = home.step(action)
    after = backend.fingerprint(home)
    assert (after != before) == (expected == "change"), (label, info)
    if not info.get("task_done"):
        assert done == isinstance(action, (Finished, CallUser)), info
    if label.startswith("launch unknown"):
        assert "unknown app" in info["error"]
    if label == "launch invalid url":
        assert "cannot open" in info["error"]


UNSUPPORTED_IDS = [(b, i) for b in sorted(BACKENDS) for i in range(len(BACKENDS[b].unsupported))]


@pytest.mark.parametrize("which", UNSUPPORTED_IDS,
                         ids=[f"{b}-{type(BACKENDS[b].unsupported[i]).NAME}-{i}" for b, i in UNSUPPORTED_IDS])
def test_unsupported_action_raises(which: tuple[str, int]) -> None:
    backend = BACKENDS[which[0]]
    home = _env_of(backend.name)
    home.reset(backend.free(home, 30))
    steps, before = home.steps, backend.fingerprint(home)  # type: ignore[attr-defined]
    with pytest.raises(UnsupportedAction):
        home.step(backend.unsupported[which[1]])
    assert home.steps == steps and backend.fingerprint(home) == before  # type: ignore[attr-defined]


def test_done_after_max_steps(env: Env, backend: Backend) -> None:
    env.reset(backend.free(env, 3))
    assert [env.step(Wait())[1] for _ in range(3)] == [False, False, True]
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Wait())


def test_success_after_ground_truth(env: Env, backend: Backend) -> None:
    for task in backend.tasks(env):
        env.reset(task)
        assert not env.is_successful(), task.goal
        dones: list[bool] = []
        last: Action | None = None
        for action in backend.solve(env, task):
            assert not any(dones), (task.goal, "acted after the episode ended")
            _, done, info = env.step(action)
            dones.append(done)
            last = action
        assert last is not None and dones[:-1] == [False] * (len(dones) - 1), task.goal
        assert dones[-1] == backend.ends_episode(last), (task.goal, info)
        assert env.is_successful(), task.goal


def test_near_miss_is_not_success(env: Env, backend: Backend) -> None:
    if backend.platform == "mobile":
        task = next(t for t in backend.tasks(env) if t.answer)  # a wrong answer
    else:
        task = env.make_task("enter-text", 2)  # type: ignore[attr-defined]  # a misspelt text
    env.reset(task)
    for action in backend.spoil(env, task):
        env.step(action)
    assert not env.is_successful()


def test_close_releases_resources(backend: Backend) -> None:
    env = backend.make()
    env.reset(backend.free(env, 30))
    server = getattr(env, "server", None)
    env.close()
    env.close()  # idempotent
    with pytest.raises(EnvError, match="after close"):
        env.step(Wait())
    backend.released(env)
    if server is not None:
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", server.port), timeout=1).close()
        serials = [d.serial for d in env.shell.client.list()]  # type: ignore[attr-defined]
        assert server.serial not in serials
