"""Runs one importer over a source directory: dataset, quarantine, checkpoint and report.

Output directory DIR (a normal Venus dataset plus three files):

    DIR/manifest.json, shards/, images/   the imported records (venus_core.data.store layout)
    DIR/quarantine.jsonl                  one line per rejected source record: source_file,
                                          index (line / list index, null for a whole file),
                                          source_id, field, code, reason
    DIR/import_checkpoint.txt             source ids processed so far (imported or quarantined)
    DIR/import_report.json                ImportReport; written last, its presence = finished

Invariant, checked before anything is written: imported + quarantined == read, where `read`
counts source records (an episode, a grounding entry, a Mind2Web task); nothing is dropped
silently.

Resuming: the dataset is written atomically (`DatasetWriter`), so an interrupted import leaves
no partial output and re-running it gives the same dataset (records in source order, ids derived
from source ids, fixed manifest time stamp): imports are idempotent. `resume=True` on a DIR that
holds a finished import of the same format continues from its checkpoint: the records, images and
quarantine lines already there are carried over and only source records whose id is not in
`import_checkpoint.txt` are processed (e.g. a source that grew, or options that changed nothing
for old records). Counts in the report are cumulative.

Memory: one source record (an episode's screenshots) plus the ids seen (needed to refuse
duplicate ids); source annotation files are parsed one file at a time.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from venus_core.config.registry import IMPORTERS
from venus_core.data.importers.base import Candidate, ImageStage, Importer, Reject, SourceRoot
from venus_core.data.images import image_relpath
from venus_core.data.schema import record_images
from venus_core.data.store import MANIFEST_NAME, DatasetReader, DatasetWriter

REPORT_NAME = "import_report.json"
QUARANTINE_NAME = "quarantine.jsonl"
CHECKPOINT_NAME = "import_checkpoint.txt"
IMPORT_EPOCH = "1970-01-01T00:00:00+00:00"
"""Manifest time stamp of imported datasets: fixed, so that an import is reproducible byte for byte."""


class ImportReport(BaseModel):
    """Summary of an import (DIR/import_report.json)."""

    model_config = ConfigDict(extra="forbid")

    format: str
    source: str
    output: str
    options: dict[str, str] = Field(default_factory=dict)
    read: int = Field(ge=0, description="source records seen (cumulative over resumed runs)")
    imported: int = Field(ge=0, description="source records turned into dataset records")
    quarantined: int = Field(ge=0, description="source records rejected (see quarantine.jsonl)")
    records: int = Field(ge=0, description="records in the dataset")
    images: int = Field(ge=0, description="distinct images in the dataset")
    quarantined_by_code: dict[str, int] = Field(default_factory=dict)
    resumed_from: int = Field(0, ge=0, description="source records carried over from a previous run")
    elapsed_s: float = Field(ge=0, description="wall time of this run")
    records_per_s: float = Field(ge=0, description="source records processed per second, this run")


def _quarantine_line(cand: Candidate, rej: Reject) -> str:
    """One JSON line; characters UTF-8 cannot hold (the surrogates by which Python names a file
    whose name is not UTF-8) are written as \\u escapes, so the line stays valid and lossless."""
    entry = {
        "source_file": cand.file,
        "index": cand.index,
        "source_id": cand.source_id,
        "field": rej.field,
        "code": rej.code,
        "reason": rej.reason,
    }
    line = json.dumps(entry, ensure_ascii=False)
    try:
        line.encode("utf-8")
    except UnicodeEncodeError:
        line = json.dumps(entry, ensure_ascii=True)
    return line + "\n"


def _schema_reject(exc: ValidationError) -> Reject:
    errs = exc.errors(include_url=False)
    first = errs[0] if errs else {"loc": (), "msg": str(exc)}
    field = ".".join(str(p) for p in first["loc"]) or "<record>"
    more = f" (+{len(errs) - 1} more)" if len(errs) > 1 else ""
    return Reject(field, f"{first['msg']}{more}", "schema")


def load_report(out: str | Path) -> ImportReport:
    """DIR/import_report.json of a finished import; errors name the file."""
    file = Path(out) / REPORT_NAME
    try:
        return ImportReport.model_validate_json(file.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{file}: no import report; not a finished import") from None
    except ValueError as exc:
        raise ValueError(f"{file}: invalid import report: {exc}") from None


class _Run:
    def __init__(self, writer: DatasetWriter, staging: Path, root: SourceRoot) -> None:
        self.writer = writer
        self.images = ImageStage(root, writer)
        self.quarantine = open(staging / QUARANTINE_NAME, "w", encoding="utf-8")  # noqa: SIM115
        # source ids name files: one whose name is not UTF-8 round-trips through surrogateescape
        self.checkpoint = open(staging / CHECKPOINT_NAME, "w", encoding="utf-8",  # noqa: SIM115
                               errors="surrogateescape")
        self.ids: set[str] = set()
        self.done: set[str] = set()
        self.read = self.imported = self.quarantined = 0
        self.codes: Counter[str] = Counter()

    def carry_over(self, old: Path, prev: ImportReport) -> None:
        """Copy a previous import's records, images, quarantine and checkpoint into this run."""
        reader = DatasetReader(old)
        for record in reader:
            for ref, _size, _field in record_images(record):
                try:
                    self.writer.image_size(ref)
                except KeyError:
                    self.writer.put_image((old / image_relpath(ref)).read_bytes())
            self.writer.write(record)
            self.ids.add(record.id)
        with open(old / QUARANTINE_NAME, encoding="utf-8") as f:
            for line in f:
                self.quarantine.write(line)
        with open(old / CHECKPOINT_NAME, encoding="utf-8", errors="surrogateescape") as f:
            for line in f:
                sid = line.rstrip("\n")
                if sid:
                    self.done.add(sid)
                    self.checkpoint.write(sid + "\n")
        self.read, self.imported, self.quarantined = prev.read, prev.imported, prev.quarantined
        self.codes.update(prev.quarantined_by_code)

    def process(self, cand: Candidate) -> None:
        self.read += 1
        try:
            try:
                records = cand.build(self.images)
            except ValidationError as exc:
                raise _schema_reject(exc) from None
            batch: set[str] = set()
            for rec in records:
                if rec.id in self.ids or rec.id in batch:
                    raise Reject("id", f"duplicate record id {rec.id!r}", "duplicate")
                batch.add(rec.id)
        except Reject as rej:
            self.images.rollback()
            self.quarantined += 1
            self.codes[rej.code] += 1
            self.quarantine.write(_quarantine_line(cand, rej))
        else:
            self.images.commit()
            for rec in records:
                self.writer.write(rec)
            self.ids |= batch
            self.imported += 1
        self.checkpoint.write(cand.source_id + "\n")
        self.done.add(cand.source_id)

    def close_files(self) -> None:
        self.quarantine.close()
        self.checkpoint.close()


