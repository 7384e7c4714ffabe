"""GUI-Odyssey importer: action mapping (finger-direction scroll kept), success, bad episodes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from venus_core.data import DatasetReader
from venus_core.data.importers import run_import
from venus_core.data.validate import validate_dataset
from importer_helpers import h, outside, src  # noqa: F401 - pytest fixtures


def _episode(src: Path, h: Any, eid: str, actions: list[tuple[str, Any]], **over: Any) -> dict[str, Any]:
    out = []
    for i, (action, info) in enumerate(actions):
        shot = f"{eid}_{i}.png"
        h.png(src / "screenshots" / shot, 108, 240, (i * 20, 3, 4))
        out.append({"step": i, "screenshot": shot, "action": action, "info": info, "ps": ""})
    ep = {"episode_id": eid,
          "device_info": {"product": "sdk", "release_version": "14", "sdk_version": "34", "h": 240,
                          "w": 108, "device_name": "Pixel 8 Pro"},
          "task_info": {"category": "Multi_Apps", "app": ["Chrome", "Tasks"], "meta_task": "Find {} and note it.",
                        "task": "Find X and note it.", "instruction": "Use Chrome to find X, then note it in Tasks."},
          "step_length": len(out), "steps": out}
    ep.update(over)
    return ep


def test_maps_actions_and_keeps_finger_scroll(src: Path, tmp_path: Path, h: Any) -> None:
    steps = [("CLICK", [[500, 250]]), ("SCROLL", [[500, 800], [510, 200]]), ("SCROLL", [[100, 500], [900, 520]]),
             ("TEXT", "new york"), ("LONG_PRESS", [[1, 2]]), ("CLICK", "KEY_BACK"), ("CLICK", "KEY_HOME"),
             ("CLICK", "KEY_APPSELECT"), ("COMPLETE", "")]
    h.dump(src / "annotations" / "ep1.json", _episode(src, h, "ep1", steps))
    h.dump(src / "annotations" / "ep2.json", _episode(src, h, "ep2", [("CLICK", [[3, 4]]), ("INCOMPLETE", "")]))
    report = run_import("guiodyssey", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (2, 2, 0)
    trajs = {t.id: t for t in DatasetReader(tmp_path / "o")}
    t1 = trajs["guiodyssey:ep1"]
    assert [s.action for s in t1.steps] == [
        "Click(box=(500,250))",
        "Scroll(start=(500,800),end=(510,200),direction='up')",  # finger moved up: kept as is
        "Scroll(start=(100,500),end=(900,520),direction='right')",
        "Type(content='new york')",
        "LongPress(box=(1,2))",
        "PressBack()", "PressHome()", "PressRecent()",
        "Finished(content='')",
    ]
    assert t1.success and t1.goal.startswith("Use Chrome")
    assert t1.meta["apps"] == ["Chrome", "Tasks"] and t1.meta["device_name"] == "Pixel 8 Pro"
    assert t1.steps[0].meta["source_action"] == "CLICK" and t1.steps[0].image_size == (108, 240)
    t2 = trajs["guiodyssey:ep2"]
    assert not t2.success and t2.steps[-1].action == "CallUser(content='I cannot complete this task.')"
    assert validate_dataset(tmp_path / "o").ok


def test_bad_episodes_are_quarantined(src: Path, outside: Path, tmp_path: Path, h: Any) -> None:
    ann = src / "annotations"
    cases = {
        "b1.json": (_episode(src, h, "b1", [("SWIPE", [[1, 1], [2, 2]])]), "steps[0].action", "unknown_action"),
        "b2.json": (_episode(src, h, "b2", [("CLICK", [[500, 1200]])]), "steps[0].info", "bad_box"),
        "b3.json": (_episode(src, h, "b3", [("SCROLL", [[5, 5], [5, 5]])]), "steps[0].info", "bad_value"),
        "b4.json": (_episode(src, h, "b4", [("CLICK", "KEY_POWER")]), "steps[0].info", "unknown_action"),
        "b5.json": (_episode(src, h, "b5", [("CLICK", [[float("nan"), 1]])]), "steps[0].info[0]", "bad_value"),
        "b6.json": (_episode(src, h, "b6", [("COMPLETE", "")], steps=[]), "steps", "bad_record"),
    }
    for name, (ep, _, _) in cases.items():
        h.dump(ann / name, ep)
    ep = _episode(src, h, "b7", [("COMPLETE", "")])
    ep["steps"][0]["screenshot"] = "../../outside/secret.png"
    h.dump(ann / "b7.json", ep)
    h.link(ann / "b8.json", outside / "b8.json")  # annotation file itself escapes the root
    (ann / "b9.json").write_text("{", encoding="utf-8")
    report = run_import("guiodyssey", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (9, 0, 9)
    q = h.by_index(h.quarantine(tmp_path / "o"))
    for name, (_, field, code) in cases.items():
        line = q[(f"annotations/{name}", None)]
        assert (line["field"], line["code"]) == (field, code), line
    assert q[("annotations/b7.json", None)]["code"] == "path"
    assert q[("annotations/b8.json", None)]["code"] == "path"
    assert "outside the source" in q[("annotations/b8.json", None)]["reason"]
    assert q[("annotations/b9.json", None)]["code"] == "bad_record"
