"""Evaluation on what the importers write: ScreenSpot-v2 (categories come through, the dataset is
recognised as the benchmark, the report shows the published numbers for it) and GUI-Odyssey
(offline navigation scored with the distance / F1 / direction rules)."""

from __future__ import annotations

import json
from pathlib import Path

from PIL import Image

from venus_core.data.importers import run_import
from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.report import render_report

from eval_fixtures import Scripted


def _v2_source(root: Path) -> None:
    (root / "screenspotv2_image").mkdir(parents=True)
    Image.new("RGB", (400, 800), (240, 240, 240)).save(root / "screenspotv2_image" / "a.png")
    entries = [  # bbox = [x, y, w, h] in pixels of the 400x800 screenshot
        {"img_filename": "a.png", "bbox": [0, 0, 200, 400], "instruction": "top left", "data_type": "text",
         "data_source": "ios"},
        {"img_filename": "a.png", "bbox": [200, 400, 200, 400], "instruction": "bottom right", "data_type": "icon",
         "data_source": "android"},
        {"img_filename": "a.png", "bbox": [200, 0, 200, 400], "instruction": "top right", "data_type": "icon",
         "data_source": "android"},
    ]
    (root / "screenspot_mobile_v2.json").write_text(json.dumps(entries), encoding="utf-8")


def test_imported_screenspot_v2(tmp_path: Path) -> None:
    _v2_source(tmp_path / "src")
    report = run_import("screenspot-v2", tmp_path / "src", tmp_path / "ssv2")
    assert report.imported == 3
    # answers in the 0–1000 frame: inside, inside, outside (the left half)
    by_instruction = {"top left": "[250,250]", "bottom right": "[750,750]", "top right": "[250,250]"}

    class ByInstruction(Scripted):
        def predict(self, queries, max_new_tokens):  # type: ignore[no-untyped-def]
            return [next(a for k, a in by_instruction.items() if f"\n{k}." in q.prompt) for q in queries]

    res = evaluate_grounding(tmp_path / "ssv2", ByInstruction({}))
    s = res.summary
    assert res.benchmark == "screenspot-v2" and (s["overall"]["k"], s["overall"]["n"]) == (2, 3)
    assert {k: (v["k"], v["n"]) for k, v in s["by_ui_type"].items()} == {"icon": (1, 2), "text": (1, 1)}
    assert {k: (v["k"], v["n"]) for k, v in s["by_data_source"].items()} == {"android": (1, 2), "ios": (1, 1)}
    assert list(s["by_platform"]) == ["mobile"]
    html = render_report([res], viewer_limit=3)
    assert 'id="published"' in html and "UI-Venus-1.5-8B (published)" in html and "95.9" in html


def test_imported_gui_odyssey_offline_navigation(tmp_path: Path) -> None:
    from venus_core.eval.navigation import evaluate_nav_offline

    from eval_fixtures import nav

    src = tmp_path / "odyssey"
    (src / "screenshots").mkdir(parents=True)
    (src / "annotations").mkdir()
    actions = [("CLICK", [[500, 250]]), ("TEXT", "new york"), ("SCROLL", [[500, 800], [510, 200]]), ("COMPLETE", "")]
    steps = []
    for i, (action, info) in enumerate(actions):
        Image.new("RGB", (108, 240), (i * 30, 0, 0)).save(src / "screenshots" / f"s{i}.png")
        steps.append({"step": i, "screenshot": f"s{i}.png", "action": action, "info": info, "ps": ""})
    episode = {"episode_id": "ep1", "device_info": {"h": 240, "w": 108, "device_name": "Pixel"},
               "task_info": {"category": "Multi_Apps", "app": ["Chrome"], "meta_task": "m", "task": "t",
                             "instruction": "Search new york in Chrome."},
               "step_length": len(steps), "steps": steps}
    (src / "annotations" / "ep1.json").write_text(json.dumps(episode), encoding="utf-8")
    assert run_import("guiodyssey", src, tmp_path / "gui").imported == 1
    answers = {"guiodyssey:ep1:0": nav("Click(box=(600,300))"),  # 112 from the reference: within 14 % of the diagonal
               "guiodyssey:ep1:1": nav("Type(content='new york city')"),  # token F1 0.8
               "guiodyssey:ep1:2": nav("Scroll(start=(500,200),end=(500,800),direction='down')"),  # wrong direction
               "guiodyssey:ep1:3": nav("Finished(content='')")}
    res = evaluate_nav_offline(tmp_path / "gui", Scripted(answers))
    s = res.summary
    assert (s["type_accuracy"]["k"], s["step_success"]["k"], s["step_success"]["n"]) == (4, 3, 4)
    assert s["by_type"]["Scroll"]["step_success"]["k"] == 0 and (s["episode_success"]["k"], s["episode_success"]["n"]) == (0, 1)
    assert res.sources == {"guiodyssey": 4} and res.benchmark is None
