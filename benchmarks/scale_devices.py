"""Benchmark: the device service at pool scale on loopback: 10,000 devices, 1,000 leases at once.

What runs (every server is the shipped code; only the devices are fake):
- `devices`: one process holding `--devices` fake devices, each its own listening socket on
  127.0.0.1 (so what a device sees is measured at the device). A device answers a request line
  `STEP <n> <device> <lease> <seq>` with `<its own id> <the line>` and `n` filler bytes, so a reply
  names the device that produced it and the session it belongs to; it counts its connections that
  carried data (the registry's connect-only health probes are counted apart) and their peak.
- `--shards` gateway shards, each a `venus gateway` process (the CLI of the cluster's pods):
  shard 0 also serves the lease registry over HTTP (its probes, TTL reaper, revocation hook),
  the others follow it with `--registry-url` (revocation polled every second). Each shard owns the
  device groups that rendezvous-hash to it (`routing.shard_of`); the registry's grants name it.
- `--workers` load-generator processes: clients are `DevicePool`s of the SDK on the registry's URL
  (HTTP lease / heartbeat / release, `Lease.connect` tunnels through the grant's shard), one thread
  per concurrently held lease.

Phases, each bounded in count and time:
1. capacity: the CPU seconds (utime + stime from /proc) the registry (shard 0's process)
   spends per lease -> heartbeat -> release cycle, and one gateway-only shard per admitted
   session, per small request/response step and per screenshot-sized step (`--screen-bytes`);
   the same steps on a direct connection to the device are the baseline. From these the shards
   and registry load of a `--pool`-device pool are computed, the arithmetic printed.
2. soak: `--leases` slots (threads) over `--clients` clients; each slot loops acquire -> tunnel ->
   `--steps` steps `--think` s apart (each paired with the same step on a direct connection to the
   device, the baseline) -> heartbeat -> release, until `--seconds`. `--vanish` extra client
   processes lease `--vanish-leases` devices each, open tunnels and are SIGKILLed half-way: their
   leases must come back through the registry's TTL. Reported: leases/s, p50/p99 of acquire,
   tunnel, step (gateway and direct), heartbeat and release latency, peak concurrent leases,
   RSS per session and open fds of the shard processes.
3. routing: for each count in `--route-clients`, that many clients each run `--route-cycles`
   lease cycles on the `--route-devices` devices of the route set, every lease opening
   `--route-tunnels` tunnels at once (more than `--max-upstream`), one step on each admitted one.
   Printed per count: the most connections one device held at once (measured at the device), the
   refusals of the per-device cap, the shards that granted each device, and the baseline: how
   many distinct clients used the busiest device — the connections it would hold if every client
   dialled devices directly and kept its transport (as `adb connect` does).
4. reconciliation: every lease acquired ended exactly once (the registry's log: released, or TTL
   expired for the killed clients), the registry holds 0 leases, no gateway session or device
   connection is left open, no reply was cross-wired, gateway refusals match the clients' count.

    python benchmarks/scale_devices.py [--devices 10000] [--leases 1000] [--seconds 60] [--shards 2]
        [--route-clients 10,100,1000] [--json out.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import IO, Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
# helpers of benchmarks/gateway.py (the gateway vs direct benchmark)
from gateway import cpu_seconds, pct, proc_stats, raise_fd_limit  # noqa: E402

from venus_core.daas import DaasError, DevicePool, GatewayBusy, HttpRegistry, shard_of  # noqa: E402
from venus_core.daas.client import Lease, Tunnel  # noqa: E402
from venus_core.daas.service import new_event_loop  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
KIND = "tcp"
BUSY = f"error {GatewayBusy.code}"
LEASE_END = re.compile(r"^(\S+ \S+) INFO \S+: lease (\S+) \((\S+) on (\S+)\) ended: (.*)$")
PROD_TTL = 30.0  # `venus gateway --ttl` default: heartbeats every 10 s (sizing)


# -- the fake devices --------------------------------------------------------------------------
@dataclass
class _DeviceState:
    id: bytes
    conns: int = 0  # connections that carried data
    active: int = 0
    peak: int = 0
    probes: int = 0  # connections closed without data (the registry's connect-only probes)


class _FakeDevice(asyncio.Protocol):
    """One connection to a fake device: answers `STEP <n> ...` lines with its id and n bytes."""

    def __init__(self, dev: _DeviceState, filler: memoryview, bad: list[int]) -> None:
        self.dev = dev
        self.filler = filler
        self.bad = bad
        self.buf = bytearray()
        self.counted = False
        self.t: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        if not self.counted:
            self.counted = True
            self.dev.conns += 1
            self.dev.active += 1
            self.dev.peak = max(self.dev.peak, self.dev.active)
        self.buf += data
        assert self.t is not None
        while (nl := self.buf.find(b"\n")) >= 0:
            line = bytes(self.buf[:nl])
            del self.buf[: nl + 1]
            parts = line.split(b" ")
            if len(parts) != 5 or parts[0] != b"STEP" or not parts[1].isdigit():
                self.bad[0] += 1
                self.t.close()
                return
            n = int(parts[1])
            self.t.write(self.dev.id + b" " + line + b"\n")
            if n:
                self.t.write(self.filler[:n])

    def connection_lost(self, exc: Exception | None) -> None:
        if self.counted:
            self.dev.active -= 1
        else:
            self.dev.probes += 1


def device_labels(i: int, n: int, route: int, group: str, shards: int) -> dict[str, str]:
    return {"set": "route" if i >= n - route else "soak", "shard": str(shard_of(group, shards))}


def serve_devices(
    n: int, groups: int, route: int, shards: int, table: Path, max_reply: int
) -> None:
    """The `devices` role: n listening sockets, the device table written to `table`, then serve;
    stdin commands: `stats` (print a JSON line), `reset` (zero the counters), EOF (exit)."""
    raise_fd_limit(n + 8192)
    loop = new_event_loop()
    filler = memoryview(b"\xab" * max(1, max_reply))
    bad = [0]
    states: list[_DeviceState] = []
    records = []
    socks = []
    for i in range(n):
        dev_id = f"dev-{i:05d}"
        group = f"g{i % groups:03d}"  # interleaved: see the note in docs/scale.md
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.bind(("127.0.0.1", 0))
        s.listen(256)
        s.setblocking(False)
        socks.append(s)
        states.append(_DeviceState(dev_id.encode()))
        records.append({
            "id": dev_id, "kind": KIND, "group": group,
            "endpoint": f"127.0.0.1:{s.getsockname()[1]}",
            "labels": device_labels(i, n, route, group, shards),
        })

    async def boot() -> list[asyncio.AbstractServer]:
        return [
            await loop.create_server(lambda st=st: _FakeDevice(st, filler, bad), sock=s)
            for st, s in zip(states, socks, strict=True)
        ]

    servers = loop.run_until_complete(boot())
    table.write_text(json.dumps({"devices": records}))
    print("ready", n, flush=True)

    async def command(cmd: str) -> str:
        if cmd == "reset":
            for st in states:
                st.conns = st.peak = st.probes = 0
                st.peak = st.active
            return json.dumps({"reset": True})
        touched = {st.id.decode(): [st.conns, st.peak] for st in states if st.conns or st.active}
        return json.dumps({
            "touched": touched,
            "active": sum(st.active for st in states),
            "probes": sum(st.probes for st in states),
            "bad": bad[0],
        })

    def read_commands() -> None:
        for line in sys.stdin:
            out = asyncio.run_coroutine_threadsafe(command(line.strip()), loop).result(60)
            print(out, flush=True)
        loop.call_soon_threadsafe(loop.stop)

    threading.Thread(target=read_commands, daemon=True).start()
    loop.run_forever()
    for srv in servers:
        srv.close()


# -- the load generator (worker processes) -----------------------------------------------------
def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("direct connection closed")
        buf += chunk
    return bytes(buf)


def _request(device: str, lease: str, seq: int, n: int) -> tuple[bytes, bytes]:
    line = f"STEP {n} {device} {lease} {seq}"
    return (line + "\n").encode(), f"{device} {line}\n".encode()


def tunnel_step(t: Tunnel, device: str, lease: str, seq: int, n: int) -> bool:
    """One request/response over the tunnel; False if the reply is not this session's."""
    req, want = _request(device, lease, seq, n)
    t.sendall(req)
    got = t.recv_exact(len(want) + n)
    return got[: len(want)] == want


