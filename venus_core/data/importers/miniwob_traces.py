"""`miniwob-traces`: raw browser traces (MiniWoB++ or any web page) -> web trajectories.

Why a raw format: a trace recorder (our `venus data collect --raw`, a human demonstration tool,
another team's browser bot) logs what a browser saw and did in *pixels*, one step per line, with
screenshots as files; the conversion to the unified action space (0–1000 coordinates, canonical
action strings) and the checks belong to one importer, so that traces from any recorder land in
the dataset the same way and bad steps are quarantined with their file, line and field.

Format (documented contract; `venus_core.envs.miniwob_collect` writes it):
SRC/**/*.jsonl, one JSON object per step; the steps of an episode are consecutive lines with the
same `episode_id`, in step order. Paths are relative to the JSONL file's folder.

    episode_id  str      unique per episode, e.g. "click-button:seed=3"
    task        str      MiniWoB task name (or a page name)
    seed        int|null generator seed
    goal        str      instruction shown to the agent (MiniWoB: the #query utterance)
    step        int      0, 1, 2, ... within the episode
    screenshot  str      PNG/JPEG of the screen the action was taken on
    viewport    [w, h]   CSS pixels; action coordinates and dom_box are in this frame (the
                         screenshot may be larger: device pixel ratio)
    action      object   {"type": ..., fields}: click|dblclick|hover|longpress {x, y};
                         drag {x, y, x2, y2}; scroll {direction, [x, y, [x2, y2]]};
                         type {text}; hotkey {keys: [..]}; enter; goto {url}; wait;
                         finish {[text]}; ask {text}
    dom_box     [x1, y1, x2, y2] | null   the target element's box, CSS pixels
    think, conclusion   str (optional, default "")
    done        bool     true on an episode's last step
    reward      number|null  the page's raw reward, on the last step

An episode is one source record (so imported + quarantined = episodes read); `success` is
reward >= 1 (MiniWoB's full credit). An episode whose last line lacks done=true, a step number
out of order, a coordinate outside the viewport, an unknown action type or a missing screenshot
quarantines the whole episode with the offending line and field. A line that is not JSON is a
record of its own. Option `min_reward`: episodes below it are quarantined (code "failed"), e.g.
`--option min_reward=1` keeps successful episodes only.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from venus_core.actions import (
    Action,
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    PressEnter,
    Scroll,
    Type,
    Wait,
    render_action,
)
from venus_core.config.registry import IMPORTERS
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    failing,
    get,
    number,
    numbers,
    pixel_box,
    safe_id,
    text,
)
from venus_core.data.importers.sources import json_lines, relname
from venus_core.data.schema import Provenance, Trajectory, TrajectoryStep
from venus_core.data.store import AnyRecord

SOURCE = "miniwob"
POINT_TYPES: dict[str, type[Action]] = {"click": Click, "dblclick": DoubleClick, "hover": Hover,
                                        "longpress": LongPress}
Viewport = tuple[float, float]


# ---- unified action <-> raw action (pixels) ------------------------------------------------


def to_raw(action: Action, px: Any) -> dict[str, Any]:
    """A unified action -> raw action dict; `px` maps a 0–1000 point to viewport CSS pixels."""
    def pt(p: tuple[int, int], a: str = "x", b: str = "y") -> dict[str, float]:
        x, y = px(p)
        return {a: round(x, 2), b: round(y, 2)}

    for name, cls in POINT_TYPES.items():
        if isinstance(action, cls):
            return {"type": name, **pt(action.box)}  # type: ignore[attr-defined]
    if isinstance(action, Drag):
        return {"type": "drag", **pt(action.start), **pt(action.end, "x2", "y2")}
    if isinstance(action, Scroll):
        out: dict[str, Any] = {"type": "scroll", "direction": action.direction}
        if action.start is not None:
            out |= pt(action.start)
        if action.end is not None:
            out |= pt(action.end, "x2", "y2")
        return out
    if isinstance(action, Type):
        return {"type": "type", "text": action.content}
    if isinstance(action, Hotkey):
        return {"type": "hotkey", "keys": list(action.keys)}
    if isinstance(action, PressEnter):
        return {"type": "enter"}
    if isinstance(action, Launch) and action.url is not None:
        return {"type": "goto", "url": action.url}
    if isinstance(action, Wait):
        return {"type": "wait"}
    if isinstance(action, Finished):
        return {"type": "finish", "text": action.content}
    if isinstance(action, CallUser):
        return {"type": "ask", "text": action.content}
    raise ValueError(f"{action.NAME} has no raw web form (phone action)")


def _point(raw: dict[str, Any], vp: Viewport, field: str, a: str = "x", b: str = "y") -> tuple[int, int]:
    x = number(get(raw, a, f"{field}.{a}"), f"{field}.{a}")
    y = number(get(raw, b, f"{field}.{b}"), f"{field}.{b}")
    if not (0 <= x <= vp[0] and 0 <= y <= vp[1]):
        raise Reject(f"{field}.{a}", f"point ({x}, {y}) is outside the {vp[0]:g}x{vp[1]:g} "
                     "viewport", "bad_box")
    return (min(1000, math.floor(x * 1000 / vp[0] + 0.5)), min(1000, math.floor(y * 1000 / vp[1] + 0.5)))


def from_raw(raw: Any, vp: Viewport, field: str) -> Action:
    """A raw action dict (pixels of viewport `vp`) -> unified web action, or Reject."""
    kind = text(get(raw, "type", f"{field}.type"), f"{field}.type")
    try:
        if kind in POINT_TYPES:
            return POINT_TYPES[kind](box=_point(raw, vp, field))
        if kind == "drag":
            return Drag(start=_point(raw, vp, field), end=_point(raw, vp, field, "x2", "y2"))
        if kind == "scroll":
            start = _point(raw, vp, field) if "x" in raw else None
            end = _point(raw, vp, field, "x2", "y2") if "x2" in raw else None
            return Scroll(direction=get(raw, "direction", f"{field}.direction"), start=start, end=end)
        if kind == "type":
            return Type(content=text(get(raw, "text", f"{field}.text"), f"{field}.text", allow_empty=True))
        if kind == "hotkey":
            keys = get(raw, "keys", f"{field}.keys")
            if not isinstance(keys, list) or not all(isinstance(k, str) for k in keys):
                raise Reject(f"{field}.keys", f"expected a list of key names, got {keys!r}")
            return Hotkey(keys=tuple(keys))
        if kind == "enter":
            return PressEnter()
        if kind == "goto":
            return Launch(url=text(get(raw, "url", f"{field}.url"), f"{field}.url"))
        if kind == "wait":
            return Wait()
        if kind == "finish":
            return Finished(content=text(raw.get("text", ""), f"{field}.text", allow_empty=True))
        if kind == "ask":
            return CallUser(content=text(get(raw, "text", f"{field}.text"), f"{field}.text"))
    except ValueError as exc:  # pydantic: a value the action model refuses
        raise Reject(field, f"invalid {kind} action: {str(exc).splitlines()[-1].strip()}") from None
    raise Reject(f"{field}.type", f"unknown action type {kind!r}", "unknown_action")


# ---- episodes --------------------------------------------------------------------------------


def build_episode(stage: ImageStage, lines: list[tuple[int, Any]], base: str,
                  min_reward: float | None) -> list[AnyRecord]:
    first_no, first = lines[0]
    episode_id = text(get(first, "episode_id", f"line {first_no}.episode_id"), "episode_id")
    goal = text(get(first, "goal", f"line {first_no}.goal"), f"line {first_no}.goal")
    task = text(get(first, "task", f"line {first_no}.task"), f"line {first_no}.task")
    steps: list[TrajectoryStep] = []
    reward: float | None = None
    for i, (lineno, obj) in enumerate(lines):
        f = f"line {lineno}"
        if get(obj, "step", f"{f}.step") != i:
            raise Reject(f"{f}.step", f"expected step {i}, got {obj['step']!r}", "bad_record")
        if obj.get("goal") != goal:
            raise Reject(f"{f}.goal", "goal changes within the episode", "bad_record")
        vw, vh = numbers(get(obj, "viewport", f"{f}.viewport"), 2, f"{f}.viewport")
        if vw <= 0 or vh <= 0:
            raise Reject(f"{f}.viewport", f"viewport {vw}x{vh} is empty", "bad_value")
        action = from_raw(get(obj, "action", f"{f}.action"), (vw, vh), f"{f}.action")
        target = None
        if obj.get("dom_box") is not None:
            x1, y1, x2, y2 = numbers(obj["dom_box"], 4, f"{f}.dom_box")
            target = pixel_box(x1, y1, x2, y2, (math.ceil(vw), math.ceil(vh)), f"{f}.dom_box")
        img = stage.from_file(get(obj, "screenshot", f"{f}.screenshot"), f"{f}.screenshot", base=base)
        if abs(img.width / img.height - vw / vh) > 0.02 * vw / vh:
            raise Reject(f"{f}.screenshot", f"a {img.width}x{img.height} screenshot does not match "
                         f"the {vw:g}x{vh:g} viewport's shape", "bad_image")
        steps.append(TrajectoryStep(
            image=img.ref, image_size=img.size, action=render_action(action), target_box=target,
            think=text(obj.get("think", ""), f"{f}.think", allow_empty=True),
            conclusion=text(obj.get("conclusion", ""), f"{f}.conclusion", allow_empty=True),
            meta={"raw_action": str(obj["action"].get("type"))}))
        last = i == len(lines) - 1
        if bool(obj.get("done", False)) != last:
            where = "the last step lacks done=true" if last else "done=true before the last step"
            raise Reject(f"{f}.done", f"{where} (truncated or merged episode)", "bad_record")
        if last and obj.get("reward") is not None:
            reward = number(obj["reward"], f"{f}.reward")
    if min_reward is not None and (reward is None or reward < min_reward):
        raise Reject("reward", f"episode reward {reward} is below min_reward {min_reward}", "failed")
    seed = first.get("seed")
    return [Trajectory(
        id=safe_id(SOURCE, episode_id), episode_id=safe_id(episode_id), platform="web", goal=goal,
        steps=steps, success=reward is not None and reward >= 1.0,
        provenance=Provenance(source=SOURCE, source_id=episode_id,
                              generator=str(first.get("generator") or "miniwob-traces"),
                              seed=seed if isinstance(seed, int) and not isinstance(seed, bool) else None,
                              extra={"task": task}),
        meta={"task": task, "reward": reward},
    )]


def _candidate(rel: str, lines: list[tuple[int, Any]], base: str, min_reward: float | None) -> Candidate:
    eid = lines[0][1].get("episode_id")
    sid = f"episode:{eid}" if isinstance(eid, str) else f"{rel}#{lines[0][0]}"
    return Candidate(sid, rel, lines[0][0],
                     lambda stage: build_episode(stage, lines, base, min_reward))


def _scan(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    min_reward = None
    if options.get("min_reward", "") != "":
        try:
            min_reward = float(options["min_reward"])
        except ValueError:
            raise ValueError(f"option min_reward={options['min_reward']!r} is not a number") from None
    for path in root.files("*.jsonl"):
        rel = relname(root, path)
        base = Path(rel).parent.as_posix()
        base = "" if base == "." else base
        current: list[tuple[int, Any]] = []
        for lineno, obj, rej in json_lines(root, path):
            if rej is not None:
                if current:
                    yield _candidate(rel, current, base, min_reward)
                    current = []
                yield Candidate(f"{rel}#{lineno}", rel, lineno or None,
                                failing(rej.field, rej.reason, rej.code))
                continue
            if not isinstance(obj, dict):
                if current:
                    yield _candidate(rel, current, base, min_reward)
                    current = []
                yield Candidate(f"{rel}#{lineno}", rel, lineno, failing(
                    "<line>", f"expected a JSON object, got {type(obj).__name__}", "bad_record"))
                continue
            eid = obj.get("episode_id")
            if current and (eid is None or eid != current[0][1].get("episode_id")):
                yield _candidate(rel, current, base, min_reward)
                current = []
            current.append((lineno, obj))
        if current:
            yield _candidate(rel, current, base, min_reward)


MINIWOB_TRACES = IMPORTERS.register("miniwob-traces", Importer(
    name="miniwob-traces",
    description="raw browser traces (JSONL steps in pixels + screenshot files) -> web trajectories",
    scan=_scan,
    options={"min_reward": "quarantine episodes whose final reward is below this (default: keep all)"},
), description="raw browser traces (JSONL steps in pixels + screenshot files) -> web trajectories")
