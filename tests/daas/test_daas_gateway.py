"""The gateway over raw sockets: admission (tokens, shards, pools), forwarding, metrics,
revocation."""

from __future__ import annotations

import logging
import os
import socket
import time
import urllib.request

import pytest
from daas_helpers import SECRET, Stack, make_stack

from venus_core.daas import (
    Claims,
    DeviceSpec,
    DeviceTable,
    Gateway,
    GatewayThread,
    TokenSigner,
)
from venus_core.daas.errors import (
    DeviceUnavailable,
    GatewayBusy,
    TokenExpired,
    TokenForged,
    TokenMismatch,
    UnknownDevice,
    WrongShard,
)
from venus_core.daas.forward import open_tunnel_socket

SIGNER = TokenSigner(SECRET)


def token(device: str, client: str = "w1", exp: float | None = None, lease: str = "L1") -> str:
    return SIGNER.sign(
        Claims(
            lease=lease,
            device=device,
            client=client,
            group="g",
            exp=time.time() + 30 if exp is None else exp,
        )
    )


def hello(device: str, tok: str, client: str = "w1") -> bytes:
    return f"VENUS1 {client} {device} {tok}\n".encode()


def connect(stack: Stack, line: bytes) -> tuple[socket.socket, str]:
    return open_tunnel_socket(("127.0.0.1", stack.gateway.port), line, 5.0)


def recv_exact(s: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(min(1 << 20, n - len(buf)))
        assert chunk, "stream ended early"
        buf += chunk
    return bytes(buf)


@pytest.fixture()
def stack(echo_server, stacks) -> Stack:  # type: ignore[no-untyped-def]
    devs = [
        DeviceSpec("echo", "tcp", "g", "127.0.0.1", echo_server.port),
        DeviceSpec("dead", "tcp", "g", "127.0.0.1", 1),
    ]
    s = make_stack(devs, metrics=True, max_upstream=2)
    stacks.append(s)
    return s


def test_forwards_bytes_both_ways_including_pipelined_data(stack: Stack) -> None:
    sock, session = connect(stack, hello("echo", token("echo")) + b"early bytes|")
    with sock:
        assert session.startswith("s0-")
        assert recv_exact(sock, 12) == b"early bytes|"
        payload = os.urandom(4 << 20)  # larger than every buffer: exercises backpressure
        sock.sendall(payload)
        assert recv_exact(sock, len(payload)) == payload
        sock.shutdown(socket.SHUT_WR)  # half-close reaches the device, which then closes
        sock.settimeout(5)
        assert sock.recv(1) == b""


@pytest.mark.parametrize(
    ("line", "error"),
    [
        (lambda: hello("echo", token("echo")[:-3] + "abc"), TokenForged),
        (lambda: hello("echo", "garbage"), TokenForged),
        (lambda: b"HELLO there\n", TokenForged),
        (lambda: hello("echo", token("echo", exp=time.time() - 1)), TokenExpired),
        (lambda: hello("echo", token("other")), TokenMismatch),  # token of another device
        (lambda: hello("echo", token("echo", client="w2")), TokenMismatch),
        (lambda: hello("ghost", token("ghost")), UnknownDevice),
        (lambda: hello("dead", token("dead")), DeviceUnavailable),
    ],
)
def test_refusals_are_typed_counted_and_logged(stack: Stack, line, error, caplog) -> None:  # type: ignore[no-untyped-def]
    caplog.set_level(logging.WARNING, logger="venus_core.daas.gateway")
    with pytest.raises(error):
        connect(stack, line())
    assert any("refused" in r.getMessage() and error.code in r.getMessage() for r in caplog.records)
    page = (
        urllib.request.urlopen(f"http://127.0.0.1:{stack.gateway.metrics_port}/metrics")
        .read()
        .decode()
    )
    assert f'venus_gateway_errors_total{{code="{error.code}",shard="0"}} 1.0' in page


def test_pool_cap_and_release(stack: Stack) -> None:
    a, _ = connect(stack, hello("echo", token("echo")))
    b, _ = connect(stack, hello("echo", token("echo")))
    with pytest.raises(GatewayBusy):
        connect(stack, hello("echo", token("echo")))
    a.close()
    deadline = time.monotonic() + 5
    while stack.table.pools["echo"].active > 1 and time.monotonic() < deadline:
        time.sleep(0.01)
    c, _ = connect(stack, hello("echo", token("echo")))
    b.close(), c.close()


def test_wrong_shard(echo_server) -> None:  # type: ignore[no-untyped-def]
    groups = {shard_group: None for shard_group in ("g0", "g1", "g2", "g3", "g4", "g5")}
    devs = [DeviceSpec(f"d-{g}", "tcp", g, "127.0.0.1", echo_server.port) for g in groups]
    table = DeviceTable(devs, shard=0, n_shards=2)
    foreign = next(d for d in devs if not table.owns(d.id))
    with GatewayThread(Gateway(table, SIGNER)) as gw, pytest.raises(WrongShard):
        open_tunnel_socket(("127.0.0.1", gw.port), hello(foreign.id, token(foreign.id)), 5)


def test_metrics_page_counts_sessions_and_bytes(stack: Stack) -> None:
    sock, _ = connect(stack, hello("echo", token("echo")))
    with sock:
        sock.sendall(b"x" * 1000)
        recv_exact(sock, 1000)
        page = (
            urllib.request.urlopen(f"http://127.0.0.1:{stack.gateway.metrics_port}/metrics")
            .read()
            .decode()
        )
    assert 'venus_gateway_sessions_total{shard="0"} 1.0' in page
    assert 'venus_gateway_sessions_active{shard="0"} 1.0' in page
    assert 'venus_gateway_bytes_total{direction="client_to_device",shard="0"} 1000.0' in page
    assert 'venus_gateway_bytes_total{direction="device_to_client",shard="0"} 1000.0' in page
    assert 'venus_gateway_connect_seconds_count{shard="0"} 1.0' in page
    health = urllib.request.urlopen(f"http://127.0.0.1:{stack.gateway.metrics_port}/healthz").read()
    assert health == b"ok\n"


def test_revoke_closes_the_lease_sessions(stack: Stack) -> None:
    sock, _ = connect(stack, hello("echo", token("echo", lease="L9")))
    other, _ = connect(stack, hello("echo", token("echo", lease="L8")))
    stack.gateway.revoke("L9")
    sock.settimeout(5)
    assert sock.recv(1) == b""
    other.sendall(b"ping")
    assert recv_exact(other, 4) == b"ping"
    sock.close(), other.close()


def test_handshake_timeout_and_oversized_line(stack: Stack) -> None:
    stack.gateway.gateway.config = type(stack.gateway.gateway.config)(handshake_timeout=0.2)
    with socket.create_connection(("127.0.0.1", stack.gateway.port), timeout=5) as s:
        s.sendall(b"VENUS1 w1 echo")  # never finishes the line
        assert s.recv(100).startswith(b"ERR timeout")
    with socket.create_connection(("127.0.0.1", stack.gateway.port), timeout=5) as s:
        s.sendall(b"A" * 5000)
        assert s.recv(100).startswith(b"ERR token_forged handshake line too long")
