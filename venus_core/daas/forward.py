"""The client end of the gateway handshake, and a local port forwarder built on it.

Why a forwarder: stock tools (the `adb` server, ssh, a CDP client) cannot prepend a lease token to
their connections. `LocalForwarder` listens on a loopback port; each connection it accepts is
tunnelled through the gateway with the lease's handshake line and then copied both ways, so
`adb connect 127.0.0.1:<port>` reaches the leased device unchanged. It runs its own event loop in a
thread; this side carries one device's traffic, so a plain read/write copy is enough.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from collections.abc import Callable
from typing import Self

from venus_core.daas.errors import DaasError, DeviceTimeout, GatewayUnavailable, error_for
from venus_core.daas.gateway import MAGIC, MAX_HANDSHAKE
from venus_core.daas.registry import Grant

log = logging.getLogger(__name__)
CHUNK = 1 << 16


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
    addr: tuple[str, int], line: bytes, timeout: float
) -> tuple[socket.socket, str]:
    """Connect to a gateway, send `line`, return (socket, session id) or raise a typed error."""
    where = f"{addr[0]}:{addr[1]}"
    try:
        sock = socket.create_connection(addr, timeout=timeout)
    except TimeoutError as exc:
        raise GatewayUnavailable(f"gateway {where}: connect timed out") from exc
    except OSError as exc:
        raise GatewayUnavailable(f"gateway {where}: {exc}") from exc
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


async def _copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        writer.close()


class LocalForwarder:
    """Listen on 127.0.0.1:`port`; tunnel each accepted connection via `target()` (addr, line)."""

    def __init__(
        self,
        target: Callable[[], tuple[tuple[str, int], bytes]],
        *,
        port: int = 0,
        timeout: float = 10.0,
    ) -> None:
        self.target = target
        self.port = port
        self.timeout = timeout
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def _handle(self, cr: asyncio.StreamReader, cw: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        gw: asyncio.StreamWriter | None = None
        try:
            addr, line = self.target()
            gr, gwr = await asyncio.wait_for(asyncio.open_connection(*addr), self.timeout)
            gw = gwr
            gwr.write(line)
            reply = await asyncio.wait_for(gr.readline(), self.timeout)
            parse_reply(reply, f"{addr[0]}:{addr[1]}")
            await asyncio.gather(_copy(cr, gwr), _copy(gr, cw))
        except (DaasError, OSError, TimeoutError) as exc:
            log.warning("forwarder :%d: tunnel failed: %s", self.port, exc)
        finally:
            cw.close()
            if gw is not None:
                gw.close()
            self._tasks.discard(task)

    def start(self) -> Self:
        ready = threading.Event()
        errors: list[BaseException] = []
        loop = asyncio.new_event_loop()
        self.loop = loop

        async def boot() -> None:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", self.port)
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
