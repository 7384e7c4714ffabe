"""Fuzz the gateway handshake over real loopback TCP (a gateway shard in its thread, an echo device).

Each input is the bytes a client sends first: random bytes; `VENUS1 <client> <device> <token>` lines
with hostile ids and tokens (truncated, re-encoded, non-ASCII, another secret); tokens *signed with
the gateway's secret* over arbitrary claim bodies (not JSON, not an object, missing claims, claims of
the wrong type, NaN / inf / 400-digit expiry, nested values), so the claim checks behind the
signature are reached too; lines longer than the handshake limit; lines followed by payload; input
ending without a newline (the client then half-closes).

Documented outcome: the gateway answers `OK <session>` (only for a well-formed, valid, unexpired
token naming the echo device and its client: the session then echoes) or `ERR <code> <message>`
with one of the typed codes, or closes without a word when the client half-closes before a line.
After each input the gateway holds no session or half-open connection of it, the device was
reached exactly once per `OK`, and the event loop reported no exception.
"""

from __future__ import annotations

import base64
import gc
import hashlib
import hmac
import json
import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from fuzz_helpers import BUDGETS, JSON_VALUES, Budget, fuzz, mutated_text
from hypothesis import strategies as st

from venus_core.daas import DeviceSpec, DeviceTable, Gateway, GatewayConfig, GatewayThread, TokenSigner
from venus_core.daas.errors import _BY_CODE
from venus_core.daas.gateway import MAX_HANDSHAKE

CODES = set(_BY_CODE) - {"error"}  # "error" is the untyped base class: never a refusal's code
SECRET = b"fuzz-secret-0123456789abcdef"


class EchoDevice(socketserver.ThreadingTCPServer):
    """A loopback device that echoes; `accepted` counts the connections the gateway opened to it."""

    daemon_threads = True
    allow_reuse_address = True

    def __init__(self) -> None:
        self.accepted = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Echo)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()


class _Echo(socketserver.BaseRequestHandler):
    server: EchoDevice

    def handle(self) -> None:
        with self.server.lock:
            self.server.accepted += 1
        try:
            while data := self.request.recv(1 << 16):
                self.request.sendall(data)
        except OSError:
            pass


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def signed(body: bytes, secret: bytes = SECRET) -> str:
    """A token over an arbitrary body with a valid MAC (the layout of `daas.tokens`)."""
    return f"{_b64(body)}.{_b64(hmac.new(secret, body, hashlib.sha256).digest())}"


EXP = int(time.time()) + 86_400  # fixed for the whole run: the strategies must draw the same way every time


def claims(**over: Any) -> dict[str, Any]:
    return {"lease": "L1", "device": "echo", "client": "w1", "group": "g", "exp": EXP, **over}


CLAIM_VALUES = st.one_of(JSON_VALUES, st.sampled_from([float("nan"), float("inf"), 10**400, -(10**400), "9" * 400]))
CLAIM_BODIES = st.one_of(
    st.builds(lambda k, v: json.dumps(claims(**{k: v}), allow_nan=True).encode(),
              st.sampled_from(["lease", "device", "client", "group", "exp"]), CLAIM_VALUES),
    st.builds(lambda k: json.dumps({x: y for x, y in claims().items() if x != k}).encode(),
              st.sampled_from(["lease", "device", "client", "group", "exp"])),
    JSON_VALUES.map(lambda v: json.dumps(v, allow_nan=True).encode()),
    st.binary(max_size=60),
    st.just(json.dumps(claims()).encode()),  # valid: admitted
    st.just(json.dumps(claims(exp=EXP - 200_000)).encode()),
    st.just(b"[" * 3000),
)
TOKENS = st.one_of(
    CLAIM_BODIES.map(signed),
    CLAIM_BODIES.map(lambda b: signed(b, b"another-secret-0123456789")),
    CLAIM_BODIES.map(signed).flatmap(lambda t: mutated_text(t, 2)),
    st.text(max_size=40), st.sampled_from(["", ".", "..", "a.b.c", "é.é", "=.=", "\x00.\x00"]),
)
IDS = st.one_of(st.sampled_from(["w1", "echo", "w2", "other", "", "VENUS1"]), st.text(max_size=8))
LINES = st.builds(lambda magic, c, d, t, sep: sep.join([magic, c, d, t]),
                  st.sampled_from(["VENUS1", "VENUS1", "VENUS0", "venus1", "GET"]),
                  st.sampled_from(["w1", "w1", "w2", "", "w1 x"]), st.sampled_from(["echo", "echo", "nope", ""]),
                  TOKENS, st.sampled_from([" ", " ", "  ", "\t"]))
