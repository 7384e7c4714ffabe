"""The `s3://` artifact store against a real S3-protocol server on loopback.

No MinIO server can be installed on the project's CI machines, so the server is
moto's ThreadedMotoServer: it speaks the S3 HTTP protocol that the `minio` SDK uses in production.
Retry behaviour is tested through a real loopback HTTP proxy in front of it that answers 503
SlowDown (or 403) for a bounded number of requests, then forwards; no mocks of the SDK.
"""

from __future__ import annotations

import hashlib
import http.client
import io
import json
import os
import re
import socket
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from minio import Minio

from venus_core.io.storage import (MARKER, ArtifactExistsError, ArtifactNotFoundError, IncompleteArtifactError,
                                   IntegrityError, InvalidKeyError, RetryPolicy, StorageError,
                                   TransientStorageError, open_store)
from venus_core.io.storage.s3 import S3Store

KEY, SECRET = "S3RVER", "S3RVER"  # s3rver's own: it checks the key id and every signature (moto takes any)
FAST = RetryPolicy(attempts=4, backoff=0.01, jitter=0.01, connect_timeout=2, read_timeout=10)


@pytest.fixture
def bucket(s3_endpoint: str) -> str:
    name = f"b-{uuid.uuid4().hex[:12]}"
    Minio(s3_endpoint.removeprefix("http://"), KEY, SECRET, secure=False).make_bucket(name)
    return name


def _store(endpoint: str, bucket: str, prefix: str = "runs/7", **kw) -> S3Store:
    s = open_store(f"s3://{bucket}/{prefix}", endpoint=endpoint, access_key=KEY, secret_key=SECRET,
                   retry=kw.pop("retry", FAST), **kw)
    assert isinstance(s, S3Store)
    return s


def _raw(endpoint: str) -> Minio:
    return Minio(endpoint.removeprefix("http://"), KEY, SECRET, secure=False)


