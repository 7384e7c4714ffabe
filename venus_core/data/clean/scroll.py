"""unify_scroll: one meaning of Scroll's direction across sources — the finger's motion.

Why: datasets disagree on what "scroll down" means (the finger moves down, or the content moves
down so that what was above comes into view). Mixed, they teach the model both meanings of the
same word. The action space's convention is the finger's motion (`venus_core.data.synth.layout`);
a source flagged "content" has every Scroll direction flipped (history items included). With
"auto", a mobile Scroll that records start and end is flipped when its direction contradicts
its own swipe vector, and one without them (web) is left alone — the swipe is the ground truth,
the direction word is the annotation.
"""

from __future__ import annotations

from typing import Any

from venus_core.actions import Scroll, parse_action, render_action
from venus_core.data.clean.base import CLEAN_STEPS, AnyRecord, CleanOptions, StepOutput, source_of
from venus_core.data.schema import NavigationStep, Trajectory, parse_record

FLIP = {"up": "down", "down": "up", "left": "right", "right": "left"}


def swipe_direction(start: tuple[int, int], end: tuple[int, int]) -> str | None:
    """The finger's direction of a swipe (dominant axis); None for a tap-like swipe.

    >>> swipe_direction((500, 800), (500, 200)), swipe_direction((100, 500), (900, 520)), swipe_direction((5, 5), (5, 5))
    ('up', 'right', None)
    """
    dx, dy = end[0] - start[0], end[1] - start[1]
    if dx == dy == 0:
        return None
    if abs(dy) >= abs(dx):
        return "down" if dy > 0 else "up"
    return "right" if dx > 0 else "left"


def _semantics(record: AnyRecord, options: CleanOptions) -> str:
    src = source_of(record)
    if src in options.scroll_semantics:
        return options.scroll_semantics[src]
    flag = record.provenance.extra.get("scroll_semantics")
    if flag in ("finger", "content", "auto"):
        return str(flag)
    return options.default_scroll_semantics


def unify_action(action: str, platform: str, semantics: str) -> str:
    """The action with its Scroll direction in finger semantics (other actions unchanged)."""
    if not action.startswith("Scroll(") or semantics == "finger":
        return action
    act = parse_action(action, platform)  # type: ignore[arg-type]
    assert isinstance(act, Scroll)
    if semantics == "content":
        direction = FLIP[act.direction]
    else:
        swipe = swipe_direction(act.start, act.end) if act.start is not None and act.end is not None else None
        if swipe is None or swipe == act.direction:
            return action
        direction = FLIP[act.direction] if swipe == FLIP[act.direction] else act.direction
    return render_action(act.model_copy(update={"direction": direction}))


@CLEAN_STEPS.register("unify_scroll")
def unify_scroll(records: list[AnyRecord], options: CleanOptions) -> StepOutput:
    """Rewrite Scroll directions to the finger's motion (per-source semantics flag)."""
    out: list[AnyRecord] = []
    changed = flipped = 0
    for r in records:
        if not isinstance(r, (Trajectory, NavigationStep)):
            out.append(r)
            continue
        sem = _semantics(r, options)
        data: dict[str, Any] = r.model_dump(mode="json")
        items = data["steps"] if isinstance(r, Trajectory) else [data, *data["history"]]
        n = 0
        for item in items:
            new = unify_action(item["action"], r.platform, sem)
            if new != item["action"]:
                item["action"] = new
                n += 1
        if n:
            changed += 1
            flipped += n
            out.append(parse_record(data, where=f"unify_scroll of record {r.id!r}"))
        else:
            out.append(r)
    return StepOutput(out, changed=changed, info={"scroll_actions_flipped": flipped})
