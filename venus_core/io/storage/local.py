"""`file://` backend: the laptop / CI artifact store, with the same guarantees as the bucket.

Layout under the root directory:
- `<key>`                      the object's bytes;
- `.venus/meta/<key>.json`     its size and sha256 (a sidecar, because xattrs are not portable);
- `.venus/tmp/<id>/...`        staging for atomic writes (same filesystem, so rename is atomic).

Writes go to a staging file, are fsynced, then renamed into place (and the directory fsynced), so a
crash never leaves a half-written object under a real key. `put_dir` stages the whole tree
including its `_SUCCESS` marker and renames the directory in one step. No retries here: local
filesystem errors are not transient.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import uuid
from pathlib import Path

from venus_core.io.storage.base import CHUNK, ArtifactStore, ObjectInfo, check_prefix, local_files, manifest_bytes
from venus_core.io.storage.errors import ArtifactExistsError, ArtifactNotFoundError, IntegrityError, StorageError
from venus_core.io.storage.keys import MARKER, RESERVED, join, under, validate_key


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _copy_hashing(src, dst: Path) -> tuple[str, int]:
    """Copy an open binary stream to `dst`, fsync it, return (sha256, size)."""
    h = hashlib.sha256()
    size = 0
    with open(dst, "wb") as out:
        while chunk := src.read(CHUNK):
            h.update(chunk)
            out.write(chunk)
            size += len(chunk)
        out.flush()
        os.fsync(out.fileno())
    return h.hexdigest(), size


class LocalStore(ArtifactStore):
    """Artifact store in a local directory (created if missing)."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            (self.root / RESERVED / "tmp").mkdir(parents=True, exist_ok=True)
            (self.root / RESERVED / "meta").mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(f"cannot create the store directory {self.root}: {exc}") from exc
        self.root_uri = self.root.as_uri()

    # paths -------------------------------------------------------------------------------------------
    def _data(self, key: str) -> Path:
        return self.root / validate_key(key)

    def _meta(self, key: str) -> Path:
        return self.root / RESERVED / "meta" / f"{key}.json"

    def _staging(self) -> Path:
        path = self.root / RESERVED / "tmp" / uuid.uuid4().hex
        path.mkdir()
        return path

    def _read_meta(self, key: str) -> dict:
        try:
            meta = json.loads(self._meta(key).read_text())
            return {"sha256": str(meta["sha256"]), "size": int(meta["size"])}
        except FileNotFoundError:
            return {}
        except (ValueError, KeyError, TypeError) as exc:
            raise StorageError(f"{self.uri_for(key)}: corrupt metadata file {self._meta(key)}: {exc}") from None

    @staticmethod
    def _write_json(path: Path, doc: dict) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
        with open(tmp, "w") as f:
            json.dump(doc, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)

    def _place(self, staged: Path, key: str, sha: str, size: int) -> ObjectInfo:
        dest = self._data(key)
        if dest.is_dir():
            raise StorageError(f"{self.uri_for(key)}: a directory artifact exists at this key; delete it first")
        try:
            dest.parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise StorageError(f"{self.uri_for(key)}: a parent of this key is an object, not a prefix") from None
        self._write_json(self._meta(key), {"sha256": sha, "size": size})
        os.replace(staged, dest)
        _fsync_dir(dest.parent)
        return ObjectInfo(key, size, sha)

    # single objects ---------------------------------------------------------------------------------
    def put_file(self, local: str | os.PathLike[str], key: str) -> ObjectInfo:
        validate_key(key)
        stage = self._staging()
        try:
            try:
                with open(local, "rb") as src:
                    sha, size = _copy_hashing(src, stage / "data")
            except OSError as exc:
                raise StorageError(f"put_file {self.uri_for(key)}: cannot read {local}: {exc}") from exc
            return self._place(stage / "data", key, sha, size)
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def put_bytes(self, data: bytes, key: str) -> ObjectInfo:
        validate_key(key)
        stage = self._staging()
        try:
            (stage / "data").write_bytes(data)
            return self._place(stage / "data", key, hashlib.sha256(data).hexdigest(), len(data))
        finally:
            shutil.rmtree(stage, ignore_errors=True)

    def _verified_source(self, key: str) -> tuple[Path, dict]:
        path = self._data(key)
        if not path.is_file():
            raise ArtifactNotFoundError(f"{self.uri_for(key)} does not exist")
        meta = self._read_meta(key)
        if not meta:
            raise IntegrityError(f"{self.uri_for(key)} has no recorded sha256 (not written through the store)")
        return path, meta

    def _check(self, key: str, meta: dict, sha: str, size: int) -> None:
        if sha != meta["sha256"] or size != meta["size"]:
            raise IntegrityError(
                f"{self.uri_for(key)}: sha256 mismatch: read {sha} ({size} bytes), "
                f"recorded {meta['sha256']} ({meta['size']} bytes)"
            )

    def get_file(self, key: str, local: str | os.PathLike[str]) -> ObjectInfo:
        path, meta = self._verified_source(key)
        dest = Path(local)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.part-{uuid.uuid4().hex}")
        try:
            with open(path, "rb") as src:
                sha, size = _copy_hashing(src, tmp)
            self._check(key, meta, sha, size)
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return ObjectInfo(key, size, sha)

    def get_bytes(self, key: str) -> bytes:
        path, meta = self._verified_source(key)
        data = path.read_bytes()
        self._check(key, meta, hashlib.sha256(data).hexdigest(), len(data))
        return data

    def exists(self, key: str) -> bool:
        return self._data(key).is_file()

    def stat(self, key: str) -> ObjectInfo:
        path = self._data(key)
        if not path.is_file():
            raise ArtifactNotFoundError(f"{self.uri_for(key)} does not exist")
        return ObjectInfo(key, path.stat().st_size, self._read_meta(key).get("sha256"))

    def list(self, prefix: str = "") -> list[str]:
        if prefix:
            validate_key(prefix, what="prefix")
        start = self.root / prefix if prefix else self.root
        if start.is_file():
            return [prefix]
        keys = []
        for dirpath, dirs, files in os.walk(start):
            if Path(dirpath) == self.root:
                dirs[:] = [d for d in dirs if d != RESERVED]
            for name in files:
                key = (Path(dirpath) / name).relative_to(self.root).as_posix()
                if under(key, prefix):
                    keys.append(key)
        return sorted(keys)

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        path = self._data(key)
        if not path.is_file():
            if missing_ok:
                return
            raise ArtifactNotFoundError(f"cannot delete {self.uri_for(key)}: it does not exist")
        path.unlink()
        self._meta(key).unlink(missing_ok=True)

    # directory artifacts ----------------------------------------------------------------------------
    def put_dir(self, local_dir: str | os.PathLike[str], prefix: str, *, overwrite: bool = False) -> list[ObjectInfo]:
        prefix = check_prefix(prefix)
        files = local_files(Path(local_dir))
        final, final_meta = self.root / prefix, self.root / RESERVED / "meta" / prefix
        if final.exists() and not overwrite:
            raise ArtifactExistsError(f"{self.uri_for(prefix)} already exists; pass overwrite=True to replace it")
        stage = self._staging()
        try:
            listing = []
            for rel, path in files:
                staged = stage / "data" / rel
                staged.parent.mkdir(parents=True, exist_ok=True)
                with open(path, "rb") as src:
                    sha, size = _copy_hashing(src, staged)
                self._write_json(stage / "meta" / f"{rel}.json", {"sha256": sha, "size": size})
                listing.append(ObjectInfo(join(prefix, rel), size, sha))
            marker = manifest_bytes(prefix, listing)
            with open(stage / "data" / MARKER, "wb") as f:
                f.write(marker)
                f.flush()
                os.fsync(f.fileno())
            self._write_json(stage / "meta" / f"{MARKER}.json",
                             {"sha256": hashlib.sha256(marker).hexdigest(), "size": len(marker)})
            final.parent.mkdir(parents=True, exist_ok=True)
            final_meta.parent.mkdir(parents=True, exist_ok=True)
            if final.exists() or final.is_symlink():
                if final.is_file():
                    raise StorageError(f"{self.uri_for(prefix)} is an object, not a directory artifact")
                os.replace(final, stage / "old")  # readers now see nothing, never a mix of old and new
            if final_meta.exists():
                os.replace(final_meta, stage / "old-meta")
            os.replace(stage / "meta", final_meta)
            os.replace(stage / "data", final)
            _fsync_dir(final.parent)
            return listing
        finally:
            shutil.rmtree(stage, ignore_errors=True)
