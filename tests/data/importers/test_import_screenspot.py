"""ScreenSpot-v2 / ScreenSpot-Pro importers: mapping, every kind of hostile entry, counts, resume."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from venus_core.data import DatasetReader
from venus_core.data.importers import load_report, run_import
from venus_core.data.validate import validate_dataset
from importer_helpers import h, outside, src  # noqa: F401 - pytest fixtures


def _v2_source(src: Path, outside: Path, h: Any) -> None:
    img = src / "screenspotv2_image"
    h.png(img / "mob_1.png", 200, 100)
    h.png(img / "web_1.png", 400, 300, (9, 9, 9))
    h.bomb(img / "bomb.png")
    h.link(img / "escape.png", outside / "other.png")
    good = {"img_filename": "mob_1.png", "bbox": [20, 10, 20, 10], "instruction": "open the menu",
            "data_type": "icon", "data_source": "android"}
    mobile = [
        good,                                                                    # 0 ok
        {**good, "instruction": "tap the title", "data_type": "text"},           # 1 ok, same image
        {**good, "bbox": [math.nan, 10, 20, 10]},                                # 2 NaN
        {**good, "bbox": [-5, 10, 20, 10]},                                      # 3 negative
        {**good, "bbox": [190, 10, 20, 10]},                                     # 4 past the right edge
        {**good, "img_filename": "missing.png"},                                 # 5 missing image
        {**good, "img_filename": "../outside/secret.png"},                       # 6 traversal
        {**good, "img_filename": str(outside / "secret.png")},                   # 7 absolute
        {**good, "img_filename": "escape.png"},                                  # 8 symlink escape
        {**good, "img_filename": "bomb.png"},                                    # 9 decompression bomb
        {**good, "bbox": [1, 2, 3]},                                             # 10 bbox length
        {**good, "instruction": "  "},                                           # 11 blank
        {"bbox": [1, 2, 3, 4], "img_filename": "mob_1.png"},                     # 12 no instruction
    ]
    h.dump(src / "screenspot_mobile_v2.json", mobile)
    h.dump(src / "screenspot_web_v2.json", [
        {"img_filename": "web_1.png", "bbox": [0, 0, 400, 300], "instruction": "whole page",
         "data_type": "text", "data_source": "shop"},
    ])
    (src / "screenspot_desktop_v2.json").write_text("[{not json", encoding="utf-8")


EXPECTED_V2 = {
    2: ("bbox[0]", "bad_value", "finite"),
    3: ("bbox", "bad_box", "negative"),
    4: ("bbox", "bad_box", "exceeds the 200x100 image"),
    5: ("img_filename", "missing_image", "does not exist"),
    6: ("img_filename", "path", ".."),
    7: ("img_filename", "path", "absolute"),
    8: ("img_filename", "path", "outside the source"),
    9: ("img_filename", "bad_image", "exceeds"),
    10: ("bbox", "bad_value", "list of 4"),
    11: ("instruction", "bad_value", "empty"),
    12: ("instruction", "bad_record", "missing"),
}


def test_v2_maps_and_quarantines_each_bad_entry(src: Path, outside: Path, tmp_path: Path, h: Any) -> None:
    _v2_source(src, outside, h)
    out = tmp_path / "out"
    report = run_import("screenspot-v2", src, out)
    assert (report.read, report.imported, report.quarantined) == (15, 3, 12)
    assert report.imported + report.quarantined == report.read
    assert load_report(out) == report
    q = h.by_index(h.quarantine(out))
    assert len(q) == 12
    for i, (field, code, words) in EXPECTED_V2.items():
        line = q[("screenspot_mobile_v2.json", i)]
        assert (line["field"], line["code"]) == (field, code), line
        assert words in line["reason"], line
    assert q[("screenspot_mobile_v2.json", 9)]["reason"].startswith("'bomb.png': ")
    broken = q[("screenspot_desktop_v2.json", None)]
    assert broken["code"] == "bad_record" and "not valid JSON" in broken["reason"]
    assert report.quarantined_by_code == {"bad_box": 2, "bad_image": 1, "bad_record": 2, "bad_value": 3,
                                          "missing_image": 1, "path": 3}
    records = {r.id: r for r in DatasetReader(out)}
    first = records["screenspot-v2:screenspot_mobile_v2:0"]
    assert first.box == (100, 100, 200, 200)  # [20,10,+20,+10] px on 200x100
    assert first.image_size == (200, 100) and first.platform == "mobile" and first.ui_type == "icon"
    assert first.provenance.extra["data_source"] == "android"
    assert records["screenspot-v2:screenspot_mobile_v2:1"].image == first.image  # deduped
    page = records["screenspot-v2:screenspot_web_v2:0"]
    assert page.platform == "web" and page.box == (0, 0, 1000, 1000)
    assert report.images == 2
    assert validate_dataset(out).ok


def test_pro_box_img_size_and_platform(src: Path, tmp_path: Path, h: Any) -> None:
    h.png(src / "images" / "pycharm_macos" / "a.png", 1000, 500)
    base = {"img_filename": "pycharm_macos/a.png", "bbox": [100, 50, 300, 150], "img_size": [1000, 500],
            "instruction": "run the tests", "instruction_cn": "运行测试", "id": "pycharm_macos_0",
            "application": "pycharm", "platform": "macos", "group": "Dev", "ui_type": "icon"}
    h.dump(src / "annotations" / "pycharm_macos.json", [
        base,
        {**base, "img_size": [1920, 1080]},          # 1 size mismatch
        {**base, "bbox": [300, 50, 100, 150]},        # 2 inverted
        {**base, "bbox": [100, 50, 1001, 150]},       # 3 outside
    ])
    out = tmp_path / "pro"
    report = run_import("screenspot-pro", src, out)
    assert (report.read, report.imported, report.quarantined) == (4, 1, 3)
    (rec,) = list(DatasetReader(out))
    assert rec.box == (100, 100, 300, 300) and rec.platform == "desktop" and rec.ui_type == "icon"
    assert rec.provenance.extra["application"] == "pycharm"
    assert rec.provenance.extra["instruction_cn"] == "运行测试"
    q = h.by_index(h.quarantine(out))
    assert q[("annotations/pycharm_macos.json", 1)]["field"] == "img_size"
    assert "inverted" in q[("annotations/pycharm_macos.json", 2)]["reason"]
    assert "exceeds" in q[("annotations/pycharm_macos.json", 3)]["reason"]


def test_rerun_is_identical_and_resume_continues(src: Path, outside: Path, tmp_path: Path, h: Any) -> None:
    _v2_source(src, outside, h)
    a, b = tmp_path / "a", tmp_path / "b"
    run_import("screenspot-v2", src, a)
    run_import("screenspot-v2", src, b)
    for name in ("manifest.json", "shards/part-00000.jsonl", "quarantine.jsonl", "import_checkpoint.txt"):
        assert (a / name).read_bytes() == (b / name).read_bytes(), name
    with pytest.raises(FileExistsError, match="--resume"):
        run_import("screenspot-v2", src, a)

    h.png(src / "screenspotv2_image" / "new.png", 50, 50, (7, 7, 7))
    h.dump(src / "screenspot_web2_v2.json", [
        {"img_filename": "new.png", "bbox": [0, 0, 25, 25], "instruction": "new one"},
        {"img_filename": "new.png", "bbox": [0, 0, 99, 25], "instruction": "too wide"},
    ])
    report = run_import("screenspot-v2", src, a, resume=True)
    assert report.resumed_from == 15
    assert (report.read, report.imported, report.quarantined) == (17, 4, 13)
    assert report.records == 4 and report.images == 3
    assert len(h.quarantine(a)) == 13
    assert len((a / "import_checkpoint.txt").read_text().splitlines()) == 17
    assert validate_dataset(a).ok
    again = run_import("screenspot-v2", src, a, resume=True)  # nothing new: same counts
    assert (again.read, again.imported, again.quarantined, again.records) == (17, 4, 13, 4)


def test_refuses_bad_setups(src: Path, tmp_path: Path, h: Any) -> None:
    h.dump(src / "screenspot_mobile_v2.json", [])
    with pytest.raises(ValueError, match="unknown option"):
        run_import("screenspot-v2", src, tmp_path / "o", options={"nope": "1"})
    with pytest.raises(ValueError, match="inside the source"):
        run_import("screenspot-v2", src, src / "out")
    with pytest.raises(NotADirectoryError):
        run_import("screenspot-v2", tmp_path / "absent", tmp_path / "o")
    report = run_import("screenspot-v2", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (0, 0, 0)
    other = tmp_path / "o"
    with pytest.raises(ValueError, match="cannot resume"):
        run_import("screenspot-pro", src, other, resume=True)
    assert json.loads((other / "import_report.json").read_text())["format"] == "screenspot-v2"


def test_platform_from_option(src: Path, tmp_path: Path, h: Any) -> None:
    h.png(src / "images" / "x.png", 10, 10)
    h.dump(src / "grounding.json", [{"img_filename": "x.png", "bbox": [1, 1, 2, 2], "instruction": "x"}])
    report = run_import("screenspot-v2", src, tmp_path / "o1")
    assert report.quarantined == 1
    assert "platform" in h.quarantine(tmp_path / "o1")[0]["reason"]
    report = run_import("screenspot-v2", src, tmp_path / "o2", options={"platform": "desktop"})
    assert report.imported == 1


def test_oversize_header_below_pil_limit_is_refused(src: Path, tmp_path: Path, h: Any) -> None:
    h.bomb(src / "images" / "big.png", 9000, 9000)  # 81 MP: over our limit, under PIL's own
    h.dump(src / "screenspot_web_v2.json", [{"img_filename": "big.png", "bbox": [1, 1, 2, 2], "instruction": "x"}])
    report = run_import("screenspot-v2", src, tmp_path / "o")
    assert (report.read, report.quarantined) == (1, 1)
    (q,) = h.quarantine(tmp_path / "o")
    assert q["code"] == "bad_image" and "9000x9000 PNG image exceeds 67108864 pixels" in q["reason"]
