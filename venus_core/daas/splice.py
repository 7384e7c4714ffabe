"""Two sockets spliced together with asyncio Protocols: the forwarding core of gateway and SDK.

Why Protocols and not streams: `data_received` writes each chunk straight into the peer's
transport, with no coroutine switch, no buffer copy into a StreamReader and no per-message
parsing (uvloop reads up to 256 KiB at a time). Backpressure is the transports' own flow control:
when one side's write buffer passes `HIGH_WATER`, `pause_writing` pauses *reading* on the other
side until it drains. Half closes are forwarded (`write_eof`); a second EOF or a reset on either
side ends the pair through its owner's `close(reason)`. Bytes that arrive before the two ends are
paired (an SSH banner, data pipelined after a handshake line) wait in `pending` and are flushed by
`pair`.
"""

from __future__ import annotations

import asyncio
import socket
from typing import Protocol, cast

HIGH_WATER = 1 << 20  # bytes buffered towards one side before the other side stops being read


class Owner(Protocol):
    """What an End reports to: the session (gateway) or tunnel (forwarder) it belongs to."""

    @property
    def client(self) -> End: ...

    def close(self, reason: str) -> None: ...


class End(asyncio.Protocol):
    """One socket of a spliced pair; forwards what it reads to the other end's transport."""

    __slots__ = ("eof", "nbytes", "owner", "peer", "pending", "transport")

    def __init__(self, owner: Owner) -> None:
        self.owner = owner
        self.transport: asyncio.Transport | None = None
        self.peer: End | None = None
        self.pending: list[bytes] = []
        self.nbytes = 0
        self.eof = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=HIGH_WATER)
        sock = transport.get_extra_info("socket")
        if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def data_received(self, data: bytes) -> None:
        self.nbytes += len(data)
        peer = self.peer
        if peer is not None and peer.transport is not None:
            peer.transport.write(data)
        else:
            self.pending.append(data)

    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()

    def eof_received(self) -> bool:
        self.eof = True
        peer = self.peer
        if peer is None or peer.transport is None or not peer.transport.can_write_eof() or peer.eof:
            self.owner.close("eof")
            return False
        peer.transport.write_eof()
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        side = "client" if self is self.owner.client else "upstream"
        self.owner.close(f"{side} {'reset' if exc else 'closed'}")


def pair(a: End, b: End) -> None:
    """Link two connected ends: flush what each has buffered to the other, then forward live."""
    assert a.transport is not None and b.transport is not None
    for chunk in a.pending:
        b.transport.write(chunk)
    for chunk in b.pending:
        a.transport.write(chunk)
    a.pending.clear()
    b.pending.clear()
    a.peer, b.peer = b, a
