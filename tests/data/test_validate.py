"""validate_dataset on a good dataset and on corrupted copies; `venus data validate` exit codes."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from data_helpers import Build, canon
from typer.testing import CliRunner

from venus_core.cli.data_cmd import data_app
from venus_core.data import ValidationReport, validate_dataset


def _manifest(ds: Path) -> dict[str, Any]:
    return json.loads((ds / "manifest.json").read_text())


def _save_manifest(ds: Path, m: dict[str, Any]) -> None:
    (ds / "manifest.json").write_text(json.dumps(m))


def _rehash(ds: Path) -> None:
    """Make the manifest's shard sha256s match again, to isolate the problem under test."""
    m = _manifest(ds)
    for s in m["shards"]:
        data = (ds / "shards" / s["name"]).read_bytes()
        s["sha256"], s["bytes"] = hashlib.sha256(data).hexdigest(), len(data)
    _save_manifest(ds, m)


def _edit_line(ds: Path, shard: int, line: int, fn: Callable[[dict[str, Any]], None]) -> None:
    file = ds / "shards" / f"part-{shard:05d}.jsonl"
    lines = file.read_text().splitlines()
    obj = json.loads(lines[line - 1])
    fn(obj)
    lines[line - 1] = json.dumps(obj)
    file.write_text("\n".join(lines) + "\n")


def _types(report: ValidationReport) -> dict[str, int]:
    return report.problems_by_type


def _image_of(ds: Path, shard: int, line: int) -> Path:
    obj = json.loads((ds / "shards" / f"part-{shard:05d}.jsonl").read_text().splitlines()[line - 1])
    digest = obj["image"][7:]
    return ds / "images" / digest[:2] / f"{digest}.png"


def test_good_dataset_passes(good_dataset: Path) -> None:
    report = validate_dataset(good_dataset)
    assert report.ok, report.to_text()
    assert (report.records_checked, report.shards_checked, report.images_checked) == (9, 3, 3)
    assert report.problems == [] and report.warnings == [] and report.unreferenced_images == 0
    assert "OK" in report.to_text()


def test_edited_shard_line_breaks_its_sha256(good_dataset: Path) -> None:
    _edit_line(good_dataset, 0, 1, lambda o: o.update(instruction="tap something else"))
    report = validate_dataset(good_dataset)
    assert _types(report) == {"shard_sha256": 1}
    assert report.problems[0].file == "shards/part-00000.jsonl"


def test_wrong_sha_in_manifest(good_dataset: Path) -> None:
    m = _manifest(good_dataset)
    m["shards"][2]["sha256"] = "0" * 64
    _save_manifest(good_dataset, m)
    assert _types(validate_dataset(good_dataset)) == {"shard_sha256": 1}


def test_schema_error_names_file_line_record_and_field(good_dataset: Path) -> None:
    _edit_line(good_dataset, 0, 2, lambda o: o.update(refusal=False))  # g1 has no box
    _rehash(good_dataset)
    report = validate_dataset(good_dataset)
    assert _types(report) == {"schema": 1}
    p = report.problems[0]
    assert (p.file, p.line, p.record_id, p.field) == ("shards/part-00000.jsonl", 2, "g1", "refusal")


def test_bad_action_string(good_dataset: Path) -> None:
    _edit_line(good_dataset, 1, 3, lambda o: o.update(action="Click(box=(500,"))
    _rehash(good_dataset)
    report = validate_dataset(good_dataset)
    assert _types(report) == {"action": 1}
    p = report.problems[0]
    assert (p.line, p.record_id, p.field) == (3, "t0:1", "action")


def test_box_out_of_range_and_bad_json(good_dataset: Path) -> None:
    _edit_line(good_dataset, 0, 1, lambda o: o.update(box=[0, 0, 1200, 50]))
    file = good_dataset / "shards" / "part-00002.jsonl"
    file.write_text(file.read_text() + "{not json\n")
    m = _manifest(good_dataset)
    m["shards"][2]["records"] += 1
    m["records"] += 1
    _save_manifest(good_dataset, m)
    _rehash(good_dataset)
    report = validate_dataset(good_dataset)
    # an unreadable line is one problem: it is not also counted against the kind/domain totals
    assert _types(report) == {"schema": 1, "json": 1}
    assert {(p.type, p.line, p.field) for p in report.problems} == {
        ("schema", 1, "box"), ("json", 2, None)}


def test_missing_image(good_dataset: Path) -> None:
    _image_of(good_dataset, 0, 3).unlink()  # q0's image, referenced once
    report = validate_dataset(good_dataset)
    assert _types(report) == {"image_missing": 1, "count_mismatch": 1}
    missing = next(p for p in report.problems if p.type == "image_missing")
    assert (missing.file, missing.line, missing.record_id, missing.field) == (
        "shards/part-00000.jsonl", 3, "q0", "image")
    # existence is checked even without image checks
    assert "image_missing" in _types(validate_dataset(good_dataset, check_images=False))


def test_truncated_image(good_dataset: Path) -> None:
    img = _image_of(good_dataset, 0, 3)
    img.write_bytes(img.read_bytes()[:40])
    report = validate_dataset(good_dataset)
    assert _types(report) == {"image_sha256": 1, "image_decode": 1}
    assert validate_dataset(good_dataset, check_images=False).ok


