"""The artifact store interface and the parts both backends share.

Every pipeline stage hands datasets, checkpoints and reports to the next one through this interface,
so its guarantees are the platform's provenance guarantees (docs/architecture.md, rule 8):
- every object carries the sha256 of its bytes, recorded at upload and verified on every download;
- a directory artifact (`put_dir`) becomes visible only as a whole: readers require the completion
  marker `<prefix>/_SUCCESS`, a JSON manifest of every file with its size and sha256, written last;
  a prefix without it is reported as incomplete instead of being read half-written.
"""

from __future__ import annotations

import hashlib
import json
import os
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from venus_core.io.storage.errors import IncompleteArtifactError, IntegrityError, InvalidKeyError, StorageError
from venus_core.io.storage.keys import MARKER, join, validate_key

MANIFEST_FORMAT = "venus.artifact-manifest/1"
CHUNK = 1 << 20


@dataclass(frozen=True)
class ObjectInfo:
    """One stored object: its key relative to the store root, size in bytes and sha256 (hex).

    `sha256` is None only for objects that were written by something other than this interface.
    """

    key: str
    size: int
    sha256: str | None


def sha256_file(path: Path) -> tuple[str, int]:
    """(hex sha256, size) of a local file, read in 1 MiB chunks."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while chunk := f.read(CHUNK):
            h.update(chunk)
            size += len(chunk)
    return h.hexdigest(), size


def local_files(local_dir: Path) -> list[tuple[str, Path]]:
    """Every regular file under `local_dir` as (relative key, path), sorted; refuses what cannot be published."""
    if not local_dir.is_dir():
        raise StorageError(f"put_dir: {local_dir} is not a directory")
    found: list[tuple[str, Path]] = []
    for dirpath, _dirs, files in os.walk(local_dir):
        for name in files:
            path = Path(dirpath) / name
            rel = path.relative_to(local_dir).as_posix()
            try:
                validate_key(rel, what=f"file name in {local_dir}")
            except InvalidKeyError as exc:
                raise InvalidKeyError(f"put_dir: {path}: {exc}") from None
            if not path.is_file():
                raise StorageError(f"put_dir: {path} is not a regular file (broken link, socket or device)")
            found.append((rel, path))
    if not found:
        raise StorageError(f"put_dir: {local_dir} contains no files; refusing to publish an empty artifact")
    if any(rel == MARKER for rel, _ in found):
        raise StorageError(f"put_dir: {local_dir / MARKER} would collide with the completion marker {MARKER!r}")
    return sorted(found)


def manifest_bytes(prefix: str, files: list[ObjectInfo]) -> bytes:
    """The completion marker's content: keys relative to `prefix`, with size and sha256."""
    entries = [{"path": f.key[len(prefix) + 1:], "size": f.size, "sha256": f.sha256} for f in files]
    return json.dumps({"format": MANIFEST_FORMAT, "prefix": prefix, "files": entries}, indent=1).encode()


def parse_manifest(data: bytes, where: str) -> list[tuple[str, int, str]]:
    """(relative path, size, sha256) for each file of a marker; `where` names it in errors."""
    try:
        doc = json.loads(data)
        if doc.get("format") != MANIFEST_FORMAT:
            raise ValueError(f"format is {doc.get('format')!r}, expected {MANIFEST_FORMAT!r}")
        out = []
        for i, e in enumerate(doc["files"]):
            rel = validate_key(e["path"], what=f"files[{i}].path")
            if not isinstance(e["size"], int) or not isinstance(e["sha256"], str) or len(e["sha256"]) != 64:
                raise ValueError(f"files[{i}]: size must be an int and sha256 a 64-char hex string")
            out.append((rel, e["size"], e["sha256"]))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise StorageError(f"corrupt completion marker {where}: {exc}") from None


def local_target(dest: Path, rel: str, what: str) -> Path:
    """`dest / rel` for a manifest entry, refused when it resolves outside `dest` (a symlink already
    in the destination pointing elsewhere; the entry itself was validated as a key)."""
    target = dest / rel
    if not target.resolve().is_relative_to(dest.resolve()):
        raise StorageError(f"{what}: manifest entry {rel!r} resolves outside {dest} (a symlink in the destination?)")
    return target


