"""Device-service security (issue 22 §4): what reaches a device, and who.

Plain TCP: every kind of refused handshake (none, garbage, forged, expired, another device's or
client's token, the token of an ended lease) gets its typed error and never opens a connection to
the device (counted on the device's side); a replayed token of a released lease is refused while
its signature and expiry are still valid, in process and on a gateway that follows the registry
over HTTP; the MAC is compared with `hmac.compare_digest`.

TLS on loopback, with a CA made in the test: the SDK leases, tunnels and forwards over mutual TLS;
the token never crosses the wire in clear (a relay records the bytes); the client identity is the
certificate's, so another client's valid certificate cannot use a stolen grant or act on another
client's lease at the registry; a missing, foreign or plain-TCP client and an untrusted server are
refused before any device is reached.
"""

from __future__ import annotations

import hmac
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from daas_helpers import SECRET, Stack, make_stack
from tls_certs import PKI, make_pki

from venus_core.daas import (
    Claims,
    ClientTLS,
    DevicePool,
    DeviceSpec,
    HttpRegistry,
    IdentityMismatch,
    LeaseExpired,
    LeaseHTTPServer,
    ServerTLS,
    TokenExpired,
    TokenForged,
    TokenMismatch,
    TokenRevoked,
    TokenSigner,
)
from venus_core.daas.errors import DaasError, DeviceTimeout, GatewayUnavailable
from venus_core.daas.forward import handshake_line, open_tunnel_socket, split_addr
from venus_core.daas.service import RevocationPoller

SIGNER = TokenSigner(SECRET)


