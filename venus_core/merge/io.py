"""Streaming safetensors I/O for merging: read row chunks, write sharded output, copy the rest.

Why: a merge must not need memory proportional to the model. Headers are read with safetensors
`safe_open`; tensor data is reached through zero-copy flat views of one private memory map per
file (`CheckpointReader.view`), so a block of a tensor costs no copy and no fresh allocation
(on this kind of VM, page-faulting fresh buffers cost more than the arithmetic). Pages of a
finished range are dropped from the process with `madvise(MADV_DONTNEED)` (`release`), otherwise
every touched page would stay resident and RSS would grow to the size of all inputs; the page
cache keeps them, so a second pass over a tensor re-maps them cheaply.

Departure from the safetensors library: it can only *write* a whole dict of in-memory tensors.
The output here is written incrementally instead: every output tensor's dtype and shape equal
the base's, so the shard plan and each shard's header are known before any value is computed,
and bytes are appended as chunks are merged. The files follow the safetensors format (8-byte
header length, JSON header with `__metadata__`, contiguous data) and are read back by
`safe_open` in the tests. sha256 digests are computed while writing, so the manifest costs no
second read.

Copy alignment: on AMD Zen (these VMs), the kernel's `rep movsb` copy between a user buffer and
the page cache runs ~2.5x slower when the destination sits a few bytes past the source modulo a
page (measured slow at 4-24 bytes, fast at 0 and from 32; < 64 is treated as slow here: 0.8 vs
0.3 ms per MiB written, 0.5 vs 0.15 ms per MiB read). A malloc'd buffer
starts 16 bytes into a page, so whether a write() was slow depended on the safetensors header's
length. Producers can ask `ShardedWriter.page_offset` where a chunk will land and allocate with
`aligned_empty`; any other chunk at a short distance is staged through an aligned buffer first
(user-space memcpy, which glibc already steers around this case).

Inputs are verified before anything maps them (`CheckpointReader`): no pickle file anywhere (a
directory holding only `.pt` / `.bin` weights gets an error saying so: checkpoints are
safetensors, pickles are never loaded), then `models.integrity.verify_checkpoint_dir` with
`require_manifest=False` (SHA256SUMS checked when present: every listed file's digest, nothing
unlisted; every safetensors header and the index validated by the safetensors library), and the
reader's own header parse refuses a header length or data offsets beyond the file's size.
Stage outputs that must have a manifest are required to by their callers (the merge job).
"""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import queue
import shutil
import struct
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch
from safetensors import safe_open

from venus_core.models.integrity import verify_checkpoint_dir

INDEX_NAME = "model.safetensors.index.json"
REPORT_NAME = "merge_report.json"
MANIFEST_NAME = "SHA256SUMS"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle")
TOKENIZER_FILES = (
    "tokenizer.json", "tokenizer_config.json", "vocab.json", "merges.txt", "tokenizer.model",
    "special_tokens_map.json", "added_tokens.json", "chat_template.jinja", "chat_template.json",
)

DTYPES: dict[str, torch.dtype] = {
    "F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
    "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8,
    "U8": torch.uint8, "BOOL": torch.bool,
    "F8_E4M3": torch.float8_e4m3fn, "F8_E5M2": torch.float8_e5m2,
}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16", "F8_E4M3", "F8_E5M2"}
PAGE = 4096
SHORT_DISTANCE = 64  # (destination - source) % PAGE in (0, SHORT_DISTANCE): slow kernel copy
STAGE_BYTES = 1 << 20
HASH_QUEUE = 4  # chunks waiting for the hashing thread (ShardedWriter(hash_thread=True))


def aligned_empty(nbytes: int, page_offset: int) -> np.ndarray:
    """An uninitialised uint8 array of nbytes whose address is page_offset modulo a page."""
    raw = np.empty(nbytes + PAGE, np.uint8)
    start = (page_offset - raw.ctypes.data) % PAGE
    return raw[start: start + nbytes]


