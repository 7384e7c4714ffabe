"""The device pool controller: keeps a lease registry in step with device pods in a cluster.

Why a controller beside the registry: UI-Venus-1.5 scales online RL to hundreds of devices; they
must appear and disappear without anyone editing a device table. The controller asks a
`PodBackend` (the Kubernetes side lives in `venus_core.io.devicepool`, because algorithm packages
never import the `kubernetes` client) to create pods from the pool templates, and on every `sync`:
- registers pods that turned ready (pod IP + the template's device port) in the registry, with the
  device labels the pods carry, and in any in-process gateway tables;
- removes devices whose pod was deleted, is being deleted or stopped being ready: a lease on such
  a device ends at once, so its holder's next heartbeat (or call) gets `LeaseExpired` naming the
  pod, and an in-process gateway closes the lease's sessions (`UpstreamClosed` in the SDK);
- mirrors leases onto the pods as labels (`venus.dev/lease`, `venus.dev/client`), so
  `kubectl get pods -l venus.dev/lease` shows who holds what;
- garbage-collects: pods labelled as this pool's that this controller does not know (left by a
  crashed controller) once their heartbeat annotation is older than `orphan_ttl`, pods that never
  became ready within `ready_timeout`, and devices quarantined longer than `quarantine_ttl`.

`scale(kind, n)` creates or deletes pods to reach `n` and waits for the new ones to be ready;
pods that miss the timeout are deleted (never leaked) and `DeviceNotReady` names them. Scaling
down deletes free pods only; leased pods are kept until released (reported in the result).

Departure from a Kubernetes operator: no watch stream and no CRD — a periodic list of the pool's
pods (one API call per `interval`) is enough at this scale and survives API-server restarts
without resync logic; the pool's state lives in pod labels, so `kubectl` tells the whole story.
"""

from __future__ import annotations

import logging
import re
import secrets
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, Self

from venus_core.config.pods import DevicePod
from venus_core.daas.errors import DeviceNotReady, UnknownDevice
from venus_core.daas.registry import LeaseRegistry
from venus_core.daas.routing import DeviceSpec, DeviceTable

log = logging.getLogger(__name__)

LEASE_LABEL = "venus.dev/lease"
CLIENT_LABEL = "venus.dev/client"
POOL_KINDS = ("android", "web")
_LABEL_VALUE = re.compile(r"[^A-Za-z0-9_.-]")


def label_value(text: str) -> str:
    """`text` as a valid Kubernetes label value (<= 63 chars, alphanumeric at both ends)."""
    return _LABEL_VALUE.sub("_", text)[:63].strip("_.-") or "x"


class PodBackend(Protocol):
    """Creates, lists, labels and deletes the pool's pods (`venus_core.io.devicepool`)."""

    pool: str

    def list_pods(self) -> Sequence[DevicePod]: ...
    def create_pod(self, kind: str, name: str, labels: dict[str, str], group: str) -> None: ...
    def delete_pod(self, name: str) -> bool: ...
    def mark_lease(self, name: str, lease: str | None, client_id: str | None) -> None: ...
    def stamp(self, names: Sequence[str]) -> None: ...


@dataclass
class ScaleResult:
    kind: str
    wanted: int
    created: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    kept_leased: list[str] = field(default_factory=list)
    ready: list[str] = field(default_factory=list)


@dataclass
class _Known:
    kind: str
    since: float  # when this controller created it (monotonic)
    registered: bool = False