def direct_step(sock: socket.socket, device: str, lease: str, seq: int, n: int) -> bool:
    req, want = _request(device, lease, seq, n)
    sock.sendall(req)
    got = _recv_exact(sock, len(want) + n)
    return got[: len(want)] == want


@dataclass
class Tally:
    """What one worker process measured (merged by the orchestrator)."""

    lat: dict[str, list[float]] = field(default_factory=dict)
    count: Counter[str] = field(default_factory=Counter)
    leases: list[list[str]] = field(default_factory=list)  # [lease, device, client, gateway]
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, name: str, seconds: float) -> None:
        self.lat.setdefault(name, []).append(seconds)

    def granted(self, lease: Lease) -> None:
        g = lease.grant
        with self.lock:
            self.leases.append([g.lease, g.device, g.client, g.gateway])

    def to_json(self) -> dict[str, Any]:
        return {"lat": self.lat, "count": dict(self.count), "leases": self.leases}


@contextmanager
def timed_lease(pool: DevicePool, labels: dict[str, str], tally: Tally) -> Iterator[Lease]:
    t0 = time.perf_counter()
    with pool.lease(KIND, 1, labels) as (lease,):
        tally.add("acquire", time.perf_counter() - t0)
        tally.count["acquired"] += 1
        tally.granted(lease)
        try:
            yield lease
        finally:
            t1 = time.perf_counter()
    tally.add("release", time.perf_counter() - t1)
    tally.count["released"] += 1


