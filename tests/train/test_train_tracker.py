from __future__ import annotations

import json
from pathlib import Path

from venus_core.train.tracker import JsonlTracker, MemoryTracker, NullTracker, Tracker


def test_trackers_satisfy_the_protocol() -> None:
    for t in (NullTracker(), MemoryTracker(), JsonlTracker("/tmp/x.jsonl")):
        assert isinstance(t, Tracker)


def test_memory_tracker_series() -> None:
    t = MemoryTracker()
    t.log_metrics({"loss": 2.0, "lr": 1e-3}, step=1)
    t.log_metrics({"loss": 1.5}, step=2)
    assert t.series("loss") == [(1, 2.0), (2, 1.5)] and t.series("lr") == [(1, 1e-3)]


def test_jsonl_tracker_writes_valid_json(tmp_path: Path) -> None:
    p = tmp_path / "run" / "metrics.jsonl"
    t = JsonlTracker(p)
    t.log_params({"lr": 0.1, "path": Path("/a")})
    t.log_metrics({"loss": float("nan"), "acc": 0.5}, step=3)
    t.log_artifact(tmp_path, "dir")
    rows = [json.loads(line) for line in p.read_text().splitlines()]
    assert [r["kind"] for r in rows] == ["params", "metrics", "artifact"]
    assert rows[1]["metrics"] == {"loss": "nan", "acc": 0.5} and rows[1]["step"] == 3
