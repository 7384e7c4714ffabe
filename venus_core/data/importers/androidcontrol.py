"""AndroidControl importer (mobile trajectories, high-level and low-level variants).

Source format (google-research/android_control README): one episode per record with
`episode_id` (int), `goal`, `screenshots` (PNG bytes), `screenshot_widths`, `screenshot_heights`,
`accessibility_trees`, `actions` (JSON strings, len(screenshots) - 1 of them, each performed on
the screenshot before it) and `step_instructions` (one per action). The release is GZIP TFRecord;
reading that needs tensorflow, which the platform does not depend on, so this importer reads the
same fields exported as JSON: `*.json` files holding one episode object each and/or `*.jsonl`
files with one episode per line. A screenshot is either a path relative to the source directory
or base64 PNG data (bare or as a `data:image/png;base64,` URI). `actions` items may be JSON
strings (as in the TFRecord) or objects; `accessibility_trees` is ignored.

Action mapping (pixel x/y are normalised against the decoded screenshot):
click -> Click, long_press -> LongPress, input_text -> Type, open_app -> Launch(app=app_name),
navigate_back -> PressBack, navigate_home -> PressHome, wait -> Wait, scroll -> Scroll.
`type` (click + type + enter in one record) has no single unified action and is quarantined as an
unsupported action, like any unknown `action_type`.

Scroll semantics: AndroidControl's `direction` is the direction the *content* moves into view
(android_world executes "down" as a swipe from the screen centre to the top edge). The unified
Scroll names the *finger's* motion, so direction is inverted and start/end are the swipe
android_world performs, in 0–1000: "down" -> Scroll(start=(500,500), end=(500,0), direction='up').

Variants (option `level`): `low` (default) keeps each step's instruction in
`TrajectoryStep.instruction` (the low-level AndroidControl task); `high` drops them (goal only).
Option `finish=true` appends a Finished() step on the final screenshot, which otherwise is unused
(AndroidControl episodes have no terminal action; UI-Venus trains one). Episodes are demonstrations,
so `success` is True.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from venus_core.actions import (
    Action,
    Click,
    Finished,
    Launch,
    LongPress,
    PressBack,
    PressHome,
    Scroll,
    Type,
    Wait,
    from_pixels,
    render_action,
)
from venus_core.config.registry import IMPORTERS
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    StagedImage,
    failing,
    get,
    number,
    parse_json,
    safe_id,
    text,
)
from venus_core.data.importers.sources import file_failure, json_lines, read_json, relname
from venus_core.data.schema import Provenance, Trajectory, TrajectoryStep
from venus_core.data.store import AnyRecord

_BASE64_PREFIXES = ("data:", "iVBORw0KGgo", "/9j/")  # data URI, base64 of the PNG / JPEG magic

CONTENT_TO_SWIPE: dict[str, tuple[str, tuple[int, int], tuple[int, int]]] = {
    # content direction -> (finger direction, start, end), the swipe android_world performs
    "down": ("up", (500, 500), (500, 0)),
    "up": ("down", (500, 500), (500, 1000)),
    "right": ("left", (500, 500), (0, 500)),
    "left": ("right", (500, 500), (1000, 500)),
}


def stage_screenshot(stage: ImageStage, value: Any, field: str) -> StagedImage:
    """A screenshot given as a relative path, base64 image data, or {"bytes": base64 | raw bytes}."""
    if isinstance(value, dict) and isinstance(value.get("bytes"), str):
        return stage.from_base64(value["bytes"], field)
    if isinstance(value, dict) and isinstance(value.get("bytes"), (bytes, bytearray)):
        return stage.from_bytes(bytes(value["bytes"]), field)  # parquet image struct
    if isinstance(value, dict) and value.get("bytes") is None and "path" in value:
        return stage.from_file(value["path"], f"{field}.path")
    if isinstance(value, str) and value.startswith(_BASE64_PREFIXES):
        return stage.from_base64(value, field)
    return stage.from_file(value, field)


def _point(action: dict[str, Any], img: StagedImage, field: str) -> tuple[int, int]:
    x = number(get(action, "x", f"{field}.x"), f"{field}.x")
    y = number(get(action, "y", f"{field}.y"), f"{field}.y")
    if x < 0 or y < 0 or x > img.width or y > img.height:
        raise Reject(field, f"point ({x}, {y}) is outside the {img.width}x{img.height} screenshot", "bad_box")
    return from_pixels(x, y, img.width, img.height)


def map_action(raw: Any, img: StagedImage, field: str) -> Action:
    """One AndroidControl action (JSON string or object) -> unified mobile action."""
    if isinstance(raw, str):
        raw = parse_json(raw, field, "action is not valid JSON")
    kind = get(raw, "action_type", f"{field}.action_type")
    if kind == "click":
        return Click(box=_point(raw, img, field))
    if kind == "long_press":
        return LongPress(box=_point(raw, img, field))
    if kind == "scroll":
        direction = get(raw, "direction", f"{field}.direction")
        if not isinstance(direction, str) or direction not in CONTENT_TO_SWIPE:
            raise Reject(f"{field}.direction", f"unknown scroll direction {direction!r}")
        finger, start, end = CONTENT_TO_SWIPE[direction]
        return Scroll(start=start, end=end, direction=finger)  # type: ignore[arg-type]
    if kind == "input_text":
        return Type(content=text(get(raw, "text", f"{field}.text"), f"{field}.text", allow_empty=True))
    if kind == "open_app":
        return Launch(app=text(get(raw, "app_name", f"{field}.app_name"), f"{field}.app_name"))
    if kind == "navigate_back":
        return PressBack()
    if kind == "navigate_home":
        return PressHome()
    if kind == "wait":
        return Wait()
    raise Reject(f"{field}.action_type", f"unknown or unsupported action type {kind!r}", "unknown_action")


def _as_list(episode: Any, key: str, n: int | None) -> list[Any]:
    value = get(episode, key, key)
    if not isinstance(value, list):
        raise Reject(key, f"expected a list, got {type(value).__name__}", "bad_record")
    if n is not None and len(value) != n:
        raise Reject(key, f"has {len(value)} items, expected {n}", "bad_record")
    return value


def build_episode(stage: ImageStage, episode: Any, options: dict[str, str]) -> list[AnyRecord]:
    eid = get(episode, "episode_id", "episode_id")
    if isinstance(eid, bool) or not isinstance(eid, (int, str)) or not str(eid).strip():
        raise Reject("episode_id", f"expected an integer or string id, got {eid!r}", "bad_record")
    goal = text(get(episode, "goal", "goal"), "goal")
    actions = _as_list(episode, "actions", None)
    if not actions:
        raise Reject("actions", "episode has no actions", "bad_record")
    shots = _as_list(episode, "screenshots", len(actions) + 1)
    instructions = _as_list(episode, "step_instructions", len(actions))
    widths = episode.get("screenshot_widths")
    heights = episode.get("screenshot_heights")
    low = options.get("level", "low") == "low"
    steps: list[TrajectoryStep] = []
    n_images = len(shots) if options.get("finish", "false") == "true" else len(actions)
    for i in range(n_images):
        img = stage_screenshot(stage, shots[i], f"screenshots[{i}]")
        for name, claimed, actual in (("screenshot_widths", widths, img.width),
                                      ("screenshot_heights", heights, img.height)):
            if isinstance(claimed, list) and i < len(claimed) and claimed[i] != actual:
                raise Reject(f"{name}[{i}]", f"{claimed[i]!r} does not match the decoded "
                             f"screenshot ({img.width}x{img.height})", "bad_image")
        if i < len(actions):
            action = map_action(actions[i], img, f"actions[{i}]")
            instr = text(instructions[i], f"step_instructions[{i}]") if low else None
        else:
            action, instr = Finished(), None
        steps.append(TrajectoryStep(image=img.ref, image_size=img.size, think="",
                                    action=render_action(action), conclusion="", instruction=instr))
    return [Trajectory(
        id=safe_id("androidcontrol", eid), episode_id=safe_id(eid), platform="mobile", goal=goal,
        steps=steps, success=True,
        provenance=Provenance(source="androidcontrol", source_id=str(eid)),
        meta={"level": "low" if low else "high", "finish_step_added": n_images > len(actions)},
    )]


def _episode_candidate(rel: str, index: int | None, episode: Any, options: dict[str, str]) -> Candidate:
    eid = episode.get("episode_id") if isinstance(episode, dict) else None
    sid = f"episode:{eid}" if isinstance(eid, (int, str)) and not isinstance(eid, bool) else f"{rel}#{index}"
    return Candidate(sid, rel, index, lambda stage: build_episode(stage, episode, options))


def _scan(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    if options.get("level", "low") not in ("low", "high"):
        raise ValueError(f"androidcontrol: option level must be low or high, got {options['level']!r}")
    if options.get("finish", "false") not in ("true", "false"):
        raise ValueError(f"androidcontrol: option finish must be true or false, got {options['finish']!r}")
    for path in root.files("*.json*"):
        rel = relname(root, path)
        if path.suffix == ".jsonl":
            for lineno, obj, rej in json_lines(root, path):
                if rej is not None:
                    yield (file_failure(root, path, rej) if lineno == 0 else
                           Candidate(f"{rel}#{lineno}", rel, lineno,
                                     failing(rej.field, rej.reason, rej.code)))
                else:
                    yield _episode_candidate(rel, lineno, obj, options)
        elif path.suffix == ".json":
            try:
                obj = read_json(root, path)
            except Reject as rej:
                yield file_failure(root, path, rej)
                continue
            yield _episode_candidate(rel, None, obj, options)


ANDROIDCONTROL = IMPORTERS.register("androidcontrol", Importer(
    name="androidcontrol",
    description="AndroidControl episodes (JSON export of the TFRecord fields) -> mobile trajectories",
    scan=_scan,
    options={"level": "low (keep step instructions, default) | high (goal only)",
             "finish": "true: append Finished() on the final screenshot (default false)"},
), description="AndroidControl episodes (JSON export of the TFRecord fields) -> mobile trajectories")
