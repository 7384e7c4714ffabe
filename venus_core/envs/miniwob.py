"""MiniWoB++ tasks in WebEnv: the `miniwob` package's HTML tasks, their own seeds and rewards.

Why: MiniWoB++ is the standard small web benchmark (≈ 125 single-page tasks, each with a
generator seeded through `Math.seedrandom` and its own JS reward). The `miniwob` package (Farama,
1.x) ships the HTML; its Python side drives Chromium through Selenium, which we do not use: our
WebEnv drives the same pages through Playwright so that web tasks share the unified action space
and the browser pool of every other web workload.

Episode protocol (as miniwob's `SeleniumInstance.begin_task`): load `html/miniwob/<task>.html`
from the installed package (file://, no server needed; a browser reached over CDP, which cannot
read this machine's files, loads it from a virtual origin whose requests Playwright routes to this
process, which answers from the same directory), `Math.seedrandom(seed)`, set
`core.EPISODE_MAX_TIME`, `core.startEpisodeReal()`; the sync cover that MiniWoB shows after an
episode no longer restarts one when clicked (an ended episode stays ended within a step). The
instruction is the page's own utterance (`core.getUtterance()`, the text of #query). The episode
ends when the page's task ends (`WOB_DONE_GLOBAL`, e.g. after the Submit click), on Finished /
CallUser, or at the step limit.
Success is the page's raw reward (`WOB_RAW_REWARD_GLOBAL`, not time-scaled) reaching
`success_reward` (1.0: a fully correct answer; partial credit is reported as
`info["reward"]` but is not success), never read from pixels. An agent that navigates away
(Launch(url=)) leaves the task unfinished: the state reads `on_task: false`, never success.

Tasks are referenced by `success_check = "miniwob:<task>,seed=<S>"`; `MiniWobEnv.make_task`
generates the episode once to read its utterance into `Task.goal`, and `reset` regenerates it
(deterministic for a seed; a page that `make_task` has just generated is used as is) and checks
that the goal matches. `page_fingerprint` names the generated start state by its layout (what the
task area shows and where), so that two seeds that build the same page are recognisably one task
(the data flywheel's uniqueness check). Departures: the page is reloaded on
every reset (miniwob reuses it; a reload makes an episode depend only on its seed, at ~50 ms); the
episode timer defaults to 10 minutes instead of MiniWoB's 10 s, so that a slow model's thinking
does not fail episodes (pass `episode_ms=10_000` for the original protocol). As in miniwob, the
page is laid out in a 500x320 window and the screen is its 160x210 task area (jQuery UI places
dialogs against the window), rendered at `scale` (2 -> 320x420 screenshots). The flight
tasks (`book-flight`), which need an HTTP server, are not offered.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

from PIL import Image

from venus_core.actions.space import Action
from venus_core.envs.base import DEFAULT_MAX_STEPS, EnvError, Observation, Task
from venus_core.envs.browser import BrowserHost
from venus_core.envs.web import WebEnv

PREFIX = "miniwob:"
SERVED_ORIGIN = "http://miniwob.venus.invalid"  # never resolved: every request to it is routed
TASK_SIZE = (160, 210)
WINDOW_SIZE = (500, 320)
DEFAULT_EPISODE_MS = 600_000
READY_TIMEOUT_MS = 60_000
_REF = re.compile(r"^miniwob:([a-z0-9-]+),seed=(-?\d+)$")

_START_JS = """([seed, ms]) => {
  Math.seedrandom(seed);
  core.setDataMode('train');
  core.EPISODE_MAX_TIME = ms;
  core.startEpisodeReal();
  if (core.cover_div) { core.cover_div.onclick = null; }  // an ended episode stays ended
  return true;
}"""
_STATE_JS = """() => (typeof WOB_DONE_GLOBAL === 'undefined' || typeof core === 'undefined')
  ? {done: false, reward: 0, raw_reward: 0, reason: 'not on the task page', ready: false,
     episode: null, on_task: false}
  : {done: WOB_DONE_GLOBAL, reward: WOB_REWARD_GLOBAL, raw_reward: WOB_RAW_REWARD_GLOBAL,
     reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON), ready: WOB_TASK_READY,
     episode: WOB_EPISODE_ID, on_task: true}"""

# the task area (#wrap) and the jQuery UI widgets the page appends to <body> (dialogs, menus):
# every element's tag, id, class, box (CSS px) and, for leaves, its text
_LAYOUT_JS = """() => Array.from(document.querySelectorAll(
    '#wrap, #wrap *, body > .ui-widget, body > .ui-widget *')).map((el) => {
  const r = el.getBoundingClientRect();
  return [el.tagName, el.id, String(el.className || ''), Math.round(r.left), Math.round(r.top),
          Math.round(r.width), Math.round(r.height),
          el.children.length ? '' : (el.textContent || '').trim(), el.value === undefined ? null : el.value];
})"""


@functools.lru_cache(maxsize=1)
def html_dir() -> Path:
    """The installed `miniwob` package's html/ directory (found without importing miniwob)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise EnvError("the `miniwob` package is not installed (pip install miniwob)")
    path = Path(next(iter(spec.submodule_search_locations))) / "html"
    if not (path / "miniwob").is_dir():
        raise EnvError(f"{path}/miniwob is missing: the installed miniwob ships no HTML tasks")
    return path


