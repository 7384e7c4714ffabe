"""`venus` importer: copy a dataset directory, re-validating every record and image."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from venus_core.data import DatasetReader, DatasetWriter
from venus_core.data.images import image_relpath
from venus_core.data.importers import run_import
from venus_core.data.validate import validate_dataset
from importer_helpers import h  # noqa: F401 - pytest fixtures


def _dataset(path: Path, build: Any, h: Any) -> tuple[str, str]:
    with DatasetWriter(path) as w:
        a = w.put_image(build.png(8, 6, (1, 1, 1)))
        b = w.put_image(build.png(8, 6, (2, 2, 2)))
        w.write(build.grounding(0, image=a))
        w.write(build.grounding(1, image=b))
        w.write(build.trajectory(3, image=a))
        w.write(build.qa(0, image=a))
    return a, b


def test_copy_revalidates(tmp_path: Path, build: Any, h: Any) -> None:
    src = tmp_path / "ds"
    a, b = _dataset(src, build, h)
    report = run_import("venus", src, tmp_path / "copy")
    assert (report.read, report.imported, report.quarantined, report.images) == (4, 4, 0, 2)
    assert [r.id for r in DatasetReader(tmp_path / "copy")] == ["g0", "g1", "t0", "q0"]
    assert validate_dataset(tmp_path / "copy").ok

    # corrupt the source: one image replaced by other content, one record made invalid
    (src / image_relpath(b)).write_bytes(build.png(8, 6, (9, 9, 9)))
    shard = src / "shards" / "part-00000.jsonl"
    lines = shard.read_text().splitlines()
    rec = json.loads(lines[3])
    rec["answer"] = "  "
    lines[3] = json.dumps(rec)
    shard.write_text("\n".join(lines) + "\n")
    report = run_import("venus", src, tmp_path / "copy2")
    assert (report.read, report.imported, report.quarantined) == (4, 2, 2)
    q = h.by_index(h.quarantine(tmp_path / "copy2"))
    assert q[("shards/part-00000.jsonl", 2)]["code"] == "bad_image"
    assert "different content" in q[("shards/part-00000.jsonl", 2)]["reason"]
    assert (q[("shards/part-00000.jsonl", 4)]["field"], q[("shards/part-00000.jsonl", 4)]["code"]) == ("answer", "schema")
    assert validate_dataset(tmp_path / "copy2").ok


def test_needs_a_dataset(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a Venus dataset"):
        run_import("venus", tmp_path / "empty", tmp_path / "o")
    assert not (tmp_path / "o").exists()
