"""Client SDK: lease devices, keep the leases alive, reach the devices through the gateway.

    pool = DevicePool("http://127.0.0.1:7070", client_id="rollout-3")   # or a LeaseRegistry
    with pool.lease(kind="android", n=4, labels={"lang": "en"}) as leases:
        with leases[0].connect() as t:          # a byte tunnel to the device (Tunnel)
            t.sendall(b"..."); t.recv_exact(24)
        with leases[1].forward() as port:       # a local port for unmodified tools
            subprocess.run(["adb", "connect", f"127.0.0.1:{port}"])
        leases[2].replace("stopped answering")  # quarantine the device, get another

Why: leases end on every path out of the `with` block; a background thread heartbeats every
lease (every ttl/3) and marks a lease lost if the registry no longer knows it; a process that dies
stops heartbeating and the registry's TTL returns its devices. Tunnel I/O has a timeout and maps a
silent device to `DeviceTimeout` and an unexpected end of stream (device or gateway gone) to
`UpstreamClosed`, so a worker never hangs on a dead device.

TLS: `DevicePool(url, tls=ClientTLS(...))`, or for a registry URL the `$VENUS_DAAS_CA` /
`$VENUS_DAAS_CERT` / `$VENUS_DAAS_KEY` files (see `tls`), encrypts both the registry's HTTP and the
gateway tunnels. With a client certificate the client id defaults to the certificate's identity,
which is the only id a mutual-TLS registry and gateway accept from this client.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol, Self

from venus_core.daas.errors import (
    DaasError,
    DeviceTimeout,
    GatewayUnavailable,
    LeaseExpired,
    UpstreamClosed,
)
from venus_core.daas.forward import LocalForwarder, handshake_line, open_tunnel_socket, split_addr
from venus_core.daas.lease_http import HttpRegistry
from venus_core.daas.registry import Grant
from venus_core.daas.tls import ClientTLS

log = logging.getLogger(__name__)


class RegistryAPI(Protocol):
    def lease(
        self,
        client: str,
        kind: str,
        n: int = 1,
        labels: dict[str, str] | None = None,
        wait: float = 0.0,
    ) -> list[Grant]: ...
    def heartbeat(self, lease_id: str, client: str) -> Grant: ...
    def release(self, lease_id: str, client: str) -> None: ...
    def report_failure(self, lease_id: str, client: str, reason: str) -> None: ...
    def replace(self, lease_id: str, client: str, reason: str, wait: float = 0.0) -> Grant: ...


class Tunnel:
    """A blocking byte stream to one device through the gateway, with timeouts and typed errors."""

    def __init__(self, sock: socket.socket, session: str, device: str, timeout: float) -> None:
        self.sock = sock
        self.session = session
        self.device = device
        sock.settimeout(timeout)

    def sendall(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except TimeoutError as exc:
            raise DeviceTimeout(f"device {self.device}: send timed out") from exc
        except OSError as exc:
            raise UpstreamClosed(f"device {self.device}: tunnel broken on send: {exc}") from exc

    def recv(self, n: int = 1 << 16) -> bytes:
        """Up to `n` bytes; raises UpstreamClosed at end of stream, DeviceTimeout when silent."""
        try:
            data = self.sock.recv(n)
        except TimeoutError as exc:
            raise DeviceTimeout(
                f"device {self.device}: no data within {self.sock.gettimeout()}s"
            ) from exc
        except OSError as exc:
            raise UpstreamClosed(f"device {self.device}: tunnel broken: {exc}") from exc
        if not data:
            raise UpstreamClosed(
                f"device {self.device}: stream ended (device or gateway went away)"
            )
        return data

    def recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            buf += self.recv(n - len(buf))
        return bytes(buf)

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class Lease:
    """One leased device; `grant` is refreshed by heartbeats and replaced by `replace()`."""

    def __init__(self, pool: DevicePool, grant: Grant) -> None:
        self.pool = pool
        self.grant = grant
        self.lost: str | None = None
        self._lock = threading.Lock()

    @property
    def device(self) -> str:
        return self.grant.device

    def _check(self) -> Grant:
        if self.lost is not None:
            raise LeaseExpired(f"lease {self.grant.lease} on {self.grant.device} lost: {self.lost}")
        return self.grant

    def connect(self, timeout: float | None = None) -> Tunnel:
        """Open a tunnel to the device (handshake and I/O bounded by `timeout`)."""
        g = self._check()
        t = self.pool.io_timeout if timeout is None else timeout
        sock, session = open_tunnel_socket(
            split_addr(g.gateway), handshake_line(g), t, self.pool.tls_context
        )
        return Tunnel(sock, session, g.device, t)

    @contextmanager
    def forward(self, port: int = 0) -> Iterator[int]:
        """A local TCP port whose connections are tunnelled to the device (for adb, SSH, CDP)."""
        fwd = LocalForwarder(
            lambda: (split_addr(self._check().gateway), handshake_line(self.grant)),
            port=port,
            timeout=self.pool.io_timeout,
            tls=self.pool.tls_context,
        ).start()
        try:
            yield fwd.port
        finally:
            fwd.stop()

    def replace(self, reason: str) -> Grant:
        """Quarantine this device (reported broken) and continue on another matching one."""
        g = self._check()
        with self._lock:
            self.grant = self.pool.registry.replace(g.lease, g.client, reason, wait=self.pool.wait)
        log.info(
            "lease %s: device %s replaced by %s (%s)", g.lease, g.device, self.grant.device, reason
        )
        return self.grant

    def heartbeat(self) -> None:
        if self.lost is not None:
            return
        g = self.grant
        try:
            fresh = self.pool.registry.heartbeat(g.lease, g.client)
        except LeaseExpired as exc:
            self.lost = str(exc)
            return
        with self._lock:
            if self.grant.lease == g.lease:
                self.grant = fresh

    def release(self) -> None:
        if self.lost is None:
            self.lost = "released"
            try:
                self.pool.registry.release(self.grant.lease, self.grant.client)
            except LeaseExpired:
                pass  # already gone (expired or ended by the registry)


class DevicePool:
    """Lease devices from a registry (a `LeaseRegistry` in process, or its HTTP(S) URL)."""

    def __init__(
        self,
        registry: RegistryAPI | str,
        client_id: str | None = None,
        *,
        wait: float = 10.0,
        io_timeout: float = 10.0,
        heartbeat_interval: float | None = None,
        tls: ClientTLS | None = None,
    ) -> None:
        if tls is None and isinstance(registry, str):
            tls = ClientTLS.from_env()
        self.tls_context = tls.context() if tls is not None else None
        self.registry: RegistryAPI = (
            HttpRegistry(registry, tls=tls) if isinstance(registry, str) else registry
        )
        identity = tls.identity() if tls is not None else None
        if identity is not None and client_id not in (None, identity):
            raise ValueError(
                f"client id {client_id!r} is not the identity of the TLS certificate {identity!r}"
            )
        self.client_id = (
            client_id or identity or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:6]}"
        )
        if any(c.isspace() for c in self.client_id):
            raise ValueError(f"client id must not contain spaces: {self.client_id!r}")
        self.wait = wait
        self.io_timeout = io_timeout
        self.heartbeat_interval = heartbeat_interval
        self._active: list[Lease] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._hb: threading.Thread | None = None

    @contextmanager
    def lease(
        self, kind: str = "android", n: int = 1, labels: dict[str, str] | None = None
    ) -> Iterator[list[Lease]]:
        """Lease `n` devices for the duration of the block; released on every exit path."""
        grants = self.registry.lease(self.client_id, kind, n, labels, wait=self.wait)
        leases = [Lease(self, g) for g in grants]
        with self._lock:
            self._active.extend(leases)
            if self._hb is None:
                interval = self.heartbeat_interval or max(0.05, min(g.ttl for g in grants) / 3)
                self._stop.clear()
                self._hb = threading.Thread(
                    target=self._heartbeats, args=(interval,), name="lease-heartbeat", daemon=True
                )
                self._hb.start()
        try:
            yield leases
        finally:
            errors: list[DaasError] = []
            for lz in leases:
                try:
                    lz.release()
                except DaasError as err:  # registry unreachable: the TTL will return the device
                    errors.append(err)
            hb: threading.Thread | None = None
            with self._lock:
                for lz in leases:
                    self._active.remove(lz)
                if not self._active and self._hb is not None:
                    self._stop.set()
                    hb, self._hb = self._hb, None
            if hb is not None:
                hb.join(5)
            for failure in errors:
                log.warning("release failed (the lease TTL will return the device): %s", failure)

    def _heartbeats(self, interval: float) -> None:
        while not self._stop.wait(interval):
            with self._lock:
                leases = list(self._active)
            for lz in leases:
                try:
                    lz.heartbeat()
                except GatewayUnavailable as exc:
                    log.warning("heartbeat for %s failed: %s", lz.grant.lease, exc)