@functools.lru_cache(maxsize=1)
def task_names() -> tuple[str, ...]:
    """Names of the MiniWoB++ tasks this env offers (file stems of html/miniwob/*.html)."""
    return tuple(sorted(p.stem for p in (html_dir() / "miniwob").glob("*.html")))


def task_url(name: str, *, served: bool = False) -> str:
    """The task's page: a file:// URL of the installed package, or (`served`) its URL under the
    virtual origin that `_serve_html` answers (for a browser on another machine)."""
    if name not in task_names():
        raise EnvError(f"unknown MiniWoB task {name!r} ({len(task_names())} known, e.g. "
                       f"{', '.join(task_names()[:5])})")
    if served:
        return f"{SERVED_ORIGIN}/miniwob/{name}.html"
    return (html_dir() / "miniwob" / f"{name}.html").as_uri()


async def _serve_html(route: Any) -> None:
    """Answer a request for the virtual origin with the file of html_dir() it names (404 outside it)."""
    root = html_dir().resolve()
    path = (root / unquote(urlsplit(route.request.url).path).lstrip("/")).resolve()
    if path.is_relative_to(root) and path.is_file():
        await route.fulfill(path=str(path))
    else:
        await route.fulfill(status=404, body="not a MiniWoB++ file")


def parse_ref(ref: str) -> tuple[str, int]:
    """`miniwob:<task>,seed=<S>` -> (task, seed)."""
    m = _REF.match(ref.strip())
    if m is None:
        raise EnvError(f"success_check {ref!r} is not a MiniWoB reference ({PREFIX}<task>,seed=<S>)")
    return m.group(1), int(m.group(2))


def task_ref(name: str, seed: int) -> str:
    return f"{PREFIX}{name},seed={seed}"


