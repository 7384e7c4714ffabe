"""Scripted plans: an app's intended interactions (`Op`s) resolved into concrete actions.

Why: breadth-first search (`planner.search`) expands every action of every state it visits, about
3-6 ms a state; a 20-40 step task searched segment by segment costs seconds, which made long tasks
the bottleneck of data generation. An app knows how its own goals are reached ("open Contacts, tap
+, tap Name, type ..."), so each `AtomicTask` carries a short script of widget keys, and this module
resolves it against the live screens in one pass: it finds the widget, scrolls the list towards it
when it is off screen, and clicks its centre. Every action is applied through `Phone.step` (the
transition function the data is replayed with), so a script plan is as exact as a searched one; a
tap that changes nothing (a tab already selected, a field already focused) is skipped, so scripts
may state the path from the app's root page. Departure from BFS: script plans are not guaranteed
shortest (they are the natural path a user takes; BFS may find odd shortcuts).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import replace

from venus_core.actions.space import Action, Click, Launch, LongPress, PressBack, PressEnter, \
    PressHome, Type
from venus_core.data.synth.apps.base import Op
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.phone import HOME, Phone, PhoneState, app_url, to_logical, to_norm
from venus_core.data.synth.planner import Move, PlanningError, swipe
from venus_core.data.synth.widgets import Widget

MAX_SCROLLS = 8
MAX_BACKS = 4


class _Run:
    """The moves so far and the state they lead to."""

    def __init__(self, phone: Phone, state: PhoneState, ctx: ViewContext,
                 rng: random.Random) -> None:
        self.phone, self.state, self.ctx, self.rng = phone, state, ctx, rng
        self.moves: list[Move] = []

    def act(self, action: Action, widget: Widget | None = None, *, required: bool = True) -> bool:
        res = self.phone.step(self.state, action, self.ctx)
        if not res.changed:
            if required:
                raise PlanningError(f"script: {action!r} has no effect ({res.info})")
            return False
        self.moves.append(Move(action, widget if widget is not None else res.widget, res.state))
        self.state = res.state
        return True

    def visible(self, key: str, *, long: bool = False) -> tuple[Widget, tuple[int, int]] | None:
        """The widget `key` if a click (long press) at its centre point would reach it."""
        screen = self.phone.view(self.state, self.ctx)
        if not screen.has(key):
            return None
        w = screen.get(key)
        pt = to_norm(*w.center, self.ctx)
        return (w, pt) if screen.hit(*to_logical(pt, self.ctx), long=long) is w else None

    def reveal(self, key: str, *, long: bool = False) -> tuple[Widget, tuple[int, int]]:
        """Scroll the screen's list until widget `key` is reachable (down the list, then up)."""
        found = self.visible(key, long=long)
        if found is not None:
            return found
        start, start_moves = self.state, len(self.moves)
        for direction in ("up", "down"):
            for _ in range(MAX_SCROLLS):
                screen = self.phone.view(self.state, self.ctx)
                target = screen.scroll_target(None, None)
                if target is None:
                    break
                if not self.act(swipe(target, direction, self.ctx), target, required=False):
                    break
                found = self.visible(key, long=long)
                if found is not None:
                    return found
            self.state, self.moves = start, self.moves[:start_moves]
        page = self.phone.view(self.state, self.ctx).page
        raise PlanningError(f"script: widget {key!r} is not on screen "
                            f"({self.state.foreground}: {page})")

    def tap(self, key: str, *, long: bool = False) -> None:
        w, pt = self.reveal(key, long=long)
        action: Action = LongPress(box=pt) if long else Click(box=pt)
        self.act(action, w, required=False)

    def go_home(self) -> None:
        if self.state.foreground == HOME:
            return
        screen = self.phone.view(self.state, self.ctx)
        if screen.has("nav:home"):
            self.tap("nav:home")
        else:
            self.act(PressHome())

    def open(self, app: str) -> None:
        """Bring `app` to the foreground at its root page (icon, Launch, or Back presses)."""
        if app not in self.phone.apps:
            raise PlanningError(f"script: app {app!r} is not installed")
        fg = self.state.foreground
        if fg == app:
            obj = self.phone.apps[app]
            for _ in range(MAX_BACKS):
                st = self.state.app(app)
                if st == obj.on_launch(st) or obj.on_back(st, self.ctx) is None:
                    break
                if self.ctx.platform == "mobile":
                    self.act(PressBack())
                elif self.visible("nav:back") is not None:
                    self.tap("nav:back")
                else:
                    break
            return
        roll = self.rng.random()
        if fg != HOME and roll < 0.4:
            self.go_home()
            fg = HOME
        if fg == HOME and roll < 0.8:
            self.tap(f"app:{app}")
        else:
            self.act(Launch(app=app) if self.ctx.platform == "mobile" else Launch(url=app_url(app)))
        if self.state.foreground != app:
            raise PlanningError(f"script: could not open {app!r}")

    def run(self, op: Op) -> None:
        if op.kind == "open":
            self.open(op.arg)
        elif op.kind in ("tap", "long"):
            self.tap(op.arg, long=op.kind == "long")
        elif op.kind == "see":
            self.reveal(op.arg)
        elif op.kind == "type":
            self.act(Type(content=op.arg))
        elif op.kind == "enter":
            self.act(PressEnter())
        elif op.kind == "back":
            self.act(PressBack())
        else:
            raise ValueError(f"script: unknown op kind {op.kind!r} (arg {op.arg!r})")


def run_script(phone: Phone, state: PhoneState, script: Sequence[Op], ctx: ViewContext,
               rng: random.Random) -> list[Move]:
    """The moves that carry out `script` from `state` (raises PlanningError when one cannot)."""
    if not script:
        raise PlanningError("script: empty script")
    run = _Run(phone, state, ctx, rng)
    for op in script:
        if op.kind == "back" and ctx.platform != "mobile":
            op = replace(op, kind="tap", arg="nav:back")
        run.run(op)
    return run.moves


__all__ = ["run_script"]