VALID_LINE = f"VENUS1 w1 echo {signed(json.dumps(claims()).encode())}\n".encode()
INPUTS = st.one_of(
    st.binary(max_size=20).map(lambda rest: VALID_LINE + rest),
    st.builds(lambda line, end, rest: line.encode("utf-8", "surrogatepass") + end + rest,
              LINES, st.sampled_from([b"\n", b"\r\n", b"\n", b""]), st.binary(max_size=20)),
    st.builds(lambda c, d, t: f"VENUS1 {c} {d} {t}\n".encode("utf-8", "surrogatepass"), IDS, IDS, TOKENS),
    st.binary(max_size=300),
    st.builds(lambda n, nl: b"V" * n + (b"\n" if nl else b""), st.integers(MAX_HANDSHAKE - 2, MAX_HANDSHAKE * 2),
              st.booleans()),
)


class Rig:
    """A gateway shard owning one echo device, with counters checked after every input."""

    def __init__(self) -> None:
        self.device = EchoDevice()
        self.table = DeviceTable([DeviceSpec("echo", "tcp", "g", "127.0.0.1", self.device.server_address[1])],
                                 max_upstream=4)
        self.thread = GatewayThread(Gateway(self.table, TokenSigner(SECRET),
                                            GatewayConfig(handshake_timeout=2.0))).start()
        self.loop_errors: list[dict[str, Any]] = []
        assert self.thread.loop is not None
        self.thread.loop.set_exception_handler(lambda _loop, ctx: self.loop_errors.append(ctx))
        self.oks = 0

    @property
    def gateway(self) -> Gateway:
        return self.thread.gateway

    def send(self, data: bytes) -> bytes:
        with socket.create_connection(("127.0.0.1", self.gateway.port), timeout=5) as sock:
            sock.sendall(data)
            if b"\n" not in data:
                sock.shutdown(socket.SHUT_WR)
            reply = b""
            while b"\n" not in reply:
                try:
                    chunk = sock.recv(4096)
                except ConnectionResetError:
                    break
                if not chunk:
                    break
                reply += chunk
            if reply.startswith(b"OK "):  # the payload sent after the line is echoed, then ours
                rest = data.split(b"\n", 1)[1]
                sock.sendall(b"ping")
                echoed = reply.split(b"\n", 1)[1]
                while len(echoed) < len(rest) + 4 and (chunk := sock.recv(4096)):
                    echoed += chunk
                assert echoed == rest + b"ping", f"admitted session echoed {echoed!r}"
        return reply

    def settled(self) -> None:
        deadline = time.monotonic() + 10
        gw = self.gateway
        while gw.sessions or gw._opening or gw._tasks:
            assert time.monotonic() < deadline, f"gateway still holds {len(gw.sessions)} sessions, " \
                                                f"{len(gw._opening)} opening, {len(gw._tasks)} tasks"
            time.sleep(0.002)

    def check(self, data: bytes) -> str:
        reply = self.send(data)
        line = reply.split(b"\n", 1)[0].decode("utf-8", "replace")
        if line.startswith("OK "):
            self.oks += 1
            outcome = "OK"
        elif line.startswith("ERR "):
            code = line.split(" ", 2)[1]
            assert code in CODES, f"untyped refusal {line!r} for {data[:120]!r}"
            outcome = f"ERR {code}"
        else:
            assert line == "" and b"\n" not in data, f"no answer to a handshake line: {data[:120]!r} -> {reply!r}"
            outcome = "closed before a line"
        self.settled()
        deadline = time.monotonic() + 5
        while self.device.accepted != self.oks:  # an admitted session's device side counts asynchronously
            assert self.device.accepted < self.oks and time.monotonic() < deadline, \
                f"device reached {self.device.accepted} times for {self.oks} admitted sessions"
            time.sleep(0.002)
        assert not self.loop_errors, self.loop_errors
        return outcome

    def close(self) -> None:
        gc.collect()  # a task whose exception nobody retrieved is reported when it is collected
        self.thread.stop()
        self.device.shutdown()
        self.device.server_close()
        assert not self.loop_errors, self.loop_errors


@pytest.fixture()
def rig() -> Iterator[Rig]:
    r = Rig()
    yield r
    r.close()


@pytest.mark.parametrize("budget", BUDGETS)
def test_gateway_handshake(rig: Rig, budget: Budget) -> None:
    tally = fuzz("gateway handshake", INPUTS, rig.check, budget)
    assert tally.outcomes["OK"] > 0 and tally.outcomes["ERR token_forged"] > 0
    assert rig.gateway.metrics.errors["error"] == 0