def _open_direct(
    endpoints: dict[str, tuple[str, int]], device: str, timeout: float
) -> socket.socket:
    sock = socket.create_connection(endpoints[device], timeout=timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return sock


def soak_slot(pool: DevicePool, plan: dict[str, Any], endpoints: dict[str, tuple[str, int]],
              tally: Tally, start_at: float, rng: random.Random) -> None:
    """Loop acquire -> tunnel -> steps (each paired with a direct step) -> heartbeat -> release."""
    time.sleep(max(0.0, start_at - time.time()))
    deadline = plan["deadline"]
    n, labels, think = plan["reply_bytes"], plan["labels"], plan["think"]
    while time.time() < deadline:
        try:
            with timed_lease(pool, labels, tally) as lease, ExitStack() as stack:
                t0 = time.perf_counter()
                tunnel = stack.enter_context(lease.connect())
                tally.add("connect", time.perf_counter() - t0)
                tally.count["tunnels"] += 1
                direct = stack.enter_context(_open_direct(endpoints, lease.device, pool.io_timeout))
                for seq in range(plan["steps"]):
                    time.sleep(think * rng.uniform(0.5, 1.5))
                    t0 = time.perf_counter()
                    ok = tunnel_step(tunnel, lease.device, lease.grant.lease, seq, n)
                    t1 = time.perf_counter()
                    ok_direct = direct_step(direct, lease.device, lease.grant.lease, seq, n)
                    tally.add("step", t1 - t0)
                    tally.add("direct", time.perf_counter() - t1)
                    tally.count["steps"] += 1
                    tally.count["wrong"] += (not ok) + (not ok_direct)
                t0 = time.perf_counter()
                lease.heartbeat()
                tally.add("heartbeat", time.perf_counter() - t0)
                if lease.lost is not None:
                    tally.count["lost"] += 1
            tally.count["cycles"] += 1
        except (DaasError, OSError) as exc:
            tally.count[f"error {type(exc).__name__}"] += 1
            time.sleep(0.2)


def route_client(
    pool: DevicePool, plan: dict[str, Any], tally: Tally, sem: threading.Semaphore
) -> None:
    """`cycles` leases, each opening `tunnels` tunnels at once and stepping on the admitted ones."""
    for c in range(plan["cycles"]):
        with sem:
            try:
                with timed_lease(pool, plan["labels"], tally) as lease, ExitStack() as stack:
                    tunnels = []
                    for _ in range(plan["tunnels"]):
                        try:
                            tunnels.append(stack.enter_context(lease.connect()))
                        except GatewayBusy:
                            tally.count["busy"] += 1
                    for i, t in enumerate(tunnels):
                        ok = tunnel_step(t, lease.device, lease.grant.lease, c * 100 + i, 0)
                        tally.count["steps"] += 1
                        tally.count["wrong"] += not ok
                    tally.count["tunnels"] += len(tunnels)
                tally.count["cycles"] += 1
            except (DaasError, OSError) as exc:
                tally.count[f"error {type(exc).__name__}"] += 1


def capacity_slot(pool: DevicePool, plan: dict[str, Any], endpoints: dict[str, tuple[str, int]],
                  tally: Tally, barrier: threading.Barrier) -> None:
    """`registry`: `count` lease -> heartbeat -> release cycles; `sessions`: open/close `count`
    tunnels (one small step each); `steps`: `count` steps on one tunnel, each followed by the same
    step on a direct connection (the baseline). The timed part runs between the two barrier
    waits, after every slot has its lease (and tunnel)."""
    n = plan["reply_bytes"]
    if plan["mode"] == "registry":  # lease -> heartbeat -> release, back to back
        barrier.wait()
        for _ in range(plan["count"]):
            with timed_lease(pool, plan["labels"], tally) as lease:
                t0 = time.perf_counter()
                lease.heartbeat()
                tally.add("heartbeat", time.perf_counter() - t0)
            tally.count["cycles"] += 1
        barrier.wait()
        return
    with timed_lease(pool, plan["labels"], tally) as lease:
        g = lease.grant
        if plan["mode"] == "sessions":
            barrier.wait()
            for seq in range(plan["count"]):
                t0 = time.perf_counter()
                with lease.connect() as t:
                    tally.count["wrong"] += not tunnel_step(t, g.device, g.lease, seq, 0)
                tally.add("session", time.perf_counter() - t0)
                tally.count["tunnels"] += 1
            barrier.wait()
            return
        with lease.connect() as t, _open_direct(endpoints, g.device, pool.io_timeout) as d:
            tally.count["tunnels"] += 1
            barrier.wait()
            for seq in range(plan["count"]):
                t0 = time.perf_counter()
                tally.count["wrong"] += not tunnel_step(t, g.device, g.lease, seq, n)
                t1 = time.perf_counter()
                tally.count["wrong"] += not direct_step(d, g.device, g.lease, seq, n)
                tally.add("step", t1 - t0)
                tally.add("direct", time.perf_counter() - t1)
                tally.count["steps"] += 1
            barrier.wait()


def run_worker(plan: dict[str, Any]) -> None:
    """The `worker` role: run the phase `plan` names, print a JSON Tally (vanish: never returns)."""
    raise_fd_limit(4 * plan.get("slots", 1) + 1024)
    table = json.loads(Path(plan["table"]).read_text())["devices"]
    endpoints = {}
    for rec in table:
        host, _, port = rec["endpoint"].rpartition(":")
        endpoints[rec["id"]] = (host, int(port))
    tally = Tally()
    url = plan["registry"]
    threads: list[threading.Thread] = []

    def pool_for(client: str) -> DevicePool:
        return DevicePool(url, client, wait=plan.get("wait", 30.0),
                          io_timeout=plan.get("io_timeout", 30.0))

    phase = plan["phase"]
    if phase == "vanish":
        pool = pool_for(plan["clients"][0])
        stack = ExitStack()
        leases = stack.enter_context(pool.lease(KIND, plan["count"], plan["labels"]))
        for lz in leases:
            tally.granted(lz)
            t = stack.enter_context(lz.connect())
            tally.count["wrong"] += not tunnel_step(t, lz.device, lz.grant.lease, 0, 0)
            tally.count["tunnels"] += 1
        tally.count["acquired"] += len(leases)
        print(json.dumps(tally.to_json()), flush=True)
        threading.Event().wait()  # until SIGKILL: the leases are never released
    if phase == "soak":
        per = plan["slots_per_client"]
        k = 0
        for client in plan["clients"]:
            pool = pool_for(client)
            for _ in range(per):
                start = plan["start_at"] + plan["ramp"] * k / max(1, len(plan["clients"]) * per)
                rng = random.Random(f"{client}-{k}")
                threads.append(threading.Thread(
                    target=soak_slot, args=(pool, plan, endpoints, tally, start, rng), daemon=True))
                k += 1
    elif phase == "route":
        sem = threading.Semaphore(plan["concurrency"])
        for client in plan["clients"]:
            threads.append(threading.Thread(
                target=route_client, args=(pool_for(client), plan, tally, sem), daemon=True))
    elif phase == "capacity":
        barrier = threading.Barrier(len(plan["clients"]) + 1, timeout=plan.get("join_s", 600))
        for client in plan["clients"]:
            threads.append(threading.Thread(
                target=capacity_slot, args=(pool_for(client), plan, endpoints, tally, barrier),
                daemon=True))
    else:
        raise ValueError(f"unknown phase {phase!r}")
    for th in threads:
        th.start()
    if phase == "capacity":  # the gateway shard's CPU seconds over the timed part only
        barrier.wait()
        c0, t0 = cpu_seconds(plan["shard_pid"]), time.monotonic()
        barrier.wait()
        tally.lat["window"] = [cpu_seconds(plan["shard_pid"]) - c0, time.monotonic() - t0]
    for th in threads:
        th.join(plan.get("join_s", 600))
    tally.count["threads_alive"] = sum(th.is_alive() for th in threads)
    print(json.dumps(tally.to_json()), flush=True)


# -- the orchestrator --------------------------------------------------------------------------
def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen[str]

    @property
    def pid(self) -> int:
        return self.popen.pid

    def line(self, timeout: float = 120.0) -> str:
        """The next stdout line (raises if the process exits or stays silent past `timeout`)."""
        out: list[str] = []
        stdout = self.popen.stdout
        assert stdout is not None
        th = threading.Thread(target=lambda: out.append(stdout.readline()), daemon=True)
        th.start()
        th.join(timeout)
        if not out or not out[0]:
            raise RuntimeError(f"{self.name}: no output (exit code {self.popen.poll()})")
        return out[0]

    def stop(self) -> None:
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(10)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(10)


def spawn_role(name: str, args: list[str], stderr: IO[str] | int | None = None) -> Proc:
    popen = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=stderr, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    return Proc(name, popen)


def run_plan(name: str, plan: dict[str, Any], timeout: float) -> dict[str, Any]:
    """Run one worker process on `plan` and return its tally."""
    proc = spawn_role(name, ["--role", "worker"])
    assert proc.popen.stdin is not None
    proc.popen.stdin.write(json.dumps(plan) + "\n")
    proc.popen.stdin.close()
    try:
        return dict(json.loads(proc.line(timeout)))
    finally:
        proc.stop()


def run_plans(plans: list[tuple[str, dict[str, Any]]], timeout: float) -> list[dict[str, Any]]:
    """Run several worker processes at once; their tallies in order."""
    out: list[dict[str, Any] | BaseException] = [RuntimeError("not run")] * len(plans)

    def one(i: int, name: str, plan: dict[str, Any]) -> None:
        try:
            out[i] = run_plan(name, plan, timeout)
        except BaseException as exc:  # noqa: BLE001 - re-raised below in the calling thread
            out[i] = exc

    ths = [threading.Thread(target=one, args=(i, n, p)) for i, (n, p) in enumerate(plans)]
    for th in ths:
        th.start()
    for th in ths:
        th.join()
    for r in out:
        if isinstance(r, BaseException):
            raise r
    return [r for r in out if isinstance(r, dict)]


def merge(tallies: list[dict[str, Any]]) -> dict[str, Any]:
    lat: dict[str, list[float]] = {}
    count: Counter[str] = Counter()
    leases: list[list[str]] = []
    for t in tallies:
        for k, v in t["lat"].items():
            lat.setdefault(k, []).extend(v)
        count.update(t["count"])
        leases += t["leases"]
    return {"lat": lat, "count": count, "leases": leases}


def metrics(port: int) -> dict[str, float]:
    """A shard's counters: sessions (total), active, and errors by code."""
    from prometheus_client.parser import text_string_to_metric_families

    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=30).read().decode()
    out: dict[str, float] = Counter()
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "venus_gateway_sessions_total":
                out["sessions"] += s.value
            elif s.name == "venus_gateway_sessions_active":
                out["active"] += s.value
            elif s.name == "venus_gateway_errors_total":
                out[f"error {s.labels['code']}"] += s.value
    return out


