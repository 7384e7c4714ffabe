"""Multimodal-Mind2Web importer: rows grouped into tasks, element boxes, ops, bad rows."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from venus_core.data import DatasetReader
from venus_core.data.importers import run_import
from venus_core.data.validate import validate_dataset
from importer_helpers import h, outside, src  # noqa: F401 - pytest fixtures


def _row(aid: str, idx: int, op: str, value: str, rect: str | None, shot: Any, **over: Any) -> dict[str, Any]:
    cands = [] if rect is None else [json.dumps({
        "tag": "button", "backend_node_id": "123",
        "attributes": json.dumps({"bounding_box_rect": rect, "class": "btn"}),
    })]
    row = {"action_uid": f"{aid}-{idx}", "annotation_id": aid, "confirmed_task": f"task {aid}",
           "website": "example", "domain": "Travel", "subdomain": "Airlines",
           "operation": json.dumps({"original_op": op, "value": value, "op": op}),
           "pos_candidates": cands, "neg_candidates": [], "screenshot": shot,
           "target_action_index": str(idx), "action_reprs": [], "raw_html": "<html/>", "cleaned_html": "<html/>"}
    row.update(over)
    return row


def test_rows_become_web_trajectories(src: Path, tmp_path: Path, h: Any) -> None:
    h.png(src / "shots" / "a0.png", 1280, 2000)
    embedded = {"bytes": h.b64(640, 400), "path": None}
    rows = [
        _row("t1", 1, "TYPE", "New York", "0,0,1280,100", "shots/a0.png"),  # rows out of step order
        _row("t1", 0, "CLICK", "", "100,200,50,40", "shots/a0.png"),
        _row("t1", 2, "SELECT", "2 adults", "320,200,64,100", embedded),
        _row("t2", 0, "CLICK", "", "0,0,10,10", "shots/a0.png"),
    ]
    h.lines(src / "train.jsonl", rows)
    report = run_import("mind2web", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (2, 2, 0)
    trajs = {t.id: t for t in DatasetReader(tmp_path / "o")}
    t1 = trajs["mind2web:t1"]
    assert t1.platform == "web" and t1.goal == "task t1" and t1.success
    assert [s.action for s in t1.steps] == ["Click(box=(98,110))", "Type(content='New York')",
                                            "Type(content='2 adults')"]
    assert t1.steps[0].target_box == (78, 100, 117, 120)
    assert t1.steps[2].image_size == (640, 400) and t1.steps[2].target_box == (500, 500, 600, 750)
    assert [s.meta["op"] for s in t1.steps] == ["CLICK", "TYPE", "SELECT"]
    assert t1.meta == {"website": "example", "domain": "Travel", "subdomain": "Airlines"}
    assert validate_dataset(tmp_path / "o").ok


def test_bad_rows_are_quarantined(src: Path, outside: Path, tmp_path: Path, h: Any) -> None:
    h.png(src / "s.png", 200, 100)
    rows = [
        _row("n1", 0, "CLICK", "", None, "s.png"),                       # line 1: no element box
        _row("n2", 0, "HOVER", "", "1,1,5,5", "s.png"),                  # line 2: unknown op
        _row("n3", 0, "CLICK", "", "150,50,100,10", "s.png"),            # line 3: box past the edge
        _row("n4", 0, "CLICK", "", "1,1,NaN,5", "s.png"),                # line 4: NaN width
        _row("n5", 0, "CLICK", "", "1,1,5,5", "/etc/passwd"),            # line 5: absolute path
        "not json",                                                      # line 6
        _row("", 0, "CLICK", "", "1,1,5,5", "s.png"),                    # line 7: no task id
        _row("ok", 0, "CLICK", "", "1,1,5,5", "s.png"),                  # line 8: fine
        _row("n9", 0, "CLICK", "", "1,1,5,5", {"bytes": "!!notbase64"}), # line 9: bad embedded image
        _row("ok", 1, "CLICK", "", "1,1,5,5", "s.png"),                  # line 10: "ok" again, split
    ]
    h.lines(src / "test.jsonl", rows)
    report = run_import("mind2web", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (10, 1, 9)
    q = h.by_index(h.quarantine(tmp_path / "o"))
    expect = {1: "bad_box", 2: "unknown_action", 3: "bad_box", 4: "bad_value", 5: "path",
              6: "bad_record", 7: "bad_record", 9: "bad_image", 10: "duplicate"}
    assert {i: q[("test.jsonl", i)]["code"] for i in expect} == expect
    assert q[("test.jsonl", 1)]["field"] == "line 1.pos_candidates"
    assert q[("test.jsonl", 4)]["field"] == "line 4.pos_candidates[0].attributes.bounding_box_rect"



def test_parquet_release_rows(src: Path, tmp_path: Path, h: Any) -> None:
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    shot = {"bytes": base64.b64decode(h.b64(200, 100)), "path": None}
    rows = [_row("p1", 0, "CLICK", "", "20,10,20,10", shot), _row("p1", 1, "TYPE", "hi", "0,0,10,10", shot),
            _row("p2", 0, "CLICK", "", "0,0,300,10", shot)]  # p2: box wider than the page
    for r in rows:
        r["action_reprs"] = ["[button] x -> CLICK"]
    pq.write_table(pa.Table.from_pylist(rows), src / "test_domain-00000.parquet")
    (src / "broken.parquet").write_bytes(b"PAR1 not really")
    report = run_import("mind2web", src, tmp_path / "o")
    assert (report.read, report.imported, report.quarantined) == (3, 1, 2)
    (traj,) = list(DatasetReader(tmp_path / "o"))
    assert [s.action for s in traj.steps] == ["Click(box=(150,150))", "Type(content='hi')"]
    q = h.by_index(h.quarantine(tmp_path / "o"))
    assert q[("test_domain-00000.parquet", 3)]["field"] == "row 3.pos_candidates"
    assert q[("broken.parquet", None)]["code"] == "bad_record"
