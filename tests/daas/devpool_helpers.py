"""Pod helpers and a stand-in kubelet for the pool tests, over the fake Kubernetes API server.

No kube-apiserver can run on these machines, so the tests talk HTTP to kmock's
`KubernetesEmulator` (`kube_fake_api.FakeKubeAPI`, serving `POD_RESOURCE`): an in-memory object
store behind the real Kubernetes REST paths, driven here by the official `kubernetes` client
exactly as in a cluster. kmock has NO controllers, scheduler or kubelet and ignores label
selectors: nothing ever starts a pod. `Kubelet` plays that part by PATCHing pod status through
the API (phase Running, condition Ready, a pod IP) — the only simulated piece; everything the
pool itself does goes through the API.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable

from kubernetes import client

NAMESPACE = "venus"
POD_RESOURCE = "v1/pods"  # the emulator key FakeKubeAPI must serve for the pool


def pod_names(api: client.CoreV1Api, **labels: str) -> list[str]:
    """Names of the pods carrying `labels` (filtered here: kmock ignores selectors)."""
    out = []
    for p in api.list_namespaced_pod(NAMESPACE).items:
        have = p.metadata.labels or {}
        if all(have.get(k) == v for k, v in labels.items()):
            out.append(p.metadata.name)
    return sorted(out)


def set_ready(api: client.CoreV1Api, name: str, ip: str = "127.0.0.1") -> None:
    api.patch_namespaced_pod_status(name, NAMESPACE, {"status": {
        "phase": "Running", "podIP": ip,
        "conditions": [{"type": "Ready", "status": "True"}]}})


def set_failed(api: client.CoreV1Api, name: str) -> None:
    api.patch_namespaced_pod_status(name, NAMESPACE, {"status": {
        "phase": "Failed", "conditions": [{"type": "Ready", "status": "False"}]}})


class Kubelet:
    """Stand-in kubelet: marks new pods Running + Ready after `delay` s, unless `hold` is set."""

    def __init__(self, api: client.CoreV1Api, delay: float = 0.1,
                 accept: Callable[[str], bool] = lambda name: True) -> None:
        self.api = api
        self.delay = delay
        self.accept = accept
        self.hold = False
        self.started: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> Kubelet:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.delay):
            if self.hold:
                continue
            raw = self.api.list_namespaced_pod(NAMESPACE, _preload_content=False).data
            for p in json.loads(raw)["items"] or []:
                name = p["metadata"]["name"]
                if name not in self.started and self.accept(name) and not p.get("status"):
                    self.started.add(name)
                    try:
                        set_ready(self.api, name)
                    except client.ApiException:
                        pass  # deleted meanwhile

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)
