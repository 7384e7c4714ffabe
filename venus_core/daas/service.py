"""Running a gateway shard: event loop choice, a background-thread runner, and the foreground entry.

Why uvloop when available: its transports read larger chunks and dispatch callbacks in C, which
is most of the cost of a byte splice; asyncio's default loop is the fallback and behaves the same.
`GatewayThread` runs a shard on a loop in a background thread: inside another program (tests, a
rollout worker, the benchmark) and in `venus gateway`, whose main thread also serves the lease
registry and waits for a signal. `RevocationPoller` ends sessions of ended leases when the
registry lives in another process.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Coroutine
from typing import Any, Self, TypeVar

from venus_core.daas.gateway import Gateway
from venus_core.daas.registry import LeaseSnapshot
from venus_core.daas.metrics import serve_metrics

log = logging.getLogger(__name__)
T = TypeVar("T")


def new_event_loop() -> asyncio.AbstractEventLoop:
    """A uvloop loop when uvloop is installed, else asyncio's default."""
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def loop_name(loop: asyncio.AbstractEventLoop) -> str:
    return "uvloop" if type(loop).__module__.startswith("uvloop") else "asyncio"


class GatewayThread:
    """A gateway shard (and optionally its metrics server) on an event loop in its own thread."""

    def __init__(self, gateway: Gateway, *, metrics_port: int | None = None) -> None:
        self.gateway = gateway
        self.metrics_port = metrics_port
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._metrics_server: asyncio.Server | None = None

    @property
    def port(self) -> int:
        return self.gateway.port

    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("gateway thread already started")
        loop = new_event_loop()
        self.loop = loop
        self._thread = threading.Thread(target=loop.run_forever, name="venus-gateway", daemon=True)
        self._thread.start()
        try:
            self.call(self._start())
        except BaseException:
            self.stop()
            raise
        return self

    async def _start(self) -> None:
        await self.gateway.start()
        if self.metrics_port is not None:
            self._metrics_server = await serve_metrics(
                self.gateway.metrics, self.gateway.config.host, self.metrics_port
            )
            self.metrics_port = self._metrics_server.sockets[0].getsockname()[1]

    async def _stop(self) -> None:
        if self._metrics_server is not None:
            self._metrics_server.close()
        await self.gateway.stop()

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = 10.0) -> T:
        """Run `coro` on the gateway's loop and wait for its result."""
        if self.loop is None:
            coro.close()
            raise RuntimeError("gateway thread is not running")
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def revoke(self, lease: str) -> None:
        """Thread-safe `Gateway.revoke` (hook it to the lease registry's end-of-lease callback)."""
        if self.loop is not None and self.loop.is_running():
            self.loop.call_soon_threadsafe(self.gateway.revoke, lease)

    def stop(self) -> None:
        loop, thread = self.loop, self._thread
        if loop is None or thread is None:
            return
        try:
            if loop.is_running():
                self.call(self._stop())
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(10)
            loop.close()
            self.loop = None
            self._thread = None

    def __enter__(self) -> Self:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()


class RevocationPoller:
    """Every `interval` s, close the gateway's sessions whose lease the registry no longer holds,
    and refuse the tokens of the leases it lists as ended.

    For a gateway in another process than the lease registry (`venus gateway --registry-url`).
    A lease that both starts and ends between two polls is not in either list; its tokens stay
    usable until the registry's ended list (its last ENDED_MEMORY leases) is next fetched, at most
    one interval. If the registry cannot be reached, open sessions are left alone (their devices
    are not handed to anyone else while the registry is down) and the failure is logged.
    """

    def __init__(
        self,
        gateway: GatewayThread,
        fetch: Callable[[], LeaseSnapshot],
        interval: float = 1.0,
    ) -> None:
        self.gateway = gateway
        self.fetch = fetch
        self.interval = interval
        self.polls = 0  # completed polls (tests wait on this rather than on time)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def poll_once(self) -> None:
        before = time.monotonic()
        try:
            snap = self.fetch()
        except Exception as exc:  # noqa: BLE001 - keep polling; sessions stay open meanwhile
            log.warning("revocation poll failed: %s", exc)
            return
        loop = self.gateway.loop
        if loop is not None and loop.is_running():
            gw = self.gateway.gateway
            loop.call_soon_threadsafe(gw.deny, snap.ended)
            loop.call_soon_threadsafe(gw.revoke_except, set(snap.live), before)
        self.polls += 1

    def start(self) -> Self:
        self._thread = threading.Thread(target=self._run, name="revocation-poll", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
