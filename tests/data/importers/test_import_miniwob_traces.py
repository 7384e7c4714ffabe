"""miniwob-traces importer: raw browser steps (pixels) -> web trajectories; bad episodes quarantined.

Fixtures are written in the documented raw format (the one `venus data collect --raw` writes); the
end-to-end round trip through a real browser is in tests/envs/test_env_miniwob.py.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from venus_core.actions import (
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
)
from venus_core.data import DatasetReader
from venus_core.data.importers import run_import
from venus_core.data.importers.base import Reject
from venus_core.data.importers.miniwob_traces import from_raw, to_raw
from venus_core.data.validate import validate_dataset
from importer_helpers import h, outside, src  # noqa: F401 - pytest fixtures

VP = (160, 210)


def _px(p: tuple[int, int]) -> tuple[float, float]:
    return (p[0] * VP[0] / 1000, p[1] * VP[1] / 1000)


def _steps(src: Path, h: Any, eid: str, actions: list[dict[str, Any]], reward: float | None = 1.0,
           shots: str = "shots", **over: Any) -> list[dict[str, Any]]:
    out = []
    for i, action in enumerate(actions):
        shot = f"{shots}/{eid}-{i}.png"
        h.png(src / shot, 320, 420, (i * 30, 5, 9))
        last = i == len(actions) - 1
        out.append({"episode_id": eid, "task": "click-button", "seed": 7, "goal": f"Goal of {eid}.",
                    "step": i, "screenshot": shot, "viewport": list(VP), "action": action,
                    "dom_box": [40.0, 100.0, 80.0, 121.0], "think": f"think {i}",
                    "conclusion": f"done {i}", "done": last, "reward": reward if last else None,
                    **over})
    return out


@pytest.mark.parametrize("action", [
    Click(box=(500, 250)), DoubleClick(box=(0, 1000)), Hover(box=(999, 3)), LongPress(box=(10, 20)),
    Drag(start=(100, 200), end=(900, 800)), Scroll(direction="up"),
    Scroll(direction="left", start=(500, 500)), Scroll(direction="down", start=(1, 2), end=(3, 4)),
    Type(content="héllo \"x\""), Hotkey(keys=("ctrl", "a")), PressEnter(), Launch(url="https://e.x/"),
    Wait(), Finished(content="42"), CallUser(content="which one?"),
], ids=lambda a: a.NAME)
def test_raw_round_trip(action: Any) -> None:
    raw = to_raw(action, _px)
    assert from_raw(raw, VP, "action") == action


def test_phone_actions_have_no_raw_form() -> None:
    from venus_core.actions import PressBack

    with pytest.raises(ValueError, match="phone action"):
        to_raw(PressBack(), _px)
    with pytest.raises(ValueError, match="phone action"):
        to_raw(Launch(app="Settings"), _px)


def test_imports_episodes_in_pixels(src: Path, tmp_path: Path, h: Any) -> None:
    ep1 = _steps(src, h, "click-button:seed=7", [
        {"type": "click", "x": 60.0, "y": 110.5}, {"type": "type", "text": "Ann"},
        {"type": "scroll", "direction": "up", "x": 80, "y": 105}, {"type": "hotkey", "keys": ["ctrl", "a"]},
        {"type": "wait"}, {"type": "enter"}])
    ep2 = _steps(src, h, "enter-text:seed=1", [{"type": "click", "x": 160, "y": 0}], reward=-1.0)
    h.lines(src / "traces.jsonl", ep1 + ep2)
    h.lines(src / "more" / "b.jsonl", _steps(src / "more", h, "other", [{"type": "finish"}], reward=0.4))
    report = run_import("miniwob-traces", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (3, 3, 0)
    trajs = {t.id: t for t in DatasetReader(tmp_path / "o")}
    t1 = trajs["miniwob:click-button:seed=7"]
    assert t1.platform == "web" and t1.success and t1.goal == "Goal of click-button:seed=7."
    assert [s.action for s in t1.steps] == [
        "Click(box=(375,526))", "Type(content='Ann')", "Scroll(start=(500,500),direction='up')",
        "Hotkey(keys=['ctrl','a'])", "Wait()", "PressEnter()"]
    assert t1.steps[0].target_box == (250, 476, 500, 576)
    assert t1.steps[0].image_size == (320, 420) and t1.steps[1].think == "think 1"
    assert t1.provenance.seed == 7 and t1.meta == {"task": "click-button", "reward": 1.0}
    t2 = trajs["miniwob:enter-text:seed=1"]
    assert not t2.success and t2.steps[0].action == "Click(box=(1000,0))"
    assert not trajs["miniwob:other"].success  # partial credit is not success
    assert validate_dataset(tmp_path / "o").ok


def test_min_reward_option_keeps_successes(src: Path, tmp_path: Path, h: Any) -> None:
    rows = (_steps(src, h, "a", [{"type": "click", "x": 1, "y": 1}], reward=1.0)
            + _steps(src, h, "b", [{"type": "click", "x": 1, "y": 1}], reward=-1.0)
            + _steps(src, h, "c", [{"type": "click", "x": 1, "y": 1}], reward=None))
    h.lines(src / "t.jsonl", rows)
    report = run_import("miniwob-traces", src, tmp_path / "o", options={"min_reward": "1"})
    assert (report.read, report.imported, report.quarantined) == (3, 1, 2)
    assert report.quarantined_by_code == {"failed": 2}
    with pytest.raises(ValueError, match="min_reward"):
        run_import("miniwob-traces", src, tmp_path / "o2", options={"min_reward": "high"})


def test_bad_episodes_are_quarantined(src: Path, outside: Path, tmp_path: Path, h: Any) -> None:
    click = {"type": "click", "x": 10, "y": 10}
    rows: list[Any] = []
    expect: dict[int, tuple[str, str]] = {}  # first line of the episode -> (field, code)

    def add(eid: str, steps: list[dict[str, Any]], field: str, code: str) -> None:
        expect[len(rows) + 1] = (field, code)
        rows.extend(steps)

    add("e1", _steps(src, h, "e1", [{"type": "swipe", "x": 1, "y": 1}]), "line {n}.action.type", "unknown_action")
    add("e2", _steps(src, h, "e2", [{"type": "click", "x": 161, "y": 5}]), "line {n}.action.x", "bad_box")
    add("e3", _steps(src, h, "e3", [{"type": "click", "x": float("nan"), "y": 5}]), "line {n}.action.x", "bad_value")
    e4 = _steps(src, h, "e4", [click, click])
    e4[1]["step"] = 5
    add("e4", e4, "line {m}.step", "bad_record")
    e5 = _steps(src, h, "e5", [click])
    e5[0]["done"] = False
    add("e5", e5, "line {n}.done", "bad_record")
    e6 = _steps(src, h, "e6", [click])
    e6[0]["screenshot"] = "../outside/secret.png"
    add("e6", e6, "line {n}.screenshot", "path")
    e7 = _steps(src, h, "e7", [click])
    e7[0]["screenshot"] = "shots/missing.png"
    add("e7", e7, "line {n}.screenshot", "missing_image")
    e8 = _steps(src, h, "e8", [click])
    e8[0]["dom_box"] = [50, 50, 40, 60]
    add("e8", e8, "line {n}.dom_box", "bad_box")
    e9 = _steps(src, h, "e9", [click])
    e9[0]["viewport"] = [210, 160]  # the screenshot is portrait
    add("e9", e9, "line {n}.screenshot", "bad_image")
    add("e10", _steps(src, h, "e10", [{"type": "hotkey", "keys": ["a", "a"]}]), "line {n}.action", "bad_value")
    expect[len(rows) + 1] = ("<line>", "bad_record")
    rows.append("{not json")
    expect[len(rows) + 1] = ("<line>", "bad_record")
    rows.append([1, 2])
    h.lines(src / "t.jsonl", rows)
    report = run_import("miniwob-traces", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (12, 0, 12)
    q = h.by_index(h.quarantine(tmp_path / "o"))
    assert len(q) == 12
    for first, (field, code) in expect.items():
        line = q[("t.jsonl", first)]
        assert (line["field"], line["code"]) == (field.format(n=first, m=first + 1), code), line


def test_from_raw_rejects_non_objects() -> None:
    with pytest.raises(Reject, match="expected an object"):
        from_raw("click", VP, "action")
