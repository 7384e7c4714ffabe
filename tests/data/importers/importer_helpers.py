"""Builders of tiny source trees in the real public formats, and of hostile inputs.

Not a conftest.py: helpers shared through conftest.py are imported by name, and a
second conftest module below it would shadow that name. Test modules import the fixtures from here.

Images are made with PIL at test time; `bomb_png` writes a valid PNG *header* that claims a huge
image (the importer must refuse it from the header, without decoding); `escape_link` makes a
symlink inside the source that points outside it.
"""

from __future__ import annotations

import base64
import io
import json
import struct
import zlib
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

import venus_core.data.importers  # noqa: F401 - registers the importers


def png_bytes(w: int, h: int, color: tuple[int, int, int] = (40, 80, 120)) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (w, h), color).save(buf, format="PNG")
    return buf.getvalue()


def write_png(path: Path, w: int, h: int, color: tuple[int, int, int] = (40, 80, 120)) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(png_bytes(w, h, color))
    return path


def bomb_png(path: Path, w: int = 100_000, h: int = 100_000) -> Path:
    """A PNG whose IHDR claims w x h pixels (tiny file, valid chunk CRCs)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    ihdr = struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0)
    data = b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(b"\0" * 16)) + chunk(b"IEND", b"")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
    return path


def escape_link(link: Path, outside: Path) -> Path:
    """A symlink `link` (inside the source) to `outside` (a real PNG outside the source)."""
    write_png(outside, 20, 20)
    link.parent.mkdir(parents=True, exist_ok=True)
    link.symlink_to(outside)
    return link


def b64png(w: int, h: int, color: tuple[int, int, int] = (1, 2, 3)) -> str:
    return base64.b64encode(png_bytes(w, h, color)).decode()


def dump(path: Path, obj: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj), encoding="utf-8")  # NaN is written as NaN, like Python writers do
    return path


def dump_lines(path: Path, rows: list[Any]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def quarantine(out: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (out / "quarantine.jsonl").read_text(encoding="utf-8").splitlines()]


def by_index(lines: list[dict[str, Any]]) -> dict[Any, dict[str, Any]]:
    return {(q["source_file"], q["index"]): q for q in lines}


@pytest.fixture
def src(tmp_path: Path) -> Path:
    root = tmp_path / "src"
    root.mkdir()
    return root


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory next to the source: files here must never be read through the source."""
    d = tmp_path / "outside"
    d.mkdir()
    write_png(d / "secret.png", 20, 20, (255, 0, 0))
    return d


class H:
    """The builders above, as one fixture."""

    png = staticmethod(write_png)
    bomb = staticmethod(bomb_png)
    link = staticmethod(escape_link)
    b64 = staticmethod(b64png)
    dump = staticmethod(dump)
    lines = staticmethod(dump_lines)
    quarantine = staticmethod(quarantine)
    by_index = staticmethod(by_index)


@pytest.fixture
def h() -> type[H]:
    return H
