"""Artifact storage: one interface over `file://` (laptop / CI) and `s3://` (MinIO in the cluster).

    store = open_store("s3://artifacts/runs/42")       # or "file:///data/artifacts", "file://rel/dir"
    store.put_dir("out/checkpoint", "mid_train/ckpt")  # atomic publish, ends with _SUCCESS manifest
    store.get_dir("mid_train/ckpt", "/tmp/ckpt")       # refuses incomplete artifacts, checks sha256s

Only endpoints and credentials come from the environment (docs/architecture.md, rule 4):
`VENUS_S3_ENDPOINT` or `MLFLOW_S3_ENDPOINT_URL` (e.g. `http://minio.venus:9000`; without one, AWS S3),
`AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` or `MINIO_ACCESS_KEY` / `MINIO_SECRET_KEY`.
Everything else (retry budget, part size) is an argument.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import unquote, urlsplit

from venus_core.io.storage.base import ArtifactStore, ObjectInfo
from venus_core.io.storage.errors import (ArtifactExistsError, ArtifactNotFoundError, IncompleteArtifactError,
                                          IntegrityError, InvalidKeyError, StorageError, TransientStorageError)
from venus_core.io.storage.keys import MARKER
from venus_core.io.storage.retry import RetryPolicy

__all__ = [
    "MARKER", "ArtifactExistsError", "ArtifactNotFoundError", "ArtifactStore", "IncompleteArtifactError",
    "IntegrityError", "InvalidKeyError", "ObjectInfo", "RetryPolicy", "StorageError", "TransientStorageError",
    "open_store",
]

ENDPOINT_VARS = ("VENUS_S3_ENDPOINT", "MLFLOW_S3_ENDPOINT_URL")
KEY_VARS = (("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"), ("MINIO_ACCESS_KEY", "MINIO_SECRET_KEY"))


def open_store(uri: str, *, endpoint: str | None = None, access_key: str | None = None,
               secret_key: str | None = None, retry: RetryPolicy | None = None,
               part_size: int = 16 * 1024 * 1024, create_bucket: bool = False) -> ArtifactStore:
    """Open the store rooted at `uri` (`file:///abs/dir`, `file://rel/dir`, `s3://bucket[/prefix]`)."""
    parts = urlsplit(uri)
    if parts.scheme == "file":
        if parts.query or parts.fragment:
            raise StorageError(f"store URI {uri!r}: query strings and fragments are not supported")
        from venus_core.io.storage.local import LocalStore

        raw = unquote(parts.netloc + parts.path)  # file://rel/dir keeps 'rel' in netloc
        if not raw:
            raise StorageError(f"store URI {uri!r} names no directory")
        return LocalStore(Path(raw))
    if parts.scheme == "s3":
        if not parts.netloc:
            raise StorageError(f"store URI {uri!r} names no bucket (expected s3://bucket/prefix)")
        return _open_s3(parts.netloc, unquote(parts.path).strip("/"), endpoint, access_key, secret_key,
                        retry or RetryPolicy(), part_size, create_bucket, uri)
    raise StorageError(f"store URI {uri!r}: unsupported scheme {parts.scheme!r} (use file:// or s3://)")


def _credentials(access_key: str | None, secret_key: str | None) -> tuple[str | None, str | None]:
    if access_key or secret_key:
        if not (access_key and secret_key):
            raise StorageError("give both access_key and secret_key, or neither (then they come from the env)")
        return access_key, secret_key
    for k, s in KEY_VARS:
        if os.environ.get(k) and os.environ.get(s):
            return os.environ[k], os.environ[s]
    return None, None


def _open_s3(bucket: str, prefix: str, endpoint: str | None, access_key: str | None, secret_key: str | None,
             policy: RetryPolicy, part_size: int, create_bucket: bool, uri: str) -> ArtifactStore:
    from minio import Minio

    from venus_core.io.storage.s3 import S3Store

    endpoint = endpoint or next((os.environ[v] for v in ENDPOINT_VARS if os.environ.get(v)), None)
    endpoint = endpoint or "https://s3.amazonaws.com"
    ep = urlsplit(endpoint)
    if ep.scheme not in ("http", "https") or not ep.netloc or ep.path.strip("/"):
        raise StorageError(f"S3 endpoint {endpoint!r} must look like http(s)://host[:port] (no path)")
    key, secret = _credentials(access_key, secret_key)
    try:
        client = Minio(ep.netloc, access_key=key, secret_key=secret, secure=ep.scheme == "https",
                       http_client=policy.pool())
    except ValueError as exc:
        raise StorageError(f"store {uri!r} at {endpoint}: {exc}") from exc
    store = S3Store(client, bucket, prefix, policy=policy, part_size=part_size)
    what = f"open {uri} at {endpoint}"
    if not store.call(what, lambda: client.bucket_exists(bucket)):
        if not create_bucket:
            raise StorageError(f"{what}: bucket {bucket!r} does not exist (create it, or pass create_bucket=True)")
        store.call(what, lambda: client.make_bucket(bucket))
    return store