def short_distance(dst: int, src: int) -> bool:
    """True when a kernel copy from address src to dst hits the slow case (module docstring)."""
    return 0 < (dst - src) % PAGE < SHORT_DISTANCE


class CheckpointError(ValueError):
    """A checkpoint directory is unusable (missing, pickled, inconsistent index ...)."""


@dataclass(frozen=True)
class TensorInfo:
    key: str
    dtype: str  # safetensors dtype string, e.g. "BF16"
    shape: tuple[int, ...]
    file: Path
    offset: int = 0  # absolute byte offset of the data in `file`

    @property
    def numel(self) -> int:
        n = 1
        for s in self.shape:
            n *= s
        return n

    @property
    def nbytes(self) -> int:
        return self.numel * DTYPES[self.dtype].itemsize


def _refuse_pickles(root: Path) -> None:
    """CheckpointError naming the first pickle file under `root`; saying so when it holds no
    safetensors at all (an old `.pt` / `.bin` checkpoint)."""
    pickles = sorted(p for p in root.rglob("*") if p.is_file() and p.suffix.lower() in PICKLE_SUFFIXES)
    if not pickles:
        return
    if not any(root.glob("*.safetensors")):
        names = ", ".join(p.name for p in pickles[:3]) + (", ..." if len(pickles) > 3 else "")
        raise CheckpointError(
            f"{pickles[0]}: {root} holds only pickle weights ({names}) and no *.safetensors: checkpoints "
            "are safetensors; pickles are never loaded (loading one can execute code). Convert it where "
            "you trust it (e.g. transformers' save_pretrained(..., safe_serialization=True)), then merge")
    raise CheckpointError(
        f"{pickles[0]}: pickle file refused: checkpoints are safetensors; pickles are never loaded "
        "(loading one can execute code); remove it from the checkpoint directory")


