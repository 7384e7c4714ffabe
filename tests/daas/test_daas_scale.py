"""One gateway thread holds 1,000 concurrent idle sessions (one device each), all still alive."""

from __future__ import annotations

import asyncio
import resource
import threading
import time

from venus_core.daas import Claims, DeviceSpec, DeviceTable, Gateway, GatewayThread, TokenSigner
from venus_core.daas.service import new_event_loop

N = 1000
SIGNER = TokenSigner(b"scale-secret-0123456789")


class _Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.t = transport

    def data_received(self, data: bytes) -> None:
        self.t.write(data)  # type: ignore[attr-defined]


def test_thousand_idle_sessions() -> None:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = 4 * N + 200
    if soft < need:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(need, hard), hard))
    echo_loop = new_event_loop()
    server = echo_loop.run_until_complete(
        echo_loop.create_server(_Echo, "127.0.0.1", 0, backlog=2048)
    )
    echo_port = server.sockets[0].getsockname()[1]
    echo_thread = threading.Thread(target=echo_loop.run_forever, daemon=True)
    echo_thread.start()
    devs = [DeviceSpec(f"d{i}", "tcp", "g", "127.0.0.1", echo_port) for i in range(N)]
    exp = time.time() + 300

    async def client(port: int) -> int:
        async def one(i: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            tok = SIGNER.sign(Claims(f"L{i}", f"d{i}", "c", "g", exp))
            w.write(f"VENUS1 c d{i} {tok}\n".encode())
            assert (await r.readline()).startswith(b"OK ")
            return r, w

        conns = []
        for start in range(0, N, 250):
            conns += await asyncio.gather(*(one(i) for i in range(start, start + 250)))
        assert len(gw.gateway.sessions) == N  # registered before each OK was written

        async def ping(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> bool:
            w.write(b"!")
            return await asyncio.wait_for(r.readexactly(1), 20) == b"!"

        alive = sum(await asyncio.gather(*(ping(r, w) for r, w in conns)))
        for _, w in conns:
            w.close()
        return alive

    try:
        with GatewayThread(Gateway(DeviceTable(devs, max_upstream=1), SIGNER)) as gw:
            loop = new_event_loop()
            try:
                assert loop.run_until_complete(client(gw.port)) == N
            finally:
                loop.close()
            deadline = time.monotonic() + 10
            while gw.gateway.sessions and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not gw.gateway.sessions
            assert all(p.active == 0 for p in gw.gateway.table.pools.values())
    finally:
        echo_loop.call_soon_threadsafe(server.close)
        echo_loop.call_soon_threadsafe(echo_loop.stop)
        echo_thread.join(5)
        echo_loop.close()