class FlakyProxy:
    """Loopback HTTP proxy to the S3 server.

    The next `fail` requests whose "METHOD path copy-source" matches the regex `match` get `status` (503 SlowDown
    by default), after reaching the server when `forward` is set (the request done, its reply lost); the next
    `truncate` GETs of object data get only half their body before the connection
    is closed. Both counts run down, so the proxy heals by itself.
    """

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.removeprefix("http://")
        self.fail, self.status, self.failed, self.forwarded, self.match, self.truncate = 0, 503, 0, 0, "", 0
        self.forward = False
        self.seen: list[str] = []  # "METHOD path" of every request, in order
        self.lock = threading.Lock()
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                pass

            def _handle(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                what = f"{self.command} {self.path} {self.headers.get('x-amz-copy-source', '')}"
                with proxy.lock:
                    proxy.seen.append(f"{self.command} {self.path}")
                    inject = proxy.fail > 0 and re.search(proxy.match, what) is not None
                    proxy.fail -= inject
                    proxy.failed += inject
                    proxy.forwarded += not inject
                if inject and proxy.forward:  # the server does it; the client hears an error
                    conn = http.client.HTTPConnection(*proxy.upstream.split(":"), timeout=30)
                    conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                    conn.getresponse().read()
                    conn.close()
                if inject:
                    code = "SlowDown" if proxy.status == 503 else "AccessDenied"
                    err = f"<?xml version='1.0'?><Error><Code>{code}</Code><Message>injected</Message></Error>"
                    self._reply(proxy.status, [("Content-Type", "application/xml")], err.encode())
                    return
                conn = http.client.HTTPConnection(*proxy.upstream.split(":"), timeout=30)
                conn.request(self.command, self.path, body=body, headers=dict(self.headers.items()))
                resp = conn.getresponse()
                data = resp.read()
                headers = [(k, v) for k, v in resp.getheaders()
                           if k.lower() not in ("transfer-encoding", "connection", "content-length")]
                conn.close()
                with proxy.lock:
                    cut = proxy.truncate > 0 and self.command == "GET" and "?" not in self.path and len(data) > 1
                    proxy.truncate -= cut
                if cut:  # announce the full length, send half, hang up
                    self.close_connection = True
                    self._reply(resp.status, headers, data, sent=len(data) // 2)
                    return
                self._reply(resp.status, headers, data)

            def _reply(self, status: int, headers: list[tuple[str, str]], data: bytes, sent: int | None = None) -> None:
                self.send_response(status)
                for k, v in headers:
                    self.send_header(k, v)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(data[:sent])

            do_GET = do_PUT = do_POST = do_DELETE = do_HEAD = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.endpoint = f"http://127.0.0.1:{self.server.server_address[1]}"

    def inject(self, n: int, status: int = 503, match: str = "", forward: bool = False) -> None:
        with self.lock:
            self.fail, self.status, self.failed, self.forwarded, self.match = n, status, 0, 0, match
            self.forward = forward

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def proxy(s3_endpoint: str) -> Iterator[FlakyProxy]:
    p = FlakyProxy(s3_endpoint)
    yield p
    p.close()


def test_file_round_trip_with_sha256_metadata(s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    store = _store(s3_endpoint, bucket)
    src = tmp_path / "a.bin"
    src.write_bytes(os.urandom(10_000))
    info = store.put_file(src, "data/a.bin")
    sha = hashlib.sha256(src.read_bytes()).hexdigest()
    assert info.sha256 == sha and info.size == 10_000 and store.stat("data/a.bin") == info
    raw = _raw(s3_endpoint).stat_object(bucket, "runs/7/data/a.bin")
    assert raw.metadata["x-amz-meta-sha256"] == sha
    assert store.get_file("data/a.bin", tmp_path / "o" / "a.bin") == info
    assert (tmp_path / "o" / "a.bin").read_bytes() == src.read_bytes()
    assert store.uri_for("data/a.bin") == f"s3://{bucket}/runs/7/data/a.bin"
    store.put_bytes(b"x", "data/ab/c")
    assert store.list("data") == ["data/a.bin", "data/ab/c"] and store.list("data/a") == []
    assert store.exists("data/a.bin") and not store.exists("data/zzz")
    store.delete("data/a.bin")
    assert not store.exists("data/a.bin")
    with pytest.raises(ArtifactNotFoundError, match=r"s3://.*/runs/7/data/a\.bin"):
        store.get_file("data/a.bin", tmp_path / "gone")
    with pytest.raises(ArtifactNotFoundError, match="a.bin"):
        store.delete("data/a.bin")


def test_download_verifies_sha256(s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    store = _store(s3_endpoint, bucket)
    info = store.put_bytes(b"the real bytes", "r.json")
    raw = _raw(s3_endpoint)
    raw.put_object(bucket, "runs/7/r.json", io.BytesIO(b"other bytes"), 11, metadata={"sha256": info.sha256})
    with pytest.raises(IntegrityError, match=r"runs/7/r\.json: sha256 mismatch"):
        store.get_file("r.json", tmp_path / "r.json")
    assert not (tmp_path / "r.json").exists() and list(tmp_path.iterdir()) == []
    raw.put_object(bucket, "runs/7/plain", io.BytesIO(b"p"), 1)
    with pytest.raises(IntegrityError, match="plain has no sha256 metadata"):
        store.get_bytes("plain")


def test_multipart_round_trip(proxy: FlakyProxy, s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    store = _store(proxy.endpoint, bucket, part_size=5 * 1024 * 1024)
    src = tmp_path / "big.bin"
    src.write_bytes(os.urandom(12 * 1000 * 1000))
    info = store.put_file(src, "ckpt/big.bin")
    parts = [r for r in proxy.seen if r.startswith("PUT ") and "partNumber=" in r and "uploadId=" in r]
    assert len(parts) == 3, proxy.seen  # 12 MB in 5 MiB parts (moto's ETag also says "-3"; s3rver's does not)
    assert any(r.startswith("POST ") and "uploads" in r for r in proxy.seen), proxy.seen
    assert store.get_file("ckpt/big.bin", tmp_path / "back.bin") == info
    assert hashlib.sha256((tmp_path / "back.bin").read_bytes()).hexdigest() == info.sha256
    with pytest.raises(ValueError, match="part_size must be >= 5242880"):
        _store(s3_endpoint, bucket, part_size=1024)


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_put_dir_atomic_publish_and_get_dir(s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    store = _store(s3_endpoint, bucket)
    src = tmp_path / "ckpt"
    for rel, data in {"config.json": b"{}", "w/model.safetensors": os.urandom(50_000), "tok.txt": b"t"}.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_bytes(data)
    listing = store.put_dir(src, "mid_train/ckpt")
    assert [o.key for o in listing] == ["mid_train/ckpt/config.json", "mid_train/ckpt/tok.txt",
                                        "mid_train/ckpt/w/model.safetensors"]
    names = sorted(o.object_name for o in _raw(s3_endpoint).list_objects(bucket, recursive=True))
    assert names == [f"runs/7/mid_train/ckpt/{r}" for r in (MARKER, "config.json", "tok.txt", "w/model.safetensors")]
    for o in listing:  # copied objects keep their sha256
        assert store.stat(o.key).sha256 == o.sha256
    manifest = json.loads(store.get_bytes(f"mid_train/ckpt/{MARKER}"))
    assert {e["path"]: e["sha256"] for e in manifest["files"]} == {
        o.key.removeprefix("mid_train/ckpt/"): o.sha256 for o in listing}
    assert store.get_dir("mid_train/ckpt", tmp_path / "back") == listing
    assert _tree(tmp_path / "back") == _tree(src)

    with pytest.raises(ArtifactExistsError, match=r"mid_train/ckpt already holds 4 object\(s\) \(complete\)"):
        store.put_dir(src, "mid_train/ckpt")
    (src / "tok.txt").unlink()
    (src / "config.json").write_bytes(b'{"v": 2}')
    store.put_dir(src, "mid_train/ckpt", overwrite=True)
    assert store.list("mid_train") == [f"mid_train/ckpt/{MARKER}", "mid_train/ckpt/config.json",
                                       "mid_train/ckpt/w/model.safetensors"]
    assert store.get_bytes("mid_train/ckpt/config.json") == b'{"v": 2}'

    store.delete(f"mid_train/ckpt/{MARKER}")
    with pytest.raises(IncompleteArtifactError, match=r"runs/7/mid_train/ckpt is not a complete artifact"):
        store.get_dir("mid_train/ckpt", tmp_path / "again")


def test_keys_and_missing_bucket_are_clear_errors(s3_endpoint: str, bucket: str, tmp_path: Path) -> None:
    store = _store(s3_endpoint, bucket)
    for key in ("/abs", "a/../b", "a\\b", "a//b", "x\x00", ".venus/tmp/x"):
        with pytest.raises(InvalidKeyError, match=repr(key).replace("\\", "\\\\")):
            store.put_bytes(b"1", key)
    with pytest.raises(StorageError, match="bucket 'no-such-bucket' does not exist"):
        _store(s3_endpoint, "no-such-bucket")
    made = _store(s3_endpoint, "made-by-store", create_bucket=True)
    assert made.list() == []


def test_credentials_and_endpoint_from_env(s3_endpoint: str, bucket: str, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "VENUS_S3_ENDPOINT"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("MINIO_ACCESS_KEY", KEY)
    monkeypatch.setenv("MINIO_SECRET_KEY", SECRET)
    monkeypatch.setenv("MLFLOW_S3_ENDPOINT_URL", s3_endpoint)
    store = open_store(f"s3://{bucket}", retry=FAST)
    assert store.put_bytes(b"env", "k").size == 3 and store.uri_for("k") == f"s3://{bucket}/k"


def test_transient_503s_are_retried(proxy: FlakyProxy, bucket: str, tmp_path: Path) -> None:
    store = _store(proxy.endpoint, bucket)
    src = tmp_path / "f.bin"
    src.write_bytes(os.urandom(3000))
    proxy.inject(3)  # three SlowDowns, then the real server answers
    info = store.put_file(src, "f.bin")
    assert proxy.failed == 3 and proxy.forwarded >= 1
    proxy.inject(2)
    assert store.get_file("f.bin", tmp_path / "back.bin") == info
    assert proxy.failed == 2 and (tmp_path / "back.bin").read_bytes() == src.read_bytes()


def test_retries_are_bounded_and_permanent_errors_are_not_retried(proxy: FlakyProxy, bucket: str) -> None:
    store = _store(proxy.endpoint, bucket)
    proxy.inject(100)
    with pytest.raises(TransientStorageError, match=r"put_bytes s3://.*/runs/7/k: gave up after 4 attempt"):
        store.put_bytes(b"1", "k")
    assert proxy.failed == FAST.attempts and proxy.forwarded == 0
    proxy.inject(100, status=403)
    with pytest.raises(StorageError, match=r"AccessDenied \(HTTP 403\)") as err:
        store.put_bytes(b"1", "k")
    assert not isinstance(err.value, TransientStorageError)
    assert proxy.failed == 1


def test_unreachable_endpoint_gives_up_with_a_clear_error(bucket: str) -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(TransientStorageError, match=rf"127\.0\.0\.1:{port}.*gave up after 2 attempt"):
        _store(f"http://127.0.0.1:{port}", bucket, retry=RetryPolicy(attempts=2, backoff=0.01, jitter=0))


def test_download_cut_off_mid_body_is_reissued(proxy: FlakyProxy, bucket: str, tmp_path: Path) -> None:
    store = _store(proxy.endpoint, bucket)
    info = store.put_bytes(os.urandom(200_000), "cut.bin")
    proxy.truncate = 2
    assert store.get_file("cut.bin", tmp_path / "cut.bin") == info
    assert proxy.truncate == 0 and hashlib.sha256((tmp_path / "cut.bin").read_bytes()).hexdigest() == info.sha256
    proxy.truncate = FAST.attempts
    with pytest.raises(TransientStorageError, match="cut.bin: gave up after 4 attempt"):
        store.get_bytes("cut.bin")
    assert list(tmp_path.iterdir()) == [tmp_path / "cut.bin"]


@pytest.mark.parametrize("match", ["/b.txt", "art/b.txt"], ids=["staging-upload-fails", "final-copy-fails"])
def test_failed_publish_leaves_no_artifact_and_no_temporaries(proxy: FlakyProxy, s3_endpoint: str, bucket: str,
                                                             tmp_path: Path, match: str) -> None:
    store = _store(proxy.endpoint, bucket)
    src = tmp_path / "d"
    src.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (src / name).write_bytes(name.encode())
    proxy.inject(100, match=match)  # the staging upload of b.txt, or its copy to the final key, keeps failing
    with pytest.raises(TransientStorageError, match="b.txt: gave up"):
        store.put_dir(src, "art")
    names = [o.object_name for o in _raw(s3_endpoint).list_objects(bucket, recursive=True)]
    assert names == []  # staged temporaries and any already-copied final objects were removed
    with pytest.raises(IncompleteArtifactError, match="holds nothing"):
        store.get_dir("art", tmp_path / "out")
    proxy.inject(0)
    assert len(store.put_dir(src, "art")) == 3 and store.is_complete("art")


def test_a_marker_stored_but_reported_failed_is_retracted_before_its_files(proxy: FlakyProxy, s3_endpoint: str,
                                                                             bucket: str, tmp_path: Path) -> None:
    """The marker's PUT reaches the server every time but its reply is lost (503 after forwarding),
    past the retry budget: put_dir fails, and must not leave the marker behind while it withdraws the
    files (before the fix readers saw a complete artifact whose files were gone)."""
    store = _store(proxy.endpoint, bucket)
    src = tmp_path / "d"
    src.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (src / name).write_bytes(name.encode())
    proxy.inject(100, match=r"^PUT \S*/art/_SUCCESS ", forward=True)
    with pytest.raises(TransientStorageError, match="_SUCCESS"):
        store.put_dir(src, "art")
    assert proxy.failed >= 2  # every attempt stored the marker, every reply was lost
    names = [o.object_name for o in _raw(s3_endpoint).list_objects(bucket, recursive=True)]
    assert names == []  # neither the marker nor the files nor the temporaries
    assert not store.is_complete("art")
    proxy.inject(0)
    assert len(store.put_dir(src, "art")) == 3 and store.is_complete("art")
    assert store.get_dir("art", tmp_path / "out") and (tmp_path / "out" / "b.txt").read_bytes() == b"b.txt"


@pytest.mark.parametrize("next_store", ["same", "restarted"])
def test_temporaries_a_failed_cleanup_left_are_removed_by_the_next_upload(proxy: FlakyProxy, s3_endpoint: str,
                                                                          bucket: str, tmp_path: Path,
                                                                          next_store: str) -> None:
    """issue 22 §2: the staging upload of b.txt and, past the retry budget, every delete are refused (the
    server still down at the cleanup), so a.txt's temporary stays behind. The next put_dir removes it:
    the same store at once; a store opened afresh (a restarted pod) only once it is older than
    `stale_tmp_after`, since until then it may be a running upload's."""
    store = _store(proxy.endpoint, bucket)
    src = tmp_path / "d"
    src.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (src / name).write_bytes(name.encode())
    temporaries = lambda: [o.object_name for o in _raw(s3_endpoint).list_objects(  # noqa: E731
        bucket, prefix="runs/7/.venus/tmp/", recursive=True)]
    proxy.inject(100, match=r"/b\.txt|\?delete")
    with pytest.raises(TransientStorageError, match="b.txt: gave up"):
        store.put_dir(src, "art")
    assert [n.rsplit("/", 1)[1] for n in temporaries()] == ["a.txt"]
    proxy.inject(0)
    if next_store == "restarted":
        store = _store(proxy.endpoint, bucket)
        assert len(store.put_dir(src, "other")) == 3
        assert len(temporaries()) == 1  # younger than stale_tmp_after (a day): kept
        store.stale_tmp_after = 0.0
    assert len(store.put_dir(src, "art")) == 3 and store.is_complete("art")
    assert temporaries() == []
    assert store.get_dir("art", tmp_path / "back") == store.read_manifest("art")