def check_prefix(prefix: str) -> str:
    return validate_key(prefix, what="prefix")


class ArtifactStore(ABC):
    """One interface over `file://` and `s3://` stores. Keys are '/'-separated and relative to the root."""

    root_uri: str

    def uri_for(self, key: str) -> str:
        """The full URI of `key` (e.g. `s3://bucket/prefix/key`), suitable for provenance records."""
        return f"{self.root_uri.rstrip('/')}/{validate_key(key)}"

    @abstractmethod
    def put_file(self, local: str | os.PathLike[str], key: str) -> ObjectInfo:
        """Upload one file (atomically replacing any object at `key`); its sha256 goes into the metadata."""

    @abstractmethod
    def put_bytes(self, data: bytes, key: str) -> ObjectInfo:
        """Store a small in-memory payload (reports, manifests) like `put_file`."""

    @abstractmethod
    def get_file(self, key: str, local: str | os.PathLike[str]) -> ObjectInfo:
        """Download `key` to `local` (written atomically), verifying the sha256; a mismatch raises IntegrityError."""

    @abstractmethod
    def get_bytes(self, key: str) -> bytes:
        """Read a small object fully into memory, verifying the sha256."""

    @abstractmethod
    def exists(self, key: str) -> bool:
        """True if an object is stored at exactly `key`."""

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Sorted keys equal to or below `prefix` (segment-wise), excluding the store's internals."""

    @abstractmethod
    def stat(self, key: str) -> ObjectInfo:
        """Size and recorded sha256 of `key`; ArtifactNotFoundError if absent."""

    @abstractmethod
    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        """Remove one object; ArtifactNotFoundError if absent unless `missing_ok`."""

    @abstractmethod
    def put_dir(self, local_dir: str | os.PathLike[str], prefix: str, *, overwrite: bool = False) -> list[ObjectInfo]:
        """Publish every file under `local_dir` below `prefix`, atomically, ending with the `_SUCCESS` marker.

        Returns the listing (keys relative to the store root, sizes, sha256s). An existing artifact at
        `prefix` raises ArtifactExistsError unless `overwrite`.
        """

    def is_complete(self, prefix: str) -> bool:
        """True if `prefix` holds a published directory artifact (its completion marker exists)."""
        return self.exists(join(check_prefix(prefix), MARKER))

    def read_manifest(self, prefix: str) -> list[ObjectInfo]:
        """The published listing of a directory artifact; IncompleteArtifactError without its marker."""
        prefix = check_prefix(prefix)
        marker = join(prefix, MARKER)
        if not self.exists(marker):
            present = len(self.list(prefix))
            state = f"{present} object(s) but no completion marker" if present else "nothing"
            raise IncompleteArtifactError(
                f"{self.uri_for(prefix)} is not a complete artifact: it holds {state} "
                f"({MARKER} is written last by put_dir; a failed or running publish leaves it out)"
            )
        files = parse_manifest(self.get_bytes(marker), self.uri_for(marker))
        return [ObjectInfo(join(prefix, rel), size, sha) for rel, size, sha in files]

    def get_dir(self, prefix: str, local_dir: str | os.PathLike[str]) -> list[ObjectInfo]:
        """Download a published directory artifact, every file checked against its manifest entry."""
        dest = Path(local_dir)
        listing = self.read_manifest(prefix)
        for entry in listing:
            rel = entry.key[len(prefix) + 1:]
            got = self.get_file(entry.key, local_target(dest, rel, self.uri_for(prefix)))
            if got.sha256 != entry.sha256 or got.size != entry.size:
                raise IntegrityError(
                    f"{self.uri_for(entry.key)}: stored object (sha256 {got.sha256}, {got.size} bytes) does not "
                    f"match the manifest of {prefix!r} (sha256 {entry.sha256}, {entry.size} bytes)"
                )
        return listing
