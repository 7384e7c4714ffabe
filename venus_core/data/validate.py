"""Full consistency check of a dataset directory (`venus data validate`).

Why: datasets are produced by many programs (importers, the synthetic world, scoring rewrites)
and consumed by long training runs; a single bad line or missing screenshot should be found in
seconds, with its file, line, record id and field, not as a crash hours into training. The check
streams every shard (memory grows only with the number of distinct record ids and images) and
reconciles everything the manifest claims: shard sha256s and record counts, counts per domain and
kind, the image count; then every record's schema (including navigation action strings, parsed
with `venus_core.actions`) and every referenced image (exists, sha256 matches its name, decodes as
PNG, size equals the record's `image_size`). Images nobody references are a warning, not a
problem. The report keeps the first `max_problems` problems and counts all of them by type.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, computed_field

from venus_core.data.schema import RecordError, parse_record, record_images, ref_digest
from venus_core.data.images import IMAGE_DIR, ImageError, decode_image, image_relpath
from venus_core.data.store import MANIFEST_NAME, SHARD_DIR, Manifest, load_manifest

_IMAGE_NAME_RE = re.compile(r"^[0-9a-f]{64}\.png$")


class Problem(BaseModel):
    """One thing wrong with a dataset, located as precisely as possible."""

    type: str = Field(description="e.g. schema, action, json, shard_sha256, count_mismatch, image_missing")
    file: str = Field(description="path relative to the dataset directory")
    line: int | None = None
    record_id: str | None = None
    field: str | None = None
    message: str


class ValidationReport(BaseModel):
    """Result of validate_dataset: totals, problem counts by type and the first problems."""

    path: str
    max_problems: int
    records_checked: int = 0
    shards_checked: int = 0
    images_checked: int = 0
    problems_found: int = 0
    problems_by_type: dict[str, int] = Field(default_factory=dict)
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    unreferenced_images: int = 0

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return self.problems_found == 0

    def add(self, type: str, file: str, message: str, *, line: int | None = None,
            record_id: str | None = None, field: str | None = None) -> None:
        self.problems_found += 1
        self.problems_by_type[type] = self.problems_by_type.get(type, 0) + 1
        if len(self.problems) < self.max_problems:
            self.problems.append(Problem(type=type, file=file, line=line, record_id=record_id,
                                         field=field, message=message))

    def to_text(self) -> str:
        """A human-readable report: a summary line, problem counts, then a table of problems."""
        status = "OK" if self.ok else f"{self.problems_found} problem(s)"
        out = [
            f"dataset {self.path}: {status}",
            f"checked {self.records_checked} records in {self.shards_checked} shards, "
            f"{self.images_checked} images",
        ]
        if self.problems_by_type:
            out.append("by type: " + ", ".join(f"{k}={v}" for k, v in sorted(self.problems_by_type.items())))
        out += [f"warning: {w}" for w in self.warnings]
        if self.problems:
            header = ("type", "where", "record", "field", "message")
            rows = [(p.type, p.file + (f":{p.line}" if p.line is not None else ""),
                     p.record_id or "-", p.field or "-", p.message) for p in self.problems]
            widths = [max(len(r[i]) for r in [header, *rows]) for i in range(4)]
            for row in [header, *rows]:
                out.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
            if self.problems_found > len(self.problems):
                out.append(f"... {self.problems_found - len(self.problems)} more not shown "
                           f"(raise --max-problems)")
        return "\n".join(out)

    def __str__(self) -> str:
        return self.to_text()


class _ImageUse:
    __slots__ = ("size", "file", "line", "record_id", "field")

    def __init__(self, size: tuple[int, int], file: str, line: int, record_id: str, field: str):
        self.size, self.file, self.line, self.record_id, self.field = size, file, line, record_id, field


def validate_dataset(path: str | Path, *, max_problems: int = 20,
                     check_images: bool = True) -> ValidationReport:
    """Check a dataset directory end to end. `check_images=False` skips hashing and decoding
    images (their existence is still checked)."""
    root = Path(path)
    report = ValidationReport(path=str(root), max_problems=max_problems)
    if not root.is_dir():
        report.add("manifest", str(root), "not a directory")
        return report
    manifest: Manifest | None
    try:
        manifest = load_manifest(root)
    except (OSError, ValueError) as exc:
        report.add("manifest", MANIFEST_NAME, str(exc).replace(f"{root / MANIFEST_NAME}: ", ""))
        manifest = None

    present = sorted(p.name for p in (root / SHARD_DIR).glob("*.jsonl")) if (root / SHARD_DIR).is_dir() else []
    listed = [s.name for s in manifest.shards] if manifest else present
    for name in sorted(set(present) - set(listed)):
        report.add("shard_unlisted", f"{SHARD_DIR}/{name}", "shard file is not listed in the manifest")

    seen_ids: set[str] = set()
    by_domain: Counter[str] = Counter()
    by_kind: Counter[str] = Counter()
    images: dict[str, _ImageUse] = {}
    total = 0
    for i, name in enumerate(listed):
        rel = f"{SHARD_DIR}/{name}"
        file = root / SHARD_DIR / name
        if not file.is_file():
            report.add("shard_missing", rel, "listed in the manifest but missing")
            continue
        digest, count = _check_shard(file, rel, report, seen_ids, by_domain, by_kind, images)
        report.shards_checked += 1
        total += count
        if manifest is not None:
            info = manifest.shards[i]
            if digest != info.sha256:
                report.add("shard_sha256", rel, f"sha256 {digest[:16]}… does not match the manifest's {info.sha256[:16]}…")
            if count != info.records:
                report.add("count_mismatch", rel, f"{count} records, manifest says {info.records}",
                           field="records")

    if manifest is not None:
        if total != manifest.records:
            report.add("count_mismatch", MANIFEST_NAME,
                       f"shards hold {total} records, manifest says {manifest.records}", field="records")
        for field, claimed, seen in (("counts_by_domain", manifest.counts_by_domain, by_domain),
                                     ("counts_by_kind", manifest.counts_by_kind, by_kind)):
            for key in sorted(set(claimed) | set(seen)):
                if claimed.get(key, 0) != seen.get(key, 0):
                    report.add("count_mismatch", MANIFEST_NAME,
                               f"{seen.get(key, 0)} records, manifest says {claimed.get(key, 0)}",
                               field=f"{field}.{key}")

    _check_images(root, report, images, check_images, manifest)
    return report


def _check_shard(file: Path, rel: str, report: ValidationReport, seen_ids: set[str],
                 by_domain: Counter[str], by_kind: Counter[str],
                 images: dict[str, _ImageUse]) -> tuple[str, int]:
    """Stream one shard: hash it, count its lines and check every record. Returns (sha256, lines)."""
    hasher = hashlib.sha256()
    count = 0
    with open(file, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            hasher.update(raw)
            count += 1
            report.records_checked += 1
            try:
                obj: Any = json.loads(raw)
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                report.add("json", rel, f"not valid JSON: {exc}", line=lineno)
                continue
            if isinstance(obj, dict):  # count what the line claims, so one bad field is one problem
                by_domain[str(obj.get("domain"))] += 1
                by_kind[str(obj.get("kind"))] += 1
            rid = obj.get("id") if isinstance(obj, dict) and isinstance(obj.get("id"), str) else None
            if rid is not None:
                if rid in seen_ids:
                    report.add("duplicate_id", rel, "id already used by an earlier record",
                               line=lineno, record_id=rid, field="id")
                seen_ids.add(rid)
            try:
                record = parse_record(obj, where=f"{rel}:{lineno}")
            except RecordError as exc:
                for field, etype, msg in exc.errors:
                    ptype = "action" if etype.startswith("action") else "schema"
                    if field and msg.startswith(f"{field}: "):  # the field has its own column
                        msg = msg[len(field) + 2 :]
                    report.add(ptype, rel, msg, line=lineno, record_id=rid, field=field or None)
                continue
            for ref, size, field in record_images(record):
                use = images.get(ref)
                if use is None:
                    images[ref] = _ImageUse(tuple(size), rel, lineno, record.id, field)  # type: ignore[arg-type]
                elif use.size != tuple(size):
                    report.add("image_size", rel,
                               f"{ref} has image_size {tuple(size)} here but {use.size} in "
                               f"{use.file}:{use.line}", line=lineno, record_id=record.id, field=field)
    return hasher.hexdigest(), count


def _check_images(root: Path, report: ValidationReport, images: dict[str, _ImageUse],
                  check_images: bool, manifest: Manifest | None) -> None:
    stored: set[str] = set()
    image_dir = root / IMAGE_DIR
    if image_dir.is_dir():
        for sub in sorted(image_dir.iterdir()):
            files = sorted(sub.iterdir()) if sub.is_dir() else [sub]
            for file in files:
                rel = file.relative_to(root).as_posix()
                if not _IMAGE_NAME_RE.match(file.name) or sub.name != file.name[:2]:
                    report.add("image_unexpected", rel, "not an images/<2 hex>/<sha256>.png file")
                    continue
                stored.add(f"sha256:{file.name[:-4]}")
    if manifest is not None and manifest.images != len(stored):
        report.add("count_mismatch", MANIFEST_NAME,
                   f"{len(stored)} images stored, manifest says {manifest.images}", field="images")
    unreferenced = len(stored - set(images))
    report.unreferenced_images = unreferenced
    if unreferenced:
        report.warnings.append(f"{unreferenced} stored image(s) are not referenced by any record")

    for ref, use in images.items():
        rel = image_relpath(ref)
        where = dict(line=use.line, record_id=use.record_id, field=use.field)
        if ref not in stored:
            report.add("image_missing", use.file, f"{ref} is not in the image store ({rel})", **where)
            continue
        if not check_images:
            continue
        report.images_checked += 1
        data = (root / rel).read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != ref_digest(ref):
            report.add("image_sha256", rel, f"content sha256 is {digest[:16]}…, not the one in its name", **where)
        try:
            img = decode_image(data)
        except ImageError as exc:
            report.add("image_decode", rel, str(exc), **where)
            continue
        if img.format != "PNG":
            report.add("image_format", rel, f"stored as {img.format}, expected PNG", **where)
        if img.size != use.size:
            report.add("image_size", rel,
                       f"image is {img.size[0]}x{img.size[1]}, record says {use.size[0]}x{use.size[1]}",
                       **where)
