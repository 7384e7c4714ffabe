"""On-disk dataset format: sharded JSONL + content-addressed PNG store + manifest.json.

Layout of a dataset directory DIR:

    DIR/manifest.json                     Manifest (schema version, counts, shard sha256s, ...)
    DIR/shards/part-00000.jsonl           one record per line (pydantic JSON), `shard_records` a shard
    DIR/images/ab/<sha256>.png            PNG bytes named by their own sha256 ("sha256:<hex>" refs)

Why this shape: JSONL shards stream (a reader never holds more than one line), diff and grep
well, and can be sharded across data-loader workers; content addressing dedupes the many
near-identical screenshots of navigation episodes and makes every image reference verifiable;
the manifest lets a consumer check counts and hashes before a multi-hour training run.

Writes are atomic: a `DatasetWriter` builds everything in a sibling `DIR.tmp-<rand>` directory,
fsyncs it and renames it to DIR on `close()`; an exception inside the `with` block deletes the
temporary directory, so DIR is either absent (or the old dataset) or complete. With
`overwrite=True` an existing DIR is replaced only if it looks like a dataset (has manifest.json)
or is empty, so a typo cannot wipe an unrelated directory.

Every image is checked on `put_image` (PIL verify + full decode, at most `MAX_IMAGE_PIXELS`
pixels, refusing decompression bombs before decoding; see `venus_core.data.images`). PNG bytes
are stored unchanged; other formats and PIL images are encoded to PNG first.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timezone
from pathlib import Path
from types import TracebackType
from typing import Any

from PIL import Image
from pydantic import BaseModel, ConfigDict, Field

import venus_core
from venus_core.data import images as _images
from venus_core.data.images import IMAGE_DIR, ImageError, decode_image, encode_png, image_relpath
from venus_core.data.schema import (
    SCHEMA_VERSION,
    GroundingSample,
    NavigationStep,
    QASample,
    Trajectory,
    image_ref,
    parse_record,
    record_images,
)

MANIFEST_NAME = "manifest.json"
SHARD_DIR = "shards"

AnyRecord = GroundingSample | NavigationStep | Trajectory | QASample


class ShardInfo(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(description="file name under shards/")
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    records: int = Field(ge=0)
    bytes: int = Field(ge=0)


class Manifest(BaseModel):
    """What a dataset directory holds; written last, so its presence means the dataset is whole."""

    model_config = ConfigDict(extra="forbid")

    schema_version: int = Field(description="venus_core.data.schema.SCHEMA_VERSION when written")
    created_at: str = Field(description="UTC ISO-8601 time of close()")
    created_by: str = Field(description="program / generator that wrote the dataset")
    venus_version: str
    sources: list[str] = Field(description="inputs given to the writer + provenance sources")
    records: int = Field(ge=0)
    counts_by_domain: dict[str, int]
    counts_by_kind: dict[str, int]
    shards: list[ShardInfo]
    images: int = Field(ge=0, description="distinct images in images/")
    image_bytes: int = Field(ge=0)


def load_manifest(path: str | Path) -> Manifest:
    """Read DIR/manifest.json; errors name the file."""
    file = Path(path) / MANIFEST_NAME
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise FileNotFoundError(f"{file}: no manifest; not a Venus dataset (or not finished)") from None
    try:
        manifest = Manifest.model_validate_json(text)
    except ValueError as exc:
        raise ValueError(f"{file}: invalid manifest: {exc}") from None
    if manifest.schema_version != SCHEMA_VERSION:
        raise ValueError(
            f"{file}: schema_version {manifest.schema_version} is not supported "
            f"(this venus_core reads {SCHEMA_VERSION})"
        )
    return manifest


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_dir(path: Path) -> None:
    try:
        _fsync_file(path)
    except OSError:  # some file systems cannot fsync a directory; the data files were synced
        pass


def _write_synced(path: Path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


class DatasetWriter:
    """Writes a dataset directory atomically. Use as a context manager or call close()."""

    def __init__(
        self,
        path: str | Path,
        *,
        shard_records: int = 1000,
        sources: list[str] | None = None,
        overwrite: bool = False,
        created_by: str | None = None,
        created_at: str | None = None,
    ) -> None:
        """`created_at` fixes the manifest's time stamp (deterministic generators pass one so that
        the same inputs give a byte-identical dataset); by default it is the time of close()."""
        if isinstance(shard_records, bool) or not isinstance(shard_records, int) or shard_records < 1:
            raise ValueError(f"shard_records must be a positive integer, got {shard_records!r}")
        self.path = Path(path).absolute()
        self.shard_records = shard_records
        self.overwrite = overwrite
        self.created_by = created_by or "venus_core.data.DatasetWriter"
        self.created_at = created_at
        self._sources = set(sources or [])
        self._check_target()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.tmp = self.path.parent / f"{self.path.name}.tmp-{secrets.token_hex(4)}"
        self.tmp.mkdir()
        (self.tmp / SHARD_DIR).mkdir()
        (self.tmp / IMAGE_DIR).mkdir()
        self._image_sizes: dict[str, tuple[int, int]] = {}
        self._image_bytes = 0
        self._ids: set[str] = set()
        self._by_domain: Counter[str] = Counter()
        self._by_kind: Counter[str] = Counter()
        self._shards: list[ShardInfo] = []
        self._shard_file: Any = None
        self._shard_hash: Any = None
        self._shard_count = 0
        self._shard_bytes = 0
        self._closed = False
        self.manifest: Manifest | None = None

    def __enter__(self) -> DatasetWriter:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._closed:
            self.close()

    def _check_target(self) -> None:
        if not self.path.exists():
            return
        if not self.overwrite:
            raise FileExistsError(f"{self.path} exists; pass overwrite=True to replace it")
        if not self.path.is_dir():
            raise FileExistsError(f"{self.path} exists and is not a directory; refusing to replace it")
        if not (self.path / MANIFEST_NAME).is_file() and any(self.path.iterdir()):
            raise FileExistsError(
                f"{self.path} is a non-empty directory without {MANIFEST_NAME}; refusing to "
                "overwrite something that is not a Venus dataset"
            )

    def _ensure_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"DatasetWriter for {self.path} is closed")

    def put_image(self, image: bytes | Image.Image) -> str:
        """Store an image (PNG-encoded if needed) and return its ref; identical images share one file."""
        self._ensure_open()
        if isinstance(image, Image.Image):
            _images.check_pixels(image.width, image.height, "image")
            data = encode_png(image)
            size = image.size
        elif isinstance(image, (bytes, bytearray, memoryview)):
            data = bytes(image)
            decoded = decode_image(data)
            size = decoded.size
            if decoded.format != "PNG":
                data = encode_png(decoded)
        else:
            raise TypeError(f"put_image takes bytes or a PIL image, not {type(image).__name__}")
        ref = image_ref(hashlib.sha256(data).hexdigest())
        if ref not in self._image_sizes:
            target = self.tmp / image_relpath(ref)
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(data)  # made durable in one go by close() (os.sync before the rename)
            self._image_sizes[ref] = (int(size[0]), int(size[1]))
            self._image_bytes += len(data)
        return ref

    def image_size(self, ref: str) -> tuple[int, int]:
        """(width, height) of an image already put in this writer."""
        try:
            return self._image_sizes[ref]
        except KeyError:
            raise KeyError(f"image {ref} was not put in this dataset") from None

    def write(self, record: AnyRecord | dict[str, Any]) -> None:
        """Append a record; its images must be in the store with the size the record claims."""
        self._ensure_open()
        if isinstance(record, dict):
            record = parse_record(record, where=f"record #{sum(self._by_kind.values())}")
        if not isinstance(record, (GroundingSample, NavigationStep, Trajectory, QASample)):
            raise TypeError(f"write takes a record model, not {type(record).__name__}")
        if record.id in self._ids:
            raise ValueError(f"record {record.id!r}: duplicate id in {self.path}")
        for ref, size, field in record_images(record):
            if ref not in self._image_sizes:
                raise ValueError(f"record {record.id!r}: {field} {ref} was not put in this dataset")
            actual = self._image_sizes[ref]
            if tuple(size) != actual:
                raise ValueError(
                    f"record {record.id!r}: {field} has image_size {tuple(size)} "
                    f"but the stored image is {actual}"
                )
        line = (record.model_dump_json() + "\n").encode("utf-8")
        if self._shard_file is None:
            self._open_shard()
        self._shard_file.write(line)
        self._shard_hash.update(line)
        self._shard_count += 1
        self._shard_bytes += len(line)
        self._ids.add(record.id)
        self._by_domain[record.domain] += 1
        self._by_kind[record.kind] += 1
        self._sources.add(record.provenance.source)
        if self._shard_count >= self.shard_records:
            self._close_shard()

    def copy_record(self, record: AnyRecord, reader: DatasetReader) -> None:
        """Append a record read from another dataset, copying the images it needs from `reader`."""
        for ref, _size, _field in record_images(record):
            if ref not in self._image_sizes:
                self.put_image(reader.image_path(ref).read_bytes())
        self.write(record)

    def _open_shard(self) -> None:
        name = f"part-{len(self._shards):05d}.jsonl"
        self._shard_file = open(self.tmp / SHARD_DIR / name, "wb")  # noqa: SIM115 - closed in _close_shard
        self._shard_name = name
        self._shard_hash = hashlib.sha256()
        self._shard_count = 0
        self._shard_bytes = 0

    def _close_shard(self) -> None:
        f = self._shard_file
        f.flush()
        os.fsync(f.fileno())
        f.close()
        self._shards.append(
            ShardInfo(
                name=self._shard_name,
                sha256=self._shard_hash.hexdigest(),
                records=self._shard_count,
                bytes=self._shard_bytes,
            )
        )
        self._shard_file = None

    def close(self) -> Manifest:
        """Finish shards, write the manifest, fsync and move the dataset into place."""
        self._ensure_open()
        try:
            if self._shard_file is not None:
                self._close_shard()
            manifest = Manifest(
                schema_version=SCHEMA_VERSION,
                created_at=self.created_at
                or datetime.now(timezone.utc).isoformat(timespec="seconds"),
                created_by=self.created_by,
                venus_version=venus_core.__version__,
                sources=sorted(self._sources),
                records=sum(self._by_kind.values()),
                counts_by_domain=dict(sorted(self._by_domain.items())),
                counts_by_kind=dict(sorted(self._by_kind.items())),
                shards=self._shards,
                images=len(self._image_sizes),
                image_bytes=self._image_bytes,
            )
            _write_synced(
                self.tmp / MANIFEST_NAME, (manifest.model_dump_json(indent=2) + "\n").encode()
            )
            # One flush for every image written (a per-file fsync cost ~20 % of synthetic-data
            # generation); the rename below only happens after it.
            os.sync()
            for sub in (self.tmp / IMAGE_DIR).iterdir():
                _fsync_dir(sub)
            for sub in (self.tmp / SHARD_DIR, self.tmp / IMAGE_DIR, self.tmp):
                _fsync_dir(sub)
            self._move_into_place()
        except BaseException:
            self.abort()
            raise
        self._closed = True
        self.manifest = manifest
        return manifest

    def _move_into_place(self) -> None:
        old: Path | None = None
        if self.path.exists():
            self._check_target()  # the target may have appeared since __init__
            old = self.path.parent / f"{self.path.name}.old-{secrets.token_hex(4)}"
            os.rename(self.path, old)
        try:
            os.rename(self.tmp, self.path)
        except BaseException:
            if old is not None:
                os.rename(old, self.path)
            raise
        _fsync_dir(self.path.parent)
        if old is not None:
            shutil.rmtree(old)

    def abort(self) -> None:
        """Discard everything written; the target is left as it was."""
        if self._shard_file is not None:
            self._shard_file.close()
            self._shard_file = None
        shutil.rmtree(self.tmp, ignore_errors=True)
        self._closed = True


class DatasetReader:
    """Streams the records of a dataset directory, shard by shard."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.manifest = load_manifest(self.path)

    def __len__(self) -> int:
        return self.manifest.records

    def __iter__(self) -> Iterator[AnyRecord]:
        for shard in self.manifest.shards:
            file = self.path / SHARD_DIR / shard.name
            with open(file, encoding="utf-8") as f:
                for lineno, line in enumerate(f, start=1):
                    where = f"{file}:{lineno}"
                    try:
                        obj = json.loads(line)
                    except json.JSONDecodeError as exc:
                        raise ValueError(f"{where}: not valid JSON: {exc}") from None
                    yield parse_record(obj, where=where)

    def iter_records(
        self, *, kind: str | None = None, domain: str | None = None
    ) -> Iterator[AnyRecord]:
        """Stream only the records of one kind and/or domain."""
        for record in self:
            if (kind is None or record.kind == kind) and (domain is None or record.domain == domain):
                yield record

    def image_path(self, ref: str) -> Path:
        return self.path / image_relpath(ref)

    def open_image(self, ref: str) -> Image.Image:
        """The decoded image (fully loaded); errors name the ref and the dataset."""
        file = self.image_path(ref)
        try:
            data = file.read_bytes()
        except FileNotFoundError:
            raise FileNotFoundError(f"{self.path}: image {ref} is missing ({file})") from None
        try:
            return decode_image(data)
        except ImageError as exc:
            raise ImageError(f"{file}: {exc}") from None
