"""The project's own format: copy a Venus dataset directory and re-validate every record and image.

Why: a dataset from elsewhere (another team, an older run, a hand edit) is as untrusted as a public
one. Copying it through the importer re-checks each record with the schema (including canonical
actions), each image (path safe, decodes within the pixel limit, content hash equals its ref, size
equals the record's `image_size`), and quarantines what fails instead of refusing the whole
dataset the way `venus data validate` does. Shard names come from the source manifest and are
resolved like any other untrusted path. Shard sha256s and manifest counts are not compared: every
record is checked individually and the output gets a fresh manifest. No scrolling is involved.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from venus_core.config.registry import IMPORTERS
from venus_core.data.images import image_relpath
from venus_core.data.importers.base import (
    Candidate,
    ImageStage,
    Importer,
    Reject,
    SourceRoot,
    failing,
)
from venus_core.data.importers.sources import file_failure, json_lines
from venus_core.data.schema import RecordError, parse_record, record_images
from venus_core.data.store import MANIFEST_NAME, SHARD_DIR, AnyRecord, load_manifest


def build_record(stage: ImageStage, obj: Any, where: str) -> list[AnyRecord]:
    try:
        record = parse_record(obj, where=where)
    except RecordError as exc:
        field, etype, msg = exc.errors[0] if exc.errors else ("<record>", "schema", str(exc))
        more = f" (+{len(exc.errors) - 1} more)" if len(exc.errors) > 1 else ""
        raise Reject(field or "<record>", f"{msg}{more}", "schema") from None
    for ref, size, field in record_images(record):
        staged = stage.from_file(image_relpath(ref), field)
        if staged.ref != ref:
            raise Reject(field, f"image file of {ref} holds different content ({staged.ref})", "bad_image")
        if staged.size != tuple(size):
            raise Reject(field, f"image_size {tuple(size)} but the image is {staged.width}x{staged.height}",
                         "bad_image")
    return [record]


def _scan(root: SourceRoot, options: dict[str, str]) -> Iterator[Candidate]:
    if not (root.path / MANIFEST_NAME).is_file():
        raise FileNotFoundError(f"{root.path}: no {MANIFEST_NAME}; not a Venus dataset")
    manifest = load_manifest(root.path)
    for shard in manifest.shards:
        path = root.path / SHARD_DIR / shard.name
        rel = f"{SHARD_DIR}/{shard.name}"
        for lineno, obj, rej in json_lines(root, path):
            if rej is not None:
                yield (file_failure(root, path, rej) if lineno == 0 else
                       Candidate(f"{rel}#{lineno}", rel, lineno,
                                 failing(rej.field, rej.reason, rej.code)))
                continue
            where = f"{rel}:{lineno}"
            yield Candidate(f"{rel}#{lineno}", rel, lineno,
                            lambda stage, obj=obj, where=where: build_record(stage, obj, where))


VENUS = IMPORTERS.register("venus", Importer(
    name="venus",
    description="a Venus dataset directory: copy with every record and image re-validated",
    scan=_scan,
    options={},
), description="a Venus dataset directory: copy with every record and image re-validated")

