"""filter_inconsistent: drop trajectories whose recorded actions contradict their screens or goal.

Why: UI-Venus-1.0 filters trajectories before training because a single impossible step (a tap
outside the screen, typing with no focused field, an agent stuck repeating itself) teaches the
model a wrong cause and effect. Schema validation already rejects points outside the 0–1000
frame, so "off screen" here means a point on the frame's edge (coordinate 0 or 1000), the
signature of an importer clamping an off-screen click (switch: `edge_is_off_screen`). A Type is
inconsistent only when the source records that no editable field had focus
(`meta["focused_editable"] is False`); unknown is not evidence. A no-op loop is `noop_repeats`
identical actions on an identical screenshot in a row. A Finished that is not the last step
contradicts the episode. Dropped records are returned with their reason.
"""

from __future__ import annotations

from venus_core.actions import parse_action
from venus_core.data.clean.base import CLEAN_STEPS, AnyRecord, CleanOptions, StepOutput
from venus_core.data.schema import NavigationStep, Trajectory

_POINT_FIELDS = ("box", "start", "end")


def _off_screen(action: str, platform: str) -> bool:
    act = parse_action(action, platform)  # type: ignore[arg-type]
    for name in _POINT_FIELDS:
        p = getattr(act, name, None)
        if p is not None and any(v in (0, 1000) for v in p):
            return True
    return False


def inconsistency(record: AnyRecord, options: CleanOptions) -> str | None:
    """The first inconsistency found ('reason: detail'), or None."""
    if isinstance(record, NavigationStep):
        steps = [(record.action, record.image, record.meta)]
    elif isinstance(record, Trajectory):
        steps = [(s.action, s.image, s.meta) for s in record.steps]
    else:
        return None
    run = 1
    for i, (action, image, meta) in enumerate(steps):
        if options.edge_is_off_screen and _off_screen(action, record.platform):
            return f"point_off_screen: step {i} {action} touches the screen edge (clamped off-screen point)"
        if action.startswith("Type(") and meta.get("focused_editable") is False:
            return f"type_without_focus: step {i} types with no focused editable field"
        if i and action == steps[i - 1][0] and image == steps[i - 1][1]:
            run += 1
            if run >= options.noop_repeats:
                return f"noop_loop: {action} repeated {run} times on an unchanged screen (steps {i - run + 1}..{i})"
        else:
            run = 1
        if action.startswith("Finished(") and i < len(steps) - 1:
            return f"action_after_finished: step {i} is Finished but {len(steps) - 1 - i} step(s) follow"
    return None


@CLEAN_STEPS.register("filter_inconsistent")
def filter_inconsistent(records: list[AnyRecord], options: CleanOptions) -> StepOutput:
    """Drop navigation records whose actions contradict their screens (edge clicks, unfocused Type, loops)."""
    kept: list[AnyRecord] = []
    dropped: list[tuple[AnyRecord, str]] = []
    for r in records:
        why = inconsistency(r, options)
        if why is None:
            kept.append(r)
        else:
            dropped.append((r, why))
    return StepOutput(kept, dropped=dropped)
