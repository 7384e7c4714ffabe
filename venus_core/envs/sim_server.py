"""The simulated phone served over TCP as an ADB *device* (what `adb connect HOST:PORT` talks to).

Why: agents, data collectors and the online RL workers drive phones through the adb server; if
the simulated phone speaks the device side of the ADB protocol, the very same code (adbutils,
`adb shell`, AndroidEnv) runs against it and against a real phone. Protocol (AOSP
`packages/modules/adb/protocol.txt`), the subset a TCP device needs:

- connection: the host sends CNXN(version, maxdata, "host::..."); we answer CNXN with the lower
  version, our maximum payload and a `device::` banner listing `shell_v2`. We never send an AUTH
  token, so the host does not authenticate (like an emulator or an `adb tcpip` device with auth
  disabled); an unsolicited AUTH from the host is answered with CNXN as well.
- streams: OPEN(host-id, 0, service) -> OKAY(our-id, host-id) or CLSE(0, host-id) if the service
  is unknown; data flows in WRTE messages, each acknowledged by OKAY before the next is sent (we
  do not advertise delayed acks); CLSE ends a stream from either side.
- services: `shell:cmd` and `exec:cmd` (raw output, stdout and stderr interleaved), `shell,v2[,...]:cmd`
  (shell protocol v2 packets: stdout, stderr, exit status). No interactive shell, sync or reboot.

Safety: binds to loopback only; payloads above our maximum, bad magic or unknown commands drop
the connection; commands are capped in `sim_shell`; connections and streams are bounded. Runs an
asyncio loop in one background thread; commands execute in a small thread pool so a slow
screenshot never blocks the protocol. `stop()` closes everything and joins the thread.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Self

from venus_core.envs import adb_wire as w
from venus_core.envs.sim_device import ShellResult, SimDevice
from venus_core.envs.sim_shell import run_command

log = logging.getLogger(__name__)

LOOPBACK = {"127.0.0.1", "::1", "localhost"}
FEATURES = ("shell_v2", "cmd")


@dataclass
class _Stream:
    local_id: int
    remote_id: int
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None


class SimAdbServer:
    """Serve `device` as an ADB device on 127.0.0.1:`port` (0 = a free port, see `.port`)."""

    def __init__(self, device: SimDevice, host: str = "127.0.0.1", port: int = 0, *,
                 max_connections: int = 16, max_streams: int = 64, ack_timeout: float = 30.0,
                 banner_props: dict[str, str] | None = None,
                 features: tuple[str, ...] = FEATURES) -> None:
        if host not in LOOPBACK:
            raise ValueError(f"SimAdbServer binds to loopback only, not {host!r}")
        self.device = device
        self.host = host
        self.port = port
        self.max_connections = max_connections
        self.max_streams = max_streams
        self.ack_timeout = ack_timeout
        self.features = features  # without "shell_v2", clients fall back to the v1 shell
        self.props = banner_props or {k: device.props[k] for k in
                                      ("ro.product.name", "ro.product.model", "ro.product.device")}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.base_events.Server | None = None
        self._conns: set[asyncio.Task[None]] = set()
        self._pool = ThreadPoolExecutor(max_workers=2, thread_name_prefix="simadb-cmd")
        self.commands_served = 0

    @property
    def serial(self) -> str:
        return f"{self.host}:{self.port}"

    # -- lifecycle -----------------------------------------------------------------------------
    def start(self) -> Self:
        if self._thread is not None:
            raise RuntimeError("SimAdbServer already started")
        ready = threading.Event()
        errors: list[BaseException] = []

        def main() -> None:
            loop = asyncio.new_event_loop()
            self._loop = loop
            try:
                self._server = loop.run_until_complete(
                    asyncio.start_server(self._accept, self.host, self.port))
                self.port = self._server.sockets[0].getsockname()[1]
            except BaseException as exc:  # noqa: BLE001 - handed to the starting thread
                errors.append(exc)
                ready.set()
                loop.close()
                return
            ready.set()
            try:
                loop.run_forever()
            finally:
                loop.close()

        self._thread = threading.Thread(target=main, name="simadb", daemon=True)
        self._thread.start()
        ready.wait(10)
        if errors:
            self._thread.join()
            self._thread = None
            raise errors[0]
        return self

    def stop(self, timeout: float = 5.0) -> None:
        loop, thread = self._loop, self._thread
        if loop is None or thread is None:
            return
        fut = asyncio.run_coroutine_threadsafe(self._shutdown(), loop)
        try:
            fut.result(timeout)
        finally:
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout)
            self._pool.shutdown(wait=False, cancel_futures=True)
            self._thread = None
            self._loop = None

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for t in list(self._conns):
            t.cancel()
        if self._conns:
            await asyncio.gather(*self._conns, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def __enter__(self) -> Self:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- connections ---------------------------------------------------------------------------
    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        if len(self._conns) >= self.max_connections:
            log.warning("sim adb: refusing connection (limit %d)", self.max_connections)
            writer.close()
            return
        sock = writer.get_extra_info("socket")
        if sock is not None:  # small OKAY/WRTE messages must not wait for delayed ACKs (Nagle)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._conns.add(task)
        try:
            await _Connection(self, reader, writer).run()
        finally:
            self._conns.discard(task)


class _Connection:
    def __init__(self, server: SimAdbServer, reader: asyncio.StreamReader,
                 writer: asyncio.StreamWriter) -> None:
        self.server = server
        self.reader = reader
        self.writer = writer
        self.version = w.VERSION_MIN
        self.max_payload = w.DEVICE_MAX_PAYLOAD
        self.online = False
        self.streams: dict[int, _Stream] = {}
        self.next_id = 1
        self.write_lock = asyncio.Lock()

    async def send(self, cmd: int, arg0: int, arg1: int, data: bytes = b"") -> None:
        async with self.write_lock:
            self.writer.write(w.Message(cmd, arg0, arg1, data).pack())
            await self.writer.drain()

    async def run(self) -> None:
        try:
            while True:
                raw = await self.reader.readexactly(w.HEADER_SIZE)
                hdr = w.parse_header(raw, w.DEVICE_MAX_PAYLOAD)
                data = await self.reader.readexactly(hdr.length) if hdr.length else b""
                w.verify_payload(hdr, data, self.version)
                await self.handle(hdr, data)
        except (asyncio.IncompleteReadError, ConnectionError):
            pass  # the host went away
        except w.AdbProtocolError as exc:
            log.warning("sim adb: dropping connection: %s", exc)
        finally:
            for s in list(self.streams.values()):
                if s.task is not None:
                    s.task.cancel()
            self.writer.close()

    async def handle(self, hdr: w.Header, data: bytes) -> None:
        if hdr.command in (w.A_CNXN, w.A_AUTH):
            if hdr.command == w.A_CNXN:
                if hdr.arg0 < w.VERSION_MIN:
                    raise w.AdbProtocolError(f"CNXN: unsupported version 0x{hdr.arg0:08x}")
                self.version = min(hdr.arg0, w.VERSION_SKIP_CHECKSUM)
                self.max_payload = max(256, min(hdr.arg1, w.DEVICE_MAX_PAYLOAD))
            self.online = True
            banner = w.device_banner(self.server.props, self.server.features)
            await self.send(w.A_CNXN, self.version, w.DEVICE_MAX_PAYLOAD, banner)
            return
        if not self.online:
            raise w.AdbProtocolError(f"{w.COMMAND_NAMES[hdr.command]} before CNXN")
        if hdr.command == w.A_OPEN:
            await self.open(hdr.arg0, w.parse_service(data))
        elif hdr.command == w.A_OKAY:
            stream = self.streams.get(hdr.arg1)
            if stream is not None:
                stream.acked.set()
        elif hdr.command == w.A_WRTE:
            stream = self.streams.get(hdr.arg1)
            if stream is not None:  # input (shell v2 stdin) is acknowledged and discarded
                await self.send(w.A_OKAY, stream.local_id, stream.remote_id)
        elif hdr.command == w.A_CLSE:
            stream = self.streams.pop(hdr.arg1, None)
            if stream is not None and stream.task is not None:
                stream.task.cancel()
        else:
            raise w.AdbProtocolError(f"unexpected {w.COMMAND_NAMES[hdr.command]} from the host")

    async def open(self, remote_id: int, service: str) -> None:
        if remote_id == 0:
            raise w.AdbProtocolError("OPEN with local-id 0")
        kind, _, command = service.partition(":")
        opts = kind.split(",")
        if opts[0] not in ("shell", "exec") or not command.strip() or \
                len(self.streams) >= self.server.max_streams:
            log.info("sim adb: refusing service %r", service[:80])
            await self.send(w.A_CLSE, 0, remote_id)
            return
        stream = _Stream(self.next_id, remote_id)
        self.next_id = self.next_id % 0x7FFFFFFF + 1
        self.streams[stream.local_id] = stream
        await self.send(w.A_OKAY, stream.local_id, remote_id)
        v2 = opts[0] == "shell" and "v2" in opts[1:]
        stream.task = asyncio.create_task(self.serve(stream, command, v2))

    async def serve(self, stream: _Stream, command: str, v2: bool) -> None:
        loop = asyncio.get_running_loop()
        try:
            res: ShellResult = await loop.run_in_executor(
                self.server._pool, run_command, self.server.device, command)
        except Exception as exc:
            log.exception("sim adb: command %r failed", command[:80])
            res = ShellResult(b"", f"internal error: {exc}\n".encode(), 1)
        self.server.commands_served += 1
        if v2:
            payload = b"".join(
                w.shell_v2_packet(kind, part[i:i + self.max_payload - 5])
                for kind, part in ((w.SHELL_STDOUT, res.stdout), (w.SHELL_STDERR, res.stderr))
                for i in range(0, len(part), self.max_payload - 5))
            payload += w.shell_v2_packet(w.SHELL_EXIT, bytes([res.exit_code & 0xFF]))
        else:
            payload = res.output
        try:
            for i in range(0, len(payload), self.max_payload):
                stream.acked.clear()
                await self.send(w.A_WRTE, stream.local_id, stream.remote_id,
                                payload[i:i + self.max_payload])
                await asyncio.wait_for(stream.acked.wait(), self.server.ack_timeout)
            if self.streams.pop(stream.local_id, None) is not None:
                await self.send(w.A_CLSE, stream.local_id, stream.remote_id)
        except (TimeoutError, ConnectionError):
            self.streams.pop(stream.local_id, None)
            log.warning("sim adb: stream %d aborted (no ack or host gone)", stream.local_id)
