"""Fuzz every importer of `venus data import` through `run_import`, on real source trees.

Each example writes a small source tree in the importer's public format: 1-4 source records built
from a valid template, each with up to three structural edits (a value replaced by a hostile JSON
value: NaN, inf, 10**400, -1, nested lists, traversal and absolute paths, NUL bytes, lone
surrogates ...; a key deleted or added; a value wrapped in a list) and, for some files, textual
edits of the serialised file (a 5,000-digit number, 5,000 open brackets, a NUL, a cut). Image
fields name files from a hostile pool: valid PNGs, a JPEG named .png, a decompression-bomb header
(100,000 x 100,000), a truncated PNG, text named .png, an empty file, a symlink out of the source
and a path through a symlinked directory, plus sizes claimed by the record that the image does not
have. The source sits next to an `outside/` directory whose image must never reach a dataset.

Documented outcome per source record: imported, or quarantined with a line naming its file, field,
code (one of the importer codes) and reason. Checked on every example: `run_import` raises nothing
(the `venus` importer may refuse a source whose manifest is not a dataset manifest, with an error
naming it), the report reconciles (read = imported + quarantined), quarantine.jsonl has one line
per quarantined record, the dataset holds one record per imported source record and passes
`validate_dataset`, and no image from `outside/` is in it. Figures count source records.

Trees are written under /dev/shm when it exists (the dataset writer fsyncs: on a tmpfs that is
free, on a disk it would dominate the run), one example at a time, removed afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from fuzz_helpers import BUDGETS, Budget, fuzz, mutated, mutated_text, write_tree
from hostile_files import bomb, image_bytes
from hypothesis import strategies as st

import venus_core.data.importers  # noqa: F401 - registers the importers
from venus_core.data import DatasetReader
from venus_core.data.importers import QUARANTINE_NAME, run_import
from venus_core.data.images import image_relpath
from venus_core.data.schema import image_ref, record_images
from venus_core.data.validate import validate_dataset

CODES = {"path", "missing_image", "bad_image", "bad_value", "bad_box", "unknown_action", "bad_record",
         "duplicate", "schema", "failed"}


W, H = 64, 48
OK = image_bytes(W, H, (40, 80, 120))
OK2 = image_bytes(H, W, (120, 80, 40))
SECRET = image_bytes(20, 20, (255, 0, 0))
SECRET_REF = image_ref(hashlib.sha256(SECRET).hexdigest())
POOL: dict[str, bytes] = {"ok.png": OK, "ok2.png": OK2, "jpeg.png": image_bytes(W, H, fmt="JPEG"), "bomb.png": bomb(),
                          "trunc.png": OK[: len(OK) // 2], "fake.png": b"not an image at all", "empty.png": b""}
LINKS = ("link.png", "dirlink")  # symlinks to outside/secret.png and to outside/
IMAGE_NAMES = st.sampled_from([*POOL, "link.png", "dirlink/secret.png", "missing.png", "../outside/secret.png",
                               "ok.png", "ok.png", "ok2.png"])
OK_B64 = base64.b64encode(OK).decode()


def pool_files(folder: str, outside: Path) -> dict[str, bytes | Path]:
    """The hostile image pool inside `folder` of the source tree."""
    prefix = f"{folder}/" if folder else ""
    files: dict[str, bytes | Path] = {prefix + name: data for name, data in POOL.items()}
    files[prefix + "link.png"] = outside / "secret.png"
    files[prefix + "dirlink"] = outside
    return files


def maybe_text_edit(draw: st.DrawFn, text: str) -> bytes:
    """The serialised file, with textual edits one time in four."""
    if draw(st.integers(0, 3)) == 0:
        text = draw(mutated_text(text))
    return text.encode("utf-8", "surrogatepass")


def records(draw: st.DrawFn, template: Callable[[st.DrawFn, int], Any], lo: int = 1, hi: int = 4) -> list[Any]:
    return [draw(mutated(template(draw, i))) for i in range(draw(st.integers(lo, hi)))]


def dumps(value: Any) -> str:
    return json.dumps(value, allow_nan=True, ensure_ascii=False)


# ---- one source tree per importer ------------------------------------------------------------

Tree = tuple[dict[str, bytes | Path], dict[str, str]]


def _coord(draw: st.DrawFn, hi: int) -> float:
    return draw(st.one_of(st.integers(0, hi), st.floats(0, hi)))


def _screenspot_v2(draw: st.DrawFn, outside: Path) -> Tree:
    def entry(draw: st.DrawFn, i: int) -> dict[str, Any]:
        x, y = _coord(draw, W - 2), _coord(draw, H - 2)
        return {"img_filename": draw(IMAGE_NAMES), "bbox": [x, y, draw(st.integers(1, 10)), draw(st.integers(1, 10))],
                "instruction": f"tap {i}", "data_type": draw(st.sampled_from(["text", "icon"])), "data_source": "ios"}

    name = f"screenspot_{draw(st.sampled_from(['mobile', 'web', 'desktop', 'other']))}_v2.json"
    files = pool_files("screenspotv2_image", outside)
    files[name] = maybe_text_edit(draw, dumps(records(draw, entry)))
    return files, {}


def _screenspot_pro(draw: st.DrawFn, outside: Path) -> Tree:
    def entry(draw: st.DrawFn, i: int) -> dict[str, Any]:
        x1, y1 = _coord(draw, W - 2), _coord(draw, H - 2)
        return {"img_filename": draw(IMAGE_NAMES), "bbox": [x1, y1, x1 + 1, y1 + 1], "img_size": [W, H],
                "instruction": f"find {i}", "id": f"e{i}", "ui_type": "icon", "application": "app",
                "platform": draw(st.sampled_from(["macos", "windows", "android", "web"])), "group": "Dev"}

    files = pool_files("images", outside)
    files["annotations/app_macos.json"] = maybe_text_edit(draw, dumps(records(draw, entry)))
    return files, {}


ANDROID_ACTIONS = st.sampled_from([
    {"action_type": "click", "x": 10, "y": 20}, {"action_type": "long_press", "x": 63, "y": 47},
    {"action_type": "scroll", "direction": "down"}, {"action_type": "input_text", "text": "it's 7"},
    {"action_type": "open_app", "app_name": "Clock"}, {"action_type": "wait"},
    {"action_type": "navigate_back"}, {"action_type": "navigate_home"}, {"action_type": "type", "text": "x"},
])


def _androidcontrol(draw: st.DrawFn, outside: Path) -> Tree:
    def episode(draw: st.DrawFn, i: int) -> dict[str, Any]:
        actions = draw(st.lists(ANDROID_ACTIONS, min_size=1, max_size=3))
        shots = [draw(st.one_of(IMAGE_NAMES.map(lambda n: f"shots/{n}"), st.just(OK_B64),
                                st.just("data:image/png;base64," + OK_B64), st.just({"bytes": OK_B64})))
                 for _ in range(len(actions) + 1)]
        return {"episode_id": draw(st.one_of(st.just(i), st.text(max_size=6))), "goal": f"goal {i}",
                "screenshots": shots, "screenshot_widths": [W] * len(shots), "screenshot_heights": [H] * len(shots),
                "actions": [json.dumps(a) if draw(st.booleans()) else a for a in actions],
                "step_instructions": [f"step {k}" for k in range(len(actions))]}

    files = pool_files("shots", outside)
    eps = records(draw, episode)
    files["episodes.jsonl"] = maybe_text_edit(draw, "".join(dumps(e) + "\n" for e in eps[1:]) or "\n")
    files["single.json"] = maybe_text_edit(draw, dumps(eps[0]))
    options = draw(st.sampled_from([{}, {"level": "high"}, {"finish": "true"}]))
    return files, options


ODYSSEY_STEPS = st.sampled_from([
    ("CLICK", [[500, 500]]), ("LONG_PRESS", [[0, 1000]]), ("CLICK", "KEY_HOME"), ("CLICK", "KEY_NOPE"),
    ("SCROLL", [[500, 800], [500, 200]]), ("SCROLL", [[5, 5], [5, 5]]), ("TEXT", "hello"), ("HOME", ""),
    ("BACK", ""), ("COMPLETE", ""), ("INCOMPLETE", ""), ("JUMP", ""),
])


def _guiodyssey(draw: st.DrawFn, outside: Path) -> Tree:
    def episode(draw: st.DrawFn, i: int) -> dict[str, Any]:
        steps = [{"step": k, "screenshot": draw(IMAGE_NAMES), "action": a, "info": info, "ps": ""}
                 for k, (a, info) in enumerate(draw(st.lists(ODYSSEY_STEPS, min_size=1, max_size=3)))]
        return {"episode_id": f"ep{i}", "device_info": {"h": H, "w": W, "device_name": "Pixel"},
                "task_info": {"category": "c", "app": ["A"], "meta_task": "m", "task": "t", "instruction": f"do {i}"},
                "step_length": len(steps), "steps": steps}

    files = pool_files("screenshots", outside)
    for i, ep in enumerate(records(draw, episode)):
        files[f"annotations/ep{i}.json"] = maybe_text_edit(draw, dumps(ep))
    return files, {}


def _mind2web(draw: st.DrawFn, outside: Path) -> Tree:
    def row(draw: st.DrawFn, i: int) -> dict[str, Any]:
        x, y = _coord(draw, W - 5), _coord(draw, H - 5)
        attrs = json.dumps({"bounding_box_rect": f"{x},{y},4,4"})
        cand = {"tag": "button", "attributes": attrs}
        op = draw(st.sampled_from(["CLICK", "TYPE", "SELECT", "HOVER"]))
        return {"annotation_id": f"task{i // 2}", "action_uid": f"a{i}", "confirmed_task": "book a flight",
                "website": "w", "domain": "Travel", "subdomain": "Air",
                "operation": json.dumps({"op": op, "original_op": op, "value": "x"}),
                "pos_candidates": [json.dumps(cand) if draw(st.booleans()) else cand],
                "screenshot": draw(st.one_of(IMAGE_NAMES.map(lambda n: f"shots/{n}"),
                                             st.just({"bytes": OK_B64, "path": None}))),
                "target_action_index": str(i % 2)}

    files = pool_files("shots", outside)
    rows = records(draw, row, 1, 5)
    files["rows.jsonl"] = maybe_text_edit(draw, "".join(dumps(r) + "\n" for r in rows))
    return files, {}


def _column(values: list[Any]) -> Any:
    """One parquet column of the mutated rows: as pyarrow types it, else each value as JSON text (a
    column of mixed types has no parquet type; the release's columns are strings, lists and a
    {bytes, path} struct, which a hostile file may replace by any other type)."""
    import pyarrow as pa

    import pyarrow.parquet as pq

    try:
        col = pa.array(values)
        pq.write_table(pa.table({"c": col}), pa.BufferOutputStream())  # e.g. a struct without fields cannot be
        return col
    except (pa.ArrowException, TypeError, ValueError, OverflowError):
        return pa.array([None if v is None else json.dumps(v, allow_nan=True, default=_b64) for v in values],
                        type=pa.string())


def _b64(value: Any) -> str:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    raise TypeError(type(value).__name__)


def _utf8(name: str) -> bool:
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return bool(name)


def parquet_file(draw: st.DrawFn, rows: list[Any]) -> bytes:
    """The rows as a parquet file (columns = the union of the dict rows' keys; a row that is not a
    dict becomes nulls), then, one time in four, bytes of it flipped or cut off."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    dicts = [r if isinstance(r, dict) else {} for r in rows]
    names = sorted({k for r in dicts for k in r if isinstance(k, str) and _utf8(k)})
    table = pa.table({k: _column([r.get(k) for r in dicts]) for k in names} if names else {"x": pa.array([None] * len(rows))})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf, row_group_size=draw(st.sampled_from([1, 3, 64])))
    data = bytearray(buf.getvalue().to_pybytes())
    edit = draw(st.integers(0, 7))
    if edit == 0:
        del data[draw(st.integers(0, len(data) - 1)):]
    elif edit == 1:
        for _ in range(draw(st.integers(1, 8))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
    return bytes(data)


def _mind2web_parquet(draw: st.DrawFn, outside: Path) -> Tree:
    """The release's format: parquet rows with `screenshot` a {bytes, path} struct of raw bytes."""
    def row(draw: st.DrawFn, i: int) -> dict[str, Any]:
        x, y = _coord(draw, W - 5), _coord(draw, H - 5)
        cand = json.dumps({"tag": "button", "attributes": json.dumps({"bounding_box_rect": f"{x},{y},4,4"})})
        op = draw(st.sampled_from(["CLICK", "TYPE", "SELECT", "HOVER"]))
        shot = draw(st.sampled_from(["ok.png", "ok2.png", "jpeg.png", "bomb.png", "trunc.png", "fake.png", "empty.png"]))
        return {"annotation_id": f"task{i // 2}", "action_uid": f"a{i}", "confirmed_task": "book a flight",
                "website": "w", "domain": "Travel", "subdomain": "Air",
                "operation": json.dumps({"op": op, "original_op": op, "value": "x"}),
                "pos_candidates": [cand], "neg_candidates": [], "raw_html": "<html/>",
                "screenshot": {"bytes": POOL[shot], "path": None}, "target_action_index": str(i % 2)}

    files = pool_files("shots", outside)
    for k in range(draw(st.integers(1, 2))):
        files[f"data/train-{k:05d}-of-00002.parquet"] = parquet_file(draw, records(draw, row, 1, 5))
    return files, {}


RAW_ACTIONS = st.sampled_from([
    {"type": "click", "x": 10, "y": 20}, {"type": "dblclick", "x": 0, "y": 0}, {"type": "hover", "x": 64, "y": 48},
    {"type": "drag", "x": 1, "y": 2, "x2": 30, "y2": 40}, {"type": "scroll", "direction": "down"},
    {"type": "type", "text": "hi"}, {"type": "hotkey", "keys": ["ctrl", "c"]}, {"type": "enter"},
    {"type": "goto", "url": "https://example.com"}, {"type": "wait"}, {"type": "finish"},
    {"type": "ask", "text": "which?"}, {"type": "teleport"},
])


def _miniwob(draw: st.DrawFn, outside: Path) -> Tree:
    lines: list[Any] = []
    for e in range(draw(st.integers(1, 3))):
        n = draw(st.integers(1, 3))
        for k in range(n):
            last = k == n - 1
            step = {"episode_id": f"task:seed={e}", "task": "click-button", "seed": e, "goal": f"Goal {e}.", "step": k,
                    "screenshot": draw(IMAGE_NAMES), "viewport": [W, H], "action": draw(RAW_ACTIONS),
                    "dom_box": [1.0, 2.0, 30.0, 40.0], "think": "", "conclusion": "", "done": last,
                    "reward": 1.0 if last else None}
            lines.append(draw(mutated(step, 2)))
    files = pool_files("traces", outside)
    files["traces/run.jsonl"] = maybe_text_edit(draw, "".join(dumps(x) + "\n" for x in lines))
    options = draw(st.sampled_from([{}, {"min_reward": "1"}]))
    return files, options


def _venus(draw: st.DrawFn, outside: Path) -> Tree:
    stored = {image_ref(hashlib.sha256(OK).hexdigest()): OK,  # valid
              image_ref(hashlib.sha256(OK2).hexdigest()): OK,  # content is not what the ref names
              image_ref(hashlib.sha256(POOL["bomb.png"]).hexdigest()): POOL["bomb.png"],
              image_ref(hashlib.sha256(POOL["trunc.png"]).hexdigest()): POOL["trunc.png"]}
    refs = [*stored, SECRET_REF, image_ref("0" * 64)]  # SECRET_REF: a symlink out; 0...0: missing
    files: dict[str, bytes | Path] = {image_relpath(r): data for r, data in stored.items()}
    files[image_relpath(SECRET_REF)] = outside / "secret.png"

    def record(draw: st.DrawFn, i: int) -> dict[str, Any]:
        return {"kind": "grounding", "id": f"g{i}", "domain": "grounding", "image": draw(st.sampled_from(refs)),
                "image_size": draw(st.sampled_from([[W, H], [H, W]])), "platform": "mobile",
                "instruction": f"tap {i}", "box": [1, 2, 30, 40], "refusal": False, "ui_type": None,
                "provenance": {"source": "fuzz", "source_id": str(i)}, "meta": {}}

    shard = "part-00000.jsonl"
    recs = records(draw, record)
    files[f"shards/{shard}"] = maybe_text_edit(draw, "".join(dumps(r) + "\n" for r in recs))
    manifest = {"schema_version": 1, "created_at": "1970-01-01T00:00:00+00:00", "created_by": "fuzz",
                "venus_version": "0", "sources": ["fuzz"], "records": len(recs), "counts_by_domain": {},
                "counts_by_kind": {}, "images": len(stored), "image_bytes": 0,
                "shards": [{"name": draw(st.sampled_from([shard, shard, "../../outside/secret.png", "missing.jsonl"])),
                            "sha256": "0" * 64, "records": len(recs), "bytes": 0}]}
    files["manifest.json"] = dumps(manifest).encode()
    return files, {}


IMPORTERS: dict[str, Callable[[st.DrawFn, Path], Tree]] = {
    "screenspot-v2": _screenspot_v2, "screenspot-pro": _screenspot_pro, "androidcontrol": _androidcontrol,
    "guiodyssey": _guiodyssey, "mind2web": _mind2web, "mind2web-parquet": _mind2web_parquet,
    "miniwob-traces": _miniwob, "venus": _venus,
}


# ---- the check ----------------------------------------------------------------------------------


@pytest.fixture()
def scratch() -> Iterator[Path]:
    shm = Path("/dev/shm")
    d = Path(tempfile.mkdtemp(prefix="venus-fuzz-import-", dir=shm if shm.is_dir() else None))
    yield d
    shutil.rmtree(d, ignore_errors=True)


def check_import(fmt: str, base: Path, draw_tree: Callable[[Path], Tree]) -> Counter[str]:
    if base.exists():
        shutil.rmtree(base)
    src, outside, out = base / "src", base / "outside", base / "out"
    outside.mkdir(parents=True)
    (outside / "secret.png").write_bytes(SECRET)
    files, options = draw_tree(outside)
    src.mkdir()
    write_tree(src, files)
    try:
        report = run_import(fmt, src, out, options=options)
    except (ValueError, FileNotFoundError) as exc:  # the venus importer: the source is not a dataset
        assert fmt == "venus" and "manifest.json" in str(exc), f"{fmt}: {type(exc).__name__}: {exc}"
        return Counter({"source refused (manifest)": 1})
    lines = [json.loads(x) for x in (out / QUARANTINE_NAME).read_text(encoding="utf-8").split("\n") if x]
    assert len(lines) == report.quarantined
    for q in lines:
        assert q["code"] in CODES and isinstance(q["field"], str) and q["field"], q
        assert isinstance(q["reason"], str) and q["reason"] and isinstance(q["source_file"], str), q
    recs = list(DatasetReader(out))
    assert len(recs) == report.imported == report.records
    assert report.read == report.imported + report.quarantined
    assert all(ref != SECRET_REF for r in recs for ref, _, _ in record_images(r)), "an image from outside/ was imported"
    assert validate_dataset(out).ok
    outcomes: Counter[str] = Counter({"accepted": report.imported})
    outcomes.update({f"quarantined: {code}": n for code, n in report.quarantined_by_code.items()})
    return outcomes


@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("fmt", sorted(IMPORTERS))
def test_importer(fmt: str, budget: Budget, scratch: Path) -> None:
    build = IMPORTERS[fmt]
    strategy = st.data()
    importer = fmt.removesuffix("-parquet")  # mind2web-parquet: the mind2web importer on parquet files

    def check(data: st.DataObject) -> Counter[str]:
        return check_import(importer, scratch / "ex", lambda outside: build(data.draw, outside))

    tally = fuzz(f"importer {fmt}", strategy, check, budget)
    assert tally.outcomes["accepted"] > 0
    assert sum(n for k, n in tally.outcomes.items() if k.startswith("quarantined")) > 0
