"""Faults: a silent device, an upstream killed mid-stream, a gateway restart. In each case the SDK
raises a typed error within its timeout, the device is quarantined and replaced where it is at
fault, and no lease leaks."""

from __future__ import annotations

import asyncio
import time

import pytest
from daas_helpers import make_stack

from venus_core.daas import DeviceSpec, DeviceTimeout, GatewayUnavailable, UpstreamClosed
from venus_core.daas.forward import handshake_line, open_tunnel_socket, split_addr


def test_device_that_stops_answering(echo_server, mute_server, stacks) -> None:  # type: ignore[no-untyped-def]
    devs = [
        DeviceSpec("hung", "tcp", "g", "127.0.0.1", mute_server.port),
        DeviceSpec("good", "tcp", "g", "127.0.0.1", echo_server.port),
    ]
    stack = make_stack(devs)
    stacks.append(stack)
    with stack.pool(io_timeout=0.4).lease(kind="tcp") as (lease,):
        assert (
            lease.device == "hung"
        )  # first in the table; it accepts TCP, so it passes a connect probe
        t0 = time.monotonic()
        with lease.connect() as t, pytest.raises(DeviceTimeout, match="hung"):
            t.sendall(b"step")
            t.recv_exact(4)
        assert time.monotonic() - t0 < 2.0
        lease.replace("stopped answering")
        assert lease.device == "good"
        assert "stopped answering" in stack.registry.status()["quarantined"]["hung"]
        with lease.connect() as t:
            t.sendall(b"step")
            assert t.recv_exact(4) == b"step"
    st = stack.registry.status()
    assert st["leased"] == 0 and set(st["quarantined"]) == {"hung"}


def test_upstream_killed_mid_stream(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    from daas_helpers import tcp_server

    other = tcp_server("echo")
    try:
        devs = [
            DeviceSpec("a", "tcp", "g", "127.0.0.1", echo_server.port),
            DeviceSpec("b", "tcp", "g", "127.0.0.1", other.port),
        ]
        stack = make_stack(devs)
        stacks.append(stack)
        with stack.pool(io_timeout=2).lease(kind="tcp") as (lease,):
            with lease.connect() as t:
                t.sendall(b"1234")
                assert t.recv_exact(4) == b"1234"
                echo_server.reset_all()  # the device dies with a TCP reset
                t0 = time.monotonic()
                with pytest.raises(UpstreamClosed):
                    t.sendall(b"more")
                    t.recv_exact(4)
                assert time.monotonic() - t0 < 1.5
            assert stack.gateway.gateway.metrics.errors["upstream_reset"] == 1  # counted as such
            lease.replace("upstream reset")
            assert lease.device == "b"
            with lease.connect() as t:
                t.sendall(b"ok")
                assert t.recv_exact(2) == b"ok"
        assert stack.registry.status()["leased"] == 0
        # the gateway gives the sessions' pool slots back (asynchronously, on its loop)
        deadline = time.monotonic() + 5
        while any(p.active for p in stack.table.pools.values()):
            assert time.monotonic() < deadline, "upstream pool slots leaked"
            time.sleep(0.01)
        assert stack.table.pools["a"].opened_total == 1
    finally:
        other.shutdown()
        other.reset_all()
        other.server_close()


def test_gateway_restart(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack([DeviceSpec("a", "tcp", "g", "127.0.0.1", echo_server.port)])
    stacks.append(stack)
    with stack.pool(io_timeout=2).lease(kind="tcp") as (lease,):
        t = lease.connect()
        t.sendall(b"before")
        assert t.recv_exact(6) == b"before"
        port = stack.gateway.port
        stack.gateway.stop()
        t0 = time.monotonic()
        with pytest.raises(UpstreamClosed):
            t.recv(10)
        assert time.monotonic() - t0 < 1.5
        t.close()
        with pytest.raises(GatewayUnavailable):  # nothing listens while it is down
            lease.connect()
        stack.restart_gateway()
        assert stack.gateway.port == port
        with lease.connect() as t2:  # the lease and its token survive the restart
            t2.sendall(b"after")
            assert t2.recv_exact(5) == b"after"
        assert stack.registry.status()["quarantined"] == {}  # not the device's fault
    assert stack.registry.status()["leased"] == 0


def test_ended_lease_closes_sessions_on_a_gateway_in_another_process(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    """Without the in-process hook, the gateway follows the registry's live leases over HTTP."""
    from venus_core.daas import HttpRegistry, LeaseHTTPServer
    from venus_core.daas.service import RevocationPoller

    stack = make_stack([DeviceSpec("a", "tcp", "g", "127.0.0.1", echo_server.port)], ttl=0.6)
    stacks.append(stack)
    stack.registry.on_end.clear()  # as if the registry lived elsewhere
    with LeaseHTTPServer(stack.registry) as http:
        poller = RevocationPoller(stack.gateway, HttpRegistry(http.url).leases, 0.1).start()
        try:
            (kept,) = stack.registry.lease("w1", "tcp")
            pool = stack.pool("w2", io_timeout=3)
            # w1's lease is never renewed: its TTL ends it, and its open session must go with it
            sock, _ = open_tunnel_socket(split_addr(kept.gateway), handshake_line(kept), 3)
            sock.settimeout(5)
            t0 = time.monotonic()
            assert sock.recv(1) == b""
            assert 0.3 < time.monotonic() - t0 < 3
            sock.close()
            with pool.lease(kind="tcp") as (lease,), lease.connect() as t:
                t.sendall(b"mine now")  # the new holder's session is not touched by the poller:
                seen = poller.polls  # three polls later (their revocations run on the loop) ...
                deadline = time.monotonic() + 10
                while poller.polls < seen + 3:
                    assert time.monotonic() < deadline, "the poller stopped polling"
                    time.sleep(0.01)
                stack.gateway.call(asyncio.sleep(0))
                assert t.recv_exact(8) == b"mine now"  # ... it is still open
        finally:
            poller.stop()
