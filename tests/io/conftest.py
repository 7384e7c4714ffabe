"""The S3 servers of the storage tests, each on loopback, one per session, reached through the `minio`
SDK as in a cluster: moto's ThreadedMotoServer (Python) and s3rver (Node.js, installed by `./dev
setup` into the virtual environment). No MinIO server can be installed here; two independent
implementations of the protocol keep the store from leaning on one server's leniency. Every test
that takes `s3_endpoint` runs against both."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer
from proc_lines import wait_for_line

S3RVER = Path(sys.prefix) / "node" / "node_modules" / ".bin" / "s3rver"
"""Where `./dev setup` installs s3rver (`npm install --prefix <venv>/node s3rver`)."""


def _moto() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


def _drain(proc: subprocess.Popen[str]) -> None:
    """Read the rest of s3rver's log (a full pipe would block it)."""
    assert proc.stdout is not None
    for _ in proc.stdout:
        pass


def _s3rver() -> Iterator[str]:
    if not S3RVER.exists():
        pytest.fail(f"s3rver is not installed at {S3RVER}: run ./dev setup")
    data = tempfile.mkdtemp(prefix="venus-s3rver-")
    # its only credentials are S3RVER / S3RVER, and it verifies every request's signature
    proc = subprocess.Popen([str(S3RVER), "-d", data, "-a", "127.0.0.1", "-p", "0", "--no-vhost-buckets"],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    reader: threading.Thread | None = None
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, lambda t: re.search(r"listening on [\d.]+:\d+", t) is not None,
                             timeout=60, what="s3rver")
        port = int(re.search(r"listening on [\d.]+:(\d+)", line).group(1))  # type: ignore[union-attr]
        reader = threading.Thread(target=_drain, args=(proc,), daemon=True)
        reader.start()
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)
        if reader is not None:
            reader.join(timeout=10)
        assert proc.stdout is not None
        proc.stdout.close()
        shutil.rmtree(data, ignore_errors=True)


S3_SERVERS = os.environ.get("VENUS_S3_SERVERS", "moto,s3rver").split(",")
"""The servers `s3_endpoint` runs each test against (VENUS_S3_SERVERS narrows them for a quick run)."""


@pytest.fixture(scope="session")
def moto_endpoint() -> Iterator[str]:
    yield from _moto()


@pytest.fixture(scope="session")
def s3rver_endpoint() -> Iterator[str]:
    yield from _s3rver()


@pytest.fixture(scope="session", params=S3_SERVERS)
def s3_endpoint(request: pytest.FixtureRequest) -> str:
    return request.getfixturevalue(f"{request.param}_endpoint")
