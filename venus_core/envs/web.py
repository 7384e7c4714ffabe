"""WebEnv: the unified action space executed in a headless Chromium page through Playwright.

Why: UI-Venus-1.5's web agent acts on a browser with the same vocabulary as the phone agent
(Table 8), coordinates in the 0–1000 frame of the screenshot. This class maps each action to
Playwright's mouse / keyboard input at CSS-pixel coordinates (x·W/1000 of the screen), so that
the browser receives real input events (hover states, focus, drag handlers, wheel scrolling)
exactly as from a user, never synthetic DOM calls. The screen is the viewport, or its top-left
`screen` region (MiniWoB lays pages out in a 500x320 window and crops the task area). Each env
owns one isolated browser context in the process-wide shared Chromium (`browser.BrowserHost`),
or, with `cdp=`, in a running Chromium reached over the DevTools protocol (a browser leased
through the device gateway: `rl.online.devices.BrowserFarm`, the cluster's browser pods).

Mapping (platform "web"):
Click / DoubleClick / Hover -> mouse.click / dblclick / move at the point; LongPress -> mouse
down, hold `long_press_ms`, up; Drag -> down at start, move in steps, up at end; Scroll ->
mouse.wheel at `start` (the screen centre without one), by |end - start| pixels when both are
given else half a screen; Type -> keyboard.type at the focused element (it does not clear the
field first, unlike the phone's ADB keyboard: a browser user selects text to replace it);
Hotkey -> keyboard.press of the chord ("ctrl" -> Control, "cmd" -> Meta, arrows, F-keys, ...);
PressEnter -> Enter; Launch(url=) -> page.goto; Wait -> sleep `wait_s`; Finished / CallUser end
the episode without touching the page.
`wait_for` waits (bounded) on a JS predicate of the page, for callers that need the page to show
something before they read it (the MiniWoB oracles), instead of sleeping.

Choices the paper leaves open: Scroll direction is the finger's motion, the action space's
convention (`synth.layout.scroll_by`): "up" moves the content up, i.e. reveals what is below
(wheel deltaY > 0). PressBack / PressHome / PressRecent, Launch(app=) and unknown Hotkey key
names raise `UnsupportedAction`; a URL that fails to load is a no-op reported in
`info["error"]` (a model's mistake, not an env failure), like AndroidEnv's unknown app.
Subclasses supply the task start state (`prepare`), page-side termination (`page_done`) and the
success check (`check_success`); the base env has none (`is_successful` raises).
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

from PIL import Image

from venus_core.actions.space import (
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
    PressEnter,
    Scroll,
    Type,
)
from venus_core.envs.base import Env, EnvError, Observation, Task, UnsupportedAction
from venus_core.envs.browser import CALL_TIMEOUT_S, BrowserHost, CdpBrowser

SUPPORTED = frozenset({"Click", "DoubleClick", "Hover", "LongPress", "Drag", "Scroll", "Type",
                       "Hotkey", "PressEnter", "Launch", "Wait", "Finished", "CallUser"})
KEY_NAMES = {"ctrl": "Control", "control": "Control", "cmd": "Meta", "command": "Meta",
             "meta": "Meta", "win": "Meta", "super": "Meta", "alt": "Alt", "option": "Alt",
             "shift": "Shift", "enter": "Enter", "return": "Enter", "esc": "Escape",
             "escape": "Escape", "tab": "Tab", "space": "Space", "backspace": "Backspace",
             "delete": "Delete", "del": "Delete", "insert": "Insert", "home": "Home",
             "end": "End", "pageup": "PageUp", "pagedown": "PageDown", "up": "ArrowUp",
             "down": "ArrowDown", "left": "ArrowLeft", "right": "ArrowRight",
             "arrowup": "ArrowUp", "arrowdown": "ArrowDown", "arrowleft": "ArrowLeft",
             "arrowright": "ArrowRight", "capslock": "CapsLock"}
KEY_NAMES |= {f"f{i}": f"F{i}" for i in range(1, 13)}
DRAG_STEPS = 8
PAGE_TIMEOUT_MS = 90_000  # navigation / wait limit of a page (Playwright's default is 30 s)
WAIT_POLL_MS = 20  # how often `wait_for` evaluates its predicate
_WHEEL = {"up": (0, 1), "down": (0, -1), "left": (1, 0), "right": (-1, 0)}


def playwright_key(key: str) -> str | None:
    """A Hotkey key name -> Playwright's key name (None when unknown)."""
    k = key.strip()
    if len(k) == 1 and k.isprintable():
        return k
    return KEY_NAMES.get(k.lower().replace("_", "").replace("-", ""))


