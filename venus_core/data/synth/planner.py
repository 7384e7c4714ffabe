"""Ground-truth plans: breadth-first search over the apps' state machines.

Why: a plan found by searching the very transition function the data is replayed through is
correct by construction (tests replay every plan through `Phone.step` with the generated action
strings), and it is the shortest. Two restrictions keep the search small enough to run per sample:

- a goal is searched in segments (its milestones, in order, each with all earlier ones kept true);
- a move may change an app's state only in its navigation fields (`App.nav_fields`) and in the
  data fields the task declares (`touches`), so the search never wanders through combinations of
  unrelated switches; and Type is offered only into an empty focused field, with the task's texts.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields

from venus_core.actions.rules import validate_action
from venus_core.actions.space import (
    Action, ActionValidationError, Click, Launch, LongPress, PressBack, PressEnter, Scroll, Type,
)
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.phone import HOME, Phone, PhoneState, app_url, to_logical, to_norm
from venus_core.data.synth.widgets import Widget

Predicate = Callable[[PhoneState], bool]


class PlanningError(RuntimeError):
    """No plan within the search limits."""


@dataclass(frozen=True)
class Move:
    action: Action
    widget: Widget | None
    state: PhoneState  # the state after the move


def _allowed_change(phone: Phone, old: PhoneState, new: PhoneState,
                    touches: dict[str, frozenset[str]]) -> bool:
    for (name, a), (_, b) in zip(old.apps, new.apps, strict=True):
        if a is b or a == b:
            continue
        ok = phone.apps[name].nav_fields | touches.get(name, frozenset())
        for f in fields(a):
            if f.name not in ok and getattr(a, f.name) != getattr(b, f.name):
                return False
    return True


def swipe(w: Widget, direction: str, ctx: ViewContext) -> Scroll:
    """A swipe over the middle half of scrollable `w` ("up" reveals what is further down)."""
    x1, y1, x2, y2 = w.box
    cx = (x1 + x2) / 2
    lo, hi = to_norm(cx, y1 + (y2 - y1) * 0.75, ctx), to_norm(cx, y1 + (y2 - y1) * 0.25, ctx)
    if direction == "up":
        return Scroll(direction="up", start=lo, end=hi)
    return Scroll(direction="down", start=hi, end=lo)


def _valid(action: Action, platform: str) -> bool:
    try:
        validate_action(action, platform)
    except ActionValidationError:
        return False
    return True


def moves(phone: Phone, state: PhoneState, ctx: ViewContext, texts: Sequence[str] = ()
          ) -> list[Move]:
    """Every action that changes `state`, with the widget it targets (deterministic order)."""
    screen = phone.view(state, ctx)
    out: list[Move] = []
    for w in screen.clickables():
        pt = to_norm(*w.center, ctx)
        if screen.hit(*to_logical(pt, ctx)) is not w:
            continue
        res = phone.press_widget(state, w, ctx)
        if res.changed:
            out.append(Move(Click(box=pt), w, res.state))
    for w in screen.widgets:
        if w.long_clickable and w.enabled:
            pt = to_norm(*w.center, ctx)
            if screen.hit(*to_logical(pt, ctx), long=True) is w:
                res = phone.press_widget(state, w, ctx, long=True)
                if res.changed:
                    out.append(Move(LongPress(box=pt), w, res.state))
    app = phone.apps[state.foreground]
    if app.focused_empty(state.app(state.foreground)):
        for t in texts:
            res = phone.step(state, Type(content=t), ctx)
            if res.changed:
                out.append(Move(Type(content=t), None, res.state))
    extra: list[Action] = [PressEnter()]
    for w in screen.widgets:
        if w.scrollable:
            extra += [swipe(w, "up", ctx), swipe(w, "down", ctx)]
    extra.append(PressBack())
    for name in phone.apps:
        if name not in (HOME, state.foreground):
            extra.append(Launch(app=name) if ctx.platform == "mobile" else Launch(url=app_url(name)))
    for a in extra:
        if not _valid(a, ctx.platform):
            continue
        res = phone.step(state, a, ctx)
        if res.changed:
            out.append(Move(a, res.widget if isinstance(a, Scroll) else None, res.state))
    return out


def search(phone: Phone, start: PhoneState, goal: Predicate, ctx: ViewContext, *,
           texts: Sequence[str] = (), touches: dict[str, frozenset[str]] | None = None,
           apps: Sequence[str] | None = None, max_depth: int = 12, max_nodes: int = 6000
           ) -> list[Move]:
    """Shortest list of moves from `start` to a state satisfying `goal` (BFS).

    With `apps`, only those apps (and the home screen) may come to the foreground.
    """
    if goal(start):
        return []
    touches = touches or {}
    parent: dict[PhoneState, tuple[PhoneState, Move] | None] = {start: None}
    frontier = deque([(start, 0)])
    while frontier:
        state, depth = frontier.popleft()
        if depth >= max_depth:
            continue
        for m in moves(phone, state, ctx, texts):
            if m.state in parent or not _allowed_change(phone, state, m.state, touches):
                continue
            if apps is not None and m.state.foreground not in apps and m.state.foreground != HOME:
                continue
            parent[m.state] = (state, m)
            if goal(m.state):
                path = []
                cur: PhoneState = m.state
                while parent[cur] is not None:
                    prev, mv = parent[cur]  # type: ignore[misc]
                    path.append(mv)
                    cur = prev
                return path[::-1]
            if len(parent) > max_nodes:
                raise PlanningError(f"no plan within {max_nodes} states")
            frontier.append((m.state, depth + 1))
    raise PlanningError(f"no plan within depth {max_depth}")


def plan_segments(phone: Phone, start: PhoneState, segments: Sequence[Predicate],
                  ctx: ViewContext, *, texts: Sequence[str] = (),
                  touches: dict[str, frozenset[str]] | None = None,
                  apps: Sequence[str] | None = None, max_depth: int = 12) -> list[Move]:
    """Plan through `segments` in order; segment i must hold together with all earlier ones."""
    moves_all: list[Move] = []
    state = start
    for i in range(len(segments)):
        def goal(s: PhoneState, upto: int = i) -> bool:
            return all(p(s) for p in segments[:upto + 1])

        path = search(phone, state, goal, ctx, texts=texts, touches=touches, apps=apps,
                      max_depth=max_depth)
        moves_all += path
        if path:
            state = path[-1].state
    return moves_all
