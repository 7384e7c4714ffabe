"""Where online RL's environments come from: made in process, or leased through the device service.

Why one small protocol (`EnvSource`): the rollout loop must not care whether its K environments
are in-process simulated phones, browser contexts, or phones leased from the device gateway. It
asks for an env, gives it back healthy or broken (`failed=reason`), and the source decides what
that means: an in-process env is closed and a fresh one made; a leased device is reported to the
lease registry (which quarantines it) and another device is leased in its place. Every acquire,
release, failure and replacement is counted in `stats`, so a run's losses are reported, not hidden.

`SimPhoneFarm` is the laptop stand-in for the cluster's emulator pool: N simulated phones, each
served over the real ADB protocol (`SimAdbServer`), registered with an in-process lease registry
behind a device gateway on loopback, and one private Debian `adb` server. The registry probes a
phone (an ADB handshake) before leasing it; a phone reported broken is quarantined and probed
again after `recheck_after` seconds, so a phone that only lost its tunnel (a gateway restart)
comes back, and one that died stays out. Envs on it are
`RemoteSimPhoneEnv`s on a local port forwarded through the gateway by the SDK (`Lease.forward`),
so a rollout takes exactly the path it takes against emulator pods: lease -> gateway -> ADB.
"""

from __future__ import annotations

import random
import secrets
import threading
from collections import Counter
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from typing import Any, Protocol, Self

from venus_core.daas import (
    DevicePool,
    DeviceSpec,
    DeviceTable,
    Gateway,
    GatewayConfig,
    GatewayThread,
    LeaseExpired,
    LeaseRegistry,
    TokenSigner,
)
from venus_core.daas.client import Lease
from venus_core.daas.probes import probe_device
from venus_core.envs.base import Env
from venus_core.envs.shells import AdbServerProcess


class EnvSource(Protocol):
    """Hands out environments; takes them back healthy or broken (see the module docstring)."""

    platform: str
    stats: Counter[str]

    def acquire(self) -> Env: ...
    def release(self, env: Env, *, failed: str | None = None) -> None: ...
    def close(self) -> None: ...


class LocalEnvs:
    """Environments made in process by `make()`; healthy ones are kept for reuse."""

    def __init__(self, make: Callable[[], Env], platform: str) -> None:
        self.make = make
        self.platform = platform
        self.stats: Counter[str] = Counter()
        self._idle: list[Env] = []
        self._out: set[int] = set()
        self._lock = threading.Lock()

    def acquire(self) -> Env:
        with self._lock:
            env = self._idle.pop() if self._idle else None
        if env is None:
            env = self.make()
            self.stats["made"] += 1
        with self._lock:
            self._out.add(id(env))
        self.stats["acquired"] += 1
        return env

    def release(self, env: Env, *, failed: str | None = None) -> None:
        with self._lock:
            self._out.discard(id(env))
        if failed is None:
            with self._lock:
                self._idle.append(env)
            self.stats["released"] += 1
            return
        self.stats["failed"] += 1
        try:
            env.close()
        except Exception:  # noqa: BLE001 - a broken env may fail to close; it is discarded either way
            self.stats["close_errors"] += 1

    @property
    def outstanding(self) -> int:
        return len(self._out)

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
        for env in idle:
            env.close()


@dataclass
class _Held:
    stack: ExitStack
    lease: Lease


class _OnLease(Env):
    """A leased device's env that refuses to go on once its lease is lost.

    Why: a heartbeat that gets `LeaseExpired` (the lease ended by its TTL, by the registry, or
    unknown to a restarted registry) marks the lease lost, but an open ADB transport through the
    gateway keeps working, so without this check the rollout would go on driving a phone the
    registry has meanwhile handed to another client. `reset` and `step` raise `LeaseExpired`
    instead: the episode is counted lost and the source leases another device."""

    def __init__(self, inner: Env, lease: Lease) -> None:
        self.inner, self.lease = inner, lease
        self.name, self.platform = inner.name, inner.platform

    @property
    def supported_actions(self) -> frozenset[str]:
        return self.inner.supported_actions

    @property
    def task(self) -> Any:  # type: ignore[override]
        return self.inner.task

    @property
    def done(self) -> bool:  # type: ignore[override]
        return self.inner.done

    @property
    def closed(self) -> bool:  # type: ignore[override]
        return self.inner.closed

    def _check(self) -> None:
        lost = self.lease.lost
        if lost is not None:
            g = self.lease.grant
            raise LeaseExpired(f"lease {g.lease} on {g.device} lost: {lost}")

    def reset(self, task: Any) -> Any:
        self._check()
        return self.inner.reset(task)

    def step(self, action: Any) -> Any:
        self._check()
        return self.inner.step(action)

    def is_successful(self) -> bool:
        return self.inner.is_successful()

    @property
    def has_success_rule(self) -> bool:
        return self.inner.has_success_rule

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # backend extras (e.g. a phone's serial)
        return getattr(self.inner, name)


