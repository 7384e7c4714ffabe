"""Fetch a published directory artifact (e.g. a dataset in MinIO) to a local directory, resumably.

    report = fetch_dir("s3://venus-data/grounding/v1", "/work/sources/grounding")

Why not `ArtifactStore.get_dir` alone: a multi-GB dataset fetched by a pod that gets preempted
should not start over. Every file is downloaded atomically (temporary name, sha256 checked against
the artifact's manifest, then renamed), so after an interruption the local directory holds only
whole, verified files; the next call keeps each local file whose size and sha256 match the
manifest and downloads only the rest. When everything is in place a stamp file
(`.venus-fetch.json`, holding the sha256 of the remote manifest) lets a later call skip even the
hashing. The source must be an artifact published by the store (`put_dir`, with its `_SUCCESS`
manifest): objects copied into a bucket by other tools carry no sha256 and are refused.
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlsplit

from venus_core.io.storage import open_store
from venus_core.io.storage.base import ArtifactStore, local_target, sha256_file
from venus_core.io.storage.errors import IntegrityError, StorageError
from venus_core.io.storage.keys import MARKER, join

STAMP = ".venus-fetch.json"


@dataclass
class FetchReport:
    """What a fetch did: files downloaded / already present, bytes moved, the manifest digest."""

    uri: str
    local: str
    manifest_sha256: str
    downloaded: list[str] = field(default_factory=list)
    reused: list[str] = field(default_factory=list)
    bytes_downloaded: int = 0
    up_to_date: bool = False

    def to_dict(self) -> dict[str, object]:
        return {"uri": self.uri, "local": self.local, "manifest_sha256": self.manifest_sha256,
                "downloaded": len(self.downloaded), "reused": len(self.reused),
                "bytes_downloaded": self.bytes_downloaded, "up_to_date": self.up_to_date}


def split_uri(uri: str) -> tuple[str, str]:
    """`s3://bucket/a/b` -> ("s3://bucket", "a/b"); `file:///root/a/b` -> ("file:///root/a", "b")."""
    parts = urlsplit(uri)
    path = unquote(parts.path).strip("/")
    if parts.scheme == "s3":
        if not parts.netloc or not path:
            raise StorageError(f"{uri!r}: expected s3://bucket/prefix (a prefix inside the bucket)")
        return f"s3://{parts.netloc}", path
    if parts.scheme == "file":
        raw = unquote(parts.netloc + parts.path).rstrip("/")
        parent, _, name = raw.rpartition("/")
        if not name:
            raise StorageError(f"{uri!r}: names no directory")
        return f"file://{parent or '/'}", name
    raise StorageError(f"{uri!r}: unsupported scheme {parts.scheme!r} (use s3:// or file://)")


def _local_ok(path: Path, size: int, sha: str) -> bool:
    if not path.is_file() or path.stat().st_size != size:
        return False
    return sha256_file(path)[0] == sha


def fetch_dir(uri: str, local_dir: str | os.PathLike[str], *, store: ArtifactStore | None = None,
              stamp: str | os.PathLike[str] | None = None) -> FetchReport:
    """Make `local_dir` an exact, verified copy of the published artifact at `uri`; see the module doc.

    `stamp`: where the stamp file goes (default `local_dir/.venus-fetch.json`); a checkpoint keeps
    it beside the directory, whose SHA256SUMS lists every file in it."""
    root_uri, prefix = split_uri(uri)
    store = store or open_store(root_uri)
    dest = Path(local_dir)
    marker = store.get_bytes(join(prefix, MARKER)) if store.exists(join(prefix, MARKER)) else None
    if marker is None:
        listed = store.list(prefix)
        state = f"{len(listed)} object(s) but no {MARKER} manifest" if listed else "nothing"
        raise StorageError(f"{uri}: not a published artifact ({state}); publish datasets with "
                           f"`open_store(...).put_dir(DIR, PREFIX)` so every file carries its sha256")
    digest = hashlib.sha256(marker).hexdigest()
    report = FetchReport(uri, str(dest), digest)
    stamp = Path(stamp) if stamp is not None else dest / STAMP
    if stamp.is_file():
        try:
            recorded = json.loads(stamp.read_text(encoding="utf-8"))
        except (ValueError, RecursionError):  # a torn or foreign stamp: fetch again
            recorded = None
        if isinstance(recorded, dict) and recorded.get("manifest_sha256") == digest:
            report.up_to_date = True
            return report
        stamp.unlink()
    for entry in store.read_manifest(prefix):
        rel = entry.key[len(prefix) + 1:]
        target = local_target(dest, rel, uri)
        assert entry.sha256 is not None  # parse_manifest requires it
        if _local_ok(target, entry.size, entry.sha256):
            report.reused.append(rel)
            continue
        got = store.get_file(entry.key, target)
        if got.sha256 != entry.sha256 or got.size != entry.size:
            target.unlink(missing_ok=True)
            raise IntegrityError(f"{store.uri_for(entry.key)}: object (sha256 {got.sha256}, {got.size} bytes) does "
                                 f"not match the manifest of {uri} (sha256 {entry.sha256}, {entry.size} bytes)")
        report.downloaded.append(rel)
        report.bytes_downloaded += got.size
    tmp = stamp.with_name(stamp.name + ".tmp")
    tmp.write_text(json.dumps({"uri": uri, "manifest_sha256": digest}), encoding="utf-8")
    os.replace(tmp, stamp)
    return report