class WebEnv(Env):
    """A browser page in its own context of the shared Chromium (see the module docstring)."""

    name = "web"
    platform = "web"
    concurrent = True  # each env is its own browser context; BrowserHost.call is thread-safe

    def __init__(self, *, size: tuple[int, int] = (1280, 720), scale: float = 1.0,
                 screen: tuple[int, int] | None = None, wait_s: float = 1.0,
                 long_press_ms: int = 600, settle_ms: int = 0,
                 host: BrowserHost | None = None, cdp: str | None = None) -> None:
        if size[0] < 16 or size[1] < 16:
            raise ValueError(f"WebEnv.size: {size} is too small (at least 16x16 CSS pixels)")
        screen = screen or size
        if not (16 <= screen[0] <= size[0] and 16 <= screen[1] <= size[1]):
            raise ValueError(f"WebEnv.screen: {screen} must lie within the {size} viewport")
        if not 0.25 <= scale <= 4:
            raise ValueError(f"WebEnv.scale: {scale} is outside 0.25..4")
        self.viewport = size
        self.screen = screen
        self.scale = scale
        self._clip = None if screen == size else {"x": 0, "y": 0, "width": screen[0],
                                                   "height": screen[1]}
        self.wait_s = wait_s
        self.long_press_ms = long_press_ms
        self.settle_ms = settle_ms
        if host is not None and cdp is not None:
            raise ValueError("WebEnv: give host or cdp, not both")
        self.owns_host = host is None  # the shared host (released on close) or a CDP host of its own
        self.host: BrowserHost | CdpBrowser = host or (CdpBrowser(cdp) if cdp else BrowserHost.acquire())
        self.closed = False
        self.task: Task | None = None
        self.steps = 0
        self.done = False
        self.answer: str | None = None
        async def open_page() -> tuple[Any, Any]:
            context = await self.host.browser.new_context(
                viewport={"width": size[0], "height": size[1]}, device_scale_factor=scale)
            context.set_default_timeout(PAGE_TIMEOUT_MS)
            return context, await context.new_page()

        try:
            self.context, self.page = self.host.call(open_page())
        except BaseException:
            if self.owns_host:
                self.host.release()
            raise

    # -- helpers -------------------------------------------------------------------------------
    @property
    def size(self) -> tuple[int, int]:
        """Screenshot size in device pixels (screen region x scale)."""
        return (round(self.screen[0] * self.scale), round(self.screen[1] * self.scale))

    def px(self, p: tuple[int, int]) -> tuple[float, float]:
        """A 0–1000 point of the screenshot to CSS pixels of the page (x·W/1000, on the screen)."""
        w, h = self.screen
        return (min(p[0] * w / 1000, w - 0.5), min(p[1] * h / 1000, h - 0.5))

    def evaluate(self, script: str, arg: Any = None) -> Any:
        """Evaluate a JS expression/function in the page (state reads for checks and oracles)."""
        self._check_open()
        return self.host.call(self.page.evaluate(script, arg))

    def wait_for(self, script: str, arg: Any = None, *, timeout_ms: int) -> bool:
        """Wait until the JS predicate `script(arg)` is truthy in the page: True, or False after
        `timeout_ms` (the caller names what it awaited in its own error).

        A condition wait, not a sleep: how long a page takes to react to an input (a debounced
        handler, a menu that opens after a delay) has no fixed bound on a loaded machine, so the
        page's own state is polled (Playwright's wait_for_function) for as long as it needs, up to
        `timeout_ms`, and a fast page is not held back."""
        from playwright.async_api import TimeoutError as PlaywrightTimeout

        self._check_open()
        if not 0 < timeout_ms < CALL_TIMEOUT_S * 1000:
            raise ValueError(f"WebEnv.wait_for: timeout_ms {timeout_ms} is outside "
                             f"0..{CALL_TIMEOUT_S * 1000:g}")

        async def run() -> bool:
            try:
                await self.page.wait_for_function(script, arg=arg, timeout=timeout_ms,
                                                  polling=WAIT_POLL_MS)
            except PlaywrightTimeout:
                return False
            return True

        return self.host.call(run())

    def screenshot(self) -> Image.Image:
        self._check_open()
        return self._image(self.host.call(self.page.screenshot(type="png", clip=self._clip)))

    @staticmethod
    def _image(png: bytes) -> Image.Image:
        img = Image.open(io.BytesIO(png))
        img.load()
        return img.convert("RGB")

    def observation(self, img: Image.Image) -> Observation:
        extras: dict[str, Any] = {"step": self.steps, "backend": self.name, "url": self.page.url,
                                  "simulated": False}
        return Observation(img, img.size, self.platform, extras)

    def observe(self) -> Observation:
        return self.observation(self.screenshot())

    def _check_open(self) -> None:
        if self.closed:
            raise EnvError(f"{self.name}: used after close")

    # -- action mapping ------------------------------------------------------------------------
    @property
    def supported_actions(self) -> frozenset[str]:
        return SUPPORTED

    def check_action(self, action: Action) -> None:
        """Raise UnsupportedAction for what this backend cannot perform (before any effect)."""
        name = type(action).NAME
        if name not in self.supported_actions:
            raise UnsupportedAction(self.name, name, "not a web action (phone button)")
        if isinstance(action, Launch) and action.url is None:
            raise UnsupportedAction(self.name, name, "Launch(app=) is a phone action; use url=")
        if isinstance(action, Hotkey):
            unknown = [k for k in action.keys if playwright_key(k) is None]
            if unknown:
                raise UnsupportedAction(self.name, name, f"unknown key(s) {unknown}")

    async def perform(self, action: Action) -> dict[str, Any]:
        """Perform `action` on the page (on the browser loop); returns info additions."""
        mouse, keyboard = self.page.mouse, self.page.keyboard
        if isinstance(action, Click):
            await mouse.click(*self.px(action.box))
        elif isinstance(action, DoubleClick):
            await mouse.dblclick(*self.px(action.box))
        elif isinstance(action, Hover):
            await mouse.move(*self.px(action.box))
        elif isinstance(action, LongPress):
            await mouse.move(*self.px(action.box))
            await mouse.down()
            await asyncio.sleep(self.long_press_ms / 1000)
            await mouse.up()
        elif isinstance(action, Drag):
            await mouse.move(*self.px(action.start))
            await mouse.down()
            await mouse.move(*self.px(action.end), steps=DRAG_STEPS)
            await mouse.up()
        elif isinstance(action, Scroll):
            await self._scroll(action)
        elif isinstance(action, Type):
            if action.content:
                await keyboard.type(action.content)
        elif isinstance(action, Hotkey):
            await keyboard.press("+".join(playwright_key(k) or k for k in action.keys))
        elif isinstance(action, PressEnter):
            await keyboard.press("Enter")
        elif isinstance(action, Launch):
            try:
                await self.page.goto(action.url or "", wait_until="load")
            except Exception as exc:  # noqa: BLE001 - Playwright raises its own Error types
                return {"error": f"cannot open {action.url!r}: {str(exc).splitlines()[0]}"}
        return {}

    async def _scroll(self, action: Scroll) -> None:
        w, h = self.screen
        at = self.px(action.start) if action.start is not None else (w / 2, h / 2)
        if action.start is not None and action.end is not None:
            (x1, y1), (x2, y2) = self.px(action.start), self.px(action.end)
            amount = max(abs(x2 - x1), abs(y2 - y1))
        else:
            amount = (w if action.direction in ("left", "right") else h) / 2
        sx, sy = _WHEEL[action.direction]
        await self.page.mouse.move(*at)
        await self.page.mouse.wheel(sx * amount, sy * amount)

    # -- episode -------------------------------------------------------------------------------
    async def prepare(self, task: Task) -> None:
        """Bring the page into the task's start state (base env: a blank page)."""
        await self.page.goto("about:blank")

    async def page_done(self) -> dict[str, Any] | None:
        """Page-side end of the episode after an action: info additions, or None (base: never)."""
        return None

    def check_success(self) -> bool:
        raise EnvError(f"{self.name}: no success check for {self.task and self.task.success_check!r}"
                       " (a plain web page has no notion of success)")

    def reset(self, task: Task) -> Observation:
        self._check_open()

        async def run() -> bytes:
            await self.page.mouse.move(0, 0)  # no hover state carried over between episodes
            await self.prepare(task)
            return await self.page.screenshot(type="png", clip=self._clip)

        png = self.host.call(run())
        self.task, self.steps, self.done, self.answer = task, 0, False, None
        return self.observation(self._image(png))

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        self._guard("step")
        self.check_action(action)  # raises UnsupportedAction before counting the step
        terminated = isinstance(action, (Finished, CallUser))

        async def run() -> tuple[dict[str, Any], dict[str, Any] | None, bytes]:
            extra = {} if terminated else await self.perform(action)
            if self.settle_ms and not terminated:
                await asyncio.sleep(self.settle_ms / 1000)
            ended = None if terminated else await self.page_done()
            return extra, ended, await self.page.screenshot(type="png", clip=self._clip)

        if action.NAME == "Wait":
            time.sleep(self.wait_s)
        extra, ended, png = self.host.call(run())
        info: dict[str, Any] = {"action": action.NAME, **extra}
        self.steps += 1
        if terminated:
            self.answer = action.content  # type: ignore[attr-defined]
        elif ended is not None:
            terminated = True
            info.update(ended)
        truncated = not terminated and self.steps >= self.task.max_steps
        self.done = terminated or truncated
        info.update(step=self.steps, terminated=terminated, truncated=truncated)
        return self.observation(self._image(png)), self.done, info

    def is_successful(self) -> bool:
        if self.task is None:
            raise EnvError(f"{self.name}: is_successful before reset")
        return self.check_success()

    @property
    def has_success_rule(self) -> bool:
        return type(self).check_success is not WebEnv.check_success

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            if self.host.alive:
                self.host.call(self.context.close(), timeout=20)
        finally:
            if self.owns_host:
                self.host.release()
