"""Builders of hostile image bytes shared by the fuzz and hostile-file tests (tests/reliability).

`bomb` is a valid PNG *header* claiming a huge image in a few dozen bytes (correct chunk CRCs, a
token IDAT): a decoder that trusts the header allocates w*h*3 bytes; the platform's must refuse it
from the header alone.
"""

from __future__ import annotations

import io
import struct
import zlib

from PIL import Image


def image_bytes(w: int, h: int, color: tuple[int, int, int] = (40, 80, 120), fmt: str = "PNG") -> bytes:
    """A plain w x h image encoded as `fmt` (PNG, JPEG ...)."""
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format=fmt)
    return buf.getvalue()


def bomb(w: int = 100_000, h: int = 100_000) -> bytes:
    """A PNG whose IHDR claims w x h pixels."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b""))