class Sampler:
    """Polls, every `interval` s, the registry's leased count, the shards' active sessions and the
    shard processes' RSS and fds; keeps the peaks (and the RSS / fds at the session peak). The
    leases' peak also takes the registry's own high-water mark (`peak_leased`), read on exit, when it
    rose above its value at entry (so the peak was reached while sampling): exact, where a
    once-a-second sample misses a peak between two polls when the slots churn under load."""

    def __init__(self, registry: HttpRegistry, shards: list[Proc], mports: list[int],
                 interval: float = 1.0) -> None:
        self.registry, self.shards, self.mports, self.interval = registry, shards, mports, interval
        self.peak_leased = 0
        self.mark = 0  # the registry's high-water mark when sampling began
        self.peak_sessions = [0] * len(shards)
        self.at_peak: list[tuple[float, int]] = [(0.0, 0)] * len(shards)
        self.samples: list[tuple[float, int]] = []
        self._stop = threading.Event()
        self._th = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.wait(self.interval):
            try:
                leased = int(self.registry.status()["leased"])
                self.samples.append((time.monotonic() - t0, leased))
                self.peak_leased = max(self.peak_leased, leased)
                for i, (p, mp) in enumerate(zip(self.shards, self.mports, strict=True)):
                    active = int(metrics(mp)["active"])
                    if active >= self.peak_sessions[i]:
                        self.peak_sessions[i] = active
                        self.at_peak[i] = proc_stats(p.pid)
            except (OSError, DaasError):
                continue

    def __enter__(self) -> Sampler:
        self.mark = int(self.registry.status()["peak_leased"])
        self._th.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._th.join(30)
        try:
            hw = int(self.registry.status()["peak_leased"])
        except (OSError, DaasError):
            return
        if hw > self.mark:
            self.peak_leased = max(self.peak_leased, hw)


def lease_ends(log: Path) -> dict[str, tuple[str, float, int]]:
    """From the registry's log: lease id -> (why it ended, when (unix time), how many times)."""
    out: dict[str, tuple[str, float, int]] = {}
    for line in log.read_text(errors="replace").splitlines():
        m = LEASE_END.match(line)
        if m:
            when = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp()
            times = out[m.group(2)][2] + 1 if m.group(2) in out else 1
            out[m.group(2)] = (m.group(5), when, times)
    return out


def quant(xs: list[float]) -> str:
    if not xs:
        return "n=0"
    return f"p50 {pct(xs, 50) * 1e3:.2f} ms, p99 {pct(xs, 99) * 1e3:.2f} ms (n={len(xs)})"


@dataclass
class Stack:
    """The running processes, their ports and files."""

    tmp: Path
    devices: Proc
    shards: list[Proc]
    shard_ports: list[int]
    metrics_ports: list[int]
    registry_url: str
    logs: list[Path]
    table: Path

    def device_cmd(self, cmd: str) -> dict[str, Any]:
        assert self.devices.popen.stdin is not None
        self.devices.popen.stdin.write(cmd + "\n")
        self.devices.popen.stdin.flush()
        return dict(json.loads(self.devices.line(60)))

    def plan(self, phase: str, **kw: Any) -> dict[str, Any]:
        return {"phase": phase, "registry": self.registry_url, "table": str(self.table), **kw}

    def stop(self) -> None:
        for p in [*self.shards, self.devices]:
            if p.popen.stdin is not None:
                try:
                    p.popen.stdin.close()
                except OSError:
                    pass
            p.stop()


