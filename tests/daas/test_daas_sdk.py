"""Client SDK and lease registry: context-managed leases, heartbeats, TTL, health checks, HTTP."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time

import pytest
from daas_helpers import make_stack

from venus_core.daas import (
    DevicePool,
    DeviceSpec,
    HttpRegistry,
    LeaseExpired,
    LeaseHTTPServer,
    NoDeviceAvailable,
)
from venus_core.daas.probes import probe_device


def echo_devices(port: int, n: int = 3, **labels: str) -> list[DeviceSpec]:
    return [
        DeviceSpec(f"echo-{i}", "tcp", f"g{i}", "127.0.0.1", port, dict(labels)) for i in range(n)
    ]


def wait_until(cond, timeout: float = 5.0) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        time.sleep(0.02)


def test_lease_connect_release(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(echo_devices(echo_server.port, lang="en"))
    stacks.append(stack)
    pool = stack.pool()
    with pool.lease(kind="tcp", n=2, labels={"lang": "en"}) as leases:
        assert len({lz.device for lz in leases}) == 2
        assert stack.registry.status()["leased"] == 2
        with leases[1].connect() as t:
            t.sendall(b"hello")
            assert t.recv_exact(5) == b"hello"
    assert stack.registry.status()["leased"] == 0
    with pytest.raises(LeaseExpired):
        leases[0].connect()


def test_release_on_exception_and_no_match(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(echo_devices(echo_server.port, n=2))
    stacks.append(stack)
    pool = stack.pool(wait=0.1)
    with pytest.raises(RuntimeError), pool.lease(kind="tcp", n=2):
        raise RuntimeError("worker bug")
    assert stack.registry.status()["leased"] == 0
    with pytest.raises(NoDeviceAvailable, match="wanted 3 tcp"), pool.lease(kind="tcp", n=3):
        pass
    with pytest.raises(NoDeviceAvailable), pool.lease(kind="tcp", labels={"lang": "zh"}):
        pass
    assert stack.registry.status()["leased"] == 0  # a partial grant is handed back


def test_heartbeats_keep_a_lease_past_its_ttl(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    # heartbeats every 0.1 s against a 1 s TTL: the lease survives a heartbeat thread starved for
    # up to 0.9 s by a loaded machine (at ttl/3 it was 0.4 s, which a busy CI box can exceed)
    stack = make_stack(echo_devices(echo_server.port, n=1), ttl=1.0)
    stacks.append(stack)
    with stack.pool(heartbeat_interval=0.1).lease(kind="tcp") as (lease,):
        first = lease.grant.token
        time.sleep(2.0)  # twice the TTL: without heartbeats the reaper would have ended it
        assert lease.lost is None and stack.registry.status()["leased"] == 1
        assert lease.grant.token != first  # refreshed token
        with lease.connect() as t:  # the fresh token still admits connections
            t.sendall(b"x")
            assert t.recv_exact(1) == b"x"


def test_waiting_lease_gets_a_device_when_one_is_freed(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(echo_devices(echo_server.port, n=1), ttl=0.5)
    stacks.append(stack)
    held = stack.registry.lease("crashed-worker", "tcp")  # never heartbeats: expires after the TTL
    t0 = time.monotonic()
    with stack.pool("w2", wait=5).lease(kind="tcp") as (lease,):
        assert lease.device == held[0].device
        assert 0.3 < time.monotonic() - t0 < 4


def test_health_check_quarantines_and_hands_out_another(echo_server, mute_server, stacks) -> None:  # type: ignore[no-untyped-def]
    # the first android "device" accepts TCP but never answers CNXN; the second does not exist
    devs = [
        DeviceSpec("hung", "android", "g", "127.0.0.1", mute_server.port),
        DeviceSpec("gone", "android", "g", "127.0.0.1", 1),
        DeviceSpec("ok", "tcp", "g", "127.0.0.1", echo_server.port),
    ]
    stack = make_stack(devs, probe=lambda d: probe_device(d, timeout=0.3))
    stacks.append(stack)
    with pytest.raises(NoDeviceAvailable):
        stack.registry.lease("w1", "android")
    quarantined = stack.registry.status()["quarantined"]
    assert set(quarantined) == {"hung", "gone"}
    assert "no answer" in quarantined["hung"] and "Refused" in quarantined["gone"]
    (g,) = stack.registry.lease("w1", "tcp")
    assert g.device == "ok"


def test_quarantined_device_returns_when_healthy(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    broken = {"echo-0"}
    stack = make_stack(
        echo_devices(echo_server.port, n=1),
        probe=lambda d: "down" if d.id in broken else None,
        recheck_after=0.2,
    )
    stacks.append(stack)
    with pytest.raises(NoDeviceAvailable):
        stack.registry.lease("w1", "tcp")
    broken.clear()
    wait_until(lambda: not stack.registry.status()["quarantined"])
    assert stack.registry.lease("w1", "tcp")[0].device == "echo-0"


CRASHING_WORKER = textwrap.dedent("""
    import os, sys
    from venus_core.daas import DevicePool
    pool = DevicePool(sys.argv[1], "doomed", wait=2)
    cm = pool.lease(kind="tcp", n=2)
    leases = cm.__enter__()
    print(",".join(lz.device for lz in leases), flush=True)
    os._exit(3)  # dies without releasing
""")


def test_crashed_client_leases_come_back_by_ttl_over_http(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack(echo_devices(echo_server.port, n=2), ttl=0.8)
    stacks.append(stack)
    with LeaseHTTPServer(stack.registry) as http:
        out = subprocess.run(
            [sys.executable, "-c", CRASHING_WORKER, http.url],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert out.returncode == 3, out.stderr
        assert sorted(out.stdout.strip().split(",")) == ["echo-0", "echo-1"]
        remote = HttpRegistry(http.url)
        assert remote.status()["leased"] == 2
        wait_until(lambda: remote.status()["leased"] == 0)
        pool = DevicePool(http.url, "survivor", wait=1)
        with pool.lease(kind="tcp", n=2) as leases, leases[0].connect(timeout=2) as t:
            t.sendall(b"over http")
            assert t.recv_exact(9) == b"over http"
        assert remote.status()["leased"] == 0
        with pytest.raises(LeaseExpired):  # typed errors survive the HTTP hop
            remote.heartbeat("L404-x", "nobody")
