"""The client end of the gateway handshake, and a local port forwarder built on it.

Why a forwarder: stock tools (the `adb` server, ssh, a CDP client) cannot prepend a lease token to
their connections. `LocalForwarder` listens on a loopback port; each connection it accepts is
tunnelled through the gateway with the lease's handshake line and then copied both ways, so
`adb connect 127.0.0.1:<port>` reaches the leased device unchanged. It runs its own event loop in a
thread (uvloop when installed) and splices with the same `splice.End` protocols as the gateway.
With an `ssl.SSLContext` (see `tls`) both the blocking tunnel and the forwarder speak TLS to the
gateway, checking its certificate against the host name of the grant's gateway address; the
local side of a forwarder stays plain TCP on loopback.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Self

from venus_core.daas.errors import DaasError, DeviceTimeout, GatewayUnavailable, error_for
from venus_core.daas.gateway import MAGIC, MAX_HANDSHAKE
from venus_core.daas.registry import Grant
from venus_core.daas.service import new_event_loop
from venus_core.daas.splice import End, pair

log = logging.getLogger(__name__)


def handshake_line(grant: Grant) -> bytes:
    return f"{MAGIC} {grant.client} {grant.device} {grant.token}\n".encode()


def split_addr(addr: str) -> tuple[str, int]:
    host, _, port = addr.rpartition(":")
    if not port.isdigit():
        raise ValueError(f"gateway address must be host:port, got {addr!r}")
    return host, int(port)


def parse_reply(line: bytes, gateway: str) -> str:
    """The session id of an `OK` line; raises the typed error of an `ERR` line."""
    text = line.decode("utf-8", "replace").strip()
    if text.startswith("OK "):
        return text[3:]
    if text.startswith("ERR "):
        code, _, msg = text[4:].partition(" ")
        raise error_for(code, f"gateway {gateway}: {msg}")
    if not text:
        raise GatewayUnavailable(f"gateway {gateway}: connection closed during the handshake")
    raise GatewayUnavailable(f"gateway {gateway}: bad handshake reply {text[:80]!r}")


def _read_line(sock: socket.socket) -> bytes:
    """One line, reading byte by byte so that nothing after the newline is consumed."""
    buf = bytearray()
    while len(buf) <= MAX_HANDSHAKE:
        b = sock.recv(1)
        if not b or b == b"\n":
            break
        buf += b
    return bytes(buf)


def open_tunnel_socket(
    addr: tuple[str, int],
    line: bytes,
    timeout: float,
    tls: ssl.SSLContext | None = None,
) -> tuple[socket.socket, str]:
    """Connect to a gateway (over TLS with `tls`), send `line`, return (socket, session id) or
    raise a typed error."""
    where = f"{addr[0]}:{addr[1]}"
    try:
        sock = socket.create_connection(addr, timeout=timeout)
    except TimeoutError as exc:
        raise GatewayUnavailable(f"gateway {where}: connect timed out") from exc
    except OSError as exc:
        raise GatewayUnavailable(f"gateway {where}: {exc}") from exc
    if tls is not None:
        try:
            sock = tls.wrap_socket(sock, server_hostname=addr[0])
        except (ssl.SSLError, ssl.CertificateError) as exc:
            sock.close()
            raise GatewayUnavailable(f"gateway {where}: TLS handshake failed: {exc}") from exc
        except OSError as exc:
            sock.close()
            raise GatewayUnavailable(f"gateway {where}: TLS handshake: {exc}") from exc
    try:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.sendall(line)
        session = parse_reply(_read_line(sock), where)
    except TimeoutError as exc:
        sock.close()
        raise DeviceTimeout(f"gateway {where}: no handshake reply within {timeout}s") from exc
    except OSError as exc:
        sock.close()
        raise GatewayUnavailable(f"gateway {where}: {exc}") from exc
    except DaasError:
        sock.close()
        raise
    return sock, session


class _Remote(End):
    """The gateway end of a forwarded connection: reads the reply line, then a plain `End`."""

    __slots__ = ("buf", "reply")

    def __init__(self, owner: _Tunnel) -> None:
        super().__init__(owner)
        self.buf = bytearray()
        self.reply: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()

    def data_received(self, data: bytes) -> None:
        if self.reply.done():
            super().data_received(data)
            return
        self.buf += data
        nl = self.buf.find(b"\n")
        if nl >= 0:
            rest = bytes(self.buf[nl + 1 :])
            self.reply.set_result(bytes(self.buf[:nl]))
            if rest:
                super().data_received(rest)
        elif len(self.buf) > MAX_HANDSHAKE:
            self.reply.set_result(bytes(self.buf))

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.reply.done():
            self.reply.set_result(b"")
        super().connection_lost(exc)


class _Local(End):
    """The local end: once connected, starts opening the tunnel through the gateway."""

    __slots__ = ("tunnel",)

    def __init__(self, tunnel: _Tunnel) -> None:
        super().__init__(tunnel)
        self.tunnel = tunnel

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self.tunnel.fwd._spawn(self.tunnel.open())


class _Tunnel:
    """One local connection and its tunnel through the gateway."""

    def __init__(self, fwd: LocalForwarder) -> None:
        self.fwd = fwd
        self.client = _Local(self)
        self.remote: _Remote | None = None
        self.closed = False

    def close(self, reason: str) -> None:
        """Close both ends. Called again once `open` has connected the remote end, since a local
        client that left while the tunnel was opening closed the tunnel before that end existed."""
        self.closed = True
        for end in (self.client, self.remote):
            if end is not None and end.transport is not None and not end.transport.is_closing():
                end.transport.close()
        self.fwd._tunnels.discard(self)

    async def open(self) -> None:
        local = self.client
        assert local.transport is not None
        if self.closed:  # the local client left before the tunnel was started
            return
        local.transport.pause_reading()
        try:
            addr, line = self.fwd.target()
            loop = asyncio.get_running_loop()
            remote = self.remote = _Remote(self)
            tls = self.fwd.tls
            await asyncio.wait_for(
                loop.create_connection(
                    lambda: remote,
                    *addr,
                    ssl=tls,
                    server_hostname=addr[0] if tls is not None else None,
                ),
                self.fwd.timeout,
            )
            assert remote.transport is not None
            remote.transport.write(line)
            reply = await asyncio.wait_for(asyncio.shield(remote.reply), self.fwd.timeout)
            parse_reply(reply, f"{addr[0]}:{addr[1]}")
        except (DaasError, OSError, TimeoutError) as exc:
            log.warning("forwarder :%d: tunnel failed: %s", self.fwd.port, exc)
            self.close("tunnel failed")
            return
        if self.closed:  # the local client left while the tunnel opened: end the gateway session too
            self.close("local client left")
            return
        pair(local, remote)
        local.transport.resume_reading()


class LocalForwarder:
    """Listen on 127.0.0.1:`port`; tunnel each accepted connection via `target()` (addr, line)."""

    def __init__(
        self,
        target: Callable[[], tuple[tuple[str, int], bytes]],
        *,
        port: int = 0,
        timeout: float = 10.0,
        tls: ssl.SSLContext | None = None,
    ) -> None:
        self.target = target
        self.port = port
        self.timeout = timeout
        self.tls = tls
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._tunnels: set[_Tunnel] = set()

    def _accept(self) -> End:
        tunnel = _Tunnel(self)
        self._tunnels.add(tunnel)
        return tunnel.client

    def _spawn(self, coro: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def start(self) -> Self:
        ready = threading.Event()
        errors: list[BaseException] = []
        loop = new_event_loop()
        self.loop = loop

        async def boot() -> None:
            self._server = await loop.create_server(self._accept, "127.0.0.1", self.port)
            self.port = self._server.sockets[0].getsockname()[1]

        def main() -> None:
            try:
                loop.run_until_complete(boot())
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                errors.append(exc)
                ready.set()
                return
            ready.set()
            loop.run_forever()

        self._thread = threading.Thread(target=main, name="venus-forward", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            self._thread.join()
            loop.close()
            raise errors[0]
        return self

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._tasks):
            t.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for tunnel in list(self._tunnels):
            tunnel.close("forwarder stopped")

    def stop(self) -> None:
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        try:
            asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(10)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
            self.loop = None
            self._thread = None