class CheckpointReader:
    """The tensors of one local HF-format safetensors checkpoint directory."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise CheckpointError(f"{self.root}: not a directory")
        _refuse_pickles(self.root)
        files = sorted(self.root.glob("*.safetensors"))
        if not files:
            raise CheckpointError(f"{self.root}: no *.safetensors files")
        index = self.root / INDEX_NAME
        if index.is_file():
            try:
                wanted = set(json.loads(index.read_text())["weight_map"].values())
            except (KeyError, ValueError) as exc:
                raise CheckpointError(f"{index}: not a safetensors index ({exc})") from exc
            missing = sorted(w for w in wanted if not (self.root / w).is_file())
            if missing:
                raise CheckpointError(f"{index}: lists missing shard {missing[0]!r}")
            files = [self.root / w for w in sorted(wanted)]
        self.tensors: dict[str, TensorInfo] = {}
        self._maps: dict[Path, tuple[BinaryIO, mmap.mmap]] = {}
        self._maps_lock = threading.Lock()  # workers and planners open files concurrently
        # our own bounded parse of every header first (its errors say what is wrong in the file's
        # terms), then SHA256SUMS when present and the library's validation (module docstring)
        all_offsets = {f: _data_offsets(f) for f in files}
        verify_checkpoint_dir(self.root, require_manifest=False)
        for f in files:
            offsets = all_offsets[f]
            with safe_open(f, framework="pt") as h:
                for key in h.keys():
                    if key in self.tensors:
                        raise CheckpointError(f"{f}: tensor {key!r} also in {self.tensors[key].file}")
                    sl = h.get_slice(key)
                    dtype = sl.get_dtype()
                    if dtype not in DTYPES:
                        raise CheckpointError(f"{f}: tensor {key!r} has unsupported dtype {dtype}")
                    self.tensors[key] = TensorInfo(key, dtype, tuple(sl.get_shape()), f, offsets[key])

    def _opened(self, f: Path) -> tuple[BinaryIO, mmap.mmap]:
        """The open file and its mapping, opened once (a lost race would let the loser's file
        object be collected, closing a descriptor another thread was reading from)."""
        got = self._maps.get(f)
        if got is None:
            with self._maps_lock:
                got = self._maps.get(f)
                if got is None:
                    fh = open(f, "rb")
                    # private (copy-on-write) mapping: writable buffer for torch.frombuffer, never written
                    got = self._maps[f] = (fh, mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_COPY))
        return got

    def _map(self, f: Path) -> mmap.mmap:
        return self._opened(f)[1]

    def view(self, key: str, start: int = 0, stop: int | None = None) -> torch.Tensor:
        """Flat elements [start, stop) of a tensor as a zero-copy view of the mapped file."""
        info = self.tensors[key]
        dtype = DTYPES[info.dtype]
        stop = info.numel if stop is None else stop
        count = stop - start
        if count <= 0:
            return torch.empty(0, dtype=dtype)
        size = dtype.itemsize
        offset = info.offset + start * size
        mm = self._map(info.file)
        if offset % size:  # misaligned (after an odd-length narrower tensor): copy
            return torch.frombuffer(mm, dtype=torch.uint8, count=count * size, offset=offset).clone().view(dtype)
        return torch.frombuffer(mm, dtype=dtype, count=count, offset=offset)

    def read_runs(self, key: str, starts: list[int], length: int) -> np.ndarray:
        """Flat elements [s, s + length) of a tensor for every start, concatenated, as raw bytes
        (uint8), read with pread: nothing is mapped (faulting in 1,024 scattered places of a
        mapping costs twice as much, and maps 64 KiB around each: fault-around)."""
        info = self.tensors[key]
        size = DTYPES[info.dtype].itemsize
        fd = self._opened(info.file)[0].fileno()
        nbytes = length * size
        parts = [os.pread(fd, nbytes, info.offset + s * size) for s in starts]
        if any(len(p) != nbytes for p in parts):
            raise CheckpointError(f"{info.file}: tensor {key!r} is shorter than its header says")
        return np.frombuffer(b"".join(parts), np.uint8)

    def release(self, key: str, start: int = 0, stop: int | None = None) -> None:
        """Drop the mapped pages of flat elements [start, stop) from this process (not the cache)."""
        info = self.tensors[key]
        if info.file not in self._maps:
            return
        size = DTYPES[info.dtype].itemsize
        stop = info.numel if stop is None else stop
        lo = (info.offset + start * size) // mmap.PAGESIZE * mmap.PAGESIZE
        hi = info.offset + stop * size
        mm = self._maps[info.file][1]
        hi = min(len(mm), -(-hi // mmap.PAGESIZE) * mmap.PAGESIZE)
        if hi > lo:
            mm.madvise(mmap.MADV_DONTNEED, lo, hi - lo)

    def close(self) -> None:
        """Unmap the files (views must be gone; a map still exported stays open until collected)."""
        for fh, mm in self._maps.values():
            try:
                mm.close()
            except BufferError:
                pass
            fh.close()
        self._maps.clear()


def _data_offsets(f: Path) -> dict[str, int]:
    """Absolute byte offset of each tensor's data (safetensors: u64 header size, JSON header).

    The header length is checked against the file's size before anything is read (a hostile or
    truncated file would otherwise have the reader allocate its stated length, up to 2^64 bytes),
    and every tensor's data must lie within the file."""
    with open(f, "rb") as fh:
        size = os.fstat(fh.fileno()).st_size
        head = fh.read(8)
        if len(head) != 8:
            raise CheckpointError(f"{f}: not a safetensors file (shorter than 8 bytes)")
        (n,) = struct.unpack("<Q", head)
        if n > size - 8:
            raise CheckpointError(f"{f}: safetensors header length {n} bytes is larger than the file "
                                  f"({size} bytes): a truncated or corrupt file, not a safetensors checkpoint")
        try:
            header = json.loads(fh.read(n))
            offsets = {k: (int(v["data_offsets"][0]), int(v["data_offsets"][1]))
                       for k, v in header.items() if k != "__metadata__"}
        except (ValueError, RecursionError, KeyError, TypeError, IndexError, AttributeError) as exc:
            raise CheckpointError(f"{f}: unreadable safetensors header ({type(exc).__name__}: {exc})") from None
    for k, (lo, hi) in offsets.items():
        if not 0 <= lo <= hi or 8 + n + hi > size:
            raise CheckpointError(f"{f}: tensor {k!r}: data_offsets [{lo}, {hi}] lie outside the file's "
                                  f"{size - 8 - n} data bytes")
    return {k: 8 + n + lo for k, (lo, _) in offsets.items()}


