"""The S3 server down during an upload, then back (issue 22 §2): moto's ThreadedMotoServer on a fixed
loopback port is stopped (its listening socket closed: connections are refused) while `put_dir` is
staging files, and started again on the same port (moto keeps its objects in process, as MinIO
keeps them on its volume). Whatever happens, no artifact is ever published incomplete: the marker
(`_SUCCESS`, the manifest) appears only with every file beside it; a reader polling throughout
never sees otherwise; the upload retried after the server is back succeeds and every downloaded
file matches its sha256, and no staged temporary outlives the retried upload."""

from __future__ import annotations

import hashlib
import logging
import os
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from faults_helpers import wait_for
from minio import Minio
from moto.core import DEFAULT_ACCOUNT_ID
from moto.s3.models import s3_backends
from moto.server import ThreadedMotoServer

from venus_core.io.storage import (MARKER, ArtifactExistsError, ArtifactNotFoundError, IncompleteArtifactError,
                                   RetryPolicy, StorageError,
                                   TransientStorageError, open_store)
from venus_core.io.storage.s3 import S3Store

KEY, SECRET = "testing-access", "testing-secret"
FILES, SIZE = 30, 48 * 1024


class RestartableS3:
    """A moto S3 server on one port that can be taken down (connections refused) and brought back."""

    def __init__(self) -> None:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.server: ThreadedMotoServer | None = None
        self.outages: list[float] = []
        self._down_at: float | None = None
        self.up()

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def up(self) -> None:
        self.server = ThreadedMotoServer(ip_address="127.0.0.1", port=self.port, verbose=False)
        self.server.start()
        if self._down_at is not None:
            self.outages.append(time.monotonic() - self._down_at)
            self._down_at = None

    def down(self) -> None:
        assert self.server is not None
        self.server.stop()
        self.server._server.server_close()  # type: ignore[union-attr]  # stop() leaves the socket listening
        self.server = None
        self._down_at = time.monotonic()

    def close(self) -> None:
        if self.server is not None:
            self.down()


@pytest.fixture
def s3() -> Iterator[RestartableS3]:
    srv = RestartableS3()
    yield srv
    srv.close()


def _bucket(endpoint: str) -> str:
    name = f"f-{uuid.uuid4().hex[:12]}"
    Minio(endpoint.removeprefix("http://"), KEY, SECRET, secure=False).make_bucket(name)
    return name


def _store(endpoint: str, bucket: str, retry: RetryPolicy) -> S3Store:
    s = open_store(f"s3://{bucket}/runs/1", endpoint=endpoint, access_key=KEY, secret_key=SECRET, retry=retry)
    assert isinstance(s, S3Store)
    return s


def _refusals(caplog: pytest.LogCaptureFixture) -> int:
    """Requests urllib3 retried after a refused or reset connection (the reader never retries)."""
    return sum("Retrying" in r.getMessage() and ("refused" in r.getMessage() or "reset" in r.getMessage())
               for r in caplog.records)


def _server_keys(bucket: str) -> list[str]:
    """The bucket's object names, read from the server's own state (no request to the server)."""
    return list(s3_backends[DEFAULT_ACCOUNT_ID]["global"].buckets[bucket].keys.keys())


def _source(tmp: Path) -> dict[str, str]:
    src = tmp / "src"
    (src / "sub").mkdir(parents=True)
    digests = {}
    for i in range(FILES):
        rel = f"sub/f{i:02d}.bin" if i % 3 else f"f{i:02d}.bin"
        data = os.urandom(SIZE)
        (src / rel).write_bytes(data)
        digests[rel] = hashlib.sha256(data).hexdigest()
    return digests


