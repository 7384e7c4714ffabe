"""Costs that benchmarks/scale_devices.py found growing with the pool: each fix keeps a test here.

- a lease filtered the whole device table (O(devices) per lease under the registry's lock);
- the registry's HTTP socket queued only 5 pending connections (socketserver's default), so a few
  hundred clients calling at once got connection resets and 1 s SYN retransmits.
"""

from __future__ import annotations

import select
import socket

import pytest

from venus_core.daas import DeviceSpec, LeaseHTTPServer, LeaseRegistry, NoDeviceAvailable, TokenSigner

SIGNER = TokenSigner(b"scale-costs-secret-0123456789")


def _table(n: int, tail: int) -> list[DeviceSpec]:
    """n devices; the last `tail` carry the label set=b, the others set=a."""
    return [
        DeviceSpec(f"d{i}", "tcp", f"g{i % 7}", "127.0.0.1", 1 + i % 60000,
                   labels={"set": "b" if i >= n - tail else "a"})
        for i in range(n)
    ]


def test_leases_do_not_filter_the_whole_table_each_time(monkeypatch: pytest.MonkeyPatch) -> None:
    n, tail = 20_000, 100
    reg = LeaseRegistry(_table(n, tail), SIGNER, ["127.0.0.1:1"], probe=None)
    calls = [0]
    matches = DeviceSpec.matches

    def counting(self: DeviceSpec, kind: str, labels: dict[str, str] | None) -> bool:
        calls[0] += 1
        return matches(self, kind, labels)

    monkeypatch.setattr(DeviceSpec, "matches", counting)
    got = [reg.lease(f"c{i}", "tcp", labels={"set": "b"})[0].device for i in range(tail)]
    assert got == [f"d{i}" for i in range(n - tail, n)]  # still the first free match, table order
    assert calls[0] <= n  # one pass over the table for this (kind, labels), not one per lease (was 100 x n)
    with pytest.raises(NoDeviceAvailable, match=r"got 0 \(100 match; 100 leased"):
        reg.lease("late", "tcp", labels={"set": "b"})
    # devices that come and go are seen at once: the cached matches are rebuilt
    reg.add_device(DeviceSpec("new", "tcp", "g", "127.0.0.1", 9, labels={"set": "b"}))
    assert reg.lease("late", "tcp", labels={"set": "b"})[0].device == "new"
    reg.remove_device("d0", "pod deleted")
    assert reg.lease("x", "tcp", labels={"set": "a"})[0].device == "d1"


def test_a_released_device_is_leased_again_in_table_order() -> None:
    reg = LeaseRegistry(_table(50, 0), SIGNER, ["127.0.0.1:1"], probe=None)
    first = [reg.lease(f"c{i}", "tcp")[0] for i in range(3)]
    reg.release(first[1].lease, first[1].client)
    assert reg.lease("again", "tcp")[0].device == "d1"


def test_status_reports_the_high_water_mark_of_held_leases() -> None:
    reg = LeaseRegistry(_table(10, 0), SIGNER, ["127.0.0.1:1"], probe=None)
    assert reg.status()["peak_leased"] == 0
    grants = [reg.lease(f"c{i}", "tcp")[0] for i in range(4)]
    for g in grants[:3]:
        reg.release(g.lease, g.client)
    reg.lease("again", "tcp")
    st = reg.status()
    assert st["leased"] == 2 and st["peak_leased"] == 4  # the mark stays after the releases


def _handshakes_completed(port: int, n: int, wait: float) -> int:
    """Open n connections while nobody accepts; how many the kernel completes (queues)."""
    socks = []
    try:
        for _ in range(n):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setblocking(False)
            s.connect_ex(("127.0.0.1", port))
            socks.append(s)
        _, writable, _ = select.select([], socks, [], wait)
        return sum(s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0 for s in writable)
    finally:
        for s in socks:
            s.close()


def test_registry_http_queues_a_pool_of_pending_connections() -> None:
    """With the accept loop not running, 200 connections still complete their TCP handshake:
    the listen backlog holds them (socketserver's default of 5 completed 6)."""
    reg = LeaseRegistry([], SIGNER, ["127.0.0.1:1"], probe=None)
    http = LeaseHTTPServer(reg)  # bound and listening, serve_forever not started
    try:
        port = int(http.httpd.server_address[1])
        assert _handshakes_completed(port, 200, 2.0) == 200
    finally:
        http.stop()
