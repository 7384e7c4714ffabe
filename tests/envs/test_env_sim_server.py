"""The device side of the ADB protocol, driven by a hand-written host over a raw socket."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from venus_core.data.synth.tasks import get_phone
from venus_core.envs import adb_wire as w
from venus_core.envs.sim_device import SimDevice
from venus_core.envs.sim_server import SimAdbServer


@pytest.fixture()
def server() -> SimAdbServer:
    phone = get_phone()
    dev = SimDevice(phone, phone.initial(random.Random(0)), size=(360, 640))
    srv = SimAdbServer(dev).start()
    yield srv
    srv.stop()


_OPEN: list[socket.socket] = []


@pytest.fixture(autouse=True)
def _close_host_sockets() -> None:
    yield
    while _OPEN:
        _OPEN.pop().close()


class Host:
    """A minimal ADB host: enough to exercise the device's handshake and streams."""

    def __init__(self, port: int, maxdata: int = 1 << 20) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=5)
        _OPEN.append(self.sock)
        self.maxdata = maxdata

    def send(self, cmd: int, a0: int, a1: int, data: bytes = b"") -> None:
        self.sock.sendall(w.Message(cmd, a0, a1, data).pack())

    def recv_exact(self, n: int) -> bytes:
        buf = b""
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("closed")
            buf += chunk
        return buf

    def recv(self) -> w.Message:
        hdr = w.parse_header(self.recv_exact(24), 1 << 20)
        return w.Message(hdr.command, hdr.arg0, hdr.arg1,
                         self.recv_exact(hdr.length) if hdr.length else b"")

    def connect(self) -> w.Message:
        self.send(w.A_CNXN, w.VERSION_SKIP_CHECKSUM, self.maxdata, b"host::features=shell_v2")
        return self.recv()

    def closed(self) -> bool:
        try:
            return self.sock.recv(1) == b""
        except ConnectionError:
            return True

    def shell(self, service: str, local_id: int = 5) -> tuple[bytes, int]:
        """Run a service to completion, acking every WRTE; returns (payload, number of WRTEs)."""
        self.send(w.A_OPEN, local_id, 0, service.encode() + b"\0")
        okay = self.recv()
        assert okay.name == "OKAY" and okay.arg1 == local_id
        data, writes = b"", 0
        while True:
            m = self.recv()
            if m.name == "CLSE":
                assert (m.arg0, m.arg1) == (okay.arg0, local_id)
                return data, writes
            assert m.name == "WRTE" and m.arg1 == local_id
            data += m.data
            writes += 1
            self.send(w.A_OKAY, local_id, okay.arg0)


def test_handshake_banner(server: SimAdbServer) -> None:
    host = Host(server.port)
    reply = host.connect()
    assert reply.name == "CNXN" and reply.arg0 == w.VERSION_SKIP_CHECKSUM
    assert reply.arg1 == w.DEVICE_MAX_PAYLOAD
    assert reply.data.startswith(b"device::") and b"features=shell_v2" in reply.data
    assert b"ro.product.model=Venus Sim" in reply.data


def test_auth_is_accepted_without_a_token(server: SimAdbServer) -> None:
    """We never send AUTH(TOKEN); a host that authenticates anyway is answered with CNXN."""
    host = Host(server.port)
    host.connect()
    host.send(w.A_AUTH, 3, 0, b"QAAAA-public-key user@host\0")  # ADB_AUTH_RSAPUBLICKEY
    reply = host.recv()
    assert reply.name == "CNXN" and reply.data.startswith(b"device::")
    out, _ = host.shell("shell:getprop ro.product.name")
    assert out == b"venus_sim\n"


def test_connection_limit() -> None:
    phone = get_phone()
    dev = SimDevice(phone, phone.initial(random.Random(0)), size=(360, 640))
    with SimAdbServer(dev, max_connections=1) as srv:
        first = Host(srv.port)
        assert first.connect().name == "CNXN"
        second = Host(srv.port)
        assert second.closed()
        out, _ = first.shell("shell:wm size")
        assert out == b"Physical size: 360x640\n"


def test_shell_v1_v2_and_flow_control(server: SimAdbServer) -> None:
    host = Host(server.port, maxdata=4096)  # small payloads: a screenshot needs many WRTEs
    host.connect()
    out, _ = host.shell("shell:wm size")
    assert out == b"Physical size: 360x640\n"
    png, writes = host.shell("exec:screencap -p", local_id=6)
    assert png.startswith(b"\x89PNG") and writes == -(-len(png) // 4096)
    raw, _ = host.shell("shell,v2,raw:nosuch", local_id=7)
    packets = []
    while raw:
        kind, length = struct.unpack("<BI", raw[:5])
        packets.append((kind, raw[5:5 + length]))
        raw = raw[5 + length:]
    assert packets[-1] == (w.SHELL_EXIT, bytes([127]))
    assert any(k == w.SHELL_STDERR and b"not found" in d for k, d in packets)


def test_unknown_service_is_refused(server: SimAdbServer) -> None:
    host = Host(server.port)
    host.connect()
    for service in (b"sync:\0", b"shell:\0", b"reboot:\0"):
        host.send(w.A_OPEN, 9, 0, service)
        m = host.recv()
        assert (m.name, m.arg0, m.arg1) == ("CLSE", 0, 9)


def test_host_close_mid_stream_keeps_connection(server: SimAdbServer) -> None:
    host = Host(server.port, maxdata=1024)
    host.connect()
    host.send(w.A_OPEN, 3, 0, b"shell:screencap -p\0")
    okay = host.recv()
    first = host.recv()
    assert first.name == "WRTE"
    host.send(w.A_CLSE, 3, okay.arg0)  # abandon the stream without acking
    out, _ = host.shell("shell:getprop ro.product.model", local_id=4)
    assert out == b"Venus Sim\n"


@pytest.mark.parametrize("bad", [
    "before-cnxn", "bad-magic", "oversized", "open-id-zero",
])
def test_protocol_violations_drop_the_connection(server: SimAdbServer, bad: str) -> None:
    host = Host(server.port)
    if bad == "before-cnxn":
        host.send(w.A_OPEN, 1, 0, b"shell:wm size\0")
    else:
        host.connect()
        if bad == "bad-magic":
            host.sock.sendall(w.Message(w.A_OKAY, 1, 1).pack()[:20] + b"\0\0\0\0")
        elif bad == "oversized":
            host.sock.sendall(w.HEADER.pack(w.A_WRTE, 1, 1, w.DEVICE_MAX_PAYLOAD + 1, 0,
                                            w.A_WRTE ^ 0xFFFFFFFF))
        else:
            host.send(w.A_OPEN, 0, 0, b"shell:wm size\0")
    assert host.closed()
    # the server keeps serving others
    other = Host(server.port)
    assert other.connect().name == "CNXN"


def test_loopback_only_and_clean_stop() -> None:
    phone = get_phone()
    dev = SimDevice(phone, phone.initial(random.Random(0)), size=(360, 640))
    with pytest.raises(ValueError, match="loopback"):
        SimAdbServer(dev, host="0.0.0.0")
    srv = SimAdbServer(dev).start()
    host = Host(srv.port)
    host.connect()
    srv.stop()
    assert host.closed()
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", srv.port), timeout=1)
