"""Fixtures for the device-service tests: loopback TCP devices and a whole lease+gateway stack."""

from __future__ import annotations

import socket
import socketserver
import struct
import threading
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from venus_core.daas import (
    DevicePool,
    DeviceSpec,
    DeviceTable,
    Gateway,
    GatewayConfig,
    GatewayThread,
    LeaseRegistry,
    ServerTLS,
    TokenSigner,
)
from venus_core.daas.probes import Probe

SECRET = b"test-secret-0123456789abcdef"


class _Server(socketserver.ThreadingTCPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.accepted = 0  # connections ever made to this device
        self.conns: set[socket.socket] = set()
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)

    @property
    def port(self) -> int:
        return int(self.server_address[1])

    def reset_all(self) -> None:
        """Kill every open connection with a TCP reset (as a crashing device would)."""
        with self.lock:
            for c in list(self.conns):
                c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
                c.close()
            self.conns.clear()


class _Handler(socketserver.BaseRequestHandler):
    server: _Server

    def handle(self) -> None:
        sock: socket.socket = self.request
        with self.server.lock:
            self.server.conns.add(sock)
            self.server.accepted += 1
        try:
            while data := sock.recv(1 << 16):
                if self.server.mode == "echo":
                    sock.sendall(data)
                # "mute": reads and never answers (a hung device)
        except OSError:
            pass
        finally:
            with self.server.lock:
                self.server.conns.discard(sock)


def tcp_server(mode: str) -> _Server:
    srv = _Server(mode)
    threading.Thread(target=srv.serve_forever, args=(0.05,), daemon=True).start()
    return srv


@pytest.fixture()
def echo_server() -> Iterator[_Server]:
    srv = tcp_server("echo")
    yield srv
    srv.shutdown()
    srv.reset_all()
    srv.server_close()


@pytest.fixture()
def mute_server() -> Iterator[_Server]:
    srv = tcp_server("mute")
    yield srv
    srv.shutdown()
    srv.reset_all()
    srv.server_close()


@dataclass
class Stack:
    registry: LeaseRegistry
    gateway: GatewayThread
    signer: TokenSigner
    table: DeviceTable

    def pool(self, client_id: str = "worker-1", **kw: float) -> DevicePool:
        kw.setdefault("wait", 0.5)
        kw.setdefault("io_timeout", 2.0)
        return DevicePool(self.registry, client_id, **kw)

    def restart_gateway(self) -> None:
        port = self.gateway.port
        config = self.gateway.gateway.config
        self.gateway.stop()
        self.gateway = GatewayThread(
            Gateway(self.table, self.signer, GatewayConfig(port=port, tls=config.tls))
        ).start()
        self.registry.on_end[:] = [self.gateway.revoke]


def make_stack(
    devices: list[DeviceSpec],
    *,
    ttl: float = 5.0,
    probe: Probe | None = None,
    recheck_after: float = 60.0,
    metrics: bool = False,
    max_upstream: int = 8,
    tls: ServerTLS | None = None,
    handshake_timeout: float = 5.0,
) -> Stack:
    signer = TokenSigner(SECRET)
    table = DeviceTable(devices, max_upstream=max_upstream)
    config = GatewayConfig(tls=tls, handshake_timeout=handshake_timeout)
    gw = GatewayThread(
        Gateway(table, signer, config), metrics_port=0 if metrics else None
    ).start()
    reg = LeaseRegistry(
        devices,
        signer,
        [f"127.0.0.1:{gw.port}"],
        ttl=ttl,
        probe=probe,
        recheck_after=recheck_after,
        reap_interval=0.1,
    ).start()
    reg.on_end.append(gw.revoke)
    return Stack(reg, gw, signer, table)


@pytest.fixture()
def stacks() -> Iterator[list[Stack]]:
    made: list[Stack] = []
    yield made
    for s in made:
        s.registry.stop()
        s.gateway.stop()