def start_stack(args: argparse.Namespace, tmp: Path) -> Stack:
    table = tmp / "devices.json"
    max_reply = max(args.reply_bytes, args.screen_bytes)
    devices = spawn_role("devices", [
        "--role", "devices", "--devices", str(args.devices), "--groups", str(args.groups),
        "--route-devices", str(args.route_devices), "--shards", str(args.shards),
        "--table", str(table), "--max-reply", str(max_reply),
    ])
    devices.line(300)
    ports = free_ports(2 * args.shards + 1)
    shard_ports, mports, reg_port = ports[: args.shards], ports[args.shards: -1], ports[-1]
    url = f"http://127.0.0.1:{reg_port}"
    env = {**os.environ, "VENUS_GATEWAY_SECRET": secrets.token_hex(32), "OMP_NUM_THREADS": "1"}
    launcher = "import sys; from venus_core.cli import main; sys.exit(main())"
    shards, logs = [], []
    for i in range(args.shards):
        cmd = [
            sys.executable, "-c", launcher, "gateway", "--devices", str(table),
            "--port", str(shard_ports[i]), "--shard", str(i), "--shards", str(args.shards),
            "--max-upstream", str(args.max_upstream), "--metrics-port", str(mports[i]),
        ]
        if i == 0:
            cmd += ["--registry-port", str(reg_port), "--ttl", str(args.ttl)]
            for p in shard_ports:
                cmd += ["--shard-addr", f"127.0.0.1:{p}"]
        else:
            cmd += ["--registry-url", url]
        log = tmp / f"shard{i}.log"
        logs.append(log)
        with log.open("w") as fh:
            popen = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=fh, text=True, env=env, cwd=ROOT)
        shards.append(Proc(f"shard {i}", popen))
    for p in shards:
        p.line(120)
    return Stack(tmp, devices, shards, shard_ports, mports, url, logs, table)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--role", choices=("bench", "devices", "worker"), default="bench")
    ap.add_argument("--table", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--max-reply", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--devices", type=int, default=10_000, help="fake devices in the table")
    ap.add_argument("--groups", type=int, default=100, help="device groups (hashed to shards)")
    ap.add_argument("--shards", type=int, default=2, help="gateway shard processes")
    ap.add_argument("--max-upstream", type=int, default=2, help="upstream connections per device")
    ap.add_argument("--ttl", type=float, default=15.0, help="lease TTL, s (heartbeats every ttl/3)")
    ap.add_argument("--leases", type=int, default=1000, help="soak: concurrently held leases")
    ap.add_argument("--clients", type=int, default=50, help="soak: clients (DevicePools)")
    ap.add_argument("--workers", type=int, default=2, help="load-generator processes")
    ap.add_argument("--seconds", type=float, default=60.0, help="soak: duration cap, s")
    ap.add_argument("--ramp", type=float, default=10.0, help="soak: slots start over this many s")
    ap.add_argument("--steps", type=int, default=3, help="soak: steps per lease")
    ap.add_argument("--think", type=float, default=3.0, help="soak: mean s between steps")
    ap.add_argument("--reply-bytes", type=int, default=1024, help="soak: reply bytes per step")
    ap.add_argument("--vanish", type=int, default=2, help="client processes SIGKILLed mid-lease")
    ap.add_argument("--vanish-leases", type=int, default=25, help="leases each of them holds")
    ap.add_argument("--route-clients", default="10,100,1000", help="routing: client counts")
    ap.add_argument("--route-devices", type=int, default=100, help="routing: devices it uses")
    ap.add_argument("--route-cycles", type=int, default=1, help="routing: lease cycles per client")
    ap.add_argument("--route-tunnels", type=int, default=3, help="routing: tunnels per lease")
    ap.add_argument("--cap-slots", type=int, default=16, help="capacity: concurrent sessions")
    ap.add_argument("--cap-leases", type=int, default=60, help="capacity: lease cycles per slot")
    ap.add_argument("--cap-sessions", type=int, default=100, help="capacity: sessions per slot")
    ap.add_argument("--cap-steps", type=int, default=400, help="capacity: 64 B steps per slot")
    ap.add_argument("--cap-screens", type=int, default=30, help="capacity: screenshots per slot")
    ap.add_argument("--screen-bytes", type=int, default=1 << 20, help="bytes of a screenshot")
    ap.add_argument("--pool", type=int, default=1000, help="sizing: devices of the pool")
    ap.add_argument("--step-rate", type=float, default=0.5, help="sizing: env steps/s per device")
    ap.add_argument("--rts-per-step", type=int, default=4, help="sizing: small round trips/step")
    ap.add_argument("--episode-steps", type=int, default=30, help="sizing: steps per session")
    ap.add_argument("--shard-util", type=float, default=0.5, help="sizing: CPU share per shard")
    ap.add_argument("--json", type=Path, help="also write the figures here")
    args = ap.parse_args()
    if args.role == "devices":
        serve_devices(args.devices, args.groups, args.route_devices, args.shards, args.table,
                      args.max_reply)
        return
    if args.role == "worker":
        run_worker(json.loads(sys.stdin.readline()))
        return
    bench(args)


def bench(args: argparse.Namespace) -> None:
    t_start = time.monotonic()
    if args.route_devices >= args.devices or args.leases + args.vanish * args.vanish_leases > (
        args.devices - args.route_devices
    ):
        sys.exit("not enough devices for the soak's leases beside the route set")
    fds = raise_fd_limit(65536)
    print(f"{os.cpu_count()} CPUs (loadavg {os.getloadavg()[0]:.1f}); fd soft limit {fds}")
    report: dict[str, Any] = {"args": {k: str(v) for k, v in vars(args).items()}}
    with tempfile.TemporaryDirectory(prefix="venus-scale-") as tmpname:
        stack = start_stack(args, Path(tmpname))
        try:
            run = Run(args, stack)
            run.capacity()
            run.sizing()
            run.soak()
            run.routing()
            run.reconcile()
            report |= run.out
        finally:
            stack.stop()
    report["wall_s"] = time.monotonic() - t_start
    print(f"total wall {report['wall_s']:.0f} s")
    print("command: python benchmarks/scale_devices.py " + " ".join(sys.argv[1:]))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=1, default=str))
    if report["reconcile"]["problems"]:
        sys.exit(1)