def test_image_replaced_by_another_valid_png(good_dataset: Path, build: Build) -> None:
    _image_of(good_dataset, 0, 3).write_bytes(build.png(8, 6, (250, 0, 0)))
    assert _types(validate_dataset(good_dataset)) == {"image_sha256": 1}


def test_image_size_mismatch(good_dataset: Path) -> None:
    _edit_line(good_dataset, 0, 3, lambda o: o.update(image_size=[9, 6]))
    _rehash(good_dataset)
    report = validate_dataset(good_dataset)
    assert _types(report) == {"image_size": 1}
    assert "8x6" in report.problems[0].message and report.problems[0].record_id == "q0"


def test_conflicting_sizes_between_records(good_dataset: Path) -> None:
    _edit_line(good_dataset, 0, 4, lambda o: o.update(image_size=[7, 6]))  # q1 shares g0's image
    _rehash(good_dataset)
    report = validate_dataset(good_dataset)
    assert _types(report) == {"image_size": 1}
    assert report.problems[0].record_id == "q1"


def test_count_mismatches(good_dataset: Path) -> None:
    m = _manifest(good_dataset)
    m["counts_by_kind"]["qa"] = 3
    m["counts_by_domain"]["video"] = 1
    m["images"] = 4
    _save_manifest(good_dataset, m)
    report = validate_dataset(good_dataset)
    assert _types(report) == {"count_mismatch": 3}
    assert {p.field for p in report.problems} == {
        "counts_by_kind.qa", "counts_by_domain.video", "images"}


def test_deleted_line_is_a_count_mismatch(good_dataset: Path) -> None:
    file = good_dataset / "shards" / "part-00000.jsonl"
    file.write_text("".join(file.read_text().splitlines(keepends=True)[1:]))
    _rehash(good_dataset)
    report = validate_dataset(good_dataset)
    assert _types(report) == {"count_mismatch": 4}  # shard records, total, kind, domain
    assert {p.field for p in report.problems} == {
        "records", "counts_by_kind.grounding", "counts_by_domain.grounding"}


def test_duplicate_ids_unlisted_shard_and_no_manifest(good_dataset: Path) -> None:
    _edit_line(good_dataset, 0, 2, lambda o: o.update(id="g0"))
    _rehash(good_dataset)
    (good_dataset / "shards" / "part-00009.jsonl").write_text("")
    report = validate_dataset(good_dataset)
    assert _types(report) == {"duplicate_id": 1, "shard_unlisted": 1}
    (good_dataset / "manifest.json").unlink()
    report = validate_dataset(good_dataset)
    assert report.problems_by_type.get("manifest") == 1
    assert report.records_checked == 9  # shards are still checked without a manifest
    assert _types(validate_dataset(good_dataset / "nowhere")) == {"manifest": 1}


def test_unreferenced_image_is_a_warning(good_dataset: Path, build: Build) -> None:
    digest = hashlib.sha256(data := build.png(3, 3)).hexdigest()
    (good_dataset / "images" / digest[:2]).mkdir(exist_ok=True)
    (good_dataset / "images" / digest[:2] / f"{digest}.png").write_bytes(data)
    m = _manifest(good_dataset)
    m["images"] += 1
    _save_manifest(good_dataset, m)
    report = validate_dataset(good_dataset)
    assert report.ok and report.unreferenced_images == 1 and report.warnings
    (good_dataset / "images" / "stray.txt").write_text("x")
    assert _types(validate_dataset(good_dataset)) == {"image_unexpected": 1}


def test_max_problems_caps_the_list_not_the_count(good_dataset: Path) -> None:
    for line in range(1, 5):
        _edit_line(good_dataset, 0, line, lambda o: o.update(platform="tv"))
    _rehash(good_dataset)
    report = validate_dataset(good_dataset, max_problems=2)
    assert report.problems_found == 4 and len(report.problems) == 2
    text = report.to_text()
    assert "2 more not shown" in text and "part-00000.jsonl:1" in text and "platform" in text
    assert ValidationReport.model_validate_json(report.model_dump_json()) == report


runner = CliRunner()


def test_cli_exit_codes_and_json(good_dataset: Path) -> None:
    ok = runner.invoke(data_app, ["validate", str(good_dataset)])
    assert ok.exit_code == 0, ok.output
    assert "OK" in ok.output
    _edit_line(good_dataset, 1, 2, lambda o: o.update(action=canon("Wait()") + "x"))
    bad = runner.invoke(data_app, ["validate", str(good_dataset), "--max-problems", "1"])
    assert bad.exit_code == 1
    assert "action" in bad.output and "shard_sha256" in bad.output
    as_json = runner.invoke(data_app, ["validate", str(good_dataset), "--json", "--no-images"])
    assert as_json.exit_code == 1
    data = json.loads(as_json.output)
    assert data["ok"] is False and data["images_checked"] == 0 and data["problems_found"] == 2
    missing = runner.invoke(data_app, ["validate", str(good_dataset / "absent")])
    assert missing.exit_code == 1


@pytest.mark.parametrize("args", [[], ["validate"]])
def test_cli_usage_errors(args: list[str]) -> None:
    assert runner.invoke(data_app, args).exit_code == 2
