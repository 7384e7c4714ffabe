"""The device gateway under sustained streaming load (issue 22 §3, first item), on loopback only.

What runs: `venus gateway` as its own process, with the lease registry served over HTTP beside it
(`--registry-port`, as deployed); simulated phones served over the device side of the real ADB
protocol (`SimAdbServer`), each with its own serial, banner and screen size; and one client thread
per session in this process, each leasing a phone through the SDK (`DevicePool` over HTTP) and
streaming screenshots over ADB (`exec:screencap -p`, `shell:getprop ro.serialno`) through a tunnel:
`Lease.connect()` or, for about half the leases, the SDK's local port forwarder (`Lease.forward()`).
Churn: a tunnel ends cleanly or vanishes mid-screenshot (a TCP reset after the header of the first
chunk); a client may also connect and reset at once (to the forwarder, or to the gateway right
after its handshake line); a tenth of the leases are abandoned (no release, no more heartbeats, as
a killed worker) and come back through the registry's TTL.

Measured: the gateway process's RSS and open file descriptors (psutil; the process holds the
registry too) at start, every 0.5 s during the load and after it. Asserted: after warm-up (the
first quarter of the load) RSS grows by at most RSS_TOLERANCE; open fds stay below their start
count plus four per session during the load and return to the start count within FD_TOLERANCE
after it; every screenshot, serial and banner came from the leased phone (no cross-wired session);
every failure is a typed device-service error; the registry and gateway end with no lease and no
session.

Size: VENUS_LOAD_SECONDS (default 20) of load with VENUS_LOAD_SESSIONS (default 32) sessions; a soak
run, e.g. `VENUS_LOAD_SECONDS=120 VENUS_LOAD_SESSIONS=64`. `VENUS_LOAD_REPORT=FILE` appends the
figures as one JSON line.

Found and fixed: a client that connected to the SDK's forwarder and vanished before its tunnel was
open left the tunnel opened anyway and never closed (a gateway session, and one of the device's
upstream slots, held until the lease ended; 8 such made the device refuse every tunnel of the
lease): `daas/forward.py` now ends it (the second test here).
"""

from __future__ import annotations

import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path

import psutil
import pytest
from prometheus_client.parser import text_string_to_metric_families
from proc_lines import wait_for_line

TESTS = Path(__file__).resolve().parents[1]
for _folder in ("daas", "faults"):  # the device-service stack builders and the fault tests' waits
    if str(TESTS / _folder) not in sys.path:
        sys.path.insert(0, str(TESTS / _folder))

from daas_helpers import echo_server, make_stack, stacks  # noqa: E402, F401 - fixtures
from faults_helpers import child_env, wait_for  # noqa: E402

from venus_core.daas import DaasError, DevicePool, DeviceSpec, HttpRegistry, Lease, Tunnel  # noqa: E402
from venus_core.daas.forward import handshake_line, split_addr  # noqa: E402
from venus_core.envs import adb_wire as w  # noqa: E402

LOAD_SECONDS = float(os.environ.get("VENUS_LOAD_SECONDS", "20"))
LOAD_SESSIONS = int(os.environ.get("VENUS_LOAD_SESSIONS", "32"))
SPARE_PHONES = max(4, LOAD_SESSIONS // 4)  # for the leases abandoned until their TTL ends them
TTL = 3.0
IO_TIMEOUT = 15.0
WARMUP = 0.25  # fraction of the load before the RSS reference is taken
SAMPLE_S = 0.5
RSS_TOLERANCE = 16 << 20
FD_TOLERANCE = 2
ABANDON = 0.1  # share of leases abandoned (no release)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def reset(sock: socket.socket) -> None:
    """Close with a TCP reset, as a killed client's kernel would."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


@dataclass(frozen=True)
class Phone:
    """What one simulated phone says about itself: every reply through its tunnel must match."""

    device: str
    serial: str
    size: tuple[int, int]
    port: int


@contextmanager
def sim_phones(n: int) -> Iterator[list[Phone]]:
    """`n` simulated phones as ADB devices on loopback, phone k with serial `sim-k`, its id in the
    CNXN banner and a screen 540 + 4k pixels wide (960 high)."""
    from venus_core.data.synth.tasks import get_phone
    from venus_core.envs import SimAdbServer, SimDevice

    app = get_phone()
    servers: list[SimAdbServer] = []
    phones: list[Phone] = []
    try:
        for k in range(n):
            dev = SimDevice(app, app.initial(random.Random(k)), size=(540 + 4 * k, 960))
            dev.props["ro.serialno"] = f"sim-{k}"
            banner = {"ro.product.name": "venus_sim", "ro.product.model": "Venus Sim",
                      "ro.product.device": f"sim-{k}"}
            srv = SimAdbServer(dev, banner_props=banner).start()
            servers.append(srv)
            phones.append(Phone(f"sim-{k}", f"sim-{k}", dev.size, srv.port))
        yield phones
    finally:
        for srv in servers:
            srv.stop()


@dataclass
class GatewayProcess:
    proc: subprocess.Popen[str]
    registry_url: str
    metrics_port: int

    def metrics(self) -> dict[str, float]:
        """The gateway's Prometheus samples: name (with the error code, if any) -> value."""
        page = urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5).read()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(page.decode()):
            for s in family.samples:
                out[s.name + (f"[{s.labels['code']}]" if "code" in s.labels else "")] = s.value
        return out


