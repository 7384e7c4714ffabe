"""AndroidControl importer: action mapping (incl. scroll inversion), variants, bad episodes."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from venus_core.actions import Scroll, parse_action
from venus_core.data import DatasetReader
from venus_core.data.importers import run_import
from venus_core.data.importers.androidcontrol import CONTENT_TO_SWIPE
from venus_core.data.validate import validate_dataset
from importer_helpers import h, outside, src  # noqa: F401 - pytest fixtures

W, H = 100, 200


def _episode(src: Path, h: Any, eid: int, actions: list[dict[str, Any]], **over: Any) -> dict[str, Any]:
    shots = []
    for i in range(len(actions) + 1):
        rel = f"shots/{eid}_{i}.png"
        h.png(src / rel, W, H, (eid % 250, i, 0))
        shots.append(rel)
    ep = {"episode_id": eid, "goal": f"goal {eid}", "screenshots": shots,
          "screenshot_widths": [W] * len(shots), "screenshot_heights": [H] * len(shots),
          "accessibility_trees": [None] * len(shots),
          "actions": [json.dumps(a) for a in actions],  # JSON strings, as in the TFRecord
          "step_instructions": [f"step {i}" for i in range(len(actions))]}
    ep.update(over)
    return ep


ALL_ACTIONS = [
    {"action_type": "open_app", "app_name": "Clock"},
    {"action_type": "click", "x": 50, "y": 100},
    {"action_type": "long_press", "x": 0, "y": 200},
    {"action_type": "scroll", "direction": "down"},
    {"action_type": "input_text", "text": "it's 7"},
    {"action_type": "wait"},
    {"action_type": "navigate_back"},
    {"action_type": "navigate_home"},
]
EXPECTED = [
    "Launch(app='Clock')",
    "Click(box=(500,500))",
    "LongPress(box=(0,1000))",
    "Scroll(start=(500,500),end=(500,0),direction='up')",
    "Type(content='it\\'s 7')",
    "Wait()",
    "PressBack()",
    "PressHome()",
]


def test_maps_every_action_and_variants(src: Path, tmp_path: Path, h: Any) -> None:
    h.dump(src / "ep1.json", _episode(src, h, 1, ALL_ACTIONS))
    low = run_import("androidcontrol", src, tmp_path / "low")
    assert (low.read, low.imported, low.quarantined) == (1, 1, 0)
    (traj,) = list(DatasetReader(tmp_path / "low"))
    assert [s.action for s in traj.steps] == EXPECTED
    assert [s.instruction for s in traj.steps] == [f"step {i}" for i in range(8)]
    assert traj.goal == "goal 1" and traj.platform == "mobile" and traj.success
    assert traj.steps[0].image_size == (W, H)
    assert validate_dataset(tmp_path / "low").ok

    run_import("androidcontrol", src, tmp_path / "high", options={"level": "high", "finish": "true"})
    (traj,) = list(DatasetReader(tmp_path / "high"))
    assert all(s.instruction is None for s in traj.steps)
    assert len(traj.steps) == 9 and traj.steps[-1].action == "Finished(content='')"
    assert traj.meta["level"] == "high" and traj.meta["finish_step_added"] is True


def test_scroll_directions_become_finger_motion() -> None:
    for content, (finger, start, end) in CONTENT_TO_SWIPE.items():
        action = Scroll(start=start, end=end, direction=finger)  # type: ignore[arg-type]
        parse_action(f"Scroll(start={start},end={end},direction='{finger}')".replace(" ", ""), "mobile")
        dx, dy = end[0] - start[0], end[1] - start[1]
        moved = "up" if dy < 0 else "down" if dy > 0 else "left" if dx < 0 else "right"
        assert moved == action.direction
        opposite = {"up": "down", "down": "up", "left": "right", "right": "left"}[content]
        assert finger == opposite  # content "down" (see further down) = finger swipes up


def test_base64_screenshots_and_jsonl(src: Path, tmp_path: Path, h: Any) -> None:
    ep = _episode(src, h, 2, [{"action_type": "click", "x": 10, "y": 20}])
    ep["screenshots"] = [h.b64(W, H), "data:image/png;base64," + h.b64(W, H, (5, 5, 5))]
    h.lines(src / "episodes.jsonl", [ep, "{broken json"])
    report = run_import("androidcontrol", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (2, 1, 1)
    (q,) = h.quarantine(tmp_path / "o")
    assert (q["source_file"], q["index"], q["code"]) == ("episodes.jsonl", 2, "bad_record")
    (traj,) = list(DatasetReader(tmp_path / "o"))
    assert traj.steps[0].action == "Click(box=(100,100))"


def test_bad_episodes_are_quarantined(src: Path, outside: Path, tmp_path: Path, h: Any) -> None:
    click = {"action_type": "click", "x": 10, "y": 10}
    cases = {
        "e10.json": (_episode(src, h, 10, [{"action_type": "type", "x": 1, "y": 1, "text": "hi"}]),
                     "actions[0].action_type", "unknown_action"),
        "e11.json": (_episode(src, h, 11, [{"action_type": "teleport"}]), "actions[0].action_type", "unknown_action"),
        "e12.json": (_episode(src, h, 12, [{"action_type": "click", "x": math.nan, "y": 1}]), "actions[0].x", "bad_value"),
        "e13.json": (_episode(src, h, 13, [{"action_type": "click", "x": 101, "y": 1}]), "actions[0]", "bad_box"),
        "e14.json": (_episode(src, h, 14, [click], step_instructions=[]), "step_instructions", "bad_record"),
        "e15.json": (_episode(src, h, 15, [click], screenshot_widths=[99, 99]), "screenshot_widths[0]", "bad_image"),
        "e16.json": (_episode(src, h, 16, [click], screenshots=["../outside/secret.png", "x.png"]),
                     "screenshots[0]", "path"),
        "e17.json": (_episode(src, h, 17, [{"action_type": "scroll", "direction": "sideways"}]),
                     "actions[0].direction", "bad_value"),
        "e18.json": (_episode(src, h, 18, [click], goal=""), "goal", "bad_value"),
    }
    for name, (ep, _, _) in cases.items():
        h.dump(src / name, ep)
    h.dump(src / "e19.json", _episode(src, h, 19, [click]))  # the one good episode
    report = run_import("androidcontrol", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (10, 1, 9)
    q = h.by_index(h.quarantine(tmp_path / "o"))
    for name, (_, field, code) in cases.items():
        line = q[(name, None)]
        assert (line["field"], line["code"]) == (field, code), line
    assert q[("e10.json", None)]["reason"].startswith("unknown or unsupported action type 'type'")
    # screenshots of rejected episodes (decoded before the rejection) are not stored
    assert report.images == 1
    check = validate_dataset(tmp_path / "o")
    assert check.ok and check.unreferenced_images == 0


def test_bad_option_values(src: Path, tmp_path: Path, h: Any) -> None:
    h.dump(src / "e.json", _episode(src, h, 1, [{"action_type": "wait"}]))
    with pytest.raises(ValueError, match="level must be low or high"):
        run_import("androidcontrol", src, tmp_path / "o", options={"level": "medium"})
    with pytest.raises(ValueError, match="finish must be true or false"):
        run_import("androidcontrol", src, tmp_path / "o", options={"finish": "yes"})
    assert not (tmp_path / "o").exists() and [p.name for p in tmp_path.iterdir()] == ["src"]