class PoolController:
    """Scale, register, label and garbage-collect one pool's device pods (see module docstring)."""

    def __init__(
        self,
        registry: LeaseRegistry,
        backend: PodBackend,
        *,
        tables: Sequence[DeviceTable] = (),
        ready_timeout: float = 300.0,
        orphan_ttl: float = 120.0,
        quarantine_ttl: float = 600.0,
        interval: float = 2.0,
        stamp_every: float | None = None,
    ) -> None:
        self.registry = registry
        self.backend = backend
        self.tables = list(tables)
        self.ready_timeout = ready_timeout
        self.orphan_ttl = orphan_ttl
        self.quarantine_ttl = quarantine_ttl
        self.interval = interval
        self.stamp_every = orphan_ttl / 4 if stamp_every is None else stamp_every
        self._known: dict[str, _Known] = {}
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_stamp = 0.0

    # -- reconciliation ------------------------------------------------------------------------
    def _register(self, pod: DevicePod) -> None:
        assert pod.host is not None and pod.port is not None
        spec = DeviceSpec(pod.name, pod.kind, pod.group, pod.host, pod.port, dict(pod.labels))
        self.registry.add_device(spec)
        for table in self.tables:
            table.add(spec)
        self._known[pod.name].registered = True

    def _unregister(self, name: str, reason: str) -> None:
        known = self._known.get(name)
        if known is None or not known.registered:
            return
        known.registered = False
        known.since = time.monotonic()  # it gets `ready_timeout` to come back before GC
        for table in self.tables:
            table.remove(name)
        try:
            lease = self.registry.remove_device(name, reason)
        except UnknownDevice:
            return
        if lease is not None:
            log.warning("pool %s: lease %s ended, %s", self.backend.pool, lease, reason)

    def _forget(self, name: str, reason: str) -> None:
        self._unregister(name, reason)
        self._known.pop(name, None)

    def sync(self) -> dict[str, int]:
        """One reconciliation pass (see the module docstring); returns counts of what it did."""
        counts = {"registered": 0, "removed": 0, "orphans": 0, "stuck": 0, "quarantined": 0}
        with self._lock:
            pods = {p.name: p for p in self.backend.list_pods()}
            now = time.time()
            for name in [n for n in self._known if n not in pods]:
                self._forget(name, f"pod {name} was deleted")
                counts["removed"] += 1
            for name, pod in pods.items():
                known = self._known.get(name)
                if known is None:
                    if now - pod.heartbeat > self.orphan_ttl and not pod.deleting:
                        log.warning("pool %s: deleting orphan pod %s (no live owner for %.0fs)",
                                    self.backend.pool, name, now - pod.heartbeat)
                        self.backend.delete_pod(name)
                        counts["orphans"] += 1
                    continue
                usable = pod.ready and not pod.deleting and not pod.failed and pod.host
                if usable and not known.registered:
                    self._register(pod)
                    counts["registered"] += 1
                elif not usable and known.registered:
                    why = "is being deleted" if pod.deleting else f"is not ready ({pod.phase})"
                    self._unregister(name, f"pod {name} {why}")
                    counts["removed"] += 1
                if (not known.registered and not pod.deleting
                        and time.monotonic() - known.since > self.ready_timeout):
                    log.warning("pool %s: pod %s not ready after %.0fs (%s): deleting",
                                self.backend.pool, name, self.ready_timeout, pod.phase)
                    self._forget(name, "never became ready")
                    self.backend.delete_pod(name)
                    counts["stuck"] += 1
            for dev, secs in self.registry.quarantined_for().items():
                if dev in self._known and secs > self.quarantine_ttl:
                    self._forget(dev, f"quarantined for {secs:.0f}s")
                    self.backend.delete_pod(dev)
                    counts["quarantined"] += 1
            self._mirror_leases(pods)
            if time.monotonic() - self._last_stamp >= self.stamp_every:
                self.backend.stamp([n for n in self._known if n in pods])
                self._last_stamp = time.monotonic()
        return counts

    def _mirror_leases(self, pods: dict[str, DevicePod]) -> None:
        holders = self.registry.holders()
        for name in self._known:
            pod = pods.get(name)
            if pod is None or pod.deleting:
                continue
            lease, client = holders.get(name, (None, None))
            want = (label_value(lease) if lease else None, label_value(client) if client else None)
            if (pod.lease, pod.client) != want:
                self.backend.mark_lease(name, *want)

    def adopt(self) -> list[str]:
        """Take over the pool's existing pods (a restarted controller, the `venus devices` CLI)
        instead of letting them age into orphans; ready ones are registered at once. Leases held
        in a previous registry are not recovered (their labels are cleared)."""
        with self._lock:
            got = []
            for pod in self.backend.list_pods():
                if pod.name not in self._known and not pod.deleting and pod.kind in POOL_KINDS:
                    self._known[pod.name] = _Known(pod.kind, time.monotonic())
                    got.append(pod.name)
            self.sync()
        return sorted(got)

    # -- scaling -------------------------------------------------------------------------------
    def pods_of(self, kind: str) -> list[str]:
        with self._lock:
            return sorted(n for n, k in self._known.items() if k.kind == kind)

    def scale(
        self,
        kind: str,
        n: int,
        *,
        labels: dict[str, str] | None = None,
        group: str | None = None,
        timeout: float | None = None,
        poll: float = 0.2,
    ) -> ScaleResult:
        """Create or delete `kind` pods until there are `n`; wait for new ones to be ready."""
        if kind not in POOL_KINDS:
            raise ValueError(f"pool kind {kind!r} is not one of {POOL_KINDS}")
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        result = ScaleResult(kind, n)
        with self._lock:
            self.sync()
            have = self.pods_of(kind)
            if len(have) < n:
                for _ in range(n - len(have)):
                    name = f"venus-{kind}-{label_value(self.backend.pool)}-{secrets.token_hex(3)}"
                    self._known[name] = _Known(kind, time.monotonic())
                    try:
                        self.backend.create_pod(kind, name, dict(labels or {}),
                                                group or self.backend.pool)
                    except Exception:
                        self._known.pop(name, None)
                        raise
                    result.created.append(name)
            elif len(have) > n:
                held = self.registry.holders()
                free = [p for p in have if p not in held]
                # not-yet-ready pods go first, then free ready ones; leased pods stay
                free.sort(key=lambda p: self._known[p].registered)
                for name in free[: len(have) - n]:
                    self._forget(name, "scaled down")
                    self.backend.delete_pod(name)
                    result.deleted.append(name)
                if len(have) - len(result.deleted) > n:
                    result.kept_leased = [p for p in have if p in held]
        if result.created:
            result.ready = self.wait_ready(result.created, timeout, poll)
        return result

    def wait_ready(self, names: Sequence[str], timeout: float | None = None,
                   poll: float = 0.2) -> list[str]:
        """Sync until every pod of `names` is registered; on timeout delete the laggards and raise
        `DeviceNotReady` naming them (and what Kubernetes said about them)."""
        limit = self.ready_timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            self.sync()
            with self._lock:
                missing = [n for n in names if not (n in self._known and self._known[n].registered)]
            if not missing:
                return list(names)
            if time.monotonic() >= deadline:
                break
            time.sleep(poll)
        phases = {p.name: p.phase for p in self.backend.list_pods()}
        with self._lock:
            for name in missing:
                self._forget(name, "not ready in time")
                self.backend.delete_pod(name)
        detail = ", ".join(f"{n} ({phases.get(n, 'gone')})" for n in missing)
        raise DeviceNotReady(
            f"pool {self.backend.pool}: {len(missing)}/{len(names)} pod(s) not ready within"
            f" {limit:g}s, deleted: {detail}"
        )

    def delete_all(self) -> list[str]:
        """Delete every pod this controller knows (leases on them end)."""
        with self._lock:
            names = sorted(self._known)
            for name in names:
                self._forget(name, "pool shut down")
                self.backend.delete_pod(name)
        return names

    # -- background loop -----------------------------------------------------------------------
    def start(self) -> Self:
        if self._thread is None:
            self._stop.clear()
            self._thread = threading.Thread(target=self._loop, name="device-pool", daemon=True)
            self._thread.start()
        return self

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.sync()
            except Exception:  # the loop must outlive API-server hiccups; it retries next tick
                log.exception("pool %s: sync failed (retrying)", self.backend.pool)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
            self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