class Run:
    """The phases of one benchmark run on a started `Stack`; figures accumulate in `out`."""

    def __init__(self, args: argparse.Namespace, stack: Stack) -> None:
        self.args, self.stack = args, stack
        self.registry = HttpRegistry(stack.registry_url, timeout=60)
        self.out: dict[str, Any] = {}
        self.leases: list[list[str]] = []  # every grant any client got: [lease, device, client, gw]
        self.vanished: set[str] = set()  # the leases of the killed clients
        self.counts: Counter[str] = Counter()
        self.cap: dict[str, dict[str, Any]] = {}
        st = self.registry.status()
        ports = ", ".join(str(p) for p in stack.shard_ports)
        print(f"stack: {st['devices']} devices, {args.shards} gateway shard(s) (ports {ports}), "
              f"registry {stack.registry_url}, ttl {args.ttl:g}s, max upstream "
              f"{args.max_upstream} per device")
        self.base = [proc_stats(p.pid) for p in stack.shards]
        self.out["base_rss_fds"] = self.base

    def take(self, tally: dict[str, Any]) -> None:
        self.leases += tally["leases"]
        self.counts.update(tally["count"])

    def drain(self, limit: float) -> float:
        """Wait (up to `limit` s) until the registry holds no lease; the seconds waited."""
        t0 = time.monotonic()
        while int(self.registry.status()["leased"]) and time.monotonic() - t0 < limit:
            time.sleep(0.25)
        return time.monotonic() - t0

    # 1. capacity -------------------------------------------------------------------------------
    def capacity(self) -> None:
        """CPU seconds of the registry (shard 0) per lease cycle, and of one gateway-only shard
        (the last; shard 0 when it is the only one) per session and per step."""
        args, stack = self.args, self.stack
        target = args.shards - 1
        pids = {0: stack.shards[0].pid, target: stack.shards[target].pid}
        c0 = {k: cpu_seconds(v) for k, v in pids.items()}
        time.sleep(3.0)
        # idle: revocation polls (served by shard 0, made by the others), the registry's reaper
        idle = {k: (cpu_seconds(v) - c0[k]) / 3.0 for k, v in pids.items()}
        clients = [f"cap-{i}" for i in range(args.cap_slots)]
        for key, mode, n, count, shard in (
            ("registry", "registry", 0, args.cap_leases, 0),
            ("session", "sessions", 0, args.cap_sessions, target),
            ("small", "steps", 64, args.cap_steps, target),
            ("screen", "steps", args.screen_bytes, args.cap_screens, target),
        ):
            labels = {"set": "soak"} if mode == "registry" else {"set": "soak", "shard": str(shard)}
            tally = run_plan("capacity", stack.plan(
                "capacity", mode=mode, clients=clients, slots=args.cap_slots, count=count,
                reply_bytes=n, labels=labels, shard_pid=pids[shard]), 300)
            cpu_raw, wall = tally["lat"].pop("window")
            cpu = cpu_raw - idle[shard] * wall
            unit = {"registry": "cycles", "sessions": "tunnels"}.get(mode, "steps")
            units = int(tally["count"].get(unit, 0))
            if cpu_raw < 5 / os.sysconf("SC_CLK_TCK"):
                print(f"  note: the {key} window took {cpu_raw:.2f} CPU-s, under 5 clock ticks: "
                      "its per-unit CPU figure is noise (raise the counts)")
            self.take(tally)
            self.cap[key] = {"cpu_s": cpu, "wall_s": wall, "units": units,
                             "cpu_per_unit": cpu / max(1, units), "lat": tally["lat"]}
        cap = self.cap
        rl, cr = cap["registry"], cap["registry"]["cpu_per_unit"]
        print(f"\n[capacity] lease registry (shard 0 process), {args.cap_slots} clients back to "
              f"back: {cr * 1e3:.2f} ms CPU per lease -> heartbeat -> release cycle (3 HTTP "
              f"requests and one connect probe; less its idle {idle[0] * 1e3:.1f} ms/s), "
              f"{rl['units'] / rl['wall_s']:.0f} cycles/s achieved, {1 / cr:.0f}/s at one core")
        for name in ("acquire", "heartbeat", "release"):
            print(f"  {name:>9}: {quant(rl['lat'].get(name, []))}")
        print(f"[capacity] gateway shard {target}, {args.cap_slots} concurrent sessions; shard CPU "
              f"(utime+stime, less its idle {idle[target] * 1e3:.1f} ms/s):")
        ses = cap["session"]
        print(f"  per admitted session (handshake, upstream connect, one step, close): "
              f"{ses['cpu_per_unit'] * 1e6:.0f} us (n={ses['units']}); open -> close "
              f"{quant(ses['lat'].get('session', []))}")
        for key, label in (("small", "64 B step"), ("screen", f"{args.screen_bytes} B step")):
            lat = cap[key]["lat"]
            ratio = pct(lat["step"], 50) / pct(lat["direct"], 50)
            print(f"  per {label}: {cap[key]['cpu_per_unit'] * 1e6:.0f} us CPU; round trip through "
                  f"the gateway {quant(lat['step'])}; direct (baseline) {quant(lat['direct'])}; "
                  f"gateway / direct p50 {ratio:.2f}x")
        self.out["capacity"] = {k: {kk: vv for kk, vv in v.items() if kk != "lat"}
                                for k, v in cap.items()}
        self.out["capacity_lat"] = {k: {n: [pct(x, 50), pct(x, 99)] for n, x in v["lat"].items()}
                                    for k, v in cap.items()}

    def sizing(self) -> None:
        """Shards (CPU) and registry load for a `--pool`-device pool, the arithmetic printed."""
        a = self.args
        cs, cm, cb, cr = (self.cap[k]["cpu_per_unit"]
                          for k in ("session", "small", "screen", "registry"))
        per_dev = a.step_rate * (a.rts_per_step * cm + cb) + a.step_rate / a.episode_steps * cs
        if per_dev <= 0:  # every capacity window under the clock's resolution (tiny counts on an idle machine)
            reason = ("the session / step / screenshot windows measured 0 CPU-s (under 5 clock ticks each): "
                      "raise the --cap-* counts to size the pool")
            print(f"\n[sizing] not computed: {reason}")
            self.out["sizing"] = {"shards_needed": None, "not_computed": reason}
            return
        demand = a.pool * per_dev
        shards = max(1, math.ceil(demand / a.shard_util))
        per_shard = int(a.shard_util / per_dev)
        print(f"\n[sizing] a {a.pool}-device pool, {a.step_rate:g} env steps/s per device, each "
              f"{a.rts_per_step} small round trips + one {a.screen_bytes} B screenshot, one session"
              f" per {a.episode_steps}-step episode:")
        print(f"  per device: {a.step_rate:g} x ({a.rts_per_step} x {cm * 1e6:.0f} + "
              f"{cb * 1e6:.0f}) us + {a.step_rate:g}/{a.episode_steps} x {cs * 1e6:.0f} us = "
              f"{per_dev * 1e3:.3f} ms CPU per s")
        print(f"  pool: {a.pool} x {per_dev * 1e3:.3f} ms/s = {demand:.2f} core-s/s; at "
              f"{a.shard_util:.0%} of one core per shard (one event loop each): "
              f"ceil({demand:.2f} / {a.shard_util:g}) = {shards} shard(s)")
        print(f"  one shard at {a.shard_util:.0%} of a core carries {a.shard_util:g} / "
              f"{per_dev * 1e3:.3f} ms/s = {per_shard} devices (memory and fds: after the soak)")
        leases = a.pool * a.step_rate / a.episode_steps
        beats = a.pool / (PROD_TTL / 3)
        req = 2 * leases + beats
        print(f"  registry: {a.pool} x {a.step_rate:g}/{a.episode_steps} = {leases:.1f} leases/s "
              f"(lease + release) + {a.pool} / {PROD_TTL / 3:g} s = {beats:.0f} heartbeats/s (ttl "
              f"{PROD_TTL:g}) = {req:.0f} requests/s x {cr / 3 * 1e3:.2f} ms = "
              f"{req * cr / 3:.2f} core-s/s")
        self.out["sizing"] = {"per_device_cpu_s_per_s": per_dev, "demand_cores": demand,
                              "shards_needed": shards, "devices_per_shard": per_shard,
                              "registry_requests_per_s": req, "registry_cores": req * cr / 3}

    # 2. soak -----------------------------------------------------------------------------------
    def _vanish(self) -> list[Proc]:
        """Start the clients that will be killed; return once each holds its leases."""
        procs = []
        for v in range(self.args.vanish):
            p = spawn_role(f"vanish {v}", ["--role", "worker"])
            assert p.popen.stdin is not None
            p.popen.stdin.write(json.dumps(self.stack.plan(
                "vanish", clients=[f"vanish-{v}"], count=self.args.vanish_leases,
                labels={"set": "soak"})) + "\n")
            p.popen.stdin.flush()
            procs.append(p)
        for p in procs:
            tally = json.loads(p.line(120))
            self.take(tally)
            self.vanished |= {lz[0] for lz in tally["leases"]}
        return procs

    def soak(self) -> None:
        a, stack = self.args, self.stack
        stack.device_cmd("reset")
        per_client = max(1, a.leases // a.clients)
        names = [f"soak-{i:04d}" for i in range(a.clients)]
        start_at = time.time() + 3.0
        deadline = start_at + a.seconds
        plans = []
        for w in range(a.workers):
            mine = names[w:: a.workers]
            plans.append((f"soak worker {w}", stack.plan(
                "soak", clients=mine, slots=len(mine) * per_client, slots_per_client=per_client,
                start_at=start_at, ramp=a.ramp * len(mine) / len(names), deadline=deadline,
                steps=a.steps, think=a.think, reply_bytes=a.reply_bytes,
                labels={"set": "soak"}, join_s=a.seconds + 120)))
        cpu0 = [cpu_seconds(p.pid) for p in stack.shards]
        t0 = time.monotonic()
        tallies: list[dict[str, Any]] = []
        with Sampler(self.registry, stack.shards, stack.metrics_ports) as sampler:
            th = threading.Thread(target=lambda: tallies.extend(run_plans(plans, a.seconds + 180)))
            th.start()
            time.sleep(max(0.0, start_at - time.time()) + a.ramp)
            doomed = self._vanish()
            time.sleep(max(0.0, (deadline - time.time()) / 2))
            for p in doomed:
                os.kill(p.pid, signal.SIGKILL)
                p.popen.wait(10)
            killed_at = time.time()
            th.join()
        wall = time.monotonic() - t0
        cpu = [cpu_seconds(p.pid) - c for p, c in zip(stack.shards, cpu0, strict=True)]
        soak = merge(tallies)
        self.take(soak)
        self.drain(a.ttl + 30)  # the killed clients' leases come back through the TTL
        sc, lat = soak["count"], soak["lat"]
        rate = sc["cycles"] / a.seconds
        print(f"\n[soak] {a.leases} slots over {a.clients} clients in {a.workers} processes, "
              f"{a.steps} steps {a.think:g}s apart per lease, {a.reply_bytes} B replies, "
              f"{a.seconds:g}s ({a.ramp:g}s ramp); +{a.vanish} clients holding "
              f"{a.vanish_leases} leases each, SIGKILLed half-way")
        print(f"  peak concurrent leases (the registry's high-water mark): {sampler.peak_leased}; "
              f"lease cycles completed {sc['cycles']} ({rate:.1f} leases/s over the run, offered "
              f"{a.leases / (a.steps * a.think):.1f}/s); steps {sc['steps']}")
        for name in ("acquire", "connect", "step", "direct", "heartbeat", "release"):
            label = {"step": "step via gateway", "direct": "step direct (baseline)"}.get(name, name)
            print(f"  {label:>24}: {quant(lat.get(name, []))}")
        (g50, g99), (d50, d99) = ([pct(lat[k], q) for q in (50, 99)] for k in ("step", "direct"))
        print(f"  step gateway / direct: p50 {g50 / d50:.2f}x (+{(g50 - d50) * 1e3:.2f} ms), "
              f"p99 {g99 / d99:.2f}x")
        errors = {k: v for k, v in sc.items() if k.startswith("error") or k in ("lost", "wrong")}
        ends = lease_ends(stack.logs[0])
        back = [ends[lz][1] - killed_at for lz in self.vanished if lz in ends]
        span = [min(back), max(back)] if back else [math.nan, math.nan]
        print(f"  client errors: {errors or 'none'}; the killed clients' {len(self.vanished)} "
              f"leases ended (registry log) {span[0]:.1f}-{span[1]:.1f}s after the kill "
              f"(ttl {a.ttl:g}s, reaper every 0.5s)")
        per_kib = []
        for i, p in enumerate(stack.shards):
            (rss, nfd), sess = sampler.at_peak[i], sampler.peak_sessions[i]
            per_kib.append((rss - self.base[i][0]) * 1024 / sess if sess else math.nan)
            role = "gateway + lease registry" if i == 0 else "gateway"
            print(f"  shard {i} ({role}): peak {sess} sessions, RSS {self.base[i][0]:.0f} -> "
                  f"{rss:.0f} MiB ({per_kib[i]:.1f} KiB per session), fds {self.base[i][1]} -> "
                  f"{nfd}; CPU {cpu[i]:.1f} s in {wall:.0f} s ({cpu[i] / wall:.0%} of a core)")
        kib = per_kib[-1]
        print(f"  [sizing] a {a.pool}-device pool, one session per device: {a.pool} x {kib:.1f} "
              f"KiB = {a.pool * kib / 1024:.1f} MiB of gateway RSS and {2 * a.pool} sockets "
              f"(client + upstream) over its shards")
        self.out["soak"] = {
            "peak_leased": sampler.peak_leased, "cycles": sc["cycles"], "leases_per_s": rate,
            "lat": {k: [pct(v, 50), pct(v, 99), len(v)] for k, v in lat.items()},
            "errors": errors, "reclaimed_s": span, "peak_sessions": sampler.peak_sessions,
            "rss_fds_at_peak": sampler.at_peak, "kib_per_session": per_kib, "cpu_s": cpu,
            "wall_s": wall, "vanished": len(self.vanished),
        }

    # 3. routing --------------------------------------------------------------------------------
    def _route_round(self, n_clients: int) -> dict[str, Any]:
        a, stack = self.args, self.stack
        stack.device_cmd("reset")
        m0 = [metrics(mp) for mp in stack.metrics_ports]
        names = [f"route{n_clients}-{i:04d}" for i in range(n_clients)]
        conc = max(1, a.route_devices // a.workers)  # the route set is never exhausted
        plans = [(f"route worker {w}", stack.plan(
            "route", clients=mine, slots=len(mine), cycles=a.route_cycles,
            tunnels=a.route_tunnels, labels={"set": "route"}, concurrency=conc, join_s=300))
            for w in range(a.workers) if (mine := names[w:: a.workers])]
        r = merge(run_plans(plans, 400))
        self.take(r)
        dev = stack.device_cmd("stats")
        m1 = [metrics(mp) for mp in stack.metrics_ports]
        users: dict[str, set[str]] = {}
        granted_by: dict[str, set[str]] = {}
        for _, device, client, gw in r["leases"]:
            users.setdefault(device, set()).add(client)
            granted_by.setdefault(device, set()).add(gw)
        rc = r["count"]
        return {
            "clients": n_clients, "cycles": rc["cycles"], "tunnels": rc["tunnels"],
            "max_conns_per_device": max((v[1] for v in dev["touched"].values()), default=0),
            "busy": rc["busy"],
            "busy_gateway": sum(b.get(BUSY, 0) - x.get(BUSY, 0)
                                for x, b in zip(m0, m1, strict=True)),
            "shards_per_device": max((len(v) for v in granted_by.values()), default=0),
            "baseline_clients_per_device": max((len(v) for v in users.values()), default=0),
            "wrong": rc["wrong"], "errors": {k: v for k, v in rc.items() if k.startswith("error")},
        }

    def routing(self) -> None:
        a = self.args
        print(f"\n[routing] {a.route_devices} devices (route set), {a.route_cycles} lease "
              f"cycle(s) per client, {a.route_tunnels} tunnels opened per lease, max upstream "
              f"{a.max_upstream}; conns/device measured at the device, the baseline from the "
              f"grants: distinct clients that used the busiest device (direct, kept transports)")
        print(f"  {'clients':>7} {'cycles':>6} {'max conns/device':>16} {'cap refusals':>16} "
              f"{'shards/device':>13} {'baseline: clients/device':>24}")
        rows = []
        for n in (int(x) for x in a.route_clients.split(",") if x):
            r = self._route_round(n)
            rows.append(r)
            print(f"  {n:>7} {r['cycles']:>6} {r['max_conns_per_device']:>16} "
                  f"{int(r['busy']):>6} (gateway {int(r['busy_gateway'])}) "
                  f"{r['shards_per_device']:>13} {r['baseline_clients_per_device']:>24}")
        self.out["routing"] = rows

    # 4. reconciliation -------------------------------------------------------------------------
    def reconcile(self) -> None:
        a, stack, counts = self.args, self.stack, self.counts
        time.sleep(1.5)  # one revocation poll, the last sessions' close
        self.drain(a.ttl + 10)  # a release that failed leaves its lease to the TTL
        ends = lease_ends(stack.logs[0])
        dup = sum(v[2] > 1 for v in ends.values())
        acquired = {lz[0] for lz in self.leases}
        reasons = Counter(ends[lz][0] if lz in ends else "never ended" for lz in acquired)
        by_ttl = all(ends[lz][0].startswith("TTL expired") for lz in self.vanished if lz in ends)
        final = self.registry.status()
        dev = stack.device_cmd("stats")
        ms = [metrics(mp) for mp in stack.metrics_ports]
        open_sessions = int(sum(m["active"] for m in ms))
        admitted = int(sum(m["sessions"] for m in ms))
        refusals: Counter[str] = Counter()
        for m in ms:
            refusals.update({k: int(v) for k, v in m.items() if k.startswith("error")})
        tunnels = int(counts["tunnels"])
        errors = {k: int(v) for k, v in counts.items() if k.startswith("error") or k == "lost"}
        print("\n[reconciliation]")
        print(f"  leases acquired by clients {len(acquired)} (granted {len(self.leases)}); ended "
              f"in the registry's log: {dict(reasons)}; ended twice: {dup}; the killed clients' "
              f"leases ended by the TTL: {by_ttl}")
        print(f"  registry leased now {final['leased']}; gateway sessions open {open_sessions}; "
              f"device connections open {dev['active']}; malformed device requests {dev['bad']}; "
              f"cross-wired replies {int(counts['wrong'])}")
        print(f"  gateway refusals by code {dict(refusals) or 'none'}; clients saw GatewayBusy "
              f"{int(counts['busy'])} times; sessions admitted {admitted}, tunnels the clients "
              f"opened {tunnels}; client errors {errors or 'none'}")
        rows = self.out["routing"]
        want = Counter({"released": len(acquired - self.vanished),
                        "TTL expired (no heartbeat)": len(self.vanished)})
        checks = (
            ("a lease did not end as released (TTL expired: the killed clients')",
             +reasons != +want),
            ("a lease ended twice", dup > 0),
            ("the registry still holds leases", final["leased"] != 0),
            ("gateway sessions left open", open_sessions != 0),
            ("device connections left open", dev["active"] != 0),
            ("malformed or cross-wired traffic", dev["bad"] + counts["wrong"] != 0),
            ("gateway refusals and the clients' count differ",
             counts["busy"] != refusals.get(BUSY, 0)),
            ("sessions admitted and tunnels opened differ", admitted != tunnels),
            ("client errors", bool(errors)),
            ("client threads still running at their time limit", counts["threads_alive"] > 0),
            ("routing: a device held more than --max-upstream connections",
             any(r["max_conns_per_device"] > a.max_upstream for r in rows)),
            ("routing: a device granted by more than one shard",
             any(r["shards_per_device"] != 1 for r in rows if r["cycles"])),
        )
        problems = [what for what, bad in checks if bad]
        self.out["reconcile"] = {
            "acquired": len(acquired), "granted": len(self.leases), "reasons": dict(reasons),
            "ended_twice": dup, "vanished_by_ttl": by_ttl, "leased_now": final["leased"],
            "sessions_open": open_sessions, "device_conns_open": dev["active"],
            "bad": dev["bad"], "wrong": int(counts["wrong"]), "busy_clients": int(counts["busy"]),
            "busy_gateway": int(refusals.get(BUSY, 0)), "sessions_admitted": admitted,
            "tunnels_clients": tunnels, "client_errors": errors, "problems": problems,
        }
        print(f"  reconciled: {'yes' if not problems else 'NO: ' + '; '.join(problems)}")


if __name__ == "__main__":
    main()
