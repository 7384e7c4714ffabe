"""The lease registry: which devices exist, which client holds which, for how long.

Why leases with a TTL: a rollout worker can die without saying goodbye (OOM, preemption); its
devices must come back by themselves. A lease lives `ttl` seconds past its last heartbeat; the
reaper thread ends expired leases and returns their devices. Health: a device is probed (see
`probes`) before it is handed out; a failed probe, or a client reporting the device broken,
quarantines it, and quarantined devices are re-probed every `recheck_after` seconds and return to
the pool once they answer. Ending a lease for any reason calls the `on_end` hooks (a gateway
running in process closes the lease's open sessions there).

Devices can come and go while the registry runs (`add_device` / `remove_device`): the Kubernetes
device pool (`pool`) adds a device when its pod turns ready and removes it when the pod is deleted
or fails; removing a leased device ends the lease, and the holder's next heartbeat or call gets
`LeaseExpired` naming the reason.

Each grant carries an HMAC token (see `tokens`) and the address of the gateway shard that owns the
device's group (see `routing.shard_of`). The registry is in process and thread-safe; `lease_http`
serves it over HTTP on loopback with the same methods.
"""

from __future__ import annotations

import itertools
import logging
import math
import secrets
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, Self

from venus_core.daas.errors import LeaseExpired, NoDeviceAvailable, UnknownDevice
from venus_core.daas.probes import Probe, probe_device
from venus_core.daas.routing import DeviceSpec, shard_of
from venus_core.daas.tokens import Claims, TokenSigner

log = logging.getLogger(__name__)
ENDED_MEMORY = 4096  # why recently ended leases ended, for the holder's error message
MATCH_CACHE = 256  # distinct (kind, labels) queries whose matching devices are kept


@dataclass(frozen=True)
class Grant:
    """What a client receives for one leased device."""

    lease: str
    device: str
    kind: str
    group: str
    client: str
    gateway: str  # "host:port" of the shard that owns the device's group
    token: str
    ttl: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Grant:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class LeaseSnapshot:
    """The leases held now, and the recently ended ones (the last ENDED_MEMORY), by id."""

    live: frozenset[str]
    ended: frozenset[str]


@dataclass
class _Lease:
    id: str
    device: DeviceSpec
    client: str
    labels: dict[str, str]
    deadline: float


@dataclass
class _Quarantine:
    reason: str
    recheck_at: float
    since: float = field(default_factory=time.monotonic)


