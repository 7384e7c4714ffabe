"""Hostile source files for `venus data import` (issue 22 §1): one case per test, each next to a
good record that must still be imported (nothing else is affected) and with the counts reconciled.

Cases: paths that leave the source (traversal, POSIX / Windows / UNC absolute, NUL, a file symlink
and a directory symlink out, a name too long for the filesystem), in three importers' path fields;
image files that are not what they claim (decompression-bomb headers, in a file and as base64,
one below PIL's own bomb limit, truncated, text named .png, empty, a JPEG named .png, sizes the
record claims wrongly); NaN / inf / huge / negative coordinates; JSON that Python cannot hold (a
5,000-digit integer, nesting past the recursion limit, an unpaired surrogate escape); a JSON line
far longer than the line limit (memory measured) and a JSON file over the file limit (sparse);
file names that are not UTF-8; a Venus dataset whose manifest names a shard outside it.
"""

from __future__ import annotations

import base64
import json
import os
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from hostile_files import bomb, image_bytes

import venus_core.data.importers  # noqa: F401 - registers the importers
from venus_core.data import DatasetReader
from venus_core.data.importers import QUARANTINE_NAME, ImportReport, run_import
from venus_core.data.importers.sources import MAX_JSON_FILE_BYTES, MAX_JSON_LINE_BYTES
from venus_core.data.validate import validate_dataset

W, H = 64, 48


def png(w: int = W, h: int = H, color: tuple[int, int, int] = (40, 80, 120), fmt: str = "PNG") -> bytes:
    return image_bytes(w, h, color, fmt)


@pytest.fixture()
def tree(tmp_path: Path) -> tuple[Path, Path, Path]:
    """(source, outside, output): outside/ holds an image that must never be imported."""
    src, outside = tmp_path / "src", tmp_path / "outside"
    src.mkdir()
    outside.mkdir()
    (outside / "secret.png").write_bytes(png(20, 20, (255, 0, 0)))
    return src, outside, tmp_path / "out"


def quarantined(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / QUARANTINE_NAME).read_text(encoding="utf-8").split("\n") if x]


def check(report: ImportReport, out: Path, imported: int, field: str, code: str, words: str = "") -> dict[str, Any]:
    """The bad record's quarantine line (exactly one), after checking counts and the dataset."""
    assert (report.imported, report.quarantined) == (imported, report.read - imported)
    assert len(list(DatasetReader(out))) == imported and validate_dataset(out).ok
    [line] = [q for q in quarantined(out) if q["code"] == code and field in q["field"]]
    assert words in line["reason"], line
    return line


# ---- three importers, one path field each ----------------------------------------------------


def _screenspot(src: Path, image: str) -> tuple[str, str]:
    (src / "screenspotv2_image").mkdir(exist_ok=True)
    (src / "screenspotv2_image" / "ok.png").write_bytes(png())
    good = {"img_filename": "ok.png", "bbox": [1, 2, 10, 10], "instruction": "tap it"}
    (src / "screenspot_mobile_v2.json").write_text(json.dumps([good, {**good, "img_filename": image}]))
    return "screenspot-v2", "img_filename"


def _androidcontrol(src: Path, image: str) -> tuple[str, str]:
    (src / "shots").mkdir(exist_ok=True)
    (src / "shots" / "ok.png").write_bytes(png())

    def ep(eid: int, shot: str) -> dict[str, Any]:
        return {"episode_id": eid, "goal": "set an alarm", "screenshots": [shot, "shots/ok.png"],
                "actions": [{"action_type": "click", "x": 5, "y": 5}], "step_instructions": ["tap"]}

    (src / "episodes.jsonl").write_text(json.dumps(ep(1, "shots/ok.png")) + "\n" + json.dumps(ep(2, image)) + "\n")
    return "androidcontrol", "screenshots[0]"  # the final screenshot is read only with finish=true


def _miniwob(src: Path, image: str) -> tuple[str, str]:
    (src / "t").mkdir(exist_ok=True)
    (src / "t" / "ok.png").write_bytes(png())

    def step(eid: str, shot: str) -> dict[str, Any]:
        return {"episode_id": eid, "task": "click-button", "goal": "Click.", "step": 0, "screenshot": shot,
                "viewport": [W, H], "action": {"type": "click", "x": 3, "y": 4}, "done": True, "reward": 1.0}

    (src / "t" / "run.jsonl").write_text(json.dumps(step("a", "ok.png")) + "\n" + json.dumps(step("b", image)) + "\n")
    return "miniwob-traces", "screenshot"