@contextmanager
def gateway_process(tmp: Path, phones: list[Phone]) -> Iterator[GatewayProcess]:
    """`venus gateway` over `phones` with the registry beside it (lease TTL `TTL`), in a child
    process; its log goes to a file (a pipe nobody reads would block it under load)."""
    table = tmp / "devices.yaml"
    table.write_text("".join(f"- {{id: {p.device}, kind: android, group: lab, endpoint: '127.0.0.1:{p.port}'}}\n"
                             for p in phones))
    (tmp / "secret").write_text("load-secret-0123456789abcdef\n")
    argv = [sys.executable, "-c", "from venus_core.cli import main; main()", "gateway", "--devices", str(table),
            "--secret-file", str(tmp / "secret"), "--port", "0", "--metrics-port", "0", "--registry-port", "0",
            "--ttl", str(TTL)]
    with open(tmp / "gateway.log", "w") as log:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, text=True,
                                env=child_env(PYTHONUNBUFFERED="1"))
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, lambda s: s.startswith("gateway shard"), timeout=60, what="venus gateway")
        yield GatewayProcess(proc, line.split(" registry ")[1].strip(), int(line.split(" metrics :")[1].split()[0]))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(15)
            proc.communicate()


@dataclass(frozen=True)
class Sample:
    t: float
    rss: int
    fds: int


class Sampler:
    """RSS and open fds of one process, now (`sample`) and every `every` s in a thread."""

    def __init__(self, pid: int, every: float = SAMPLE_S) -> None:
        self.proc = psutil.Process(pid)
        self.every = every
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="load-sampler", daemon=True)

    def sample(self) -> Sample:
        return Sample(time.monotonic(), self.proc.memory_info().rss, self.proc.num_fds())

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.samples.append(self.sample())

    def __enter__(self) -> Sampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(10)


class AdbHost:
    """The host half of ADB (AOSP protocol.txt) over a tunnel: enough to run one-shot services."""

    def __init__(self, tunnel: Tunnel) -> None:
        self.tunnel = tunnel
        self.next_id = 1

    def send(self, cmd: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        self.tunnel.sendall(w.Message(cmd, arg0, arg1, data).pack())

    def recv(self) -> w.Message:
        hdr = w.parse_header(self.tunnel.recv_exact(w.HEADER_SIZE), w.DEVICE_MAX_PAYLOAD)
        return w.Message(hdr.command, hdr.arg0, hdr.arg1, self.tunnel.recv_exact(hdr.length) if hdr.length else b"")

    def connect(self) -> bytes:
        """The device's CNXN banner."""
        self.send(w.A_CNXN, w.VERSION_SKIP_CHECKSUM, w.DEVICE_MAX_PAYLOAD, b"host::features=shell_v2\0")
        reply = self.recv()
        assert reply.name == "CNXN", reply
        return reply.data

    def open(self, service: str) -> tuple[int, int]:
        """(our stream id, the device's) of a newly opened service."""
        local, self.next_id = self.next_id, self.next_id + 1
        self.send(w.A_OPEN, local, 0, service.encode() + b"\0")
        reply = self.recv()
        assert reply.name == "OKAY" and reply.arg1 == local, reply
        return local, reply.arg0

    def run(self, service: str) -> bytes:
        """A service's whole output (every WRTE acknowledged)."""
        local, remote = self.open(service)
        out = bytearray()
        while (m := self.recv()).name != "CLSE":
            assert m.name == "WRTE" and m.arg1 == local, m
            out += m.data
            self.send(w.A_OKAY, local, remote)
        return bytes(out)


def png_size(png: bytes) -> tuple[int, int]:
    assert png[:8] == PNG_MAGIC and png[12:16] == b"IHDR", png[:32]
    return struct.unpack(">II", png[16:24])


@dataclass
class Tally:
    """What one client saw."""

    leases: int = 0
    tunnels: int = 0
    screenshots: int = 0
    nbytes: int = 0
    endings: Counter[str] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)  # typed DaasError class names
    crossed: list[str] = field(default_factory=list)  # replies from another phone than the leased one
    crashes: list[str] = field(default_factory=list)  # anything untyped

    def merge(self, other: Tally) -> None:
        self.leases += other.leases
        self.tunnels += other.tunnels
        self.screenshots += other.screenshots
        self.nbytes += other.nbytes
        self.endings.update(other.endings)
        self.errors.update(other.errors)
        self.crossed += other.crossed
        self.crashes += other.crashes