class LeasedEnvs:
    """One env per device leased from `pool` (kind and labels as given), on a forwarded port.

    `keep_idle`: an env given back healthy keeps its lease and is handed out again by the next
    `acquire` (until `close`), for devices whose env is costly to open (a browser: CDP connection,
    context, page ~0.5 s) and that a rollout would otherwise lease again at every step.

    `make(port)` builds the env on the local port that the SDK tunnels to the device. `adb`: the
    local adb server that `make`'s envs connect through (ADB devices); one that went away is started
    again before the next env is made (`stats["adb_restarts"]`), so a lost adb server costs the
    episodes in flight, not the run."""

    def __init__(self, pool: DevicePool, make: Callable[[int], Env], *, kind: str = "android",
                 platform: str = "mobile", labels: dict[str, str] | None = None,
                 adb: AdbServerProcess | None = None, keep_idle: bool = False) -> None:
        self.pool = pool
        self.make = make
        self.adb = adb
        self.kind = kind
        self.platform = platform
        self.labels = labels
        self.keep_idle = keep_idle
        self.stats: Counter[str] = Counter()
        self._held: dict[int, _Held] = {}
        self._idle: list[Env] = []
        self._lock = threading.Lock()

    def acquire(self) -> Env:
        while True:  # a device kept from an earlier release (keep_idle), unless its lease was lost meanwhile
            with self._lock:
                env = self._idle.pop() if self._idle else None
            if env is None:
                break
            if self._held[id(env)].lease.lost is None:
                self.stats["reused"] += 1
                return env
            self.release(env, failed="lease lost while idle")
        stack = ExitStack()
        try:
            if self.adb is not None and self.adb.ensure():
                self.stats["adb_restarts"] += 1
            (lease,) = stack.enter_context(self.pool.lease(self.kind, 1, self.labels))
            port = stack.enter_context(lease.forward())
            inner = self.make(port)
            stack.callback(inner.close)
            env: Env = _OnLease(inner, lease)
        except BaseException:
            stack.close()
            self.stats["acquire_errors"] += 1
            raise
        with self._lock:
            self._held[id(env)] = _Held(stack, lease)
        self.stats["leased"] += 1
        return env

    def release(self, env: Env, *, failed: str | None = None) -> None:
        """Give `env` back: broken (`failed`: reported, its lease ends) or healthy (its lease ends, or
        with `keep_idle` the env and its lease are kept for the next `acquire` until `close`)."""
        if failed is None and self.keep_idle:
            with self._lock:
                if id(env) not in self._held:
                    raise ValueError("release: this env was not acquired from this source")
                self._idle.append(env)
            self.stats["kept"] += 1
            return
        with self._lock:
            held = self._held.pop(id(env), None)
        if held is None:
            raise ValueError("release: this env was not acquired from this source")
        if failed is not None and held.lease.lost is not None:  # not the device's fault: nothing to report
            self.stats["failed"] += 1
            self.stats["lease_lost"] += 1
        elif failed is not None:
            self.stats["failed"] += 1
            g = held.lease.grant
            try:  # quarantine the device in the registry; the lease then ends
                self.pool.registry.report_failure(g.lease, g.client, failed)
                self.stats["reported"] += 1
            except Exception:  # noqa: BLE001 - registry unreachable: its TTL returns the device
                self.stats["report_errors"] += 1
        try:
            held.stack.close()  # env.close(), then the forwarder, then the lease release
        except Exception:  # noqa: BLE001 - a dead device may fail to close; the lease still ends
            self.stats["close_errors"] += 1
        self.stats["released"] += 1

    @property
    def outstanding(self) -> int:
        """Envs given out and not given back (kept idle ones are not outstanding)."""
        return len(self._held) - len(self._idle)

    def leases(self) -> list[Lease]:
        """The leases of the envs out now."""
        with self._lock:
            return [h.lease for h in self._held.values()]

    def close(self) -> None:
        with self._lock:
            held, self._held, self._idle = list(self._held.values()), {}, []
        for h in held:
            h.stack.close()
            self.stats["released"] += 1


