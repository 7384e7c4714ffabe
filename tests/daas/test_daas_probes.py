"""Protocol health probes: each kind needs its protocol's answer, not just a TCP accept."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest

from venus_core.daas import DeviceSpec
from venus_core.daas.probes import probe_device


@pytest.fixture()
def speaker() -> Iterator[tuple[int, list[bytes]]]:
    """A server that sends `greeting[0]` on accept (or after the first read, for HTTP)."""
    greeting: list[bytes] = [b""]
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)
    stop = threading.Event()

    def run() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            with conn:
                if greeting[0].startswith(b"HTTP/"):
                    conn.recv(4096)
                conn.sendall(greeting[0])
                conn.settimeout(1)
                try:
                    conn.recv(1)
                except OSError:
                    pass

    t = threading.Thread(target=run, daemon=True)
    t.start()
    yield srv.getsockname()[1], greeting
    stop.set()
    t.join(5)
    srv.close()


@pytest.mark.parametrize(
    ("kind", "good", "bad"),
    [
        ("ssh", b"SSH-2.0-OpenSSH_9.2\r\n", b"220 smtp ready\r\n"),
        ("web", b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}", b""),
        ("android", b"CNXN" + bytes(20), b"HTTP/1.1 400 Bad\r\n\r\n"),
    ],
)
def test_probe_kinds(speaker, kind: str, good: bytes, bad: bytes) -> None:  # type: ignore[no-untyped-def]
    port, greeting = speaker
    dev = DeviceSpec("d", kind, "g", "127.0.0.1", port)
    greeting[0] = good
    assert probe_device(dev, timeout=2) is None
    greeting[0] = bad
    assert probe_device(dev, timeout=0.5) is not None  # wrong reply, silence or a reset


def test_probe_refused_and_tcp_kind(speaker) -> None:  # type: ignore[no-untyped-def]
    port, _ = speaker
    assert probe_device(DeviceSpec("t", "tcp", "g", "127.0.0.1", port)) is None
    assert "Refused" in str(probe_device(DeviceSpec("x", "tcp", "g", "127.0.0.1", 1)))
