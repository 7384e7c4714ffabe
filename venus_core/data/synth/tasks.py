"""Tasks on the simulated phone, sampled per curriculum level, with their ground-truth plans.

Why: a task is a goal text plus success predicates on the *state* (never on pixels), so success can
be checked exactly both here and later when the same apps run as a live device. Tasks are sampled
from the apps' own `tasks()` (which know what is reachable from a state), lifted to the phone
(`segments`), composed for long horizons, and kept only when the planner finds a plan whose length
fits the level. Levels 0–2 use the board app alone (single-step tasks).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache

from venus_core.data.synth.apps.base import AtomicTask, pick
from venus_core.data.synth.apps.board import grid_board, single_board
from venus_core.data.synth.i18n import ViewContext, tr
from venus_core.data.synth.phone import HOME, Phone, PhoneState
from venus_core.data.synth.planner import Move, PlanningError, moves, plan_segments, _allowed_change

Predicate = Callable[[PhoneState], bool]

# (min, max) plan length per level; levels 0-2 are single clicks on the board.
PLAN_LENGTH = {0: (1, 1), 1: (1, 1), 2: (1, 1), 3: (1, 1), 4: (2, 5), 5: (6, 40)}


@dataclass(frozen=True)
class Task:
    goal: str
    lang: str
    level: int
    segments: tuple[Predicate, ...]
    texts: tuple[str, ...] = ()
    touches: tuple[tuple[str, frozenset[str]], ...] = ()
    answer: str = ""
    apps: tuple[str, ...] = ()

    def done(self, state: PhoneState) -> bool:
        return all(seg(state) for seg in self.segments)


@dataclass(frozen=True)
class Episode:
    task: Task
    start: PhoneState
    moves: tuple[Move, ...]
    phone: Phone
    ctx: ViewContext


@lru_cache(maxsize=8)
def get_phone(apps: tuple[str, ...] | None = None) -> Phone:
    return Phone(list(apps) if apps is not None else None)


def _lift(at: AtomicTask) -> tuple[list[Predicate], bool]:
    name = at.app

    def on(p: Callable[[object], bool]) -> Predicate:
        return lambda ps: p(ps.app(name))

    segs = [on(m) for m in at.milestones] + [on(at.check)]
    if at.kind == "info":
        segs.append(lambda ps: ps.foreground == name)
    return segs, at.kind == "info"


def open_app_task(name: str, lang: str, level: int) -> Task:
    from venus_core.config.registry import SYNTH_APPS

    title = tr(SYNTH_APPS.get(name).title_key, "zh" if lang == "zh" else "en")
    return Task(pick(lang, f"Open the {title} app", f"打开{title}"), lang, level,
                (lambda ps, n=name: ps.foreground == n,), apps=(name,))


def compose(atomics: list[AtomicTask], lang: str, level: int) -> Task:
    """One task doing `atomics` in order (an information question may only come last)."""
    segs: list[Predicate] = []
    touches: dict[str, frozenset[str]] = {}
    texts: list[str] = []
    for i, at in enumerate(atomics):
        s, info = _lift(at)
        if info and i != len(atomics) - 1:
            raise ValueError("compose: an information task must be the last part")
        segs += s
        touches[at.app] = touches.get(at.app, frozenset()) | frozenset(at.touches)
        texts += [t for t in at.texts if t not in texts]
    sep = "，然后" if lang == "zh" else ", then "
    goal = sep.join(g if i == 0 else (g if lang == "zh" else g[0].lower() + g[1:])
                    for i, g in enumerate(a.goal for a in atomics))
    return Task(goal, lang, level, tuple(segs), tuple(texts), tuple(sorted(touches.items())),
                atomics[-1].answer, tuple(dict.fromkeys(a.app for a in atomics)))


def plan_task(phone: Phone, state: PhoneState, task: Task, ctx: ViewContext) -> list[Move]:
    return plan_segments(phone, state, task.segments, ctx, texts=task.texts,
                         touches=dict(task.touches), apps=task.apps or None, max_depth=10)


def _wander(phone: Phone, state: PhoneState, ctx: ViewContext, rng: random.Random, k: int
            ) -> PhoneState:
    """Take up to `k` random navigation-only moves (varied start screens, no data changes)."""
    for _ in range(k):
        options = [m for m in moves(phone, state, ctx) if _allowed_change(phone, state, m.state, {})]
        if not options:
            break
        state = rng.choice(options).state
    return state


def board_episode(rng: random.Random, level: int, ctx: ViewContext) -> Episode:
    phone = get_phone(("board",))
    start = phone.initial(rng, foreground="board")
    board = single_board(rng) if level == 0 else grid_board(rng, labels=level >= 2)
    start = start.with_app("board", board)
    atomic = rng.choice(phone.apps["board"].tasks(board, rng, ctx.lang))
    task = compose([atomic], ctx.lang, level)
    return Episode(task, start, tuple(plan_task(phone, start, task, ctx)), phone, ctx)


def sample_episode(rng: random.Random, level: int, ctx: ViewContext, *, tries: int = 40
                   ) -> Episode:
    """A task of `level` with a plan whose length fits the level (see `PLAN_LENGTH`)."""
    if level not in PLAN_LENGTH:
        raise ValueError(f"unknown curriculum level {level}; known: {sorted(PLAN_LENGTH)}")
    if level <= 2:
        return board_episode(rng, level, ctx)
    lo, hi = PLAN_LENGTH[level]
    phone = get_phone()
    names = [n for n in phone.apps if n != HOME]
    for _ in range(tries):
        fg = rng.choice([HOME] + names) if level <= 4 else HOME
        start = phone.initial(rng, foreground=fg)
        start = _wander(phone, start, ctx, rng, rng.randint(0, 3) if level <= 4 else 0)
        fg = start.foreground
        if level == 5:
            parts: list[AtomicTask] = []
            for app in rng.sample(names, rng.randint(2, min(4, len(names)))):
                cands = [t for t in phone.apps[app].tasks(start.app(app), rng, ctx.lang)
                         if t.kind != "info" or not parts]
                parts.append(rng.choice(cands))
            info = [p for p in parts if p.kind == "info"]
            parts = [p for p in parts if p.kind != "info"] + info[:1]
            task = compose(parts, ctx.lang, level)
        elif level == 3 and fg == HOME:
            task = open_app_task(rng.choice(names), ctx.lang, level)
        else:
            app = fg if level == 3 or (fg != HOME and rng.random() < 0.5) else rng.choice(names)
            cands = phone.apps[app].tasks(start.app(app), rng, ctx.lang)
            if not cands:
                continue
            task = compose([rng.choice(cands)], ctx.lang, level)
        try:
            plan = plan_task(phone, start, task, ctx)
        except PlanningError:
            continue
        if lo <= len(plan) <= hi:
            return Episode(task, start, tuple(plan), phone, ctx)
    raise PlanningError(f"level {level}: no task with a {lo}-{hi} step plan in {tries} tries")
