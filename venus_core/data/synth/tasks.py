"""Tasks on the simulated phone, sampled per curriculum level, with their ground-truth plans.

Why: a task is a goal text plus success predicates on the *state* (never on pixels), so success can
be checked exactly both here and later when the same apps run as a live device. Tasks are sampled
from the apps' own `tasks()` (which know what is reachable from a state), lifted to the phone
(`segments`), composed for long horizons, and kept only when the planner finds a plan whose length
fits the level. Levels 0–2 use the board app alone (single-step tasks). Long levels (5, 6) chain
several data-changing tasks across apps, planned by the apps' scripts (`longtasks`), and may end
with a question. A question's answer is read back from the final state (`Task.answer_in`) and
must be written on the final screen; the episode closes with Finished or CallUser carrying it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import lru_cache

from venus_core.actions.space import Action, CallUser, Finished
from venus_core.data.synth.apps.base import AtomicTask, pick
from venus_core.data.synth.apps.board import board_for
from venus_core.data.synth.i18n import ViewContext, tr
from venus_core.data.synth.phone import HOME, Phone, PhoneState
from venus_core.data.synth.planner import Move, PlanningError, moves, plan_segments, _allowed_change

Predicate = Callable[[PhoneState], bool]

# (min, max) plan length per level; levels 0-2 are single clicks on the board. Levels 5-6 are
# composed from the apps' scripts (`longtasks`), the others are searched (BFS).
PLAN_LENGTH = {0: (1, 1), 1: (1, 1), 2: (1, 1), 3: (1, 1), 4: (2, 5), 5: (6, 19), 6: (20, 48)}
SCRIPTED_LEVELS = (5, 6)
REPLIES = ("Finished", "CallUser")


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
    answer_of: Predicate | None = None  # PhoneState -> the answer read from the state (info tasks)
    reply: str = "Finished"  # the final action of an information task: Finished or CallUser

    def done(self, state: PhoneState) -> bool:
        return all(seg(state) for seg in self.segments)

    def answer_in(self, state: PhoneState) -> str:
        """The answer the final `state` holds (info tasks); raises for tasks without an answer."""
        if self.answer_of is None:
            raise ValueError(f"task {self.goal!r} asks no question")
        return str(self.answer_of(state))

    def final_action(self) -> Action:
        """The closing action: CallUser(content=answer) or Finished(content=answer)."""
        return CallUser(content=self.answer) if self.reply == "CallUser" and self.answer \
            else Finished(content=self.answer)


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
    if at.kind == "info" and at.answer_of is None:
        raise ValueError(f"information task {at.goal!r} of app {name!r} has no answer_of")
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
    last = atomics[-1]
    answer_of = None
    if last.kind == "info" and last.answer_of is not None:
        read = last.answer_of
        answer_of = lambda ps, n=last.app: read(ps.app(n))  # noqa: E731
    return Task(goal, lang, level, tuple(segs), tuple(texts), tuple(sorted(touches.items())),
                last.answer, tuple(dict.fromkeys(a.app for a in atomics)), answer_of)


def answer_shown(phone: Phone, ctx: ViewContext, answer: str) -> Predicate:
    """The answer is written on the screen of a state (so the agent can read it off)."""
    return lambda ps: any(answer in t for t in phone.view(ps, ctx).texts())


def plan_task(phone: Phone, state: PhoneState, task: Task, ctx: ViewContext,
              max_depth: int = 10) -> list[Move]:
    """BFS plan through the task's segments; a question's answer must end up on screen.

    `max_depth` bounds each segment's search: a level rejects longer plans anyway, and a failed
    search costs its whole state budget, so the bound is what keeps short levels fast."""
    segments = task.segments + ((answer_shown(phone, ctx, task.answer),) if task.answer else ())
    return plan_segments(phone, state, segments, ctx, texts=task.texts,
                         touches=dict(task.touches), apps=task.apps or None, max_depth=max_depth)


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
    board = board_for(rng, level)
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
    if level in SCRIPTED_LEVELS:
        from venus_core.data.synth.longtasks import scripted_episode  # it builds on this module

        ep = scripted_episode(rng, level, ctx, phone, lo, hi, tries=tries)
    else:
        ep = _searched_episode(rng, level, ctx, phone, lo, hi, tries)
    if ep.task.answer:
        ep = replace(ep, task=replace(ep.task, reply=rng.choice(REPLIES)))
    return ep


def _searched_episode(rng: random.Random, level: int, ctx: ViewContext, phone: Phone, lo: int,
                      hi: int, tries: int) -> Episode:
    """Levels 3-4: one task of one app, planned by BFS."""
    names = [n for n in phone.apps if n != HOME]
    for _ in range(tries):
        start = phone.initial(rng, foreground=rng.choice([HOME] + names))
        start = _wander(phone, start, ctx, rng, rng.randint(0, 3))
        fg = start.foreground
        if level == 3 and fg == HOME:
            task = open_app_task(rng.choice(names), ctx.lang, level)
        else:
            app = fg if level == 3 or (fg != HOME and rng.random() < 0.5) else rng.choice(names)
            cands = phone.apps[app].tasks(start.app(app), rng, ctx.lang)
            if not cands:
                continue
            task = compose([rng.choice(cands)], ctx.lang, level)
        try:
            plan = plan_task(phone, start, task, ctx, max_depth=hi)
        except PlanningError:
            continue
        if lo <= len(plan) <= hi:
            return Episode(task, start, tuple(plan), phone, ctx)
    raise PlanningError(f"level {level}: no task with a {lo}-{hi} step plan in {tries} tries")
