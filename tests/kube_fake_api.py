"""A fake Kubernetes API server on loopback (kmock's `KubernetesEmulator`), shared by the tests
that drive the official `kubernetes` client: the device pool (tests/daas, pods) and the TrainJob
launcher (tests/runtime, a custom resource).

Why a fake: no kube-apiserver can run on these machines. kmock keeps objects in memory behind the
real Kubernetes REST paths, so the client does real HTTP; it has NO controllers, scheduler or
kubelet and ignores label selectors, so each test plays those parts itself through the API.
Importable from any test folder because tests/ is on sys.path (pytest's default "prepend" import
mode puts the folder of tests/conftest.py there).
"""

from __future__ import annotations

import asyncio
import threading

import kmock
from kubernetes import client


class FakeKubeAPI:
    """kmock served on 127.0.0.1 from a background event loop; `url` is its base URL.

    `resources` are emulator keys (`"v1/pods"`, `"<group>/<version>/<plural>"`) registered empty
    at start, so that listing them works before the first object is created.
    """

    def __init__(self, *resources: str) -> None:
        self.resources = resources
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        asyncio.run_coroutine_threadsafe(self._start(), self.loop).result(10)

    async def _start(self) -> None:
        self.handler = kmock.KubernetesEmulator()
        await self.handler.__aenter__()
        self.server = kmock.Server(self.handler)
        await self.server.__aenter__()
        for key in self.resources:
            self.handler.resources[key] = {}
        self.url = str(self.server.url).rstrip("/")

    def api_client(self) -> client.ApiClient:
        """A client of this server (no auth) for any typed API, e.g. `client.CoreV1Api(...)`."""
        return client.ApiClient(client.Configuration(host=self.url))

    async def _stop(self) -> None:
        await self.server.__aexit__(None, None, None)
        await self.handler.__aexit__(None, None, None)

    def stop(self) -> None:
        asyncio.run_coroutine_threadsafe(self._stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