def run_import(
    fmt: str,
    src: str | Path,
    out: str | Path,
    *,
    options: dict[str, str] | None = None,
    resume: bool = False,
    overwrite: bool = False,
    progress: Callable[[int, int | None], None] | None = None,
) -> ImportReport:
    """Import the source directory `src` in format `fmt` into the dataset directory `out`.

    `progress(read, None)` is called after each source record (imported or quarantined; carried
    over ones included): the total is not known before the importer's scan ends.
    """
    importer: Importer = IMPORTERS.get(fmt)
    opts = importer.check_options(options or {})
    root = SourceRoot(src)
    out = Path(out).absolute()
    if out.resolve().is_relative_to(root.real) or root.real.is_relative_to(out.resolve()):
        raise ValueError(f"output {out} must not be inside the source {root.path} (or contain it)")
    prev: ImportReport | None = None
    if resume and (out / MANIFEST_NAME).exists():
        prev = load_report(out)
        if prev.format != fmt:
            raise ValueError(f"{out}: holds a {prev.format!r} import; cannot resume it as {fmt!r}")
    elif out.exists() and not overwrite and not resume:
        raise FileExistsError(f"{out} exists; pass --resume to continue it or --overwrite to replace it")
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.import-{secrets.token_hex(4)}"
    staging.mkdir()
    started = time.perf_counter()
    try:
        writer = DatasetWriter(
            out, overwrite=prev is not None or overwrite, sources=[fmt],
            created_by=f"venus_core.data.importers.{fmt}", created_at=IMPORT_EPOCH,
        )
        with writer:
            run = _Run(writer, staging, root)
            try:
                if prev is not None:
                    run.carry_over(out, prev)
                carried = run.read
                for cand in importer.scan(root, opts):
                    if cand.source_id in run.done:
                        continue
                    run.process(cand)
                    if progress is not None:
                        progress(run.read, None)
            finally:
                run.close_files()
            if run.imported + run.quarantined != run.read:  # a bug, never a data problem
                raise RuntimeError(
                    f"counts do not reconcile: imported {run.imported} + quarantined "
                    f"{run.quarantined} != read {run.read}"
                )
            manifest = writer.close()
        elapsed = time.perf_counter() - started
        report = ImportReport(
            format=fmt, source=str(root.path), output=str(out), options=opts,
            read=run.read, imported=run.imported, quarantined=run.quarantined,
            records=manifest.records, images=manifest.images,
            quarantined_by_code=dict(sorted(run.codes.items())), resumed_from=carried,
            elapsed_s=round(elapsed, 3),
            records_per_s=round((run.read - carried) / elapsed, 1) if elapsed > 0 else 0.0,
        )
        for name in (QUARANTINE_NAME, CHECKPOINT_NAME):
            os.replace(staging / name, out / name)
        tmp_report = staging / REPORT_NAME
        tmp_report.write_text(report.model_dump_json(indent=2) + "\n", encoding="utf-8")
        os.replace(tmp_report, out / REPORT_NAME)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return report
