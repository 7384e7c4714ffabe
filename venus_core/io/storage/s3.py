"""`s3://` backend on the `minio` SDK: MinIO in the cluster, any S3-protocol server in tests.

- sha256: computed locally before upload and stored as user metadata `x-amz-meta-sha256`; a download
  hashes the bytes as they stream in and compares with the header of the same response (so a
  concurrent overwrite cannot pair new metadata with old bytes).
- multipart: the SDK splits uploads larger than `part_size` (>= 5 MiB, S3's minimum) into parts.
- atomic publish (`put_dir`): every file goes under `.venus/tmp/<id>/`, then is copied server-side
  to its final key, then the `_SUCCESS` manifest is written, then the temporaries are deleted. S3 has
  no multi-object transaction, so "atomic" means: readers that go through this interface see either
  the complete artifact or an IncompleteArtifactError, never a partial one. If a step fails, the
  objects already copied and the temporaries are removed (best effort, logged if that fails too).
  Temporaries that could not be removed (the server still down at the cleanup, the process killed)
  are removed by the next `put_dir`: this store's own at once, any process's once older than
  `stale_tmp_after` (a day by default, longer than any upload stages; younger ones may belong to an
  upload still running).
- retries: per HTTP request, see `retry.py`; a download whose body breaks off mid-stream is re-issued
  within the same budget.
"""

from __future__ import annotations

import hashlib
import io
import logging
import os
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TypeVar

from minio import Minio
from minio.commonconfig import REPLACE, CopySource
from minio.deleteobjects import DeleteObject
from minio.error import S3Error
from urllib3.exceptions import ProtocolError, ReadTimeoutError

from venus_core.io.storage.base import (CHUNK, ArtifactStore, ObjectInfo, check_prefix, local_files, manifest_bytes,
                                        sha256_file)
from venus_core.io.storage.errors import ArtifactExistsError, ArtifactNotFoundError, IntegrityError, StorageError
from venus_core.io.storage.keys import MARKER, RESERVED, join, under, validate_key
from venus_core.io.storage.retry import NOT_FOUND_CODES, RetryPolicy, translate

LOG = logging.getLogger(__name__)
META = "sha256"
MIN_PART = 5 * 1024 * 1024
STALE_TMP_S = 24 * 3600.0
T = TypeVar("T")