SOURCES = {"screenspot-v2": _screenspot, "androidcontrol": _androidcontrol, "miniwob-traces": _miniwob}
PATHS = {
    "traversal": ("../../outside/secret.png", "path", "leaves the source"),
    "traversal inside a name": ("sub/../../../outside/secret.png", "path", "leaves the source"),
    "absolute posix": ("{outside}/secret.png", "path", "absolute"),
    "absolute windows": ("C:\\outside\\secret.png", "path", "absolute"),
    "unc": ("\\\\server\\share\\secret.png", "path", "absolute"),
    "nul byte": ("ok.png\x00.txt", "path", "NUL"),
    "symlink file out": ("link.png", "path", "outside the source directory (symlink)"),
    "symlink directory out": ("dirlink/secret.png", "path", "outside the source directory (symlink)"),
    "name too long": ("x" * 300 + ".png", "path", "too long"),
}


@pytest.mark.parametrize("fmt", sorted(SOURCES))
@pytest.mark.parametrize("case", sorted(PATHS))
def test_paths_that_leave_the_source_are_quarantined(tree: tuple[Path, Path, Path], fmt: str, case: str) -> None:
    src, outside, out = tree
    value, code, words = PATHS[case]
    folder = {"screenspot-v2": "screenspotv2_image", "androidcontrol": "", "miniwob-traces": "t"}[fmt]
    value = value.format(outside=outside)
    if fmt == "androidcontrol" and not value.startswith(("/", "\\", "C:", "..")):
        value = value.replace("sub/../../../", "sub/../../")  # relative to the source, not a folder
    (src / folder).mkdir(exist_ok=True)
    (src / folder / "link.png").symlink_to(outside / "secret.png")
    (src / folder / "dirlink").symlink_to(outside)
    name, field = SOURCES[fmt](src, value)
    report = run_import(name, src, out)
    check(report, out, 1, field, code, words)


# ---- images that are not what they claim -----------------------------------------------------