def stream(lease: Lease, port: int, phone: Phone, rng: random.Random, tally: Tally) -> None:
    """One tunnel to the leased phone (through the forwarder on `port`, else `connect()`): a few
    rounds of serial + screenshot, then a clean close or a reset in the middle of a screenshot."""
    if rng.random() < 0.15:  # connect and vanish at once: at the forwarder, or right after the handshake line
        sock = socket.create_connection(("127.0.0.1", port) if port else split_addr(lease.grant.gateway),
                                        timeout=IO_TIMEOUT)
        if not port:
            sock.sendall(handshake_line(lease.grant))
        reset(sock)
        tally.endings["vanished at connect"] += 1
        return
    if port:
        sock = socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT)
        tunnel = Tunnel(sock, "forwarded", lease.device, IO_TIMEOUT)
    else:
        tunnel = lease.connect(IO_TIMEOUT)
    tally.tunnels += 1
    with tunnel:
        host = AdbHost(tunnel)
        banner = host.connect()
        if f"ro.product.device={phone.device};".encode() not in banner:
            tally.crossed.append(f"{phone.device}: banner {banner[:120]!r}")
        for _ in range(rng.randint(2, 8)):
            serial = host.run("shell:getprop ro.serialno").decode().strip()
            png = host.run("exec:screencap -p")
            if serial != phone.serial or png_size(png) != phone.size:
                tally.crossed.append(f"{phone.device}: serial {serial!r}, screen {png_size(png)}")
            tally.screenshots += 1
            tally.nbytes += len(png)
        if rng.random() < 0.5:  # read the header of the screenshot's first chunk, then vanish
            local, _ = host.open("exec:screencap -p")
            hdr = w.parse_header(tunnel.recv_exact(w.HEADER_SIZE), w.DEVICE_MAX_PAYLOAD)
            assert hdr.command == w.A_WRTE and hdr.arg1 == local and hdr.length > 0, hdr
            reset(tunnel.sock)
            tally.endings["vanished mid-screenshot"] += 1
        else:
            tally.endings["closed"] += 1


def client(i: int, url: str, phones: dict[str, Phone], deadline: float) -> Tally:
    """Lease, stream, release (or abandon) until `deadline`."""
    rng = random.Random(i)
    tally = Tally()
    pool = DevicePool(url, f"load-{i}", wait=IO_TIMEOUT, io_timeout=IO_TIMEOUT)
    while time.monotonic() < deadline:
        try:
            with pool.lease(kind="android") as (lease,):
                tally.leases += 1
                via_forwarder = rng.random() < 0.5
                with lease.forward() if via_forwarder else nullcontext(0) as port:
                    for _ in range(rng.randint(1, 4)):
                        if time.monotonic() >= deadline:
                            break
                        try:
                            stream(lease, port, phones[lease.device], rng, tally)
                        except DaasError as exc:
                            tally.errors[type(exc).__name__] += 1
                if rng.random() < ABANDON:
                    lease.lost = "abandoned by the load test"  # no release, no heartbeat: the TTL ends it
                    tally.endings["lease abandoned"] += 1
        except DaasError as exc:
            tally.errors[type(exc).__name__] += 1
        except Exception as exc:  # noqa: BLE001 - reported: the test fails on any
            tally.crashes.append(f"client {i}: {type(exc).__name__}: {exc}")
    return tally


def mib(n: float) -> float:
    return round(n / (1 << 20), 1)


