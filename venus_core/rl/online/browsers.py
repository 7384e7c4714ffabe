"""Browsers leased through the device service: the laptop's stand-in for the cluster's browser pods.

`BrowserFarm` starts `n` headless Chromium processes, each serving the DevTools protocol (CDP) on
its own loopback port, registers them as devices of kind `web` with a lease registry behind a
device gateway on loopback (`devices.serve_on_loopback`), and hands out `MiniWobEnv`s that drive a
leased browser over CDP on the local port the SDK forwards through the gateway (`Lease.forward`):
lease -> gateway -> CDP, the path a rollout takes against the browser pods of
`manifests/base/device-pool.yaml`. The registry probes a browser (`GET /json/version`) before
leasing it; one reported broken is quarantined and probed again later, so a browser that died
stays out and the rollout leases another.

Each env opens its own browser context in the leased browser; a healthy env keeps its lease and
context for the job's next episode (`LeasedEnvs(keep_idle=True)`: the CDP connection, context and
page cost ~0.5 s, and a rollout takes its envs again at every step); on close the context is
closed and the lease ends, so the next lease starts from a clean browser. The MiniWoB++ pages of
a browser pod are served to it by this process (Playwright routing of a virtual origin,
`MiniWobEnv(serve_pages=True)`): the pod needs no copy of the `miniwob` package; the farm's
browsers run on this machine and load the package's files themselves.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from venus_core.daas import DevicePool, DeviceSpec, DeviceTable, GatewayThread, LeaseRegistry, TokenSigner
from venus_core.envs.base import EnvError
from venus_core.envs.browser import CHROMIUM_FLAGS, chromium_path
from venus_core.rl.online.devices import LeasedEnvs, serve_on_loopback

START_TIMEOUT_S = 30.0


@dataclass
class ChromiumProcess:
    """One headless Chromium serving CDP on 127.0.0.1 (its port chosen by Chromium itself)."""

    profile: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="venus-chromium-")))
    proc: subprocess.Popen[bytes] | None = None
    port: int = 0
    stopped: bool = False

    def start(self) -> Self:
        args = [chromium_path(), "--headless", *CHROMIUM_FLAGS, "--disable-dev-shm-usage",
                f"--user-data-dir={self.profile}", "--remote-debugging-port=0", "about:blank"]
        self.proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL, start_new_session=True)
        # its own session outlives this process on a kill: stopped at interpreter exit at the latest
        atexit.register(self.stop)
        active = self.profile / "DevToolsActivePort"  # Chromium writes its port here once it listens
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                self.stop()
                raise EnvError(f"Chromium exited with status {self.proc.returncode} before serving CDP")
            if active.is_file():
                first = active.read_text(encoding="utf-8").split("\n", 1)[0].strip()
                if first.isdigit():
                    self.port = int(first)
                    return self
            time.sleep(0.05)
        self.stop()
        raise EnvError(f"Chromium did not serve CDP within {START_TIMEOUT_S:g} s")

    def kill(self) -> None:
        """Kill the browser outright (a browser pod that dies; for fault tests)."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, 9)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        atexit.unregister(self.stop)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        if self.proc is not None:
            try:  # its children (renderers, GPU process) too: they may still write into the profile
                os.killpg(self.proc.pid, 9)
            except ProcessLookupError:
                pass
            self.proc.wait(timeout=10)
        shutil.rmtree(self.profile, ignore_errors=True)


@dataclass
class BrowserFarm:
    """`n` Chromium processes behind a local lease registry and gateway (module docstring)."""

    n: int
    ttl: float = 30.0
    io_timeout: float = 15.0
    recheck_after: float = 2.0
    browsers: list[ChromiumProcess] = field(default_factory=list)
    registry: LeaseRegistry | None = None
    gateway: GatewayThread | None = None
    _signer: TokenSigner | None = None
    _table: DeviceTable | None = None

    def start(self) -> Self:
        if self.n < 1:
            raise ValueError(f"BrowserFarm: n must be >= 1, got {self.n}")
        try:
            specs = []
            for i in range(self.n):
                browser = ChromiumProcess().start()
                self.browsers.append(browser)
                specs.append(DeviceSpec(f"browser-{i}", "web", "local", "127.0.0.1", browser.port))
            self._signer, self._table, self.gateway, self.registry = serve_on_loopback(
                specs, ttl=self.ttl, recheck_after=self.recheck_after)
        except BaseException:
            self.stop()
            raise
        return self

    def pool(self, client_id: str) -> DevicePool:
        if self.registry is None:
            raise RuntimeError("BrowserFarm: start() first")
        return DevicePool(self.registry, client_id, wait=self.io_timeout, io_timeout=self.io_timeout)

    def env_source(self, client_id: str = "online-rl") -> LeasedEnvs:
        """MiniWoB++ envs on this farm's browsers; they run on this machine, so they load the pages
        from the package's files (a remote browser pod gets them served: `leased_miniwob`)."""
        return leased_miniwob(self.pool(client_id), serve_pages=False)

    def leased(self) -> int:
        return int(self.registry.status()["leased"]) if self.registry is not None else 0

    def kill(self, index: int) -> None:
        """Kill browser `index` (a browser pod that dies; for fault tests)."""
        self.browsers[index].kill()

    def stop(self) -> None:
        if self.registry is not None:
            self.registry.stop()
        if self.gateway is not None:
            self.gateway.stop()
        for browser in self.browsers:
            browser.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def leased_miniwob(pool: DevicePool, *, serve_pages: bool = True) -> LeasedEnvs:
    """MiniWoB++ envs, each on a browser leased from `pool` and driven over CDP through the gateway;
    `serve_pages`: the pages are served to the browser from this process (a browser pod has no copy)."""
    from venus_core.envs import MiniWobEnv

    return LeasedEnvs(pool, lambda port: MiniWobEnv(wait_s=0.0, cdp=f"http://127.0.0.1:{port}",
                                                    serve_pages=serve_pages),
                      kind="web", platform="web", keep_idle=True)


__all__ = ["BrowserFarm", "ChromiumProcess", "leased_miniwob"]
