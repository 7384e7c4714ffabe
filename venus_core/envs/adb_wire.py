"""The ADB transport wire format (device side): 24-byte message headers, payload checks, shell v2.

Why our own: the simulated phone must be reachable by the *real* adb server (`adb connect
127.0.0.1:PORT`), so it has to speak the device half of the protocol described in AOSP
`packages/modules/adb/protocol.txt`. No maintained Python library implements the device side
(adbutils and adb-shell are host-side clients), and the subset we need is small: framing here,
connection and stream handling in `sim_server`.

A message is six little-endian uint32 (command, arg0, arg1, data_length, data_check, magic) and
`data_length` payload bytes; `magic == command ^ 0xffffffff`. Since protocol version 0x01000001
the host no longer verifies `data_check`; we still fill it (sum of the payload bytes) so older
hosts accept our messages, and we verify it on input only when the negotiated version is older.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

A_SYNC = 0x434E5953
A_CNXN = 0x4E584E43
A_AUTH = 0x48545541
A_OPEN = 0x4E45504F
A_OKAY = 0x59414B4F
A_CLSE = 0x45534C43
A_WRTE = 0x45545257
A_STLS = 0x534C5453

COMMAND_NAMES = {A_SYNC: "SYNC", A_CNXN: "CNXN", A_AUTH: "AUTH", A_OPEN: "OPEN",
                 A_OKAY: "OKAY", A_CLSE: "CLSE", A_WRTE: "WRTE", A_STLS: "STLS"}

VERSION_MIN = 0x01000000
VERSION_SKIP_CHECKSUM = 0x01000001
DEVICE_MAX_PAYLOAD = 256 * 1024
"""Largest payload we accept or send (the host's announced maximum may lower it)."""

HEADER = struct.Struct("<6I")
HEADER_SIZE = HEADER.size  # 24

# shell v2 packet ids (a 1-byte id and a 4-byte little-endian length before each chunk)
SHELL_STDIN, SHELL_STDOUT, SHELL_STDERR, SHELL_EXIT, SHELL_CLOSE_STDIN = 0, 1, 2, 3, 4
SHELL_V2_HEADER = struct.Struct("<BI")


class AdbProtocolError(ValueError):
    """A peer sent something that is not a well-formed ADB message; the connection is dropped."""


def checksum(data: bytes) -> int:
    return sum(data) & 0xFFFFFFFF


@dataclass(frozen=True)
class Message:
    command: int
    arg0: int
    arg1: int
    data: bytes = b""

    @property
    def name(self) -> str:
        return COMMAND_NAMES.get(self.command, f"0x{self.command:08x}")

    def pack(self) -> bytes:
        return HEADER.pack(self.command, self.arg0, self.arg1, len(self.data),
                           checksum(self.data), self.command ^ 0xFFFFFFFF) + self.data


@dataclass(frozen=True)
class Header:
    command: int
    arg0: int
    arg1: int
    length: int
    check: int


def parse_header(raw: bytes, max_payload: int) -> Header:
    """Validate one 24-byte header: known command, matching magic, payload within bounds."""
    if len(raw) != HEADER_SIZE:
        raise AdbProtocolError(f"short header: {len(raw)} of {HEADER_SIZE} bytes")
    command, arg0, arg1, length, check, magic = HEADER.unpack(raw)
    if command not in COMMAND_NAMES:
        raise AdbProtocolError(f"unknown command 0x{command:08x}")
    if magic != command ^ 0xFFFFFFFF:
        raise AdbProtocolError(f"{COMMAND_NAMES[command]}: bad magic 0x{magic:08x}")
    if length > max_payload:
        raise AdbProtocolError(
            f"{COMMAND_NAMES[command]}: payload of {length} bytes exceeds the {max_payload} limit")
    return Header(command, arg0, arg1, length, check)


def verify_payload(header: Header, data: bytes, version: int) -> None:
    if version < VERSION_SKIP_CHECKSUM and checksum(data) != header.check:
        raise AdbProtocolError(f"{COMMAND_NAMES[header.command]}: payload checksum mismatch")


def shell_v2_packet(kind: int, data: bytes) -> bytes:
    return SHELL_V2_HEADER.pack(kind, len(data)) + data


def device_banner(props: dict[str, str], features: tuple[str, ...]) -> bytes:
    """The CNXN identity string of a device: `device::key=value;...;features=a,b`."""
    items = [f"{k}={v}" for k, v in props.items()]
    items.append("features=" + ",".join(features))
    return ("device::" + ";".join(items)).encode()


def parse_service(raw: bytes) -> str:
    """The service name of an OPEN payload (NUL-terminated, UTF-8)."""
    text = raw.split(b"\0", 1)[0]
    try:
        return text.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AdbProtocolError(f"OPEN: service name is not UTF-8 ({exc})") from None
