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

    def __init__(self, *, executable: str | None = None, headless: bool = True) -> None:
        from playwright.async_api import async_playwright

        self.executable = executable or chromium_path()
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="venus-browser",
                                       daemon=True)
        self.thread.start()
        self.users = 0
        self.closed = False

        async def start() -> tuple[Any, Any]:
            pw = await async_playwright().start()
            try:
                # launch() gives the browser a fresh temporary profile (--user-data-dir)
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
            raise EnvError(f"cannot start Chromium ({self.executable}): {exc}") from exc

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        """Run `coro` on the browser loop and return its result (raises its exception)."""
        return _run_on(self.loop, self.thread, coro, timeout)

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
        _stop_loop(self.loop, self.thread)


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    """Stop `loop`, wait for `thread` (which runs it) and close the loop once the thread has ended."""
    loop.call_soon_threadsafe(loop.stop)
    thread.join(timeout=10)
    if not thread.is_alive():
        loop.close()


def _run_on(loop: asyncio.AbstractEventLoop, thread: threading.Thread, coro: Coroutine[Any, Any, T],
            timeout: float) -> T:
    """Run `coro` on `loop` (driven by `thread`) from another thread and return its result."""
    if threading.current_thread() is thread:
        coro.close()
        raise EnvError("a browser call from the browser thread would deadlock")
    if loop.is_closed() or not thread.is_alive():
        coro.close()
        raise EnvError("the browser host is closed")
    future = asyncio.run_coroutine_threadsafe(coro, loop)
    try:
        return future.result(timeout)
    except FutureTimeout:
        future.cancel()
        raise EnvError(f"browser call did not finish within {timeout:g} s") from None


class _Driver:
    """One Playwright driver (its node process) on an asyncio loop thread, shared by every CDP
    connection of the process: started with the first, stopped with the last (a driver per
    connection cost ~1 CPU-s per leased browser, and a rollout leases one per env per step)."""

    _shared: _Driver | None = None
    _lock = threading.Lock()

    def __init__(self) -> None:
        from playwright.async_api import async_playwright

        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="venus-cdp", daemon=True)
        self.thread.start()
        self.users = 0

        async def start() -> Any:
            return await async_playwright().start()

        try:
            self.playwright = _run_on(self.loop, self.thread, start(), CALL_TIMEOUT_S)
        except BaseException as exc:
            self._stop_loop()
            raise EnvError(f"cannot start the Playwright driver: {exc}") from exc

    @classmethod
    def acquire(cls) -> _Driver:
        with cls._lock:
            if cls._shared is None or not cls._shared.thread.is_alive():
                cls._shared = _Driver()
            cls._shared.users += 1
            return cls._shared

    def release(self) -> None:
        with _Driver._lock:
            self.users -= 1
            if self.users > 0:
                return
            if _Driver._shared is self:
                _Driver._shared = None
        try:
            _run_on(self.loop, self.thread, self.playwright.stop(), 20)
        except Exception:  # noqa: BLE001 - the loop must stop even when the driver is gone
            pass
        self._stop_loop()

    def _stop_loop(self) -> None:
        _stop_loop(self.loop, self.thread)


class CdpBrowser:
    """A running Chromium reached over the DevTools protocol at `cdp` (e.g. `http://127.0.0.1:PORT`,
    the port the device SDK forwards to a leased browser), through the process's shared Playwright
    driver; the `BrowserHost` interface a `WebEnv` uses. `release` disconnects (closing the contexts
    opened through it); the browser keeps running for its next lease."""

    def __init__(self, cdp: str) -> None:
        self.cdp = cdp
        self.closed = False
        self.driver = _Driver.acquire()
        try:
            self.browser = self.call(self.driver.playwright.chromium.connect_over_cdp(
                cdp, timeout=CONNECT_TIMEOUT_S * 1000), timeout=CONNECT_TIMEOUT_S + 5)
        except BaseException as exc:
            self.closed = True
            self.driver.release()
            raise EnvError(f"cannot connect to Chromium over CDP at {cdp}: {exc}") from exc

    def call(self, coro: Coroutine[Any, Any, T], timeout: float = CALL_TIMEOUT_S) -> T:
        return _run_on(self.driver.loop, self.driver.thread, coro, timeout)

    @property
    def alive(self) -> bool:
        return not self.closed and self.browser.is_connected()

    def release(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            self.call(self.browser.close(), timeout=20)
        except Exception:  # noqa: BLE001 - a browser that is gone: nothing left to disconnect
            pass
        finally:
            self.driver.release()