class S3Store(ArtifactStore):
    """Artifact store under `s3://bucket/prefix` reached through a configured `Minio` client."""

    def __init__(self, client: Minio, bucket: str, prefix: str = "", *, policy: RetryPolicy,
                 part_size: int = 16 * 1024 * 1024, stale_tmp_after: float = STALE_TMP_S) -> None:
        if part_size < MIN_PART:
            raise ValueError(f"part_size must be >= {MIN_PART} bytes (S3's minimum part), got {part_size}")
        self.client, self.bucket, self.prefix = client, bucket, prefix.strip("/")
        if self.prefix:
            validate_key(self.prefix, what="store prefix")
        self.policy, self.part_size, self.stale_tmp_after = policy, part_size, stale_tmp_after
        self._unremoved: set[str] = set()  # temporaries a failed put_dir could not delete
        # prefix -> keys a put_dir failed in its publish phase had copied there and could not withdraw (the
        # server was down): unreadable without their marker, and this store's own, so a retried put_dir of
        # the same prefix replaces them without `overwrite`
        self._unwithdrawn: dict[str, set[str]] = {}
        self.root_uri = f"s3://{bucket}/{self.prefix}" if self.prefix else f"s3://{bucket}"

    def _name(self, key: str) -> str:
        return join(self.prefix, key)

    def call(self, what: str, fn: Callable[[], T]) -> T:
        """Run one SDK call; any failure becomes a StorageError naming `what` (retries happen inside)."""
        try:
            return fn()
        except Exception as exc:  # noqa: BLE001 - translated into a StorageError naming `what`
            raise translate(exc, what, self.policy) from exc

    # single objects ---------------------------------------------------------------------------------
    def _upload(self, name: str, local: Path, sha: str, what: str) -> None:
        self.call(what, lambda: self.client.fput_object(
            self.bucket, name, str(local), metadata={META: sha}, part_size=self.part_size))

    def put_file(self, local: str | os.PathLike[str], key: str) -> ObjectInfo:
        validate_key(key)
        what = f"put_file {local} -> {self.uri_for(key)}"
        try:
            sha, size = sha256_file(Path(local))
        except OSError as exc:
            raise StorageError(f"{what}: cannot read {local}: {exc}") from exc
        self._upload(self._name(key), Path(local), sha, what)
        return ObjectInfo(key, size, sha)

    def _put_bytes(self, name: str, data: bytes, what: str) -> str:
        sha = hashlib.sha256(data).hexdigest()
        self.call(what, lambda: self.client.put_object(
            self.bucket, name, io.BytesIO(data), len(data), metadata={META: sha}, part_size=self.part_size))
        return sha

    def put_bytes(self, data: bytes, key: str) -> ObjectInfo:
        validate_key(key)
        return ObjectInfo(key, len(data), self._put_bytes(self._name(key), data, f"put_bytes {self.uri_for(key)}"))

    def _download(self, key: str, sink: Callable[[], io.BufferedIOBase]) -> tuple[str, int]:
        """Stream `key` into a fresh sink, verifying sha256; mid-stream breaks are retried within the budget."""
        what = f"get {self.uri_for(key)}"
        for attempt in range(1, self.policy.attempts + 1):
            resp = self.call(what, lambda: self.client.get_object(self.bucket, self._name(key)))
            try:
                expected = resp.headers.get(f"x-amz-meta-{META}")
                if not expected:
                    raise IntegrityError(f"{self.uri_for(key)} has no sha256 metadata (not written through the store)")
                h, size = hashlib.sha256(), 0
                with sink() as out:
                    for chunk in resp.stream(CHUNK):
                        h.update(chunk)
                        out.write(chunk)
                        size += len(chunk)
                break
            except (ProtocolError, ReadTimeoutError) as exc:
                if attempt == self.policy.attempts:
                    raise translate(exc, what, self.policy) from exc
                LOG.warning("%s: body broke off (%s); retrying (%d/%d)", what, exc, attempt, self.policy.attempts)
            finally:
                resp.close()
                resp.release_conn()
        if h.hexdigest() != expected:
            raise IntegrityError(f"{self.uri_for(key)}: sha256 mismatch: downloaded {h.hexdigest()} "
                                 f"({size} bytes), metadata says {expected}")
        return expected, size

    def get_file(self, key: str, local: str | os.PathLike[str]) -> ObjectInfo:
        validate_key(key)
        dest = Path(local)
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = dest.with_name(f".{dest.name}.part-{uuid.uuid4().hex}")
        try:
            sha, size = self._download(key, lambda: open(tmp, "wb"))
            os.replace(tmp, dest)
        finally:
            tmp.unlink(missing_ok=True)
        return ObjectInfo(key, size, sha)

    def get_bytes(self, key: str) -> bytes:
        validate_key(key)
        buf = io.BytesIO()

        def sink() -> io.BytesIO:
            buf.seek(0)
            buf.truncate()
            return _Unclosing(buf)

        self._download(key, sink)
        return buf.getvalue()

    def stat(self, key: str) -> ObjectInfo:
        validate_key(key)
        st = self.call(f"stat {self.uri_for(key)}", lambda: self.client.stat_object(self.bucket, self._name(key)))
        return ObjectInfo(key, int(st.size or 0), (st.metadata or {}).get(f"x-amz-meta-{META}"))

    def exists(self, key: str) -> bool:
        validate_key(key)
        try:
            self.client.stat_object(self.bucket, self._name(key))
            return True
        except S3Error as exc:
            if exc.code in NOT_FOUND_CODES:
                return False
            raise translate(exc, f"exists {self.uri_for(key)}", self.policy) from exc
        except Exception as exc:  # noqa: BLE001
            raise translate(exc, f"exists {self.uri_for(key)}", self.policy) from exc

    def _list_names(self, prefix: str) -> list[str]:
        base = self._name(prefix) if prefix else self.prefix
        query = f"{base}/" if base else None
        return self.call(f"list {self.root_uri} {prefix!r}", lambda: [
            o.object_name for o in self.client.list_objects(self.bucket, prefix=query, recursive=True)])

    def list(self, prefix: str = "") -> list[str]:
        if prefix:
            validate_key(prefix, what="prefix")
        cut = len(self.prefix) + 1 if self.prefix else 0
        keys = [n[cut:] for n in self._list_names(prefix)]
        if prefix and self.exists(prefix):
            keys.append(prefix)
        return sorted(k for k in keys if under(k, prefix) and k.split("/")[0] != RESERVED)

    def delete(self, key: str, *, missing_ok: bool = False) -> None:
        if not self.exists(key):
            if missing_ok:
                return
            raise ArtifactNotFoundError(f"cannot delete {self.uri_for(key)}: it does not exist")
        self.call(f"delete {self.uri_for(key)}", lambda: self.client.remove_object(self.bucket, self._name(key)))

    def _delete_names(self, names: list[str], what: str) -> None:
        if not names:
            return
        errors = self.call(what, lambda: list(self.client.remove_objects(
            self.bucket, (DeleteObject(n) for n in names))))
        if errors:
            raise StorageError(f"{what}: {len(errors)} object(s) not deleted, first: {errors[0]}")

    def _remove_leftover_temporaries(self) -> None:
        """Delete the staged temporaries no upload will remove any more: those a failed `put_dir` of
        this store could not delete (the server was still down at its cleanup), and any under this
        store's prefix older than `stale_tmp_after` (left by a killed process, or by a pod that exited
        after the error). Best effort: a failure is logged and the upload goes on."""
        root = join(self.prefix, f"{RESERVED}/tmp/")
        what = f"put_dir: removing leftover temporaries under s3://{self.bucket}/{root}"
        cutoff = datetime.now(timezone.utc) - timedelta(seconds=self.stale_tmp_after)
        known = set(self._unremoved)
        try:
            stale = self.call(what, lambda: {
                o.object_name for o in self.client.list_objects(self.bucket, prefix=root, recursive=True)
                if o.last_modified is not None and o.last_modified < cutoff})
            self._delete_names(sorted(known | stale), what)
        except StorageError as exc:
            LOG.warning("%s (tried again by the next put_dir)", exc)
            return
        self._unremoved -= known

    # directory artifacts ----------------------------------------------------------------------------
    def put_dir(self, local_dir: str | os.PathLike[str], prefix: str, *, overwrite: bool = False) -> list[ObjectInfo]:
        prefix = check_prefix(prefix)
        files = local_files(Path(local_dir))
        existing = self.list(prefix)
        ours = self._unwithdrawn.get(prefix, set())
        foreign = [k for k in existing if k not in ours]
        if foreign and not overwrite:
            if join(prefix, MARKER) in existing:
                state = "complete"
            else:
                state = ("incomplete: no completion marker, left by a put_dir that failed while publishing or "
                         "one still running")
            raise ArtifactExistsError(f"{self.uri_for(prefix)} already holds {len(foreign)} object(s) ({state}); "
                                      f"pass overwrite=True to replace it")
        self._remove_leftover_temporaries()
        tmp = join(self.prefix, f"{RESERVED}/tmp/{uuid.uuid4().hex}")
        staged: list[str] = []
        try:
            listing = []
            for rel, path in files:
                sha, size = sha256_file(path)
                staged.append(join(tmp, rel))  # before the request: one that fails may still have stored it
                self._upload(join(tmp, rel), path, sha, f"put_dir {path} -> {self.uri_for(join(prefix, rel))}")
                listing.append(ObjectInfo(join(prefix, rel), size, sha))
            new = {o.key for o in listing}
            marker = join(prefix, MARKER)
            if marker in existing:  # first, alone: until the new marker exists readers see "incomplete"
                self.call(f"put_dir: retract {self.uri_for(marker)}",
                           lambda: self.client.remove_object(self.bucket, self._name(marker)))
            self._delete_names([self._name(k) for k in existing if k not in new and k != marker],
                               f"put_dir {self.uri_for(prefix)}: removing files of the old artifact")
            published: list[str] = []  # keys, each added before its request (one that fails may still be stored)
            marker_sent = False
            try:
                for (rel, _), entry in zip(files, listing):
                    published.append(entry.key)
                    self.call(f"put_dir: copy to {self.uri_for(entry.key)}", lambda: self.client.copy_object(
                        self.bucket, self._name(entry.key), CopySource(self.bucket, join(tmp, rel)),
                        metadata={META: entry.sha256}, metadata_directive=REPLACE))
                marker_sent = True
                self._put_bytes(self._name(marker), manifest_bytes(prefix, listing),
                                f"put_dir: marker {self.uri_for(marker)}")
            except BaseException:
                try:  # without the marker they are unreadable anyway; do not leave them lying around
                    if marker_sent:  # first, alone: its PUT may be stored though it failed
                        self.call(f"put_dir: retract {self.uri_for(marker)}",
                                  lambda: self.client.remove_object(self.bucket, self._name(marker)))
                    self._delete_names([self._name(k) for k in published],
                                       f"put_dir: withdrawing partial {self.uri_for(prefix)}")
                except StorageError as exc:
                    left = {*published, *ours, *([marker] if marker_sent else [])}
                    self._unwithdrawn[prefix] = left
                    LOG.warning("%s (readers see the prefix as incomplete; a put_dir of it by this store replaces "
                                "the %d copies)", exc, len(left))
                raise
            self._unwithdrawn.pop(prefix, None)
            return listing
        finally:
            try:
                self._delete_names(staged, f"put_dir: removing temporaries under s3://{self.bucket}/{tmp}")
            except StorageError as exc:
                self._unremoved.update(staged)
                LOG.warning("%s (the artifact itself is unaffected; the next put_dir removes them)", exc)


class _Unclosing(io.BufferedIOBase):
    """Context-manager view of a BytesIO that survives `with` (get_bytes reads it afterwards)."""

    def __init__(self, buf: io.BytesIO) -> None:
        self.buf = buf

    def write(self, data) -> int:  # type: ignore[override]
        return self.buf.write(data)

    def close(self) -> None:
        pass