@pytest.mark.slow
@pytest.mark.timeout(LOAD_SECONDS + 300)
def test_the_gateway_streams_under_load_with_flat_memory_and_fds_and_no_crossed_session(tmp_path: Path) -> None:
    with sim_phones(LOAD_SESSIONS + SPARE_PHONES) as phones, gateway_process(tmp_path, phones) as gw:
        by_id = {p.device: p for p in phones}
        registry = HttpRegistry(gw.registry_url)
        sampler = Sampler(gw.proc.pid)
        start = sampler.sample()
        with sampler:
            t0 = time.monotonic()
            deadline = t0 + LOAD_SECONDS
            with ThreadPoolExecutor(LOAD_SESSIONS, thread_name_prefix="load-client") as ex:
                futures = [ex.submit(client, i, gw.registry_url, by_id, deadline) for i in range(LOAD_SESSIONS)]
                done, pending = wait(futures, timeout=LOAD_SECONDS + 120)
                assert not pending, f"{len(pending)} clients still running 120 s after the load ended"
            load_s = time.monotonic() - t0
            # the abandoned leases end by TTL, and with them their sessions
            wait_for(lambda: registry.status()["leased"] == 0, TTL * 3 + 10, "every lease returned")
            wait_for(lambda: gw.metrics()["venus_gateway_sessions_active"] == 0, 10, "every gateway session closed")
        after = sampler.sample()
        metrics = gw.metrics()
    total = Tally()
    for f in futures:
        total.merge(f.result())
    warm = [s for s in sampler.samples if s.t >= t0 + WARMUP * LOAD_SECONDS]
    during = [s for s in warm if s.t <= t0 + load_s]
    assert len(during) >= 4, "too few samples during the load"
    ref = during[0]
    figures = {
        "seconds": round(load_s, 1), "sessions": LOAD_SESSIONS, "phones": len(phones),
        "leases": total.leases, "tunnels": total.tunnels, "screenshots": total.screenshots,
        "mib_streamed": mib(total.nbytes), "endings": dict(total.endings), "typed_errors": dict(total.errors),
        "gateway_sessions": metrics["venus_gateway_sessions_total"],
        "gateway_errors": {k: v for k, v in metrics.items() if k.startswith("venus_gateway_errors_total[")},
        "rss_mib": {"start": mib(start.rss), "after_warmup": mib(ref.rss), "max_during": mib(max(s.rss for s in warm)),
                    "after": mib(after.rss)},
        "fds": {"start": start.fds, "after_warmup": ref.fds, "max_during": max(s.fds for s in during),
                "after": after.fds},
    }
    print(f"\ngateway load: {json.dumps(figures)}")
    if os.environ.get("VENUS_LOAD_REPORT"):
        with open(os.environ["VENUS_LOAD_REPORT"], "a") as f:
            f.write(json.dumps({"test": "gateway", **figures}) + "\n")
    assert not total.crashes, total.crashes[:5]
    assert not total.crossed, total.crossed[:5]
    assert total.screenshots >= 5 * LOAD_SESSIONS, figures
    assert set(total.endings) == {"closed", "vanished mid-screenshot", "vanished at connect", "lease abandoned"}, figures
    assert max(s.rss for s in warm) - ref.rss <= RSS_TOLERANCE, figures
    assert max(s.fds for s in during) <= start.fds + 4 * LOAD_SESSIONS, figures
    assert after.fds <= start.fds + FD_TOLERANCE, figures


def test_a_client_that_connects_to_the_forwarder_and_vanishes_leaves_no_session_at_the_gateway(
        echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    """A local connection reset before the forwarder's tunnel is open: the tunnel used to be opened
    anyway and left open (a gateway session and an upstream slot held until the lease ended)."""
    stack = make_stack([DeviceSpec("echo", "tcp", "g", "127.0.0.1", echo_server.port)])
    stacks.append(stack)
    gw = stack.gateway.gateway
    with stack.pool().lease(kind="tcp") as (lease,), lease.forward() as port:
        for _ in range(40):
            reset(socket.create_connection(("127.0.0.1", port), timeout=5))
        # the device stays reachable (a leaked session holds one of its 8 upstream slots for good) ...
        wait_for(lambda: echoes(port), 10, "a tunnel through the forwarder once the vanished clients' ended")
        # ... and the gateway holds no session of the vanished clients
        wait_for(lambda: not gw.sessions and gw.table.pools["echo"].active == 0, 10,
                 "the gateway sessions of the vanished clients closed")
    wait_for(lambda: not echo_server.conns, 10, "the device's connections closed")


def echoes(port: int) -> bool:
    """One round trip through the forwarder on `port` to the echo device."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(b"still here")
            return Tunnel(s, "forwarded", "echo", 5).recv_exact(10) == b"still here"
    except DaasError:
        return False
