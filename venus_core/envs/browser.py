"""One headless Chromium shared by many web environments, driven by Playwright's async API.

Why: UI-Venus trains on many browsers at once; a Chromium process costs ~100 MB and a second or
more to start, while a fresh *browser context* (isolated cookies, storage, pages) costs a few
milliseconds. So every `WebEnv` in a process gets its own context in one shared browser
(measured on the project's machines: many contexts in one browser scale better than many
browsers).

Playwright's async API runs on an asyncio loop in a daemon thread owned by `BrowserHost`; the
`Env` interface is synchronous, so `BrowserHost.call(coro)` submits a coroutine to that loop and
waits for its result. Envs stepped from several Python threads therefore run concurrently in the
browser (the rollout workers and the parallel benchmark rely on this). The host is reference
counted (`acquire` / `release`): the last env to close stops the browser and the loop thread.

Departures: the browser is the Debian `chromium` (`executable_path="/usr/bin/chromium"`, flags that keep
it quiet in a container), not Playwright's downloaded build, which cannot be fetched here. Scrollbars are
hidden so that a screenshot shows only page content.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
from collections.abc import Coroutine
from concurrent.futures import TimeoutError as FutureTimeout
from typing import Any, TypeVar

from venus_core.envs.base import EnvError

T = TypeVar("T")

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = ("--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update",
                  "--disable-sync", "--hide-scrollbars", "--mute-audio")
CONNECT_TIMEOUT_S = 30.0
"""Longest wait for a CDP connection to a running browser (through the device gateway)."""
CALL_TIMEOUT_S = 180.0
"""Longest wait for one browser call: generous, a starved machine (nice 19 under load) is slow."""


def chromium_path() -> str:
    """The Chromium binary: $VENUS_CHROMIUM, else /usr/bin/chromium, else `chromium` on PATH."""
    for candidate in (os.environ.get("VENUS_CHROMIUM"), CHROMIUM, shutil.which("chromium")):
        if candidate and os.path.exists(candidate):
            return candidate
    raise EnvError("no Chromium found: install Debian `chromium` or set VENUS_CHROMIUM")


class BrowserHost:
    """A Playwright driver + one headless Chromium on a private asyncio loop (module docstring)."""

    _shared: BrowserHost | None = None
    _shared_lock = threading.Lock()

    def __init__(self, *, executable: str | None = None, headless: bool = True, cdp: str | None = None) -> None:
        """Launch a private headless Chromium, or with `cdp` (e.g. `http://127.0.0.1:PORT`, a port
        the device SDK forwards to a leased browser) connect to a running one over the DevTools
        protocol (`connect`); closing such a host disconnects and closes the contexts it opened,
        the browser itself keeps running for its next lease."""
        from playwright.async_api import async_playwright

        self.cdp = cdp
        self.executable = "" if cdp else (executable or chromium_path())
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="venus-browser",
                                       daemon=True)
        self.thread.start()
        self.users = 0
        self.closed = False

        async def start() -> tuple[Any, Any]:
            pw = await async_playwright().start()
            try:
                if cdp:
                    browser = await pw.chromium.connect_over_cdp(cdp, timeout=CONNECT_TIMEOUT_S * 1000)
                else:  # launch() gives the browser a fresh temporary profile (--user-data-dir)
                    browser = await pw.chromium.launch(executable_path=self.executable,
                                                       headless=headless, args=list(CHROMIUM_FLAGS))
            except BaseException:
                await pw.stop()
                raise
            return pw, browser

        try:
            self.playwright, self.browser = self.call(start())
        except BaseException as exc:
            self._stop_loop()
            what = f"connect to Chromium over CDP at {cdp}" if cdp else f"start Chromium ({self.executable})"
            raise EnvError(f"cannot {what}: {exc}") from exc

    @classmethod
    def connect(cls, cdp: str) -> BrowserHost:
        """A host of its own on the running browser at `cdp`, held by one user: `release` (the
        env's close) disconnects it."""
        host = cls(cdp=cdp)
        host.users = 1
        return host

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        """Run `coro` on the browser loop and return its result (raises its exception)."""
        if threading.current_thread() is self.thread:
            coro.close()
            raise EnvError("BrowserHost.call from the browser thread would deadlock")
        if self.loop.is_closed() or not self.thread.is_alive():
            coro.close()
            raise EnvError("the browser host is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self.loop)
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise EnvError(f"browser call did not finish within {timeout:g} s") from None

    @property
    def alive(self) -> bool:
        return not self.closed and self.browser.is_connected()

    # -- sharing -------------------------------------------------------------------------------
    @classmethod
    def acquire(cls) -> BrowserHost:
        """The process-wide shared host (started on first use, restarted if Chromium died)."""
        with cls._shared_lock:
            host = cls._shared
            if host is None or not host.alive:
                host = cls._shared = BrowserHost()
            host.users += 1
            return host

    def release(self) -> None:
        """Drop one user of the shared host; the last one closes it."""
        with BrowserHost._shared_lock:
            self.users -= 1
            if self.users > 0:
                return
            if BrowserHost._shared is self:
                BrowserHost._shared = None
        self.close()

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True

        async def stop() -> None:
            try:
                await self.browser.close()
            finally:
                await self.playwright.stop()

        try:
            self.call(stop(), timeout=20)
        except Exception:  # noqa: BLE001 - a dead browser must still let the loop stop
            pass
        self._stop_loop()

    def _stop_loop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(timeout=10)
        if not self.thread.is_alive():
            self.loop.close()