def wait_until(cond: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, f"{what}: not within {timeout} s"
        time.sleep(0.01)


def token(device: str = "echo", client: str = "w1", exp: float | None = None,
          lease: str = "L-forged") -> str:
    exp = time.time() + 60 if exp is None else exp
    return SIGNER.sign(Claims(lease=lease, device=device, client=client, group="g", exp=exp))


@pytest.fixture()
def stack(echo_server, stacks) -> Stack:  # type: ignore[no-untyped-def]
    s = make_stack([DeviceSpec("echo", "tcp", "g", "127.0.0.1", echo_server.port),
                    DeviceSpec("other", "tcp", "g", "127.0.0.1", echo_server.port)],
                   handshake_timeout=0.5)
    stacks.append(s)
    return s


def _ended_lease_line(stack: Stack) -> bytes:
    (g,) = stack.registry.lease("w1", "tcp", labels={})
    line = handshake_line(g)
    stack.registry.release(g.lease, "w1")
    return line


REFUSED: dict[str, tuple[Callable[[Stack], bytes], type[DaasError]]] = {
    "no handshake line": (lambda s: b"", DeviceTimeout),
    "garbage": (lambda s: b"GET / HTTP/1.1\n", TokenForged),
    "oversized line": (lambda s: b"V" * 10_000, TokenForged),
    "forged signature": (lambda s: f"VENUS1 w1 echo {token()[:-4]}AAAA\n".encode(), TokenForged),
    "other secret": (lambda s: ("VENUS1 w1 echo " + TokenSigner(b"x" * 32).sign(
        Claims("L1", "echo", "w1", "g", time.time() + 60)) + "\n").encode(), TokenForged),
    "expired": (lambda s: f"VENUS1 w1 echo {token(exp=time.time() - 1)}\n".encode(), TokenExpired),
    "another device's token": (lambda s: f"VENUS1 w1 echo {token('other')}\n".encode(),
                               TokenMismatch),
    "another client's token": (lambda s: f"VENUS1 w2 echo {token()}\n".encode(), TokenMismatch),
    "token of a released lease": (_ended_lease_line, TokenRevoked),
}


@pytest.mark.parametrize("case", sorted(REFUSED))
def test_no_device_is_reachable_without_a_live_lease(stack: Stack, echo_server, case: str) -> None:  # type: ignore[no-untyped-def]
    make, error = REFUSED[case]
    line = make(stack)
    with pytest.raises(error):
        open_tunnel_socket(("127.0.0.1", stack.gateway.port), line, 5.0)
    assert echo_server.accepted == 0 and stack.table.pools["echo"].opened_total == 0
    assert stack.gateway.gateway.metrics.errors[error.code] == 1


def test_a_replayed_token_of_an_ended_lease_is_refused(stack: Stack, echo_server) -> None:  # type: ignore[no-untyped-def]
    pool = stack.pool("w1")
    with pool.lease(kind="tcp") as (lease,):
        line, tok = handshake_line(lease.grant), lease.grant.token
        with lease.connect() as t:
            t.sendall(b"mine")
            assert t.recv_exact(4) == b"mine"
        sock, _ = open_tunnel_socket(split_addr(lease.grant.gateway), line, 5.0)  # still open...
    sock.settimeout(5)
    assert sock.recv(1) == b""  # ...until the release closed it
    sock.close()
    assert SIGNER.verify(tok).exp > time.time()  # signature and expiry would still admit it
    with pytest.raises(TokenRevoked, match="has ended"):
        open_tunnel_socket(split_addr(lease.grant.gateway), line, 5.0)
    # the device counts a connection when its handler thread runs, which can lag under load
    wait_until(lambda: echo_server.accepted >= 2, "the device saw both admitted sessions")
    assert echo_server.accepted == 2  # the two admitted sessions, nothing after the release


def test_replay_is_refused_by_a_gateway_that_follows_the_registry_over_http(stack: Stack) -> None:
    stack.registry.on_end.clear()  # as if the registry lived in another process
    with LeaseHTTPServer(stack.registry) as http:
        poller = RevocationPoller(stack.gateway, HttpRegistry(http.url).leases, 0.05).start()
        try:
            line = _ended_lease_line(stack)
            seen = poller.polls
            wait_until(lambda: poller.polls >= seen + 2, "two polls after the release")
            stack.gateway.call(_noop())  # the poll's deny() has run on the gateway's loop
            with pytest.raises(TokenRevoked):
                open_tunnel_socket(("127.0.0.1", stack.gateway.port), line, 5.0)
        finally:
            poller.stop()


async def _noop() -> None:
    return None


def test_the_mac_is_compared_in_constant_time(monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def spy(a: bytes, b: bytes) -> bool:
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr("venus_core.daas.tokens.hmac.compare_digest", spy)
    good = token()
    SIGNER.verify(good)
    for bad in (good[:-4] + "AAAA", good.split(".")[0] + ".AA"):  # wrong MAC, short MAC
        with pytest.raises(TokenForged):
            SIGNER.verify(bad)
    assert len(calls) == 3 and all(len(b) == 32 for _, b in calls)
    assert len(calls[2][0]) == 1  # a short MAC is compared too, not rejected by its length first


# ---------------------------------------------------------------------------------------- TLS


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> PKI:
    return make_pki(tmp_path_factory.mktemp("pki"))


def _client(pki: PKI, who: str | None = "worker-1", ca: Path | None = None) -> ClientTLS:
    pair = pki.clients[who] if who else None
    return ClientTLS(ca or pki.ca, pair.cert if pair else None, pair.key if pair else None)


class TLSStack:
    def __init__(self, stack: Stack, http: LeaseHTTPServer) -> None:
        self.stack, self.http = stack, http

    def pool(self, tls: ClientTLS, **kw: float) -> DevicePool:
        return DevicePool(self.http.url, tls=tls, wait=0.5, io_timeout=5.0, **kw)


@pytest.fixture()
def mtls(pki: PKI, echo_server, stacks) -> Iterator[TLSStack]:  # type: ignore[no-untyped-def]
    server = ServerTLS(pki.server.cert, pki.server.key, client_ca=pki.ca)
    stack = make_stack([DeviceSpec("echo", "tcp", "g", "127.0.0.1", echo_server.port)], tls=server,
                       handshake_timeout=2.0)
    stacks.append(stack)
    with LeaseHTTPServer(stack.registry, tls=server) as http:
        assert http.url.startswith("https://")
        yield TLSStack(stack, http)


def test_sdk_leases_tunnels_and_forwards_over_mutual_tls(mtls: TLSStack, pki: PKI) -> None:
    pool = mtls.pool(_client(pki))
    assert pool.client_id == "worker-1"  # taken from the certificate
    with pool.lease(kind="tcp") as (lease,):
        assert lease.grant.client == "worker-1"
        with lease.connect() as t:
            t.sendall(b"over tls")
            assert t.recv_exact(8) == b"over tls"
        with lease.forward() as port, socket.create_connection(("127.0.0.1", port), 5) as s:
            s.sendall(b"forwarded")
            buf = b""
            while len(buf) < 9:
                buf += s.recv(9 - len(buf))
            assert buf == b"forwarded"
    assert mtls.stack.registry.status()["leased"] == 0
    with pytest.raises(ValueError, match="not the identity of the TLS certificate"):
        DevicePool(mtls.http.url, "worker-2", tls=_client(pki))


class Relay:
    """A TCP relay in front of the gateway that keeps every byte it passes, both ways."""

    def __init__(self, target: int) -> None:
        self.target = target
        self.seen = bytearray()
        self.lock = threading.Lock()
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                a, _ = self.sock.accept()
            except OSError:
                return
            b = socket.create_connection(("127.0.0.1", self.target))
            for src, dst in ((a, b), (b, a)):
                threading.Thread(target=self._pipe, args=(src, dst), daemon=True).start()

    def _pipe(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while data := src.recv(65536):
                with self.lock:
                    self.seen += data
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                s.close()


def test_the_token_never_crosses_the_wire_in_clear(mtls: TLSStack, pki: PKI) -> None:
    relay = Relay(mtls.stack.gateway.port)
    mtls.stack.registry.gateways = [f"127.0.0.1:{relay.port}"]
    try:
        with mtls.pool(_client(pki)).lease(kind="tcp") as (lease,), lease.connect() as t:
            t.sendall(b"secret payload")
            assert t.recv_exact(14) == b"secret payload"
            tok = lease.grant.token
    finally:
        relay.sock.close()
    with relay.lock:
        seen = bytes(relay.seen)
    assert len(seen) > 500  # the TLS handshake and records went through the relay
    for clear in (tok.encode(), tok.split(".")[1].encode(), b"VENUS1", b"secret payload"):
        assert clear not in seen


def test_the_client_identity_is_the_certificate_not_what_the_client_says(
        mtls: TLSStack, pki: PKI, echo_server) -> None:  # type: ignore[no-untyped-def]
    thief = _client(pki, "worker-2")
    with mtls.pool(_client(pki)).lease(kind="tcp") as (lease,):
        g = lease.grant
        addr, ctx = split_addr(g.gateway), thief.context()
        opened = echo_server.accepted
        with pytest.raises(IdentityMismatch, match="'worker-1', the certificate 'worker-2'"):
            open_tunnel_socket(addr, handshake_line(g), 5.0, ctx)  # the stolen line, as is
        with pytest.raises(TokenMismatch, match="not 'worker-2'"):  # the stolen token, own name
            open_tunnel_socket(addr, f"VENUS1 worker-2 {g.device} {g.token}\n".encode(), 5.0, ctx)
        assert echo_server.accepted == opened
        registry = HttpRegistry(mtls.http.url, tls=thief)
        for act in (registry.heartbeat, registry.release):
            with pytest.raises(IdentityMismatch, match="the TLS certificate 'worker-2'"):
                act(g.lease, "worker-1")
            with pytest.raises(LeaseExpired, match="not held by worker-2"):
                act(g.lease, "worker-2")
        with pytest.raises(IdentityMismatch):
            registry.lease("worker-1", "tcp", 1)
        assert lease.lost is None and mtls.stack.registry.status()["leased"] == 1


def test_clients_without_a_trusted_certificate_and_untrusted_servers_are_refused(
        mtls: TLSStack, pki: PKI, echo_server) -> None:  # type: ignore[no-untyped-def]
    addr = ("127.0.0.1", mtls.stack.gateway.port)
    line = f"VENUS1 worker-1 echo {token(client='worker-1')}\n".encode()  # a valid token
    rogue = ClientTLS(pki.ca, pki.rogue_client.cert, pki.rogue_client.key)  # CN worker-1, other CA
    for who in (_client(pki, None), rogue):
        with pytest.raises(GatewayUnavailable):
            open_tunnel_socket(addr, line, 5.0, who.context())
        with pytest.raises(GatewayUnavailable):
            HttpRegistry(mtls.http.url, tls=who).lease("worker-1", "tcp", 1)
    with pytest.raises(GatewayUnavailable, match="connection closed during the handshake"):
        open_tunnel_socket(addr, line, 5.0)  # plain TCP to a TLS gateway
    with pytest.raises(GatewayUnavailable, match="certificate verify failed"):
        open_tunnel_socket(addr, line, 5.0, _client(pki, ca=pki.rogue_ca).context())
    with pytest.raises(ValueError, match="https URL needs client TLS"):
        HttpRegistry(mtls.http.url)
    assert echo_server.accepted == 0 and mtls.stack.registry.status()["leased"] == 0


def test_server_only_tls_encrypts_with_a_self_asserted_client(pki: PKI, echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    server = ServerTLS(pki.server.cert, pki.server.key)
    stack = make_stack([DeviceSpec("echo", "tcp", "g", "127.0.0.1", echo_server.port)], tls=server)
    stacks.append(stack)
    with LeaseHTTPServer(stack.registry, tls=server) as http:
        pool = DevicePool(http.url, "anyone", tls=_client(pki, None), wait=0.5, io_timeout=5.0)
        with pool.lease(kind="tcp") as (lease,), lease.connect() as t:
            t.sendall(b"ok")
            assert t.recv_exact(2) == b"ok"
