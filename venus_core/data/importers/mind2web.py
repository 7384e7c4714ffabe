"""Multimodal-Mind2Web importer (web trajectories).

Source format (osunlp/Multimodal-Mind2Web): one row per action step with `annotation_id` (the
task), `action_uid`, `confirmed_task`, `website`, `domain`, `subdomain`, `operation`
({"op": CLICK | TYPE | SELECT, "original_op", "value"}), `pos_candidates` (the target element(s),
each with `attributes` holding `bounding_box_rect` = "x,y,width,height" in screenshot pixels),
`neg_candidates`, `screenshot` (the full-page screenshot), `target_action_index`,
`action_reprs`, and the page's HTML. Both the release's parquet files (`*.parquet`, read in small
row batches with pyarrow, only the columns used here; `screenshot` is {bytes, path}) and the same
rows as JSON lines (`*.jsonl`, e.g. `datasets`' `to_json`) are read. `operation`, candidates and
`attributes` may be objects or JSON strings (as in the release); in JSON lines `screenshot` is a
path relative to the source, base64 data, or {"bytes": <base64>, "path": ...}. Rows of one task are
consecutive (the release's order) and become one `Trajectory`; steps follow `target_action_index`.

Action mapping (the element box is kept as the step's `target_box`, in 0–1000 of the screenshot):
CLICK -> Click(box=centre of the element); TYPE -> Type(content=value); SELECT -> Type(content=
value) (our choice: the unified space has no select action; typing the option's text into the
focused <select> is how a keyboard user picks it, and it keeps the value Mind2Web scores).
Other ops are quarantined. No scrolling occurs (screenshots are full pages). A task whose rows are
split by another task in the file yields a duplicate id and its second part is quarantined.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from venus_core.actions import Action, Click, Type, render_action
from venus_core.config.registry import IMPORTERS
from venus_core.data.importers.androidcontrol import stage_screenshot
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    failing,
    get,
    number,
    parse_json,
    pixel_box,
    safe_id,
    text,
)
from venus_core.data.importers.sources import file_failure, json_lines, relname
from venus_core.data.schema import Provenance, Trajectory, TrajectoryStep
from venus_core.data.store import AnyRecord


COLUMNS = ("annotation_id", "action_uid", "confirmed_task", "website", "domain", "subdomain",
           "operation", "pos_candidates", "screenshot", "target_action_index")


def _obj(value: Any, field: str) -> dict[str, Any]:
    """An object given inline or as a JSON string."""
    if isinstance(value, str):
        value = parse_json(value, field)
    if not isinstance(value, dict):
        raise Reject(field, f"expected an object, got {type(value).__name__}", "bad_record")
    return value


def element_rect(row: dict[str, Any], field: str) -> tuple[float, float, float, float]:
    """(x1, y1, x2, y2) pixels of the first positive candidate's bounding_box_rect."""
    cands = get(row, "pos_candidates", field)
    if not isinstance(cands, list) or not cands:
        raise Reject(field, "no positive candidate: the target element is unknown", "bad_box")
    cand = _obj(cands[0], f"{field}[0]")
    attrs = _obj(get(cand, "attributes", f"{field}[0].attributes"), f"{field}[0].attributes")
    rect_field = f"{field}[0].attributes.bounding_box_rect"
    rect = get(attrs, "bounding_box_rect", rect_field)
    parts = rect.split(",") if isinstance(rect, str) else rect
    if not isinstance(parts, list) or len(parts) != 4:
        raise Reject(rect_field, f"expected 'x,y,width,height', got {rect!r}", "bad_box")
    try:
        x, y, w, h = (number(float(p) if isinstance(p, str) else p, rect_field) for p in parts)
    except ValueError:
        raise Reject(rect_field, f"expected 'x,y,width,height', got {rect!r}", "bad_box") from None
    return x, y, x + w, y + h