def tokenizer_digests(root: Path) -> dict[str, str]:
    """sha256 of each tokenizer / chat-template file present in a checkpoint directory."""
    out: dict[str, str] = {}
    for name in TOKENIZER_FILES:
        p = Path(root) / name
        if p.is_file():
            out[name] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _header(entries: list[TensorInfo]) -> bytes:
    header: dict[str, object] = {"__metadata__": {"format": "pt"}}
    offset = 0
    for e in entries:
        header[e.key] = {"dtype": e.dtype, "shape": list(e.shape), "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    return struct.pack("<Q", len(raw)) + raw


def plan_shards(entries: list[TensorInfo], shard_bytes: int) -> list[list[TensorInfo]]:
    """Greedy shard plan in the given order; a tensor larger than the budget gets its own shard."""
    shards: list[list[TensorInfo]] = [[]]
    size = 0
    for e in entries:
        if shards[-1] and size + e.nbytes > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += e.nbytes
    return shards


class ShardedWriter:
    """Writes tensors in plan order, chunk by chunk, into `model-0000i-of-0000n.safetensors`.

    Two ways in, mixable: `write(chunk)`, in order, from the calling thread (hashes, then
    writes); or `put(key, byte, data)`, from any thread in any order, which writes a chunk at its
    place in the file (every position is known from the plan), followed by `wrote(data)` for
    the same chunk in order, which accounts for it and hashes it. With `hash_thread`, `wrote`
    hands the chunk to a hashing thread instead (bounded queue; the caller must not modify the
    chunk afterwards): the fused merge's workers then write their own blocks and the calling
    thread only orders them, so the one serial step left is the sha256 stream itself (0.7 s
    per GB on these VMs, SHA-NI), rather than hash + write + orchestration on one thread.
    """

    def __init__(self, out_dir: Path, entries: list[TensorInfo], shard_bytes: int,
                 hash_thread: bool = False, hash_queue: int = HASH_QUEUE) -> None:
        self.out_dir = Path(out_dir)
        self.shards = plan_shards(entries, shard_bytes)
        n = len(self.shards)
        self.names = [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]
        self.order = [(si, e) for si, shard in enumerate(self.shards) for e in shard]
        self.digests: dict[str, str] = {}
        self._headers = [_header(shard) for shard in self.shards]
        self._starts: dict[str, int] = {}  # key -> file position of its first byte
        self._shard_of: dict[str, int] = {}
        for si, (head, shard) in enumerate(zip(self._headers, self.shards)):
            at = len(head)
            for e in shard:
                self._starts[e.key] = at
                self._shard_of[e.key] = si
                at += e.nbytes
        self._pos = -1
        self._left = 0
        self._at = 0  # bytes accounted for in the current shard file (written in order or put)
        self._fds: dict[int, int] = {}  # shard -> file descriptor, opened on first use
        self._fd_lock = threading.Lock()
        self._hash = hashlib.sha256()
        self._shard = -1
        self._stage: np.ndarray | None = None
        self.staged_bytes = 0  # written through the staging buffer (short-distance chunks)
        self._hasher = _Hasher(hash_queue) if hash_thread else None

    @property
    def hashes_aside(self) -> bool:
        """Whether `wrote` hashes on the hashing thread (then producers `put` their chunks themselves)."""
        return self._hasher is not None

    def page_offset(self, key: str, byte: int = 0) -> int:
        """Where byte `byte` of tensor `key` lands in its shard file, modulo a page."""
        return (self._starts[key] + byte) % PAGE

    def _fd(self, si: int) -> int:
        fd = self._fds.get(si)
        if fd is None:
            with self._fd_lock:
                fd = self._fds.get(si)
                if fd is None:
                    fd = self._fds[si] = os.open(self.out_dir / self.names[si],
                                                 os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666)
        return fd

    def put(self, key: str, byte: int, data: np.ndarray) -> None:
        """Write `data` (bytes `byte` .. of tensor `key`) at its place in its file; any thread, any
        order. The same chunk must then be passed to `wrote`, in order."""
        si = self._shard_of[key]
        self._pwrite(si, memoryview(np.ascontiguousarray(data).reshape(-1).view(np.uint8)),
                     self._starts[key] + byte)

    def _pwrite(self, si: int, piece: memoryview, at: int) -> None:
        fd = self._fd(si)
        while piece.nbytes:  # a write may be short
            n = os.pwrite(fd, piece, at)
            if n <= 0:
                raise OSError(f"{self.out_dir / self.names[si]}: short write at byte {at}")
            piece, at = piece[n:], at + n

    def begin(self, key: str) -> None:
        if self._left:
            raise RuntimeError(f"tensor {self.order[self._pos][1].key!r} not fully written")
        self._pos += 1
        si, e = self.order[self._pos]
        if e.key != key:
            raise RuntimeError(f"writer expected tensor {e.key!r}, got {key!r}")
        if si != self._shard:
            self._close()
            self._shard = si
            self._hash = hashlib.sha256()
            self._at = 0
            self._emit(memoryview(self._headers[si]))
        self._left = e.nbytes

    def _take(self, nbytes: int) -> None:
        if nbytes > self._left:
            raise RuntimeError(f"tensor {self.order[self._pos][1].key!r}: too many bytes written")
        self._left -= nbytes

    def write(self, chunk: torch.Tensor) -> None:
        """The next bytes of the current tensor, in order: hashed, then written, from this thread."""
        data = chunk.contiguous().reshape(-1).view(torch.uint8).numpy()
        self._take(data.nbytes)
        if self._hasher is not None:  # the chunk may be released once this returns: hash it now
            self._hasher.drain()
        if data.nbytes < PAGE or not short_distance(self._at, data.ctypes.data):
            self._emit(memoryview(data))
            return
        if self._stage is None:
            self._stage = np.empty(STAGE_BYTES + PAGE, np.uint8)
        for s in range(0, data.nbytes, STAGE_BYTES):
            piece = data[s: s + STAGE_BYTES]
            start = (self._at - self._stage.ctypes.data) % PAGE
            stage = self._stage[start: start + piece.nbytes]
            np.copyto(stage, piece)
            self._emit(memoryview(stage))
        self.staged_bytes += data.nbytes

    def wrote(self, chunk: torch.Tensor) -> None:
        """The next bytes of the current tensor, in order, already `put` at their place: hashed
        here, or on the hashing thread (then `chunk` must stay unmodified)."""
        data = chunk.contiguous().reshape(-1).view(torch.uint8).numpy()
        self._take(data.nbytes)
        if self._hasher is not None:
            self._hasher.update(self._hash, data)
        else:
            self._hash.update(memoryview(data))
        self._at += data.nbytes

    def _emit(self, data: memoryview) -> None:
        """Hash, then write, in pieces of at most STAGE_BYTES: hashing a piece first brings it into
        this core's cache, so the kernel's copy reads it from there (a block just computed on a
        worker thread and handed to write(2) whole copied ~2.5x slower: 1.0 vs 0.4 ms per MiB)."""
        for s in range(0, data.nbytes, STAGE_BYTES):
            piece = data[s: s + STAGE_BYTES]
            self._hash.update(piece)
            self._pwrite(self._shard, piece, self._at + s)
        self._at += data.nbytes

    def _close(self) -> None:
        if self._shard < 0:
            return
        if self._hasher is not None:
            self._hasher.drain()
        os.close(self._fds.pop(self._shard))  # open: begin() wrote the header
        self.digests[self.names[self._shard]] = self._hash.hexdigest()

    def abort(self) -> None:
        """Stop the hashing thread and close every file (after an error; the output is incomplete)."""
        if self._hasher is not None:
            self._hasher.stop(discard=True)
        for fd in self._fds.values():
            os.close(fd)
        self._fds.clear()

    def finish(self) -> dict[str, str]:
        if self._left or self._pos != len(self.order) - 1:
            raise RuntimeError("output incomplete: not every planned tensor was written")
        self._close()
        self._shard = -1
        if self._hasher is not None:
            self._hasher.stop()
        weight_map = {e.key: self.names[si] for si, e in self.order}
        index = {
            "metadata": {"total_size": sum(e.nbytes for _, e in self.order)},
            "weight_map": dict(sorted(weight_map.items())),
        }
        raw = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
        (self.out_dir / INDEX_NAME).write_bytes(raw)
        self.digests[INDEX_NAME] = hashlib.sha256(raw).hexdigest()
        return self.digests


class _Hasher:
    """One thread that feeds chunks to their sha256 objects in the order they were handed over.

    At most `depth` chunks wait (the producer blocks beyond that: memory stays bounded);
    hashlib releases the GIL on large buffers, so hashing runs beside the merge's workers."""

    def __init__(self, depth: int) -> None:
        self._q: queue.Queue[tuple["hashlib._Hash", np.ndarray] | None] = queue.Queue(max(1, depth))
        self._error: BaseException | None = None
        self._discard = False  # set by stop(discard=True): chunks still queued are not hashed
        self._thread = threading.Thread(target=self._run, name="venus-merge-sha256", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            item = self._q.get()
            try:
                if item is None:
                    return
                if self._error is None and not self._discard:
                    try:
                        item[0].update(memoryview(item[1]))
                    except BaseException as e:  # kept for the producer: raised at its next call
                        self._error = e
            finally:
                self._q.task_done()

    def _check(self) -> None:
        if self._error is not None:
            raise RuntimeError("hashing the merged output failed") from self._error

    def update(self, digest: "hashlib._Hash", data: np.ndarray) -> None:
        self._check()
        if not self._thread.is_alive():
            raise RuntimeError("the output's hashing thread has stopped")
        self._q.put((digest, data))

    def drain(self) -> None:
        """Wait until every chunk handed over so far is hashed."""
        if self._thread.is_alive():
            self._q.join()
        self._check()

    def stop(self, discard: bool = False) -> None:
        self._discard = discard
        if self._thread.is_alive():
            self._q.put(None)
            self._thread.join()


def copy_non_weight_files(src: Path, dst: Path) -> dict[str, str]:
    """Copy config, processor, tokenizer, chat template ... (all but weights); return digests."""
    digests: dict[str, str] = {}
    skip = {INDEX_NAME, REPORT_NAME, MANIFEST_NAME}
    for p in sorted(Path(src).rglob("*")):
        rel = p.relative_to(src).as_posix()
        if not p.is_file() or p.suffix == ".safetensors" or rel in skip:
            continue
        target = Path(dst) / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(p, target)
        digests[rel] = hashlib.sha256(target.read_bytes()).hexdigest()
    return digests


def write_manifest(out_dir: Path, digests: dict[str, str]) -> None:
    """`sha256sum -c`-compatible manifest of every output file."""
    lines = [f"{digests[name]}  {name}\n" for name in sorted(digests)]
    (Path(out_dir) / MANIFEST_NAME).write_text("".join(lines))
