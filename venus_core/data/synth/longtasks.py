"""Long composite tasks (levels 5 and 6): several goals across apps, then possibly a question.

Why: the foundation asks for navigation trajectories of 1 to 20+ steps. A long task here is a
chain of data-changing goals sampled one after another from the *evolving* phone state (change
settings, add a contact and message them, fill the whole form, search and buy several items),
each planned by its app's script (`script.run_script`, milliseconds) instead of a search, and
optionally closed by an information question about the state reached ("How many items are in the
cart?", "Which contact's number ends in 42?"). Sampling against the evolving state keeps every
part feasible (a message can go to the contact added two parts earlier's app state); a part whose
plan would undo an earlier part's result (order the cart after "add 2 mangoes") is rejected, so
the whole chain's predicates hold at the end, which `Task.done` checks.

Departure from the paper: UI-Venus's long trajectories are real-device traces; these are synthetic
compositions whose plans follow the apps' natural paths rather than a search's shortest one.
"""

from __future__ import annotations

import random

from venus_core.data.synth.apps.base import AtomicTask
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.phone import HOME, Phone, PhoneState
from venus_core.data.synth.planner import Move, PlanningError
from venus_core.data.synth.script import run_script
from venus_core.data.synth.tasks import Episode, Predicate, _lift, answer_shown, compose

QUESTION_SHARE = 0.4  # share of long tasks that end with an information question
MAX_PARTS_TRIED = 40
SWITCH_APP = 0.7  # chance that the next part is in another app than the last one


def _try_part(phone: Phone, state: PhoneState, at: AtomicTask, ctx: ViewContext,
              rng: random.Random, kept: list[Predicate], room: int
              ) -> tuple[list[Move], list[Predicate]] | None:
    """The moves of part `at` from `state`, if they keep every earlier result and fit `room`."""
    try:
        mv = run_script(phone, state, at.script, ctx, rng)
    except PlanningError:
        return None
    if not mv or len(mv) > room:
        return None
    checks = kept + _lift(at)[0]
    end = mv[-1].state
    if not all(c(end) for c in checks):
        return None
    if at.kind == "info":
        assert at.answer_of is not None  # _lift refuses questions without one
        if at.answer_of(end.app(at.app)) != at.answer or \
                not answer_shown(phone, ctx, at.answer)(end):
            return None
    return mv, checks


def _pick(phone: Phone, state: PhoneState, app: str, rng: random.Random, lang: str,
          info: bool, done: set[str]) -> AtomicTask | None:
    cands = [t for t in phone.apps[app].tasks(state.app(app), rng, lang)
             if t.script and t.goal not in done
             and (t.kind == "info" if info else (t.kind != "info" and bool(t.touches)))]
    return rng.choice(cands) if cands else None


def _grow(phone: Phone, start: PhoneState, ctx: ViewContext, rng: random.Random, level: int,
          lo: int, hi: int) -> Episode | None:
    names = [n for n in phone.apps if n != HOME]
    question = rng.random() < QUESTION_SHARE
    # aim in the lower half of the range (the last part may overshoot up to `hi`): every step is
    # a rendered screenshot, and rendering, not planning, is what long trajectories cost
    target = rng.randint(lo, (lo + hi) // 2)
    budget = hi - (4 if question else 0)
    state, moves, parts, kept = start, [], [], []  # type: ignore[var-annotated]
    last_app = ""
    for _ in range(MAX_PARTS_TRIED):
        if len(moves) >= target - (3 if question else 0):
            break
        others = [n for n in names if n != last_app]
        app = rng.choice(others) if last_app and rng.random() < SWITCH_APP else rng.choice(names)
        at = _pick(phone, state, app, rng, ctx.lang, False, {p.goal for p in parts})
        if at is None:
            continue
        got = _try_part(phone, state, at, ctx, rng, kept, budget - len(moves))
        if got is None:
            continue
        mv, kept = got
        parts.append(at)
        moves += mv
        state, last_app = mv[-1].state, app
    if question:
        for app in rng.sample(names, len(names)):
            at = _pick(phone, state, app, rng, ctx.lang, True, set())
            got = None if at is None else _try_part(phone, state, at, ctx, rng, kept,
                                                    hi - len(moves))
            if got is not None:
                assert at is not None
                mv, kept = got
                parts.append(at)
                moves += mv
                state = mv[-1].state
                break
    if not parts or not lo <= len(moves) <= hi:
        return None
    task = compose(parts, ctx.lang, level)
    if not task.done(state):  # every part was checked on the way; this guards the composition
        raise PlanningError(f"long task {task.goal!r}: composed plan does not reach the goal")
    return Episode(task, start, tuple(moves), phone, ctx)


def scripted_episode(rng: random.Random, level: int, ctx: ViewContext, phone: Phone, lo: int,
                     hi: int, *, tries: int = 40) -> Episode:
    """A composite task whose scripted plan has `lo`..`hi` steps (raises PlanningError)."""
    names = [n for n in phone.apps if n != HOME]
    for _ in range(tries):
        fg = HOME if rng.random() < 0.7 else rng.choice(names)
        ep = _grow(phone, phone.initial(rng, foreground=fg), ctx, rng, level, lo, hi)
        if ep is not None:
            return ep
    raise PlanningError(f"level {level}: no composite task with a {lo}-{hi} step plan "
                        f"in {tries} tries")


__all__ = ["QUESTION_SHARE", "scripted_episode"]