def _step_index(value: Any) -> int | None:
    """target_action_index as an int (the release stores it as a string), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return None


def build_task(stage: ImageStage, rows: list[tuple[int, dict[str, Any]]], label: str = "line") -> list[AnyRecord]:
    first = rows[0][1]
    aid = text(get(first, "annotation_id", "annotation_id"), "annotation_id")
    goal = text(get(first, "confirmed_task", "confirmed_task"), "confirmed_task")
    order = [_step_index(r.get("target_action_index")) for _, r in rows]
    if all(o is not None for o in order):
        rows = [r for _, r in sorted(zip(order, rows), key=lambda t: t[0])]  # type: ignore[arg-type, return-value]
    steps: list[TrajectoryStep] = []
    for i, (lineno, row) in enumerate(rows):
        field = f"{label} {lineno}"
        op = _obj(get(row, "operation", f"{field}.operation"), f"{field}.operation")
        name = get(op, "op", f"{field}.operation.op")
        img = stage_screenshot(stage, get(row, "screenshot", f"{field}.screenshot"), f"{field}.screenshot")
        x1, y1, x2, y2 = element_rect(row, f"{field}.pos_candidates")
        box = pixel_box(x1, y1, x2, y2, img.size, f"{field}.pos_candidates")
        action: Action
        if name == "CLICK":
            action = Click(box=((box[0] + box[2] + 1) // 2, (box[1] + box[3] + 1) // 2))
        elif name in ("TYPE", "SELECT"):
            action = Type(content=text(op.get("value"), f"{field}.operation.value", allow_empty=True))
        else:
            raise Reject(f"{field}.operation.op", f"unknown operation {name!r}", "unknown_action")
        meta = {"op": name, **{k: row[k] for k in ("action_uid",) if isinstance(row.get(k), str)}}
        if isinstance(op.get("original_op"), str):
            meta["original_op"] = op["original_op"]
        steps.append(TrajectoryStep(image=img.ref, image_size=img.size, think="",
                                    action=render_action(action), conclusion="",
                                    target_box=box, meta=meta))
    meta = {k: first[k] for k in ("website", "domain", "subdomain") if isinstance(first.get(k), str)}
    return [Trajectory(
        id=safe_id("mind2web", aid), episode_id=safe_id(aid), platform="web", goal=goal,
        steps=steps, success=True, provenance=Provenance(source="mind2web", source_id=aid), meta=meta,
    )]


def _task_candidate(rel: str, rows: list[tuple[int, dict[str, Any]]], label: str) -> Candidate:
    aid = rows[0][1].get("annotation_id")
    return Candidate(f"task:{aid}#{rows[0][0]}", rel, rows[0][0], lambda stage: build_task(stage, rows, label))


def parquet_rows(root: SourceRoot, path: Path) -> Iterator[tuple[int, Any, Reject | None]]:
    """(row number from 1, row dict, None) per row of a parquet file, a few rows in memory at a time.

    Only the columns the importer uses are read (the page HTML columns are large). An unsafe or
    unreadable file yields a single (0, None, Reject). Needs pyarrow.
    """
    try:
        real = root.resolve(relname(root, path), "<file>")
    except Reject as rej:
        yield 0, None, rej
        return
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise RuntimeError(f"{path}: reading parquet needs pyarrow (pip install pyarrow)") from None
    try:
        pf = pq.ParquetFile(real)
        columns = [c for c in COLUMNS if c in pf.schema_arrow.names]
        batches = pf.iter_batches(batch_size=8, columns=columns)
        n = 0
        for batch in batches:
            for row in batch.to_pylist():
                n += 1
                yield n, row, None
    except (OSError, ValueError) as exc:  # pyarrow's ArrowInvalid is a ValueError
        yield 0, None, Reject("<file>", f"not a readable parquet file: {exc}", "bad_record")


def _scan(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    files = sorted([*root.files("*.jsonl"), *root.files("*.parquet")])
    for path in files:
        rel = relname(root, path)
        label = "row" if path.suffix == ".parquet" else "line"
        rows = parquet_rows(root, path) if label == "row" else json_lines(root, path)
        group: list[tuple[int, dict[str, Any]]] = []
        for lineno, obj, rej in rows:
            if rej is not None and lineno == 0:
                yield file_failure(root, path, rej)
                break
            aid = obj.get("annotation_id") if isinstance(obj, dict) else None
            if rej is not None or not isinstance(aid, str) or not aid.strip():
                if group:
                    yield _task_candidate(rel, group, label)
                    group = []
                rej = rej or Reject("annotation_id", f"missing or not a string: {aid!r}", "bad_record")
                yield Candidate(f"{rel}#{lineno}", rel, lineno, failing(rej.field, rej.reason, rej.code))
                continue
            if group and group[0][1].get("annotation_id") != aid:
                yield _task_candidate(rel, group, label)
                group = []
            group.append((lineno, obj))
        if group:
            yield _task_candidate(rel, group, label)


MIND2WEB = IMPORTERS.register("mind2web", Importer(
    name="mind2web",
    description="Multimodal-Mind2Web rows (JSON lines) -> web trajectories",
    scan=_scan,
    options={},
), description="Multimodal-Mind2Web rows (JSON lines) -> web trajectories")