def serve_on_loopback(specs: list[DeviceSpec], *, ttl: float, recheck_after: float
                      ) -> tuple[TokenSigner, DeviceTable, GatewayThread, LeaseRegistry]:
    """A device gateway and a lease registry on loopback for `specs` (the laptop's device service):
    the registry probes each device's protocol before leasing it and revokes the gateway's tunnels
    of every lease that ends. The caller stops both."""
    signer = TokenSigner(secrets.token_bytes(32))
    table = DeviceTable(specs)
    gateway = GatewayThread(Gateway(table, signer)).start()
    try:
        registry = LeaseRegistry(specs, signer, [f"127.0.0.1:{gateway.port}"], ttl=ttl, probe=probe_device,
                                 recheck_after=recheck_after, reap_interval=0.2).start()
    except BaseException:
        gateway.stop()
        raise
    registry.on_end.append(gateway.revoke)
    return signer, table, gateway, registry


@dataclass
class SimPhoneFarm:
    """`n` simulated phones behind a local lease registry and gateway (module docstring)."""

    n: int
    size: tuple[int, int] = (256, 256)
    lang: str = "en"
    ttl: float = 30.0
    io_timeout: float = 15.0
    recheck_after: float = 2.0  # a quarantined phone is probed (ADB handshake) again after this
    servers: list = field(default_factory=list)  # SimAdbServer per device
    registry: LeaseRegistry | None = None
    gateway: GatewayThread | None = None
    adb: AdbServerProcess | None = None
    _signer: TokenSigner | None = None
    _table: DeviceTable | None = None

    def start(self) -> Self:
        from venus_core.data.synth.tasks import get_phone
        from venus_core.envs import AdbServerProcess, SimAdbServer, SimDevice

        if self.n < 1:
            raise ValueError(f"SimPhoneFarm: n must be >= 1, got {self.n}")
        try:
            phone = get_phone()
            specs = []
            for i in range(self.n):
                dev = SimDevice(phone, phone.initial(random.Random(i)), size=self.size, lang=self.lang)
                srv = SimAdbServer(dev).start()
                self.servers.append(srv)
                specs.append(DeviceSpec(f"sim-{i}", "android", "local", "127.0.0.1", srv.port, labels=self.labels))
            self._signer, self._table, self.gateway, self.registry = serve_on_loopback(
                specs, ttl=self.ttl, recheck_after=self.recheck_after)
            self.adb = AdbServerProcess().start()
        except BaseException:
            self.stop()
            raise
        return self

    @property
    def labels(self) -> dict[str, str]:
        return {"size": f"{self.size[0]}x{self.size[1]}", "lang": self.lang}

    def pool(self, client_id: str) -> DevicePool:
        if self.registry is None:
            raise RuntimeError("SimPhoneFarm: start() first")
        return DevicePool(self.registry, client_id, wait=self.io_timeout, io_timeout=self.io_timeout)

    def env_source(self, client_id: str = "online-rl") -> LeasedEnvs:
        from venus_core.envs import RemoteSimPhoneEnv

        if self.adb is None:
            raise RuntimeError("SimPhoneFarm: start() first")
        adb = self.adb
        return LeasedEnvs(self.pool(client_id), lambda port: RemoteSimPhoneEnv(f"127.0.0.1:{port}", adb_port=adb.port),
                          kind="android", platform="mobile", labels=self.labels, adb=adb)

    def leased(self) -> int:
        return int(self.registry.status()["leased"]) if self.registry is not None else 0

    def restart_gateway(self) -> None:
        """Stop the gateway and start a new one on the same port (its tunnels drop; leases stay)."""
        assert self.gateway is not None and self.registry is not None and self._table is not None
        port = self.gateway.port
        self.gateway.stop()
        self.gateway = GatewayThread(Gateway(self._table, self._signer, GatewayConfig(port=port))).start()  # type: ignore[arg-type]
        self.registry.on_end[:] = [self.gateway.revoke]

    def kill_adb_server(self) -> None:
        """Make the private adb server exit (a lost adb server; for fault tests)."""
        if self.adb is None:
            raise RuntimeError("this farm has no private adb server (it was not started)")
        self.adb.kill()

    def kill(self, index: int) -> None:
        """Stop device `index`'s ADB server (a device that dies; for fault tests)."""
        self.servers[index].stop()

    def stop(self) -> None:
        if self.registry is not None:
            self.registry.stop()
        if self.gateway is not None:
            self.gateway.stop()
        for srv in self.servers:
            srv.stop()
        if self.adb is not None:
            self.adb.stop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = ["EnvSource", "LeasedEnvs", "LocalEnvs", "SimPhoneFarm", "serve_on_loopback"]
