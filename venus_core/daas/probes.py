"""Health probes: does a device answer its own protocol, not merely accept TCP connections?

Why protocol probes: a hung adbd or browser still completes the TCP handshake (the kernel does it),
so a connect-only check would keep handing out dead devices. Each probe sends the smallest request
of the device's protocol and waits for a reply of the right shape:
- android: an ADB `CNXN` (AOSP protocol.txt); a live device answers `CNXN` or `AUTH`;
- web: `GET /json/version` on the DevTools port; expects an HTTP status line;
- ssh: the server speaks first; expects an `SSH-` banner;
- tcp: connect only.
"""

from __future__ import annotations

import socket
import struct
from collections.abc import Callable

from venus_core.daas.routing import DeviceSpec

A_CNXN = 0x4E584E43
ADB_VERSION = 0x01000001
ADB_MAXDATA = 256 * 1024


def _adb_cnxn() -> bytes:
    payload = b"host::features=shell_v2\x00"
    return (
        struct.pack(
            "<6I",
            A_CNXN,
            ADB_VERSION,
            ADB_MAXDATA,
            len(payload),
            sum(payload) & 0xFFFFFFFF,
            A_CNXN ^ 0xFFFFFFFF,
        )
        + payload
    )


def _recv_some(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            break
        buf += chunk
    return buf


def probe_device(dev: DeviceSpec, timeout: float = 1.0) -> str | None:
    """None when `dev` answers its protocol within `timeout`, else the reason it failed."""
    try:
        with socket.create_connection((dev.host, dev.port), timeout=timeout) as sock:
            if dev.kind == "android":
                sock.sendall(_adb_cnxn())
                head = _recv_some(sock, 4)
                return None if head in (b"CNXN", b"AUTH") else f"no ADB CNXN reply (got {head!r})"
            if dev.kind == "web":
                sock.sendall(f"GET /json/version HTTP/1.1\r\nHost: {dev.host}\r\n\r\n".encode())
                head = _recv_some(sock, 5)
                return None if head == b"HTTP/" else f"no HTTP reply (got {head!r})"
            if dev.kind == "ssh":
                head = _recv_some(sock, 4)
                return None if head == b"SSH-" else f"no SSH banner (got {head!r})"
            return None
    except TimeoutError:
        return f"no answer within {timeout:g}s"
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


Probe = Callable[[DeviceSpec], str | None]