IMAGES: dict[str, tuple[bytes, str, str]] = {
    "decompression bomb header": (bomb(), "bad_image", "exceeds"),
    "header below PIL's bomb limit, above ours": (bomb(9000, 9000), "bad_image", "exceeds 67108864 pixels"),
    "truncated png": (png()[: len(png()) // 2], "bad_image", "not a decodable image"),
    "text named .png": (b"<html>not an image</html>", "bad_image", "not a decodable image"),
    "empty file": (b"", "bad_image", "not a decodable image"),
}


@pytest.mark.parametrize("case", sorted(IMAGES))
def test_image_files_that_are_not_images_are_quarantined(tree: tuple[Path, Path, Path], case: str) -> None:
    src, _, out = tree
    data, code, words = IMAGES[case]
    name, field = _screenspot(src, "bad.png")
    (src / "screenspotv2_image" / "bad.png").write_bytes(data)
    check(run_import(name, src, out), out, 1, field, code, words)


def test_an_embedded_base64_bomb_is_quarantined(tree: tuple[Path, Path, Path]) -> None:
    src, _, out = tree
    name, field = _androidcontrol(src, "data:image/png;base64," + base64.b64encode(bomb()).decode())
    check(run_import(name, src, out), out, 1, field, "bad_image", "exceeds")


def test_a_jpeg_named_png_is_imported_as_png(tree: tuple[Path, Path, Path]) -> None:
    src, _, out = tree
    name, _ = _screenspot(src, "photo.png")
    (src / "screenspotv2_image" / "photo.png").write_bytes(png(fmt="JPEG"))
    report = run_import(name, src, out)
    assert (report.imported, report.quarantined) == (2, 0)
    reader = DatasetReader(out)
    for record in reader:
        assert reader.image_path(record.image).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"  # stored as what it is named
        assert reader.open_image(record.image).size == (W, H)


def test_sizes_the_record_claims_wrongly_are_quarantined(tree: tuple[Path, Path, Path]) -> None:
    src, _, out = tree
    (src / "images").mkdir()
    (src / "images" / "a.png").write_bytes(png())
    good = {"img_filename": "a.png", "bbox": [1, 2, 10, 10], "img_size": [W, H], "instruction": "find", "platform": "macos"}
    (src / "annotations").mkdir()
    (src / "annotations" / "app_macos.json").write_text(json.dumps([good, {**good, "img_size": [W * 2, H * 2]}]))
    check(run_import("screenspot-pro", src, out), out, 1, "img_size", "bad_image", "does not match")
    src2 = src.parent / "src2"
    src2.mkdir()
    _androidcontrol(src2, "shots/ok.png")
    lines = (src2 / "episodes.jsonl").read_text().splitlines()
    bad = {**json.loads(lines[1]), "screenshot_widths": [W + 1, W]}
    (src2 / "episodes.jsonl").write_text(lines[0] + "\n" + json.dumps(bad) + "\n")
    out2 = src.parent / "out2"
    check(run_import("androidcontrol", src2, out2), out2, 1, "screenshot_widths[0]", "bad_image", "does not match")


# ---- coordinates and JSON values -------------------------------------------------------------

COORDS: dict[str, tuple[str, str, str]] = {  # JSON text of bbox[0] -> (field, code, words)
    "NaN": ("NaN", "bad_value", "not a finite number"),
    "Infinity": ("Infinity", "bad_value", "not a finite number"),
    "-Infinity": ("-Infinity", "bad_value", "not a finite number"),
    "1e308": ("1e308", "bad_box", "box (1e+308"),
    "10**400": ("1" + "0" * 400, "bad_value", "too large a number"),
    "negative": ("-5", "bad_box", "negative"),
    "a string": ('"5"', "bad_value", "expected a number"),
    "a bool": ("true", "bad_value", "expected a number"),
}


@pytest.mark.parametrize("case", sorted(COORDS))
def test_coordinates_that_are_not_numbers_in_range_are_quarantined(tree: tuple[Path, Path, Path], case: str) -> None:
    src, _, out = tree
    literal, code, words = COORDS[case]
    name, _ = _screenspot(src, "ok.png")
    entries = json.loads((src / "screenspot_mobile_v2.json").read_text())
    text = json.dumps(entries[:1])[:-1] + ', {"img_filename": "ok.png", "bbox": [' + literal + ', 2, 10, 10], ' \
        '"instruction": "tap it"}]'
    (src / "screenspot_mobile_v2.json").write_text(text)
    check(run_import(name, src, out), out, 1, "bbox", code, words)


@pytest.mark.parametrize(("value", "field", "code", "words"), [
    ("NaN", "actions[0].x", "bad_value", "not a finite number"),
    ("1e999", "actions[0].x", "bad_value", "not a finite number"),
    ("1" + "0" * 400, "actions[0].x", "bad_value", "too large a number"),
    ("-1", "actions[0]", "bad_box", "outside the 64x48 screenshot"),
    ("65", "actions[0]", "bad_box", "outside the 64x48 screenshot"),
])
def test_action_coordinates_that_are_not_on_the_screen_are_quarantined(
        tree: tuple[Path, Path, Path], value: str, field: str, code: str, words: str) -> None:
    src, _, out = tree
    _androidcontrol(src, "shots/ok.png")
    first = (src / "episodes.jsonl").read_text().splitlines()[0]
    bad = first.replace('"episode_id": 1', '"episode_id": 2').replace('"x": 5', f'"x": {value}')
    (src / "episodes.jsonl").write_text(first + "\n" + bad + "\n")
    line = check(run_import("androidcontrol", src, out), out, 1, field, code, words)
    assert line["field"] == field


UNHOLDABLE = {
    "5,000-digit integer": '{"episode_id": ' + "9" * 5000 + "}",
    "nesting past the recursion limit": "[" * 100_000,
    "unpaired surrogate escape": '{"episode_id": "\\ud800", "goal": "g"}',
}


@pytest.mark.parametrize("case", sorted(UNHOLDABLE))
def test_json_python_cannot_hold_is_a_quarantined_line(tree: tuple[Path, Path, Path], case: str) -> None:
    src, _, out = tree
    _androidcontrol(src, "shots/ok.png")
    good = (src / "episodes.jsonl").read_text().splitlines()[0]
    (src / "episodes.jsonl").write_text(good + "\n" + UNHOLDABLE[case] + "\n")
    check(run_import("androidcontrol", src, out), out, 1, "<line>", "bad_record", "not valid JSON")


def test_a_gigantic_json_line_is_skipped_in_bounded_memory(tree: tuple[Path, Path, Path]) -> None:
    src, _, out = tree
    _androidcontrol(src, "shots/ok.png")
    first, second = (src / "episodes.jsonl").read_text().splitlines()
    second = second.replace('"episode_id": 2', '"episode_id": 3')
    size = 3 * MAX_JSON_LINE_BYTES  # 192 MiB on one line
    with open(src / "episodes.jsonl", "w", encoding="utf-8") as f:
        f.write(first + "\n" + '{"goal": "')
        chunk = "x" * (1 << 20)
        for _ in range(size >> 20):
            f.write(chunk)
        f.write('"}\n' + second + "\n")
    tracemalloc.start()
    try:
        report = run_import("androidcontrol", src, out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    line = check(report, out, 2, "<line>", "bad_record", f"longer than the {MAX_JSON_LINE_BYTES}-byte limit")
    assert line["index"] == 2 and peak < MAX_JSON_LINE_BYTES + (16 << 20), peak  # never the whole line


def test_a_json_file_over_the_file_limit_is_not_read(tree: tuple[Path, Path, Path]) -> None:
    src, _, out = tree
    name, _ = _screenspot(src, "ok.png")  # two good entries
    big = src / "screenspot_web_v2.json"
    with open(big, "wb") as f:  # sparse: the size is checked before anything is read
        f.truncate(MAX_JSON_FILE_BYTES + 1)
    report = run_import(name, src, out)
    check(report, out, 2, "<file>", "bad_record", f"limit {MAX_JSON_FILE_BYTES}")


def test_a_file_name_that_is_not_utf8_is_quarantined_losslessly(tree: tuple[Path, Path, Path]) -> None:
    src, _, out = tree
    (src / "annotations").mkdir()
    (src / "screenshots").mkdir()
    (src / "screenshots" / "a.png").write_bytes(png())
    episode = {"episode_id": "e1", "task_info": {"instruction": "open it"},
               "steps": [{"step": 0, "screenshot": "a.png", "action": "HOME", "info": ""}]}
    (src / "annotations" / "e1.json").write_text(json.dumps(episode))
    with open(os.path.join(os.fsencode(src / "annotations"), b"bad\xff.json"), "w") as f:
        f.write(json.dumps({**episode, "episode_id": "e2"}))
    report = run_import("guiodyssey", src, out)
    line = check(report, out, 1, "<file>", "path", "is not UTF-8 text")
    assert os.fsencode(line["source_file"]) == b"annotations/bad\xff.json"  # the exact name, escaped in JSON
    assert b"\\udcff" in (out / QUARANTINE_NAME).read_bytes()


def test_a_venus_manifest_naming_a_shard_outside_the_dataset_is_quarantined(tree: tuple[Path, Path, Path]) -> None:
    src, outside, out = tree
    (outside / "evil.jsonl").write_text("{}\n")
    (src / "shards").mkdir()
    (src / "shards" / "part-0.jsonl").write_text("")
    manifest = {"schema_version": 1, "created_at": "1970-01-01T00:00:00+00:00", "created_by": "x", "venus_version": "0",
                "sources": [], "records": 0, "counts_by_domain": {}, "counts_by_kind": {}, "images": 0, "image_bytes": 0,
                "shards": [{"name": n, "sha256": "0" * 64, "records": 0, "bytes": 0}
                           for n in ("part-0.jsonl", "../../outside/evil.jsonl")]}
    (src / "manifest.json").write_text(json.dumps(manifest))
    report = run_import("venus", src, out)
    assert (report.read, report.quarantined) == (1, 1)
    [line] = quarantined(out)
    assert line["code"] == "path" and "leaves the source" in line["reason"]


def test_the_line_limit_is_exact_and_does_not_shift_line_numbers(tmp_path: Path) -> None:
    from venus_core.data.importers import SourceRoot
    from venus_core.data.importers.sources import json_lines

    (tmp_path / "s").mkdir()
    ten = '"' + "x" * 8 + '"'  # a 10-byte JSON line
    (tmp_path / "s" / "a.jsonl").write_text("\n".join([ten, ten + " ", "", '"' + "y" * 5000 + '"', ten]))
    got = [(n, obj, rej.reason if rej else None)
           for n, obj, rej in json_lines(SourceRoot(tmp_path / "s"), tmp_path / "s" / "a.jsonl", max_line_bytes=10)]
    assert got == [(1, "x" * 8, None), (2, None, "line is 12 bytes, longer than the 10-byte limit"),
                   (4, None, "line is 5003 bytes, longer than the 10-byte limit"), (5, "x" * 8, None)]
