"""GUI-Odyssey importer (cross-app mobile trajectories).

Source format (OpenGVLab/GUI-Odyssey, introduction.md and data/format_converter.py):
`annotations/<episode_id>.json`, one episode per file, and `screenshots/<name>.png`. Episode:
`episode_id`, `device_info` {product, release_version, sdk_version, h, w, device_name},
`task_info` {category, app, meta_task, task, instruction}, `step_length`, `steps`: list of
{`step`, `screenshot` (file name under screenshots/), `action`, `info`, `ps`}. Coordinates in
`info` are already normalised to 0–1000.

Action mapping:
CLICK [[x,y]] -> Click; LONG_PRESS [[x,y]] -> LongPress; CLICK/LONG_PRESS with info KEY_HOME /
KEY_BACK / KEY_APPSELECT -> PressHome / PressBack / PressRecent (the released converter's
reading); HOME / BACK -> PressHome / PressBack; TEXT (documented as TYPE; both accepted) with the
text in `info` -> Type; SCROLL [[x1,y1],[x2,y2]] -> Scroll(start, end, direction);
COMPLETE -> Finished() and success=True; INCOMPLETE / IMPOSSIBLE (the annotator could not finish)
-> CallUser(content=ps or a fixed sentence) and success=False (our choice: the unified space has
no "infeasible" action; CallUser hands the task back to the user). Anything else is quarantined.

Scroll semantics: GUI-Odyssey stores the *finger's* trajectory (start and end of the swipe; the
released converter calls a swipe with decreasing y "UP"), which is already the unified Scroll's
convention: direction is the dominant axis of end - start (vertical on a tie), start/end kept. A
zero-length scroll is quarantined. Episodes are human demonstrations; `success` is True unless the
last action says the task could not be completed.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from venus_core.actions import (
    Action,
    CallUser,
    Click,
    Finished,
    LongPress,
    PressBack,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    render_action,
)
from venus_core.config.registry import IMPORTERS
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    get,
    norm_point,
    numbers,
    safe_id,
    text,
)
from venus_core.data.importers.sources import file_failure, read_json, relname
from venus_core.data.schema import Provenance, Trajectory, TrajectoryStep
from venus_core.data.store import AnyRecord

KEYS: dict[str, type[Action]] = {"KEY_HOME": PressHome, "KEY_BACK": PressBack, "KEY_APPSELECT": PressRecent}
INFEASIBLE_TEXT = "I cannot complete this task."


def _point(info: Any, field: str) -> tuple[int, int]:
    if isinstance(info, list) and len(info) == 1 and isinstance(info[0], list):
        info = info[0]
    x, y = numbers(info, 2, field)
    return norm_point(x, y, field)


def _scroll(info: Any, field: str) -> Scroll:
    if not isinstance(info, list) or len(info) != 2:
        raise Reject(field, f"SCROLL needs [[x1,y1],[x2,y2]], got {info!r}", "bad_record")
    start = _point(info[0], f"{field}[0]")
    end = _point(info[1], f"{field}[1]")
    dx, dy = end[0] - start[0], end[1] - start[1]
    if dx == 0 and dy == 0:
        raise Reject(field, f"zero-length scroll {info!r}", "bad_value")
    if abs(dx) > abs(dy):
        direction = "right" if dx > 0 else "left"
    else:
        direction = "down" if dy > 0 else "up"
    return Scroll(start=start, end=end, direction=direction)  # type: ignore[arg-type]


def map_action(step: dict[str, Any], field: str) -> Action:
    """One GUI-Odyssey step's (action, info, ps) -> unified mobile action."""
    name = get(step, "action", f"{field}.action")
    info = step.get("info", "")
    if name in ("CLICK", "LONG_PRESS"):
        if isinstance(info, str):
            if info in KEYS:
                return KEYS[info]()
            raise Reject(f"{field}.info", f"unknown key {info!r} for {name}", "unknown_action")
        point = _point(info, f"{field}.info")
        return Click(box=point) if name == "CLICK" else LongPress(box=point)
    if name == "SCROLL":
        return _scroll(info, f"{field}.info")
    if name in ("TEXT", "TYPE"):
        return Type(content=text(info, f"{field}.info", allow_empty=True))
    if name == "HOME":
        return PressHome()
    if name == "BACK":
        return PressBack()
    if name == "COMPLETE":
        return Finished()
    if name in ("INCOMPLETE", "IMPOSSIBLE"):
        ps = step.get("ps")
        return CallUser(content=ps.strip() if isinstance(ps, str) and ps.strip() else INFEASIBLE_TEXT)
    raise Reject(f"{field}.action", f"unknown action type {name!r}", "unknown_action")


def build_episode(stage: ImageStage, episode: Any, shots: str) -> list[AnyRecord]:
    eid = text(get(episode, "episode_id", "episode_id"), "episode_id")
    task = get(episode, "task_info", "task_info")
    goal_value = task.get("instruction") if isinstance(task, dict) else None
    if not (isinstance(goal_value, str) and goal_value.strip()) and isinstance(task, dict):
        goal_value = task.get("task")
    goal = text(goal_value, "task_info.instruction")
    raw_steps = get(episode, "steps", "steps")
    if not isinstance(raw_steps, list) or not raw_steps:
        raise Reject("steps", "expected a non-empty list of steps", "bad_record")
    steps: list[TrajectoryStep] = []
    success = True
    for i, step in enumerate(raw_steps):
        field = f"steps[{i}]"
        if not isinstance(step, dict):
            raise Reject(field, f"expected an object, got {type(step).__name__}", "bad_record")
        action = map_action(step, field)
        success = not isinstance(action, CallUser)
        img = stage.from_file(get(step, "screenshot", f"{field}.screenshot"), f"{field}.screenshot", base=shots)
        meta = {"source_action": step["action"]}
        steps.append(TrajectoryStep(image=img.ref, image_size=img.size, think="",
                                    action=render_action(action), conclusion="", meta=meta))
    device = episode.get("device_info") if isinstance(episode.get("device_info"), dict) else {}
    meta: dict[str, Any] = {k: task[k] for k in ("category", "meta_task", "task") if isinstance(task.get(k), str)}
    if isinstance(task.get("app"), list):
        meta["apps"] = [a for a in task["app"] if isinstance(a, str)]
    if isinstance(device.get("device_name"), str):
        meta["device_name"] = device["device_name"]
    return [Trajectory(
        id=safe_id("guiodyssey", eid), episode_id=safe_id(eid), platform="mobile", goal=goal,
        steps=steps, success=success,
        provenance=Provenance(source="guiodyssey", source_id=eid), meta=meta,
    )]


def _scan(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    ann = options.get("annotations", "annotations")
    shots = options.get("screenshots", "screenshots")
    for path in root.files("*.json", ann):
        rel = relname(root, path)
        try:
            episode = read_json(root, path)
        except Reject as rej:
            yield file_failure(root, path, rej)
            continue
        eid = episode.get("episode_id") if isinstance(episode, dict) else None
        sid = f"episode:{eid}" if isinstance(eid, str) else f"file:{rel}"
        yield Candidate(sid, rel, None, lambda stage, episode=episode: build_episode(stage, episode, shots))


GUIODYSSEY = IMPORTERS.register("guiodyssey", Importer(
    name="guiodyssey",
    description="GUI-Odyssey annotations/*.json episodes (0-1000 coordinates) -> mobile trajectories",
    scan=_scan,
    options={"annotations": "annotation folder (default annotations/)",
             "screenshots": "screenshot folder (default screenshots/)"},
), description="GUI-Odyssey annotations/*.json episodes (0-1000 coordinates) -> mobile trajectories")
