"""ShardedWriter: chunks whose address sits a short distance before their file position (the slow
kernel copy on AMD Zen, io.py) go through the aligned staging buffer; bytes and digests are the
same whichever way a chunk is written, and `page_offset` / `aligned_empty` agree with the file."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
import torch

from venus_core.merge import io
from venus_core.merge.io import PAGE, ShardedWriter, TensorInfo, aligned_empty, short_distance


def _entries() -> list[TensorInfo]:
    # an odd-sized first tensor shifts the second one off any page boundary
    return [TensorInfo("a", "U8", (37,), Path("x"), 0), TensorInfo("b", "F32", (3 * (1 << 18) + 5,), Path("x"), 0),
            TensorInfo("c", "F32", (10,), Path("x"), 0)]


def _write(out: Path, chunks: dict[str, list[np.ndarray]], stage_bytes: int) -> ShardedWriter:
    out.mkdir()
    w = ShardedWriter(out, _entries(), 1 << 40)
    emit = w._emit

    def checked(data: memoryview) -> None:  # what reaches write(2) is never at a short distance
        if data.nbytes >= PAGE:
            assert not short_distance(w._at, np.frombuffer(data, np.uint8).ctypes.data)
        emit(data)

    w._emit = checked  # type: ignore[method-assign]
    old = io.STAGE_BYTES
    io.STAGE_BYTES = stage_bytes
    try:
        for key in ("a", "b", "c"):
            w.begin(key)
            for c in chunks[key]:
                w.write(torch.from_numpy(c))
        w.finish()
    finally:
        io.STAGE_BYTES = old
    return w


@pytest.mark.parametrize("stage_bytes", [1 << 20, 4096 + 8])  # pieces that end mid-page too
def test_staged_and_direct_writes_give_the_same_bytes(tmp_path: Path, stage_bytes: int) -> None:
    rng = np.random.default_rng(0)
    a = rng.integers(0, 255, 37, dtype=np.uint8)
    b = rng.standard_normal(3 * (1 << 18) + 5).astype(np.float32)
    c = np.arange(10, dtype=np.float32)
    probe = ShardedWriter(tmp_path, _entries(), 1 << 40)
    pos = probe.page_offset("b")
    head = len(probe._headers[0])  # the header with its 8-byte length field
    assert pos == (head + 37) % PAGE

    def placed(x: np.ndarray, short: bool) -> np.ndarray:
        want = (pos - (7 if short else 0)) % PAGE  # 7 bytes before the file position: slow copy
        buf = aligned_empty(x.nbytes, want)
        assert buf.ctypes.data % PAGE == want
        assert short_distance(pos, buf.ctypes.data) == short
        out = buf.view(np.uint8)
        out[:] = x.view(np.uint8)
        return out.view(np.float32) if x.dtype == np.float32 else out

    halves = [b[: 1 << 18], b[1 << 18:]]
    direct = _write(tmp_path / "direct", {"a": [a], "b": [placed(h, False) for h in halves],
                                          "c": [c]}, 1 << 20)
    staged = _write(tmp_path / "staged", {"a": [a], "b": [placed(b, True)], "c": [c]}, stage_bytes)
    assert direct.staged_bytes == 0 and staged.staged_bytes == b.nbytes
    name = direct.names[0]
    raw = (tmp_path / "direct" / name).read_bytes()
    assert raw == (tmp_path / "staged" / name).read_bytes()
    assert direct.digests[name] == staged.digests[name] == hashlib.sha256(raw).hexdigest()
    assert raw[head + 37: head + 37 + b.nbytes] == b.tobytes()
