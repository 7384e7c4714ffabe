"""ShardedWriter: chunks whose address sits a short distance before their file position (the slow
kernel copy on AMD Zen, io.py) go through the aligned staging buffer; bytes and digests are the
same whichever way a chunk is written, and `page_offset` / `aligned_empty` agree with the file."""

from __future__ import annotations

import hashlib
import os
import threading
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


def _chunks(rng: np.random.Generator) -> dict[str, list[np.ndarray]]:
    b = rng.standard_normal(3 * (1 << 18) + 5).astype(np.float32)
    return {"a": [rng.integers(0, 255, 37, dtype=np.uint8)],
            "b": [b[: 1 << 17], b[1 << 17: 5 << 17], b[5 << 17:]],
            "c": [np.arange(10, dtype=np.float32)]}


@pytest.mark.parametrize("hash_thread", [False, True])
@pytest.mark.parametrize("shard_bytes", [1 << 40, 64])  # one shard; every tensor in a shard of its own
def test_put_anywhere_then_wrote_in_order_equals_write(tmp_path: Path, hash_thread: bool, shard_bytes: int) -> None:
    """Chunks written at their place in any order from other threads (`put`), then accounted for
    in order (`wrote`, hashed here or on the hashing thread), give write()'s bytes and digests;
    write() and wrote() may be mixed within a tensor."""
    import concurrent.futures

    chunks = _chunks(np.random.default_rng(1))
    ref_dir, out_dir = tmp_path / "ref", tmp_path / "put"
    ref_dir.mkdir()
    out_dir.mkdir()
    ref = ShardedWriter(ref_dir, _entries(), shard_bytes)
    for key in ("a", "b", "c"):
        ref.begin(key)
        for c in chunks[key]:
            ref.write(torch.from_numpy(c))
    ref.finish()

    w = ShardedWriter(out_dir, _entries(), shard_bytes, hash_thread=hash_thread, hash_queue=1)
    assert w.hashes_aside == hash_thread
    placed = [(key, c) for key in ("b", "c") for c in chunks[key]]  # "a" goes through write()
    offsets = {id(c): sum(x.nbytes for x in chunks[key][: i]) for key in chunks for i, c in enumerate(chunks[key])}
    with concurrent.futures.ThreadPoolExecutor(3) as pool:  # last chunk first: any order works
        list(pool.map(lambda kc: w.put(kc[0], offsets[id(kc[1])], kc[1]), reversed(placed)))
    w.begin("a")
    w.write(torch.from_numpy(chunks["a"][0]))
    w.begin("b")
    w.wrote(torch.from_numpy(chunks["b"][0]))
    w.write(torch.from_numpy(chunks["b"][1]))  # written again, in order: same bytes, same place
    w.wrote(torch.from_numpy(chunks["b"][2]))
    w.begin("c")
    w.wrote(torch.from_numpy(chunks["c"][0]))
    assert w.finish() == ref.digests
    for name in ref.names:
        raw = (out_dir / name).read_bytes()
        assert raw == (ref_dir / name).read_bytes()
        assert w.digests[name] == hashlib.sha256(raw).hexdigest()
    assert not [t for t in threading.enumerate() if t.name == "venus-merge-sha256"]


def test_a_failing_hash_is_raised_to_the_producer(tmp_path: Path) -> None:
    class Broken:
        def update(self, data: object) -> None:
            raise MemoryError("no room")

    w = ShardedWriter(tmp_path, _entries(), 1 << 40, hash_thread=True)
    w.begin("a")
    w._hash = Broken()  # type: ignore[assignment]
    w.wrote(torch.zeros(37, dtype=torch.uint8))
    w.begin("b")
    with pytest.raises(RuntimeError, match="hashing the merged output failed") as err:
        w.write(torch.zeros(4, dtype=torch.float32))  # drains the hashing thread: the failure surfaces
    assert isinstance(err.value.__cause__, MemoryError)
    w.abort()


def test_abort_stops_the_hashing_thread_and_closes_the_files(tmp_path: Path) -> None:
    before = set(os.listdir("/proc/self/fd"))
    w = ShardedWriter(tmp_path, _entries(), 64, hash_thread=True)
    w.put("b", 0, np.ones(8, np.float32))  # opens b's shard file
    w.begin("a")
    w.wrote(torch.zeros(37, dtype=torch.uint8))
    assert w._hasher is not None
    thread = w._hasher._thread
    w.abort()
    assert not thread.is_alive()
    assert set(os.listdir("/proc/self/fd")) <= before