class LeaseRegistry:
    """Hand out devices to clients under leases; see the module docstring."""

    def __init__(
        self,
        devices: Sequence[DeviceSpec],
        signer: TokenSigner,
        gateways: Sequence[str],
        *,
        ttl: float = 30.0,
        probe: Probe | None = probe_device,
        recheck_after: float = 10.0,
        reap_interval: float = 0.5,
    ) -> None:
        if not gateways:
            raise ValueError("at least one gateway shard address is needed")
        if ttl <= 0:
            raise ValueError(f"ttl must be > 0, got {ttl}")
        self.devices = {d.id: d for d in devices}
        if len(self.devices) != len(devices):
            raise ValueError("duplicate device ids")
        self.signer = signer
        self.gateways = list(gateways)
        self.ttl = ttl
        self.probe = probe
        self.recheck_after = recheck_after
        self.reap_interval = reap_interval
        self.on_end: list[Callable[[str], None]] = []
        self._leases: dict[str, _Lease] = {}
        self._peak_leased = 0  # high-water mark of leases held at once since start (capacity planning)
        self._held: dict[str, str] = {}  # device id -> lease id
        self._quarantine: dict[str, _Quarantine] = {}
        self._ended: OrderedDict[str, str] = OrderedDict()
        self._matches: dict[tuple[str, tuple[tuple[str, str], ...]], list[DeviceSpec]] = {}
        self._cond = threading.Condition()
        self._ids = itertools.count(1)
        self._stop = threading.Event()
        self._reaper: threading.Thread | None = None

    # -- leasing -------------------------------------------------------------------------------
    def _grant(self, lease: _Lease) -> Grant:
        dev = lease.device
        claims = Claims(
            lease=lease.id,
            device=dev.id,
            client=lease.client,
            group=dev.group,
            exp=time.time() + self.ttl,
        )
        return Grant(
            lease=lease.id,
            device=dev.id,
            kind=dev.kind,
            group=dev.group,
            client=lease.client,
            gateway=self.gateways[shard_of(dev.group, len(self.gateways))],
            token=self.signer.sign(claims),
            ttl=self.ttl,
        )

    def _matching(self, kind: str, labels: dict[str, str]) -> list[DeviceSpec]:
        """Under the lock: the devices of `kind` with `labels`, in table order (cached until a
        device is added or removed)."""
        key = (kind, tuple(sorted(labels.items())))
        got = self._matches.get(key)
        if got is None:
            if len(self._matches) >= MATCH_CACHE:
                self._matches.clear()
            got = self._matches[key] = [
                d for d in self.devices.values() if d.matches(kind, labels)
            ]
        return got

    def _take_one(
        self, client: str, kind: str, labels: dict[str, str], exclude: set[str]
    ) -> _Lease | None:
        """Under the lock: probe free candidates (lock released while probing) and lease one."""
        while True:
            # the first free match in table order, from the cached matches of (kind, labels):
            # filtering every device on each lease cost O(devices) per lease under the lock
            # (4.4 ms at 10,000 devices, benchmarks/scale_devices.py)
            dev = next(
                (
                    d
                    for d in self._matching(kind, labels)
                    if d.id not in self._held
                    and d.id not in self._quarantine
                    and d.id not in exclude
                ),
                None,
            )
            if dev is None:
                return None
            self._held[dev.id] = "probing"
            self._cond.release()
            try:
                reason = self.probe(dev) if self.probe is not None else None
            finally:
                self._cond.acquire()
                del self._held[dev.id]
            if dev.id not in self.devices:  # removed (its pod went away) while being probed
                continue
            if reason is not None:
                self._quarantine_locked(dev.id, f"probe failed: {reason}")
                continue
            lease = _Lease(
                f"L{next(self._ids)}-{secrets.token_hex(4)}",
                dev,
                client,
                labels,
                time.monotonic() + self.ttl,
            )
            self._leases[lease.id] = lease
            self._peak_leased = max(self._peak_leased, len(self._leases))
            self._held[dev.id] = lease.id
            return lease

    def lease(
        self,
        client: str,
        kind: str,
        n: int = 1,
        labels: dict[str, str] | None = None,
        wait: float = 0.0,
    ) -> list[Grant]:
        """Lease `n` healthy devices of `kind` matching `labels`, waiting up to `wait` seconds."""
        if n < 1:
            raise ValueError(f"n must be >= 1, got {n}")
        if not math.isfinite(wait) or wait < 0:  # NaN would never reach its deadline
            raise ValueError(f"wait must be a finite number of seconds >= 0, got {wait}")
        labels = dict(labels or {})
        deadline = time.monotonic() + wait
        got: list[_Lease] = []
        with self._cond:
            while len(got) < n:
                lease = self._take_one(client, kind, labels, set())
                if lease is not None:
                    got.append(lease)
                    continue
                left = deadline - time.monotonic()
                if left <= 0:
                    for lz in got:
                        self._end_locked(lz.id, "lease request failed")
                    free = len(self._matching(kind, labels))
                    raise NoDeviceAvailable(
                        f"{client}: wanted {n} {kind} device(s) with labels {labels},"
                        f" got {len(got)} ({free} match; {len(self._held)} leased,"
                        f" {len(self._quarantine)} quarantined)"
                    )
                self._cond.wait(min(left, self.reap_interval))
            return [self._grant(lz) for lz in got]

    def _live(self, lease_id: str, client: str) -> _Lease:
        lease = self._leases.get(lease_id)
        if lease is None or lease.client != client:
            why = self._ended.get(lease_id)
            raise LeaseExpired(
                f"lease {lease_id} is not held by {client}" + (f" (ended: {why})" if why else "")
            )
        return lease

    def heartbeat(self, lease_id: str, client: str) -> Grant:
        """Extend the lease by `ttl` and return a fresh token."""
        with self._cond:
            lease = self._live(lease_id, client)
            lease.deadline = time.monotonic() + self.ttl
            return self._grant(lease)

    def release(self, lease_id: str, client: str) -> None:
        with self._cond:
            self._live(lease_id, client)
            self._end_locked(lease_id, "released")

    def report_failure(self, lease_id: str, client: str, reason: str) -> None:
        """The client found its device broken: quarantine it and end the lease."""
        with self._cond:
            lease = self._live(lease_id, client)
            self._end_locked(lease_id, f"device failed: {reason}")
            self._quarantine_locked(lease.device.id, f"reported by {client}: {reason}")

    def replace(self, lease_id: str, client: str, reason: str, wait: float = 0.0) -> Grant:
        """`report_failure`, then lease another device of the same kind and labels."""
        with self._cond:
            old = self._live(lease_id, client)
        self.report_failure(lease_id, client, reason)
        return self.lease(client, old.device.kind, 1, old.labels, wait=wait)[0]

    # -- devices that come and go -------------------------------------------------------------
    def add_device(self, device: DeviceSpec) -> None:
        """Make a new device leasable (waiting `lease` calls see it at once)."""
        with self._cond:
            if device.id in self.devices:
                raise ValueError(f"device {device.id!r} is already registered")
            self.devices[device.id] = device
            self._matches.clear()
            self._cond.notify_all()
        log.info("device %s (%s, group %s) added at %s", device.id, device.kind, device.group,
                 device.endpoint)

    def remove_device(self, device_id: str, reason: str) -> str | None:
        """Forget a device; a lease on it ends (its holder gets `LeaseExpired` with `reason`).

        Returns the id of the lease that was ended, if any."""
        with self._cond:
            if device_id not in self.devices:
                raise UnknownDevice(f"unknown device {device_id!r}")
            held = self._held.get(device_id)
            ended = None
            if held is not None and held in self._leases:
                self._end_locked(held, f"device removed: {reason}")
                ended = held
            del self.devices[device_id]
            self._matches.clear()
            self._quarantine.pop(device_id, None)
        log.info("device %s removed: %s", device_id, reason)
        return ended

    def holders(self) -> dict[str, tuple[str, str]]:
        """device id -> (lease id, client) for every leased device."""
        with self._cond:
            return {lz.device.id: (lz.id, lz.client) for lz in self._leases.values()}

    def quarantined_for(self) -> dict[str, float]:
        """device id -> seconds it has been in quarantine."""
        now = time.monotonic()
        with self._cond:
            return {d: now - q.since for d, q in self._quarantine.items()}

    # -- bookkeeping ---------------------------------------------------------------------------
    def _end_locked(self, lease_id: str, why: str) -> None:
        lease = self._leases.pop(lease_id)
        del self._held[lease.device.id]
        self._ended[lease_id] = why
        while len(self._ended) > ENDED_MEMORY:
            self._ended.popitem(last=False)
        log.info("lease %s (%s on %s) ended: %s", lease_id, lease.client, lease.device.id, why)
        self._cond.notify_all()
        for hook in self.on_end:
            try:
                hook(lease_id)
            except Exception:
                log.exception("lease end hook failed for %s", lease_id)

    def _quarantine_locked(self, device_id: str, reason: str) -> None:
        if device_id not in self.devices:
            raise UnknownDevice(f"unknown device {device_id!r}")
        log.warning("device %s quarantined: %s", device_id, reason)
        self._quarantine[device_id] = _Quarantine(reason, time.monotonic() + self.recheck_after)

    def reap(self) -> None:
        """End expired leases; re-probe quarantined devices that are due."""
        now = time.monotonic()
        with self._cond:
            for lease in [lz for lz in self._leases.values() if lz.deadline <= now]:
                self._end_locked(lease.id, "TTL expired (no heartbeat)")
            due = [d for d, q in self._quarantine.items() if q.recheck_at <= now]
        for dev_id in due:
            dev = self.devices.get(dev_id)
            if dev is None:  # removed meanwhile
                continue
            reason = self.probe(dev) if self.probe is not None else None
            with self._cond:
                if reason is None:
                    log.info("device %s back from quarantine", dev_id)
                    self._quarantine.pop(dev_id, None)
                    self._cond.notify_all()
                elif dev_id in self._quarantine:
                    self._quarantine[dev_id].recheck_at = time.monotonic() + self.recheck_after

    def leases(self) -> LeaseSnapshot:
        """Held and recently ended lease ids (gateways in other processes poll this: they close
        the sessions of leases no longer held and refuse the tokens of ended ones)."""
        with self._cond:
            return LeaseSnapshot(frozenset(self._leases), frozenset(self._ended))

    def status(self) -> dict[str, Any]:
        with self._cond:
            return {
                "devices": len(self.devices),
                "leased": len(self._leases),
                "peak_leased": self._peak_leased,
                "quarantined": {d: q.reason for d, q in self._quarantine.items()},
                "leases": {
                    lz.id: {"device": lz.device.id, "client": lz.client}
                    for lz in self._leases.values()
                },
            }

    # -- reaper thread -------------------------------------------------------------------------
    def start(self) -> Self:
        if self._reaper is None:
            self._stop.clear()
            self._reaper = threading.Thread(
                target=self._reap_loop, name="lease-reaper", daemon=True
            )
            self._reaper.start()
        return self

    def _reap_loop(self) -> None:
        while not self._stop.wait(self.reap_interval):
            try:
                self.reap()
            except Exception:
                log.exception("lease reaper failed")

    def stop(self) -> None:
        self._stop.set()
        if self._reaper is not None:
            self._reaper.join(5)
            self._reaper = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
