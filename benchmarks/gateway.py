"""Benchmark: the device gateway vs a direct connection, on loopback.

Three processes: an echo server (the "devices": N device ids that all point at it), one gateway
shard (a single event-loop thread, pinned to one CPU when the machine lets us), and this load
generator (uvloop when installed). Every session is one lease on its own device, as in RL
rollouts. Figures:

- bulk MB/s: one session streams `--bulk-mb` MB while reading the echo back;
- request/response latency (64-byte ping-pong) at 1, 64 and 512 concurrent sessions: p50 / p99,
  direct vs through the gateway; the added latency per round trip is the difference of the p50s;
- idle sessions: `--idle` sessions are opened through the gateway, held, then each must still echo
  a byte; reports the gateway's RSS and open fds;
- env step: a simulated-phone step (`input tap` + `screencap -p` over adbutils and the real adb
  server), direct vs through the SDK's local forwarder and the gateway, alternating step by step;
  the added latency is the median of the paired differences. The target is <= 2 % added latency
  on an env step.

Counts and time are bounded (each phase stops at its count or its time limit, whichever first).

    python benchmarks/gateway.py [--bulk-mb 256] [--rounds 2000] [--idle 1000] [--env-steps 30]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from venus_core.daas import Claims, DeviceSpec, DeviceTable, Gateway, GatewayThread, TokenSigner
from venus_core.daas.service import loop_name, new_event_loop

SECRET = b"benchmark-secret-0123456789"
SIGNER = TokenSigner(SECRET)


def raise_fd_limit(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = want if hard == resource.RLIM_INFINITY else min(want, hard)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


# -- child processes ---------------------------------------------------------------------------
class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport

    def data_received(self, data: bytes) -> None:
        self.t.write(data)  # type: ignore[attr-defined]


def serve_echo() -> None:
    loop = new_event_loop()
    server = loop.run_until_complete(loop.create_server(_Echo, "127.0.0.1", 0, backlog=4096))
    print(server.sockets[0].getsockname()[1], flush=True)
    loop.run_forever()


def serve_gateway(upstream: int, n_devices: int) -> None:
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    devs = [DeviceSpec(f"d{i}", "tcp", "bench", "127.0.0.1", upstream) for i in range(n_devices)]
    gw = GatewayThread(Gateway(DeviceTable(devs, max_upstream=1), SIGNER)).start()
    assert gw.loop is not None
    print(gw.port, loop_name(gw.loop), flush=True)
    sys.stdin.read()  # until the parent closes our stdin
    gw.stop()


def spawn(*args: str) -> tuple[subprocess.Popen[str], list[str]]:
    proc = subprocess.Popen(
        [sys.executable, __file__, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None
    return proc, proc.stdout.readline().split()


# -- load generator ----------------------------------------------------------------------------
def hello(device: str) -> bytes:
    claims = Claims(
        lease=f"bench-{device}",
        device=device,
        client="bench",
        group="bench",
        exp=time.time() + 3600,
    )
    return f"VENUS1 bench {device} {SIGNER.sign(claims)}\n".encode()


async def open_session(
    port: int, device: str | None
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port, limit=1 << 20)
    if device is not None:
        writer.write(hello(device))
        line = await reader.readline()
        if not line.startswith(b"OK "):
            raise RuntimeError(f"gateway refused {device}: {line!r}")
    return reader, writer


async def bulk(port: int, device: str | None, total: int, limit_s: float) -> tuple[float, int]:
    """(MB/s, bytes echoed) of one session streaming up to `total` bytes."""
    reader, writer = await open_session(port, device)
    chunk = os.urandom(1 << 16)
    t0 = time.perf_counter()
    sent = 0

    async def produce() -> None:
        nonlocal sent
        while sent < total and time.perf_counter() - t0 < limit_s:
            writer.write(chunk)
            sent += len(chunk)
            await writer.drain()

    async def consume() -> int:
        got = 0
        while True:
            if prod.done() and got >= sent:
                return got
            data = await reader.read(1 << 20)
            if not data:
                return got
            got += len(data)

    prod = asyncio.ensure_future(produce())
    got = await consume()
    dt = time.perf_counter() - t0
    writer.close()
    return got / dt / 1e6, got


async def pingpong(
    port: int, first: int | None, sessions: int, rounds: int, limit_s: float
) -> list[float]:
    """Round-trip times; through the gateway (devices d<first>.. ) unless `first` is None."""
    conns = await asyncio.gather(
        *(open_session(port, None if first is None else f"d{first + i}") for i in range(sessions))
    )
    lat: list[float] = []
    msg = b"x" * 64
    deadline = time.perf_counter() + limit_s
    per = max(1, rounds // sessions)

    async def run(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        for _ in range(per):
            if time.perf_counter() > deadline:
                return
            t = time.perf_counter()
            w.write(msg)
            await r.readexactly(64)
            lat.append(time.perf_counter() - t)

    await asyncio.gather(*(run(r, w) for r, w in conns))
    for _, w in conns:
        w.close()
    return lat


async def idle(
    port: int, first: int, n: int, hold_s: float, pid: int
) -> tuple[int, float, float, int]:
    """Open `n` sessions, hold them, measure the gateway (RSS MiB, fds), then check each echoes."""
    conns = []
    t0 = time.perf_counter()
    for start in range(0, n, 200):  # open in batches (listen backlog)
        conns += await asyncio.gather(
            *(open_session(port, f"d{first + i}") for i in range(start, min(n, start + 200)))
        )
    opened = time.perf_counter() - t0
    await asyncio.sleep(hold_s)
    rss, nfd = proc_stats(pid)

    async def check(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
        w.write(b"?")
        return await asyncio.wait_for(r.readexactly(1), 30) == b"?"

    alive = sum(await asyncio.gather(*(check(r, w) for r, w in conns)))
    for _, w in conns:
        w.close()
    return alive, opened, rss, nfd


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc; clock-tick resolution)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_stats(pid: int) -> tuple[float, int]:
    rss = next(
        int(line.split()[1])
        for line in Path(f"/proc/{pid}/status").read_text().splitlines()
        if line.startswith("VmRSS:")
    )
    return rss / 1024, len(os.listdir(f"/proc/{pid}/fd"))


def pct(xs: list[float], q: float) -> float:
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1] if len(xs) > 1 else xs[0]


def env_step_bench(steps: int) -> tuple[float, float, float]:
    """Sim-phone step (tap + screencap) medians: direct, through the gateway, paired difference.

    Direct and gateway steps alternate so that the load drift of a shared machine hits both.
    """
    import random

    from venus_core.daas.forward import LocalForwarder
    from venus_core.data.synth.tasks import get_phone
    from venus_core.envs import AdbServerProcess, AdbShell, SimAdbServer, SimDevice

    phone = get_phone()
    dev = SimDevice(phone, phone.initial(random.Random(0)), size=(540, 960))
    with SimAdbServer(dev) as srv, AdbServerProcess() as adb:
        # the gateway process routes its devices to the echo server, so this phase uses its own
        # in-process gateway (same code) whose device d0 is the simulated phone
        devs = [DeviceSpec("d0", "android", "bench", "127.0.0.1", srv.port)]
        with GatewayThread(Gateway(DeviceTable(devs), SIGNER)) as gw:
            fwd = LocalForwarder(lambda: (("127.0.0.1", gw.port), hello("d0"))).start()
            shells = [
                AdbShell(srv.serial, port=adb.port, connect=True),
                AdbShell(f"127.0.0.1:{fwd.port}", port=adb.port, connect=True),
            ]
            times: list[list[float]] = [[], []]
            try:
                for i in range(steps + 2):
                    for shell, out in zip(shells, times, strict=True):
                        t = time.perf_counter()
                        shell.run(f"input tap {100 + i} 200")
                        shell.run("screencap -p")
                        if i >= 2:  # warm-up
                            out.append(time.perf_counter() - t)
            finally:
                for shell in shells:
                    shell.close()
                fwd.stop()
    diffs = [g - d for d, g in zip(*times, strict=True)]
    return statistics.median(times[0]), statistics.median(times[1]), statistics.median(diffs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--role", choices=("bench", "echo", "gateway"), default="bench")
    ap.add_argument("--upstream", type=int, default=0)
    ap.add_argument("--devices", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--bulk-mb", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=4000, help="round trips per concurrency level")
    ap.add_argument("--idle", type=int, default=1000)
    ap.add_argument("--hold", type=float, default=2.0, help="seconds the idle sessions are held")
    ap.add_argument("--env-steps", type=int, default=30)
    ap.add_argument("--limit", type=float, default=15.0, help="time limit per phase, seconds")
    args = ap.parse_args()
    if args.role == "echo":
        serve_echo()
        return
    fds = raise_fd_limit(4 * (args.idle + 600) + 256)
    if args.role == "gateway":
        serve_gateway(args.upstream, args.devices)
        return

    # every session gets its own device (one lease each): bulk d0, ping-pong levels, then idle
    n_dev = 1 + 1 + 64 + 512 + args.idle
    echo, (echo_port,) = spawn("--role", "echo")
    gwp, (gw_port, gw_loop) = spawn(
        "--role", "gateway", "--upstream", echo_port, "--devices", str(n_dev)
    )
    loop = new_event_loop()
    print(
        f"fd soft limit {fds}; gateway loop {gw_loop}; client loop {loop_name(loop)}; "
        f"{os.cpu_count()} CPUs (loadavg {os.getloadavg()[0]:.1f})"
    )
    try:
        run = loop.run_until_complete
        total = args.bulk_mb << 20
        d_mb, _ = run(bulk(int(echo_port), None, total, args.limit))
        cpu0 = cpu_seconds(gwp.pid)
        g_mb, g_bytes = run(bulk(int(gw_port), "d0", total, args.limit))
        print(
            f"bulk echo: direct {d_mb:.0f} MB/s, gateway {g_mb:.0f} MB/s ({g_mb / d_mb:.0%}); "
            f"gateway CPU {(cpu_seconds(gwp.pid) - cpu0) / (2 * g_bytes / 1e9):.2f} s per GB forwarded"
        )
        head = f"{'direct p50/p99 (us)':>22} {'gateway p50/p99 (us)':>22} {'added p50':>10}"
        print(f"{'sessions':>8} {head}")
        first = 1
        for c in (1, 64, 512):
            d = run(pingpong(int(echo_port), None, c, args.rounds, args.limit))
            cpu0 = cpu_seconds(gwp.pid)
            g = run(pingpong(int(gw_port), first, c, args.rounds, args.limit))
            cpu_rt = (cpu_seconds(gwp.pid) - cpu0) / len(g) * 1e6
            first += c
            d50, d99, g50, g99 = (
                pct(d, 50) * 1e6,
                pct(d, 99) * 1e6,
                pct(g, 50) * 1e6,
                pct(g, 99) * 1e6,
            )
            print(
                f"{c:>8} {d50:>10.0f} / {d99:<9.0f} {g50:>10.0f} / {g99:<9.0f} {g50 - d50:>8.0f}us"
                f"   (n={len(d)}/{len(g)}; gateway CPU {cpu_rt:.0f} us per round trip)"
            )
        alive, opened, rss, nfd = run(idle(int(gw_port), first, args.idle, args.hold, gwp.pid))
        print(
            f"idle: {alive}/{args.idle} sessions alive after {args.hold:g}s through one gateway "
            f"thread (opened in {opened:.1f}s); while held: gateway RSS {rss:.0f} MiB, {nfd} fds"
        )
        if args.env_steps:
            d_step, g_step, added = env_step_bench(args.env_steps)
            print(
                f"env step (tap + screencap over adb, {args.env_steps} alternating pairs): median "
                f"direct {d_step * 1e3:.1f} ms, through forwarder+gateway {g_step * 1e3:.1f} ms; "
                f"median paired difference {added * 1e3:+.2f} ms ({added / d_step:+.1%})"
            )
    finally:
        loop.close()
        for p in (gwp, echo):
            if p.stdin is not None:
                p.stdin.close()
            p.terminate()
            p.wait(10)
    print("command: python benchmarks/gateway.py " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
