"""The device gateway: token-checked TCP splice from a client to one device (ADB, CDP, SSH).

Why a byte splice: ADB, the Chrome DevTools WebSocket (after its HTTP upgrade) and SSH are all
long-lived TCP streams, so one reverse proxy serves every device kind without parsing any of them.
Framing: the client's first line is `VENUS1 <client-id> <device-id> <token>\\n`; the gateway checks
the token (signature, expiry, device, client), that its lease has not ended (a replayed token of
a released or expired lease is refused until the token itself expires), that its shard owns the
device's group (see `routing`), takes a slot in the device's upstream pool, connects, and answers
`OK <session>\\n` or `ERR <code> <message>\\n` (codes in `errors`) and closes. After `OK` the bytes
are the device's. With TLS (`GatewayConfig.tls`, see `tls`) the line travels encrypted; with client
certificates (mTLS) the client id is the certificate's identity: a handshake naming another
client, or a token issued to another client, is refused.

Forwarding does no per-message Python work: both sides are `splice.End` Protocols whose
`data_received` writes the chunk straight into the peer transport, with transport flow control as
backpressure (see `splice`). An idle session costs two sockets and two small objects, no
coroutine, which is what lets one core hold thousands.

Departure from the paper: no zero-copy (splice(2)) in Python; the copy is one `bytes` per chunk.
When a lease ends its open sessions are closed: `Gateway.revoke(lease)` is wired to the registry
in process; a gateway in another process follows the registry's live-lease list
(`service.RevocationPoller`, `revoke_except`), so revocation there lags by one poll interval.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from venus_core.daas.errors import (
    DaasError,
    DeviceTimeout,
    DeviceUnavailable,
    GatewayBusy,
    IdentityMismatch,
    TokenForged,
    TokenRevoked,
    UnknownDevice,
    WrongShard,
)
from venus_core.daas.metrics import GatewayMetrics
from venus_core.daas.routing import DeviceTable, UpstreamPool
from venus_core.daas.splice import End, pair
from venus_core.daas.tls import ServerTLS, peer_identity
from venus_core.daas.tokens import Claims, TokenSigner

log = logging.getLogger(__name__)

MAGIC = "VENUS1"
MAX_HANDSHAKE = 4096


@dataclass(frozen=True)
class GatewayConfig:
    host: str = "127.0.0.1"
    port: int = 0
    handshake_timeout: float = 5.0  # TLS handshake, then the handshake line, each
    connect_timeout: float = 5.0
    tls: ServerTLS | None = None
    # how long an ended lease is remembered (its tokens refused): at least the registry's TTL,
    # since a token signed at the lease's last heartbeat stays valid that long
    revoked_for: float = 3600.0


class _Client(End):
    """The client side: reads the handshake line, then behaves as a plain `End`."""

    __slots__ = ("buf", "session", "timer")

    def __init__(self, session: Session) -> None:
        super().__init__(session)
        self.session = session
        self.buf = bytearray()
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        # over TLS this runs after the TLS handshake: the peer certificate is known (verified)
        self.session.identity = peer_identity(transport.get_extra_info("peercert"))
        self.session.gateway._opening.add(self.session)
        self.timer = asyncio.get_running_loop().call_later(
            self.session.gateway.config.handshake_timeout,
            self.session.refuse,
            DeviceTimeout("no handshake line in time"),
        )

    def data_received(self, data: bytes) -> None:
        if self.peer is not None or self.session.admitting:
            super().data_received(data)
            return
        self.buf += data
        nl = self.buf.find(b"\n")
        if nl < 0:
            if len(self.buf) > MAX_HANDSHAKE:
                self.session.refuse(TokenForged("handshake line too long"))
            return
        line, rest = bytes(self.buf[:nl]), bytes(self.buf[nl + 1 :])
        self.buf.clear()
        if rest:
            self.nbytes += len(rest)
            self.pending.append(rest)
        if self.timer is not None:
            self.timer.cancel()
        self.session.admitting = True
        assert self.transport is not None
        self.transport.pause_reading()
        task = asyncio.get_running_loop().create_task(self.session.admit(line))
        self.session.gateway._tasks.add(task)
        task.add_done_callback(self.session.gateway._tasks.discard)

    def eof_received(self) -> bool:
        if self.peer is None:
            self.session.close("eof before handshake")
            return False
        return super().eof_received()


class Session:
    """One client connection and, once admitted, its upstream connection."""

    _ids = itertools.count(1)

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway
        self.id = f"s{gateway.table.shard}-{next(self._ids)}"
        self.client = _Client(self)
        self.upstream: End | None = None
        self.claims: Claims | None = None
        self.identity: str | None = None  # the client certificate's identity (mTLS only)
        self.pool: UpstreamPool | None = None
        self.admitting = False
        self.closed = False
        self.started = time.monotonic()

    def refuse(self, err: DaasError) -> None:
        if self.closed:
            return
        self.gateway.metrics.errors[err.code] += 1
        peer = self.client.transport.get_extra_info("peername") if self.client.transport else None
        lease = self.claims.lease if self.claims else "-"
        log.warning(
            "gateway shard %d: refused %s (lease %s): %s: %s",
            self.gateway.table.shard,
            peer,
            lease,
            err.code,
            err,
        )
        if self.client.transport is not None:
            msg = str(err).replace("\n", " ")[:200]
            self.client.transport.write(f"ERR {err.code} {msg}\n".encode())
        self.close("refused")

    async def admit(self, line: bytes) -> None:
        gw = self.gateway
        t0 = time.perf_counter()
        try:
            parts = line.decode("utf-8").strip().split(" ")
            if len(parts) != 4 or parts[0] != MAGIC:
                raise TokenForged(f"bad handshake: expected '{MAGIC} <client> <device> <token>'")
            _, client_id, device_id, token = parts
            if gw.mutual_tls and client_id != self.identity:
                raise IdentityMismatch(
                    f"handshake names client {client_id!r}, the certificate {self.identity!r}"
                )
            self.claims = gw.signer.verify(token, device=device_id, client=client_id)
            if gw.is_revoked(self.claims.lease):
                raise TokenRevoked(f"lease {self.claims.lease} has ended")
            if device_id not in gw.table.devices:
                raise UnknownDevice(f"unknown device {device_id!r}")
            pool = gw.table.pools.get(device_id)
            if pool is None:
                raise WrongShard(
                    f"device {device_id} belongs to another shard than {gw.table.shard}"
                )
            if not pool.try_acquire():
                raise GatewayBusy(
                    f"device {device_id}: {pool.max_conns} upstream connections in use"
                )
            self.pool = pool
            dev = pool.device
            loop = asyncio.get_running_loop()
            upstream = self.upstream = End(self)
            try:
                await asyncio.wait_for(
                    loop.create_connection(lambda: upstream, dev.host, dev.port),
                    gw.config.connect_timeout,
                )
            except TimeoutError as exc:
                raise DeviceTimeout(
                    f"device {device_id} at {dev.endpoint}: connect timed out"
                ) from exc
            except OSError as exc:
                raise DeviceUnavailable(
                    f"device {device_id} at {dev.endpoint}: {exc.strerror or exc}"
                ) from exc
        except UnicodeDecodeError:
            self.refuse(TokenForged("handshake is not UTF-8"))
            return
        except DaasError as err:
            self.refuse(err)
            return
        except Exception as exc:  # a bug: fail closed (refuse, free the slot) rather than hang the client
            log.exception("gateway shard %d: admission failed", gw.table.shard)
            self.refuse(DaasError(f"internal error: {type(exc).__name__}"))
            return
        if self.closed:  # the client left (or was revoked) while we connected
            if self.upstream.transport is not None:
                self.upstream.transport.close()
            return
        gw.metrics.connect_seconds.labels(gw.shard_label).observe(time.perf_counter() - t0)
        self._splice()

    def _splice(self) -> None:
        gw, c, u = self.gateway, self.client, self.upstream
        assert u is not None and c.transport is not None and u.transport is not None
        gw._opening.discard(self)
        gw.sessions[self.id] = self
        gw.metrics.sessions_total += 1
        c.transport.write(f"OK {self.id}\n".encode())
        pair(c, u)
        self.admitting = False
        c.transport.resume_reading()

    def close(self, reason: str) -> None:
        if self.closed:
            return
        self.closed = True
        gw = self.gateway
        if self.client.timer is not None:
            self.client.timer.cancel()
        for side in (self.client, self.upstream):
            if side is not None and side.transport is not None:
                side.transport.close()
        gw._opening.discard(self)
        if gw.sessions.pop(self.id, None) is not None:
            gw.metrics.closed_bytes_up += self.client.nbytes
            gw.metrics.closed_bytes_down += self.upstream.nbytes if self.upstream else 0
            gw.metrics.session_seconds.labels(gw.shard_label).observe(
                time.monotonic() - self.started
            )
            if reason.endswith(" reset"):  # counted as "upstream_reset" / "client_reset"
                gw.metrics.errors[reason.replace(" ", "_")] += 1
        if self.pool is not None:
            self.pool.release()
            self.pool = None


class Gateway:
    """One gateway shard: serves the devices of `table` whose groups hash to `table.shard`."""

    def __init__(
        self, table: DeviceTable, signer: TokenSigner, config: GatewayConfig | None = None
    ) -> None:
        self.table = table
        self.signer = signer
        self.config = config or GatewayConfig()
        self.shard_label = str(table.shard)
        self.sessions: dict[str, Session] = {}
        self.mutual_tls = self.config.tls is not None and self.config.tls.mutual
        self._revoked: OrderedDict[str, float] = OrderedDict()  # lease -> forget after (monotonic)
        self._opening: set[Session] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self._server: asyncio.Server | None = None
        self.metrics = GatewayMetrics(table.shard, self._live_bytes, lambda: len(self.sessions))
        self.port = self.config.port

    def _live_bytes(self) -> tuple[int, int]:
        sessions = list(self.sessions.values())
        return (
            sum(s.client.nbytes for s in sessions),
            sum(s.upstream.nbytes for s in sessions if s.upstream is not None),
        )

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        tls = self.config.tls
        self._server = await loop.create_server(
            lambda: Session(self).client,
            self.config.host,
            self.config.port,
            backlog=4096,
            ssl=tls.context() if tls is not None else None,
            ssl_handshake_timeout=self.config.handshake_timeout if tls is not None else None,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        log.info(
            "gateway shard %d/%d listening on %s:%d (%d devices owned, %s)",
            self.table.shard,
            self.table.n_shards,
            self.config.host,
            self.port,
            len(self.table.pools),
            "mTLS" if self.mutual_tls else "TLS" if tls is not None else "plain TCP",
        )

    def sessions_of(self, lease: str) -> Iterator[Session]:
        return (
            s
            for s in [*self.sessions.values(), *self._opening]
            if s.claims is not None and s.claims.lease == lease
        )

    def deny(self, leases: Iterable[str]) -> None:
        """Refuse new connections with tokens of these (ended) leases for `revoked_for` s."""
        now = time.monotonic()
        while self._revoked and next(iter(self._revoked.values())) <= now:
            self._revoked.popitem(last=False)
        for lease in leases:
            if lease not in self._revoked:
                self._revoked[lease] = now + self.config.revoked_for

    def is_revoked(self, lease: str) -> bool:
        until = self._revoked.get(lease)
        return until is not None and until > time.monotonic()

    def revoke(self, lease: str) -> int:
        """`lease` ended: refuse its tokens from now on and close its sessions (how many)."""
        self.deny([lease])
        victims = list(self.sessions_of(lease))
        for s in victims:
            s.close("revoked")
        return len(victims)

    def revoke_except(self, live: set[str], before: float) -> int:
        """Close sessions opened before `before` (monotonic) whose lease is not in `live`.

        For a gateway in another process than the registry: `live` is the registry's lease list
        fetched at `before`; a session that started earlier has a lease created earlier still,
        so if that lease is missing from the list it has ended.
        """
        victims = [
            s
            for s in [*self.sessions.values(), *self._opening]
            if s.claims is not None and s.claims.lease not in live and s.started < before
        ]
        for s in victims:
            s.close("revoked")
        return len(victims)

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for s in [*self.sessions.values(), *self._opening]:
            for side in (s.client, s.upstream):
                if side is not None and side.transport is not None:
                    side.transport.abort()
            s.close("gateway stopped")
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        if tasks:  # let the cancelled admissions unwind (else asyncio logs "Task was destroyed but it is pending")
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
