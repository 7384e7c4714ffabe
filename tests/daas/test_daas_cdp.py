"""Chrome DevTools through the gateway: Playwright -> SDK forwarder -> gateway -> headless Chromium.

The DevTools endpoint starts as HTTP (`/json/version`) and upgrades to a WebSocket; the gateway
carries both as bytes. Chromium builds the WebSocket URL from the request's Host header, so the
browser connection also goes through the forwarder (the gateway's session count proves it).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
from daas_helpers import make_stack

from venus_core.daas import DeviceSpec
from venus_core.daas.probes import probe_device

CHROMIUM = shutil.which("chromium")
FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "about:blank",
]


@pytest.mark.slow
@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium not installed")
def test_playwright_over_cdp_through_the_gateway(tmp_path: Path, stacks) -> None:  # type: ignore[no-untyped-def]
    sync_api = pytest.importorskip("playwright.sync_api")
    assert CHROMIUM is not None
    browser_proc = subprocess.Popen(
        [CHROMIUM, f"--user-data-dir={tmp_path / 'profile'}", *FLAGS],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert browser_proc.stderr is not None
        port = None
        for _ in range(200):
            line = browser_proc.stderr.readline()
            if m := re.search(r"DevTools listening on ws://127\.0\.0\.1:(\d+)/", line):
                port = int(m.group(1))
                break
        assert port is not None, "chromium did not report its DevTools port"
        spec = DeviceSpec("chrome-1", "web", "browsers", "127.0.0.1", port)
        assert probe_device(spec, timeout=5) is None  # GET /json/version answers
        stack = make_stack([spec], probe=lambda d: probe_device(d, timeout=5))
        stacks.append(stack)
        pool = stack.pool(io_timeout=15)
        with pool.lease(kind="web") as (lease,), lease.forward() as fwd_port:
            with sync_api.sync_playwright() as pw:
                browser = pw.chromium.connect_over_cdp(
                    f"http://127.0.0.1:{fwd_port}", timeout=30000
                )
                try:
                    page = (
                        browser.contexts[0].new_page() if browser.contexts else browser.new_page()
                    )
                    page.set_content("<button id=b onclick=\"this.textContent='done'\">go</button>")
                    page.click("#b")
                    assert page.text_content("#b") == "done"
                finally:
                    browser.close()
            assert stack.gateway.gateway.metrics.sessions_total >= 2  # HTTP + WebSocket
        assert stack.registry.status()["leased"] == 0
    finally:
        browser_proc.terminate()
        try:
            browser_proc.wait(10)
        except subprocess.TimeoutExpired:
            browser_proc.kill()
            browser_proc.wait(10)
        if browser_proc.stderr is not None:
            browser_proc.stderr.close()
