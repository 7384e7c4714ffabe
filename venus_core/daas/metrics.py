"""Gateway metrics in the Prometheus text format (prometheus_client), plus a tiny scrape server.

Why counters are plain ints: the forwarding path must do no per-chunk work beyond one addition, so
byte counts live on the session objects and are summed when Prometheus scrapes (a custom
collector), not pushed through prometheus_client's locked counters on every chunk. Latencies are
observed once per session (handshake-to-upstream-connected, session duration) in histograms.
Each gateway has its own CollectorRegistry so that several gateways can live in one process.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable, Iterator

from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class GatewayMetrics(Collector):
    """Counters owned by one gateway shard; `render()` gives the Prometheus text page."""

    def __init__(
        self,
        shard: int,
        live_bytes: Callable[[], tuple[int, int]],
        live_sessions: Callable[[], int],
    ) -> None:
        self.shard = str(shard)
        self._live_bytes = live_bytes
        self._live_sessions = live_sessions
        self.sessions_total = 0
        self.closed_bytes_up = 0
        self.closed_bytes_down = 0
        self.errors: Counter[str] = Counter()
        self.registry = CollectorRegistry(auto_describe=True)
        self.registry.register(self)
        self.connect_seconds = Histogram(
            "venus_gateway_connect_seconds",
            "handshake line received -> upstream connected",
            ["shard"],
            registry=self.registry,
            buckets=(
                0.0001,
                0.00025,
                0.0005,
                0.001,
                0.0025,
                0.005,
                0.01,
                0.025,
                0.05,
                0.1,
                0.25,
                1,
                5,
            ),
        )
        self.session_seconds = Histogram(
            "venus_gateway_session_seconds",
            "duration of a forwarded session",
            ["shard"],
            registry=self.registry,
            buckets=(0.01, 0.1, 0.5, 1, 5, 15, 60, 300, 1800, 7200),
        )

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        up, down = self._live_bytes()
        sessions = CounterMetricFamily(
            "venus_gateway_sessions", "sessions admitted", labels=["shard"]
        )
        sessions.add_metric([self.shard], self.sessions_total)
        yield sessions
        active = GaugeMetricFamily(
            "venus_gateway_sessions_active", "sessions open now", labels=["shard"]
        )
        active.add_metric([self.shard], self._live_sessions())
        yield active
        nbytes = CounterMetricFamily(
            "venus_gateway_bytes", "bytes forwarded", labels=["shard", "direction"]
        )
        nbytes.add_metric([self.shard, "client_to_device"], self.closed_bytes_up + up)
        nbytes.add_metric([self.shard, "device_to_client"], self.closed_bytes_down + down)
        yield nbytes
        errors = CounterMetricFamily(
            "venus_gateway_errors", "refused or failed connections", labels=["shard", "code"]
        )
        for code, n in sorted(self.errors.items()):
            errors.add_metric([self.shard, code], n)
        yield errors

    def render(self) -> bytes:
        return generate_latest(self.registry)


async def serve_metrics(metrics: GatewayMetrics, host: str, port: int) -> asyncio.Server:
    """Serve `GET /metrics` and `GET /healthz` on host:port (HTTP/1.0, one request a connection)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            line = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            parts = line.decode("latin-1").split()
            path = parts[1].split("?")[0] if len(parts) >= 2 else ""
            if len(parts) >= 2 and parts[0] == "GET" and path == "/metrics":
                status, ctype, body = "200 OK", CONTENT_TYPE, metrics.render()
            elif len(parts) >= 2 and parts[0] == "GET" and path == "/healthz":
                status, ctype, body = "200 OK", "text/plain", b"ok\n"
            else:
                status, ctype, body = "404 Not Found", "text/plain", b"not found\n"
            writer.write(
                f"HTTP/1.0 {status}\r\nContent-Type: {ctype}\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
        except (TimeoutError, ConnectionError, UnicodeDecodeError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, host, port)