class MiniWobEnv(WebEnv):
    """WebEnv on MiniWoB++ tasks (see the module docstring)."""

    name = "miniwob"

    def __init__(self, *, scale: float = 2.0, episode_ms: int = DEFAULT_EPISODE_MS,
                 success_reward: float = 1.0, wait_s: float = 0.5, long_press_ms: int = 600,
                 settle_ms: int = 0, host: BrowserHost | None = None, cdp: str | None = None,
                 serve_pages: bool | None = None) -> None:
        if episode_ms < 1000:
            raise ValueError(f"MiniWobEnv.episode_ms: {episode_ms} is under 1000 ms")
        self.episode_ms = episode_ms
        self.success_reward = success_reward
        self.state: dict[str, Any] | None = None
        self.fresh: tuple[str, int] | None = None  # (task, seed) just generated, not yet acted on
        super().__init__(size=WINDOW_SIZE, screen=TASK_SIZE, scale=scale, wait_s=wait_s, long_press_ms=long_press_ms,
                         settle_ms=settle_ms, host=host, cdp=cdp)
        # A browser on another machine (cdp) cannot read this package's files: its pages come from
        # a virtual origin whose requests this process answers from html_dir() (Playwright routing).
        # serve_pages=False: the browser runs on this machine and loads the files itself (~70 ms a
        # reset less); default: served iff cdp.
        self.served = (cdp is not None) if serve_pages is None else serve_pages
        if self.served:
            try:
                self.host.call(self.context.route(f"{SERVED_ORIGIN}/**", _serve_html))
            except BaseException:
                self.close()
                raise

    # -- tasks ---------------------------------------------------------------------------------
    async def _start(self, name: str, seed: int) -> str:
        await self.page.goto(task_url(name, served=self.served), wait_until="load")
        await self.page.evaluate(_START_JS, [seed, self.episode_ms])
        await self.page.wait_for_function("() => WOB_TASK_READY === true", timeout=READY_TIMEOUT_MS,
                                        polling=20)
        return str(await self.page.evaluate("() => core.getUtterance()"))

    def make_task(self, name: str, seed: int, *, max_steps: int = DEFAULT_MAX_STEPS) -> Task:
        """The Task of MiniWoB `name` with `seed`, its goal read from the generated page."""
        self._check_open()
        goal = self.host.call(self._start(name, seed))
        self.fresh = (name, seed)
        if not goal.strip():
            raise EnvError(f"MiniWoB {name} seed {seed}: the page produced no utterance")
        return Task(goal=goal, app=name, success_check=task_ref(name, seed), max_steps=max_steps)

    async def prepare(self, task: Task) -> None:
        name, seed = parse_ref(task.success_check)
        if self.fresh == (name, seed):  # make_task just generated this episode: use it as is
            goal = await self.page.evaluate("() => core.getUtterance()")
        else:
            goal = await self._start(name, seed)
        self.fresh = None
        if goal != task.goal:
            raise EnvError(f"task {task.success_check!r}: goal {task.goal!r} does not match the "
                           f"page's utterance {goal!r} (not deterministic for this seed?)")
        self.state = await self._read_state()

    # -- state ---------------------------------------------------------------------------------
    async def _read_state(self) -> dict[str, Any]:
        try:
            return await self.page.evaluate(_STATE_JS)
        except Exception:  # noqa: BLE001 - a navigation the action started replaced the page
            await self.page.wait_for_load_state("load")
            return await self.page.evaluate(_STATE_JS)

    async def perform(self, action: Action) -> dict[str, Any]:
        self.fresh = None
        return await super().perform(action)

    async def page_done(self) -> dict[str, Any] | None:
        self.state = await self._read_state()
        if not self.state["done"]:
            return None
        return {"task_done": True, "reward": self.state["raw_reward"],
                "reason": self.state["reason"]}

    def read_state(self) -> dict[str, Any]:
        """The page's MiniWoB globals now (done, reward, raw_reward, reason, ready, episode)."""
        self._check_open()
        self.state = self.host.call(self._read_state())
        return self.state

    def page_fingerprint(self) -> str:
        """`miniwob-page:<sha256 prefix>` of the page's layout now (`_LAYOUT_JS`): equal for two
        seeds that generate the same page, different when any element, box or text differs."""
        import hashlib
        import json

        layout = json.dumps(self.evaluate(_LAYOUT_JS), separators=(",", ":"), ensure_ascii=False)
        return "miniwob-page:" + hashlib.sha256(layout.encode("utf-8")).hexdigest()[:16]

    def utterance(self) -> str:
        return str(self.evaluate("() => core.getUtterance()"))

    def check_success(self) -> bool:
        state = self.read_state()
        return bool(state["done"]) and float(state["raw_reward"]) >= self.success_reward - 1e-9

    def observation(self, img: Image.Image) -> Observation:
        obs = super().observation(img)
        if self.task is not None:
            obs.extras["task"] = self.task.app
        if self.state is not None:
            obs.extras["reward"] = self.state["raw_reward"]
        return obs
