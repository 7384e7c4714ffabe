"""The simulated device: several apps, one foreground, and the unified actions applied to them.

Why: actions are resolved here, once for all apps. A Click's 0–1000 point is mapped onto the
foreground screen's logical pixels and hit-tested against its widgets; Type goes to the focused
field; Scroll to the scrollable container under the swipe's start; PressBack / PressHome /
Launch change the foreground app. An action that changes nothing leaves the state untouched and
says why in `StepResult.info`, so environments can report ineffective actions.

On the web platform the same apps are pages of one site: there is no Back/Home button, the header
has "Home" / "Back" links, and `Launch(url=...)` opens an app by its URL (`app_url`).
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

from venus_core.actions.space import (
    Action, Click, DoubleClick, Finished, Launch, LongPress, PressBack, PressEnter, PressHome,
    Scroll, Type,
)
from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, AppState, GoHome, OpenApp
from venus_core.data.synth.i18n import STRINGS, ViewContext
from venus_core.data.synth.widgets import Screen, Widget

HOME = "launcher"
VIEW_CACHE = 4096


def app_url(name: str) -> str:
    return f"https://{name}.synth.local/"


def to_logical(p: tuple[int, int], ctx: ViewContext) -> tuple[float, float]:
    """A 0–1000 point onto the logical pixel grid (x·width/1000, as on a device)."""
    return (p[0] * ctx.width / 1000.0, p[1] * ctx.height / 1000.0)


def to_norm(x: float, y: float, ctx: ViewContext) -> tuple[int, int]:
    """A logical pixel position into the 0–1000 frame (rounded, clamped)."""
    nx = min(1000, max(0, round(x * 1000.0 / ctx.width)))
    ny = min(1000, max(0, round(y * 1000.0 / ctx.height)))
    return (nx, ny)


def norm_box(box: tuple[int, int, int, int], ctx: ViewContext) -> tuple[int, int, int, int]:
    """A logical pixel box into the 0–1000 frame, rounded outwards so it contains the element."""
    x1, y1, x2, y2 = box
    nx1 = max(0, int(x1 * 1000 // ctx.width))
    ny1 = max(0, int(y1 * 1000 // ctx.height))
    nx2 = min(1000, -(-x2 * 1000 // ctx.width))
    ny2 = min(1000, -(-y2 * 1000 // ctx.height))
    return (nx1, ny1, max(nx2, nx1 + 1), max(ny2, ny1 + 1))


@dataclass(frozen=True)
class PhoneState:
    foreground: str
    apps: tuple[tuple[str, AppState], ...]

    def app(self, name: str) -> AppState:
        for n, s in self.apps:
            if n == name:
                return s
        raise KeyError(f"app {name!r} is not installed; installed: {[n for n, _ in self.apps]}")

    def with_app(self, name: str, state: AppState) -> PhoneState:
        return replace(self, apps=tuple((n, state if n == name else s) for n, s in self.apps))


@dataclass(frozen=True)
class StepResult:
    state: PhoneState
    changed: bool
    info: str
    widget: Widget | None = None


class Phone:
    """A device with the named apps installed (default: every registered synthetic app)."""

    def __init__(self, apps: Sequence[str] | None = None) -> None:
        names = list(apps) if apps is not None else [
            e.name for e in SYNTH_APPS if getattr(e.obj, "on_home_screen", False)
        ]
        if HOME not in names:
            names.insert(0, HOME)
        self.apps: dict[str, App] = {n: SYNTH_APPS.get(n) for n in names}
        self._views: dict[tuple[str, AppState, ViewContext], Screen] = {}

    # -- state ---------------------------------------------------------------------------------
    def initial(self, rng: random.Random, foreground: str = HOME) -> PhoneState:
        if foreground not in self.apps:
            raise KeyError(f"foreground app {foreground!r} is not installed")
        states = []
        for name, app in self.apps.items():
            st = app.initial(rng)
            if name == HOME:
                st = replace(st, apps=tuple(n for n in self.apps if n != HOME))
            states.append((name, st))
        return PhoneState(foreground=foreground, apps=tuple(states))

    def view(self, state: PhoneState, ctx: ViewContext) -> Screen:
        name = state.foreground
        return self.app_view(name, state.app(name), ctx)

    def app_view(self, name: str, app_state: AppState, ctx: ViewContext) -> Screen:
        """`App.view`, memoised: views are pure, and a planner asks for the same ones often."""
        key = (name, app_state, ctx)
        screen = self._views.get(key)
        if screen is None:
            if len(self._views) >= VIEW_CACHE:
                self._views.clear()
            screen = self._views[key] = self.apps[name].view(app_state, ctx)
        return screen

    def resolve_app(self, text: str) -> str | None:
        """An app name from a Launch argument: registry name, URL, or title in either language."""
        t = text.strip().lower()
        for name, app in self.apps.items():
            en, zh = STRINGS[app.title_key]
            if t in (name, en.lower(), zh, app_url(name).lower(), app_url(name).rstrip("/").lower()):
                return name
        return None

    # -- transitions ---------------------------------------------------------------------------
    def _apply(self, state: PhoneState, name: str, result: object, what: str) -> StepResult:
        if result is None:
            return StepResult(state, False, f"no effect: {what}")
        if isinstance(result, OpenApp):
            return self.open(state, result.app, what)
        if isinstance(result, GoHome):
            return self.go_home(state, what)
        if result == state.app(name):
            return StepResult(state, False, f"no effect: {what}")
        return StepResult(state.with_app(name, result), True, what)

    def open(self, state: PhoneState, name: str, what: str) -> StepResult:
        if name not in self.apps:
            return StepResult(state, False, f"no effect: {what} (app {name!r} is not installed)")
        new = state.with_app(name, self.apps[name].on_launch(state.app(name)))
        new = replace(new, foreground=name)
        return StepResult(new, new != state, f"{what}: opened {name}")

    def go_home(self, state: PhoneState, what: str) -> StepResult:
        home = self.apps[HOME]
        new = replace(state.with_app(HOME, home.on_launch(state.app(HOME))), foreground=HOME)
        if new == state:
            return StepResult(state, False, f"no effect: {what} (already home)")
        return StepResult(new, True, f"{what}: home screen")

    def press_widget(
        self, state: PhoneState, widget: Widget, ctx: ViewContext, *, long: bool = False
    ) -> StepResult:
        """Apply a tap (or long press) on an already hit-tested widget of the foreground app."""
        name = state.foreground
        app, st = self.apps[name], state.app(name)
        what = f"{'long-pressed' if long else 'clicked'} {widget.key}"
        if long:
            return self._apply(state, name, app.on_long_press(st, widget, ctx), what)
        if widget.key == "nav:back":
            return self.back(state, ctx, what)
        if widget.key == "nav:home":
            return self.go_home(state, what)
        return self._apply(state, name, app.on_click(st, widget, ctx), what)

    def back(self, state: PhoneState, ctx: ViewContext, what: str = "back") -> StepResult:
        name = state.foreground
        res = self.apps[name].on_back(state.app(name), ctx)
        if res is None:
            if name == HOME:
                return StepResult(state, False, f"no effect: {what} (home screen)")
            return self.go_home(state, what)
        return self._apply(state, name, res, what)

    def step(self, state: PhoneState, action: Action, ctx: ViewContext) -> StepResult:
        """Apply one unified action to the foreground app (see the module docstring)."""
        name = state.foreground
        app, st = self.apps[name], state.app(name)
        if isinstance(action, (Click, DoubleClick, LongPress)):
            long = isinstance(action, LongPress)
            x, y = to_logical(action.box, ctx)
            widget = self.app_view(name, st, ctx).hit(x, y, long=long)
            if widget is None or (long and not widget.long_clickable):
                kind = "long-pressable" if long else "clickable"
                return StepResult(state, False, f"no effect: no {kind} element at {action.box}")
            res = self.press_widget(state, widget, ctx, long=long)
            return replace(res, widget=widget)
        if isinstance(action, Type):
            return self._apply(state, name, app.on_type(st, action.content, ctx),
                               f"typed {action.content!r}")
        if isinstance(action, PressEnter):
            return self._apply(state, name, app.on_enter(st, ctx), "pressed enter")
        if isinstance(action, Scroll):
            screen = self.app_view(name, st, ctx)
            at = to_logical(action.start, ctx) if action.start is not None else (None, None)
            target = screen.scroll_target(*at)
            if target is None:
                return StepResult(state, False, "no effect: nothing scrollable there")
            res = self._apply(state, name, app.on_scroll(st, action.direction, target, ctx),
                              f"scrolled {action.direction}")
            return replace(res, widget=target)
        if isinstance(action, PressBack):
            return self.back(state, ctx)
        if isinstance(action, PressHome):
            return self.go_home(state, "home")
        if isinstance(action, Launch):
            target_name = self.resolve_app(action.app or action.url or "")
            if target_name is None:
                return StepResult(state, False, f"no effect: unknown app {action.app or action.url!r}")
            return self.open(state, target_name, f"launch {target_name}")
        if isinstance(action, Finished):
            return StepResult(state, False, "finished")
        return StepResult(state, False, f"no effect: {action.NAME} does nothing here")

    def run(
        self, state: PhoneState, actions: Iterable[Action], ctx: ViewContext
    ) -> PhoneState:
        for a in actions:
            state = self.step(state, a, ctx).state
        return state
