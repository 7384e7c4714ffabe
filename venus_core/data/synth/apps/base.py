"""The app protocol of the synthetic world: state in, Screen out, events in, state out.

Why: an app is a deterministic state machine. `view` is a pure function of (state, context) to a
`Screen`; the `on_*` handlers are pure functions from (state, event) to a new state, or `None` when
the event has no effect. Handlers receive *resolved* events (the widget that was hit, the text that
was typed), never pixels: hit-testing lives in `phone.step`, once for all apps. An app state is a
frozen dataclass of tuples, so it is hashable and a planner can search over it.

Tasks are sampled by the app from a state (`tasks`), each with a success predicate on the app
state, never on pixels, and (for the long levels) a `script` of intended interactions that
`script.run_script` turns into concrete actions in one pass instead of a search.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.widgets import RGB, Screen, Widget

AppState = Any  # a frozen, hashable dataclass owned by the app


@dataclass(frozen=True)
class OpenApp:
    """Handler result asking the phone to bring another app to the foreground."""

    app: str


@dataclass(frozen=True)
class GoHome:
    """Handler result asking the phone to show the home screen (e.g. the web "Home" link)."""


HandlerResult = Any  # AppState | OpenApp | GoHome | None


@dataclass(frozen=True)
class Op:
    """One intended interaction of a scripted plan (see `venus_core.data.synth.script`).

    kind: "open" (bring `arg` app to the foreground at its root page), "tap" / "long" (the widget
    whose key is `arg`, scrolling to it first if needed), "see" (scroll until widget `arg` is
    visible), "type" (`arg` into the focused field), "enter", "back".
    """

    kind: str
    arg: str = ""


def ops(app: str, *steps: str | Op) -> tuple[Op, ...]:
    """A script: open `app`, then taps of the given widget keys (or explicit `Op`s)."""
    return (Op("open", app),) + tuple(s if isinstance(s, Op) else Op("tap", s) for s in steps)


@dataclass(frozen=True)
class AtomicTask:
    """One goal inside one app, in one language, with a predicate on that app's state.

    A task is built for one language because what the user types (a message, a search query, a
    contact's name) is part of the goal. `texts` are the strings the planner may type (the Type
    action's content). `answer` is set for information-retrieval goals: the episode ends with
    Finished(content=answer). `milestones` are optional intermediate predicates (in order) that
    let the planner search one short segment at a time instead of the whole product space.
    """

    app: str
    goal: str
    check: Callable[[AppState], bool]
    texts: tuple[str, ...] = ()
    answer: str = ""
    kind: str = "state"
    milestones: tuple[Callable[[AppState], bool], ...] = ()
    touches: tuple[str, ...] = ()  # data fields (not `App.nav_fields`) the goal may change
    # The app's own macro plan from the state the task was sampled in (fast, used by the long
    # levels); empty: plan by breadth-first search only.
    script: tuple[Op, ...] = ()
    # Information tasks: the answer read back from the app state at the end of the plan, so the
    # generator checks the answer against the state it was asked about.
    answer_of: Callable[[AppState], str] | None = None


def pick(lang: str, en: str, zh: str) -> str:
    """`en` or `zh` by language (for goal templates)."""
    return zh if lang == "zh" else en


class App(ABC):
    """A synthetic app. Subclasses set `name`, `title_key`, `icon`, `color`."""

    name: str = ""
    title_key: str = ""
    icon: str = "app"
    color: RGB = (100, 100, 100)
    on_home_screen: bool = True
    # Fields of the state that are navigation (page, scroll, focus, dialogs...): changing them has
    # no lasting effect. The planner lets a task change only these plus the task's `touches`.
    nav_fields: frozenset[str] = frozenset()

    @abstractmethod
    def initial(self, rng: random.Random) -> AppState:
        """A fresh state with randomised content (names, products, switch positions)."""

    @abstractmethod
    def view(self, state: AppState, ctx: ViewContext) -> Screen:
        """The screen of `state` (pure)."""

    @abstractmethod
    def on_click(self, state: AppState, widget: Widget, ctx: ViewContext) -> HandlerResult:
        """A tap on `widget` (already hit-tested)."""

    def on_long_press(self, state: AppState, widget: Widget, ctx: ViewContext) -> HandlerResult:
        return None

    def on_type(self, state: AppState, text: str, ctx: ViewContext) -> HandlerResult:
        return None

    def on_enter(self, state: AppState, ctx: ViewContext) -> HandlerResult:
        return None

    def on_scroll(
        self, state: AppState, direction: str, target: Widget, ctx: ViewContext
    ) -> HandlerResult:
        return None

    def on_back(self, state: AppState, ctx: ViewContext) -> HandlerResult:
        """Back: the previous page/dialog, or `None` at the app's root (the phone goes home)."""
        return None

    def on_launch(self, state: AppState) -> AppState:
        """Launching from the home screen restarts at the root page but keeps the app's data."""
        return state

    def tasks(self, state: AppState, rng: random.Random, lang: str) -> list[AtomicTask]:
        """Goals that can be reached from `state` (sampled, varied by `rng`)."""
        return []

    def focused_empty(self, state: AppState) -> bool:
        """Whether a text field has focus and is empty (where a Type action makes sense)."""
        return False


def title_of(app: App, ctx: ViewContext) -> str:
    return ctx.t(app.title_key)