class Reader(threading.Thread):
    """Polls the artifact while it is being uploaded: whenever the marker is there, every file must be
    there with its manifest's sha256 (get_dir checks each). Counts what it saw."""

    def __init__(self, store: S3Store, prefix: str, dest: Path) -> None:
        super().__init__(daemon=True)
        self.store, self.prefix, self.dest = store, prefix, dest
        self.stop_evt = threading.Event()
        self.polls = self.unpublished = self.complete = self.errors = 0
        self.bad: list[str] = []

    def run(self) -> None:
        while not self.stop_evt.is_set():
            self.polls += 1
            try:
                listing = self.store.get_dir(self.prefix, self.dest / str(self.polls))
                if len(listing) != FILES:
                    self.bad.append(f"published with {len(listing)} of {FILES} files")
                self.complete += 1
            except (ArtifactNotFoundError, IncompleteArtifactError):
                self.unpublished += 1
            except StorageError:  # the server is down: nothing to see
                self.errors += 1
            self.stop_evt.wait(0.05)


@pytest.mark.slow
def test_an_outage_within_the_retry_budget_is_ridden_out_by_the_same_upload(
        s3: RestartableS3, tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, "urllib3.connectionpool")
    bucket = _bucket(s3.endpoint)
    digests = _source(tmp_path)
    store = _store(s3.endpoint, bucket, RetryPolicy(attempts=12, backoff=0.05, jitter=0.01, max_backoff=1.0,
                                                    connect_timeout=2, read_timeout=10))
    reader = Reader(_store(s3.endpoint, bucket, RetryPolicy(attempts=1, connect_timeout=1, read_timeout=5)),
                    "art", tmp_path / "seen")
    result: dict[str, object] = {}
    up = threading.Thread(target=lambda: result.setdefault("listing", store.put_dir(tmp_path / "src", "art")),
                          daemon=True)
    reader.start()
    up.start()
    staged = lambda: sum(".venus/tmp/" in k for k in _server_keys(bucket))  # noqa: E731
    wait_for(lambda: staged() >= FILES // 3, 60, "a third of the files staged")
    s3.down()
    staged_at_outage = staged()
    # the server stays down until the uploader has been refused three times (its retries under way)
    wait_for(lambda: _refusals(caplog) >= 3, 30, "three refused connections of the uploader")
    s3.up()
    up.join(60)
    wait_for(lambda: reader.complete >= 1, 30, "the reader to see the published artifact")
    reader.stop_evt.set()
    reader.join(30)
    assert not up.is_alive(), "the upload did not finish after the server came back"
    assert staged_at_outage < FILES and _refusals(caplog) >= 3
    listing = result["listing"]
    assert len(listing) == FILES  # type: ignore[arg-type]
    back = store.get_dir("art", tmp_path / "back")
    assert {o.key.removeprefix("art/"): o.sha256 for o in back} == digests
    assert {rel: hashlib.sha256((tmp_path / "back" / rel).read_bytes()).hexdigest() for rel in digests} == digests
    assert reader.bad == [] and reader.unpublished >= 1 and reader.complete >= 1
    assert not [k for k in _server_keys(bucket) if ".venus/tmp/" in k]  # temporaries removed after publishing
    print(f"\nshort outage: {s3.outages[0]:.2f} s down with {staged_at_outage}/{FILES} staged; "
          f"reader polls {reader.polls} (unpublished {reader.unpublished}, down {reader.errors}, "
          f"complete {reader.complete}, partial 0; {_refusals(caplog)} refused requests retried)")


@pytest.mark.slow
def test_an_outage_past_the_retry_budget_publishes_nothing_and_the_retried_upload_succeeds(
        s3: RestartableS3, tmp_path: Path) -> None:
    bucket = _bucket(s3.endpoint)
    digests = _source(tmp_path)
    store = _store(s3.endpoint, bucket, RetryPolicy(attempts=3, backoff=0.05, jitter=0.0, connect_timeout=1,
                                                    read_timeout=5))
    errors: list[BaseException] = []

    def upload() -> None:
        try:
            store.put_dir(tmp_path / "src", "art")
        except BaseException as exc:  # noqa: BLE001 - recorded for the assertions below
            errors.append(exc)

    up = threading.Thread(target=upload, daemon=True)
    up.start()
    staged = lambda: sum(".venus/tmp/" in k for k in _server_keys(bucket))  # noqa: E731
    wait_for(lambda: staged() >= FILES // 2, 60, "half the files staged")
    s3.down()
    staged_at_outage = staged()
    up.join(60)  # the server stays down until the upload has given up
    assert not up.is_alive()
    s3.up()
    assert len(errors) == 1 and isinstance(errors[0], TransientStorageError), errors
    assert staged_at_outage < FILES
    names = _server_keys(bucket)
    assert not [k for k in names if k.startswith("runs/1/art")]  # nothing published, not even a partial file
    left = [k for k in names if ".venus/tmp/" in k]  # its temporaries (could not be removed while down)
    with pytest.raises(IncompleteArtifactError, match="holds nothing"):
        store.read_manifest("art")

    listing = store.put_dir(tmp_path / "src", "art")  # the retried upload, server back
    assert len(listing) == FILES
    back = store.get_dir("art", tmp_path / "back")
    assert {o.key.removeprefix("art/"): o.sha256 for o in back} == digests
    assert {rel: hashlib.sha256((tmp_path / "back" / rel).read_bytes()).hexdigest() for rel in digests} == digests
    assert store.exists(f"art/{MARKER}")
    after = [k for k in _server_keys(bucket) if ".venus/tmp/" in k]
    assert left and after == []  # the failed upload's temporaries went with the retry, which removed its own too
    print(f"\nlong outage: upload gave up ({type(errors[0]).__name__}) with {staged_at_outage}/{FILES} staged; "
          f"{len(left)} temporaries left under .venus/tmp while down, nothing under the prefix; "
          f"retry published {len(listing)}, {len(after)} temporaries left after it")


@pytest.mark.slow
def test_an_outage_in_the_publish_phase_leaves_nothing_readable_and_the_same_store_retries_without_overwrite(
        s3: RestartableS3, tmp_path: Path) -> None:
    """The server goes down after the fifth file was copied under the prefix (every file staged, the
    publish phase under way): the copies cannot be withdrawn while it is down, so the prefix holds
    files without a marker. Readers see an incomplete artifact; another store (another process) is
    refused without `overwrite`; the failed store's own retry replaces its copies and publishes."""
    bucket = _bucket(s3.endpoint)
    digests = _source(tmp_path)
    store = _store(s3.endpoint, bucket, RetryPolicy(attempts=3, backoff=0.05, jitter=0.0, connect_timeout=1,
                                                    read_timeout=5))
    copies = 0
    real_copy = store.client.copy_object

    def copy_then_fail(*args: object, **kwargs: object) -> object:
        nonlocal copies
        copies += 1
        if copies == 6:  # five copies published, then the server goes away
            s3.down()
        return real_copy(*args, **kwargs)

    store.client.copy_object = copy_then_fail  # type: ignore[method-assign]
    with pytest.raises(TransientStorageError):
        store.put_dir(tmp_path / "src", "art")
    store.client.copy_object = real_copy  # type: ignore[method-assign]
    s3.up()
    under = [k for k in _server_keys(bucket) if k.startswith("runs/1/art/")]
    assert len(under) == 5 and f"runs/1/art/{MARKER}" not in under  # copies the withdrawal could not remove
    with pytest.raises(IncompleteArtifactError, match="5 object"):
        store.read_manifest("art")
    other = _store(s3.endpoint, bucket, RetryPolicy(attempts=1))
    with pytest.raises(ArtifactExistsError, match=r"5 object\(s\) \(incomplete: no completion marker"):
        other.put_dir(tmp_path / "src", "art")

    listing = store.put_dir(tmp_path / "src", "art")  # the failed store's retry: its own copies, no overwrite
    assert len(listing) == FILES
    back = store.get_dir("art", tmp_path / "back")
    assert {o.key.removeprefix("art/"): o.sha256 for o in back} == digests
    assert {rel: hashlib.sha256((tmp_path / "back" / rel).read_bytes()).hexdigest() for rel in digests} == digests
    assert not [k for k in _server_keys(bucket) if ".venus/tmp/" in k]
    with pytest.raises(ArtifactExistsError, match=r"\(complete\)"):  # and now it is a result like any other
        store.put_dir(tmp_path / "src", "art")
    print(f"\npublish-phase outage: {len(under)} copies left unmarked, refused to another store, "
          f"replaced by the failed store's retry ({len(listing)} files published, sha256 checked)")
