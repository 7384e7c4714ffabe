"""Hostile keys and artifacts in the artifact store (issue 22 §1), on both backends: the local store
and S3 (moto's server on loopback, `s3_endpoint` in conftest.py, through the `minio` SDK as in a cluster).

Cases: object keys that would leave the store root (traversal, absolute, backslash, NUL, control
characters) are refused naming the key before any request; a forged completion marker (`_SUCCESS`,
with a correct sha256, i.e. written by someone with write access to the store) listing a traversal
or absolute path is refused by `get_dir` and `fetch_dir` naming the entry; a symlink already in the
download destination pointing elsewhere is refused instead of being written through. In every case
nothing is written outside the destination.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest
from minio import Minio

from venus_core.io.storage import MARKER, InvalidKeyError, RetryPolicy, StorageError, open_store
from venus_core.io.storage.base import ArtifactStore
from venus_core.io.storage.fetch import fetch_dir, split_uri

KEY, SECRET = "S3RVER", "S3RVER"  # s3rver's own: it checks the key id and every signature (moto takes any)
FAST = RetryPolicy(attempts=2, backoff=0.01, jitter=0.01, connect_timeout=2, read_timeout=10)


Opener = Callable[[str], ArtifactStore]


@pytest.fixture(params=["local", "moto", "s3rver"])  # the S3 servers of conftest.py
def store(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[ArtifactStore, str, Opener]:
    """(store, its root URI, how to open another root of the same backend: `fetch_dir` opens the
    parent of the artifact's URI, so artifacts here sit at the top of the store)."""
    if request.param == "local":
        uri = (tmp_path / "store").as_uri()
        return open_store(uri), uri, open_store
    endpoint = request.getfixturevalue(f"{request.param}_endpoint")  # conftest: one per S3 server
    bucket = f"b-{uuid.uuid4().hex[:12]}"
    Minio(endpoint.removeprefix("http://"), KEY, SECRET, secure=False).make_bucket(bucket)

    def opener(root: str) -> ArtifactStore:
        return open_store(root, endpoint=endpoint, access_key=KEY, secret_key=SECRET, retry=FAST)

    uri = f"s3://{bucket}/runs"
    return opener(uri), uri, opener


def _fetch(uri: str, dest: Path, opener: Opener) -> None:
    fetch_dir(uri, dest, store=opener(split_uri(uri)[0]))


@pytest.mark.parametrize("key", ["../escape.txt", "a/../../escape.txt", "/etc/passwd", "a\\..\\b", "a\x00b",
                                 "a\nb", "a//b", ".venus/meta/x"])
def test_a_key_that_would_leave_the_root_is_refused_before_any_request(
        store: tuple[ArtifactStore, str, Opener], tmp_path: Path, key: str) -> None:
    s, _, _ = store
    src = tmp_path / "f.txt"
    src.write_text("x")
    for call in (lambda: s.put_file(src, key), lambda: s.put_bytes(b"x", key),
                 lambda: s.get_file(key, tmp_path / "dl" / "f"), lambda: s.get_bytes(key), lambda: s.exists(key)):
        with pytest.raises(InvalidKeyError) as err:
            call()
        assert repr(key) in str(err.value)
    assert s.list() == [] and not (tmp_path / "escape.txt").exists()


def _forged_marker(s: ArtifactStore, prefix: str, paths: list[str]) -> None:
    """A valid artifact, then its marker replaced by one listing `paths` (with a correct sha256)."""
    s.put_bytes(b"payload", f"{prefix}/ok.txt")
    files = [{"path": p, "size": 7, "sha256": "0" * 64} for p in ["ok.txt", *paths]]
    s.put_bytes(json.dumps({"format": "venus.artifact-manifest/1", "prefix": prefix, "files": files}).encode(),
                f"{prefix}/{MARKER}")


@pytest.mark.parametrize("entry", ["../../escape.txt", "/tmp/escape.txt", "sub/../../escape.txt", "a\\..\\b"])
def test_a_forged_marker_listing_a_path_outside_is_refused(store: tuple[ArtifactStore, str, Opener],
                                                            tmp_path: Path, entry: str) -> None:
    s, uri, opener = store
    _forged_marker(s, "v1", [entry])
    dest = tmp_path / "deep" / "dest"
    with pytest.raises(StorageError, match=r"corrupt completion marker .*files\[1\]\.path"):
        s.get_dir("v1", dest)
    with pytest.raises(StorageError, match=r"corrupt completion marker .*files\[1\]\.path"):
        _fetch(f"{uri}/v1", dest, opener)
    assert not list(tmp_path.rglob("escape.txt"))


def test_a_symlink_in_the_destination_is_not_written_through(store: tuple[ArtifactStore, str, Opener],
                                                             tmp_path: Path) -> None:
    s, uri, opener = store
    art = tmp_path / "art"
    (art / "sub").mkdir(parents=True)
    (art / "sub" / "weights.txt").write_text("published")
    s.put_dir(art, "v1")
    outside = tmp_path / "outside"
    outside.mkdir()
    dest = tmp_path / "dest"
    dest.mkdir()
    (dest / "sub").symlink_to(outside)
    with pytest.raises(StorageError, match=r"manifest entry 'sub/weights\.txt' resolves outside"):
        s.get_dir("v1", dest)
    with pytest.raises(StorageError, match=r"manifest entry 'sub/weights\.txt' resolves outside"):
        _fetch(f"{uri}/v1", dest, opener)
    assert list(outside.iterdir()) == []
