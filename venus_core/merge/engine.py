"""Streaming merge of one tensor: flat blocks of base and models, trim, combine, write.

Why blocks rather than whole tensors: memory must stay bounded by `max_working_bytes` whatever
the model size, and speed comes from small temporaries. Inputs are zero-copy views of the
memory-mapped files (io.py); every temporary of a block (fp32 task vectors, masks, sums) is
at most `BLOCK_ELEMS` elements per model, so it stays in the CPU cache and the allocator reuses
it instead of page-faulting fresh memory (which, measured on the project's VMs, cost several
times the arithmetic itself). Mapped input pages are released after each block.

Two backends compute the same bytes. "fused" (the default) runs numba kernels: one pass per
block does trim, election, disjoint mean, statistics and checks - fused_fast.py's kernels
specialised for the number of models (1-4; ~3x faster), else fused.py's generic one -, blocks
of up to FUSED_BLOCK elements run on `threads` worker threads (the kernels release the GIL), each
worker writes its blocks to their place in the output file, and the calling thread accounts for
them in order while a thread of the writer's hashes them (io.ShardedWriter); with one thread, the
calling thread computes, writes and hashes. The next tensor's blocks start as soon as the current
one's are all submitted (launch_fused / finish_fused). "torch" runs the block-wise tensor ops below;
it is the reference the fused kernels are tested against, and the path for what the kernels do not
cover (a threshold that must count ties while streaming, a merge method registered by a plugin).

Per-tensor trim threshold: a tensor that fits in one block gets it by direct selection from the
task vectors already computed for the merge (read once). A larger tensor is read twice: one
pass that counts/collects around bounds taken from a small sample (trim.py), then the merge
pass; only if the sample's bounds miss (rare, adversarial data) do two radix passes follow.

All maths is fp32 and rounded once to the base's dtype. A block where every model is
byte-identical to the base (e.g. a vision tower frozen during RL) is copied as raw base bytes,
so such parts come out bit-exact (no fp32 round trip, no -0.0/+0.0 surprises).
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np
import torch

from venus_core.merge import fused, fused_fast
from venus_core.merge.io import DTYPES, HASH_QUEUE, CheckpointReader, ShardedWriter, aligned_empty
from venus_core.merge.methods import CombineOptions, MergeMethod
from venus_core.merge.trim import (KEEP_ALL, KEEP_NONE, Threshold, TiePolicy, _as_float, apply_thresholds,
                                   band_bounds, exact_thresholds, find_thresholds, k_for, select_in_band,
                                   split_trivial)
from venus_core.merge.verify import MergeInputError, TensorJob, TensorStats, non_finite_error

BLOCK_ELEMS = 1 << 17  # elements per model per compute block (512 KiB of fp32)
SAMPLE_RUNS, SAMPLE_RUN = 64, 1024  # threshold sample: evenly spaced contiguous runs
FUSED_BLOCK = 1 << 20  # elements per model per fused block (no temporaries: only the output)
PLAN_AHEAD = 3  # tensors whose threshold passes run ahead of the merge (Engine.prepare), one thread each
Backend = Literal["fused", "torch"]
T = TypeVar("T")
R = TypeVar("R")


@dataclass
class Engine:
    base: CheckpointReader
    models: list[CheckpointReader]
    method: MergeMethod
    weights: torch.Tensor  # [M] fp32
    max_working_bytes: int
    ties: TiePolicy
    backend: Backend = "fused"
    threads: int = 1
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _planner: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    @property
    def m(self) -> int:
        return len(self.models)

    @property
    def fuses(self) -> bool:
        """Whether float tensors go to the fused kernels (launch_fused) rather than the torch path."""
        return self.backend == "fused" and self.method.name in fused.METHOD_CODES

    def close(self) -> None:
        for ex in (self._planner, self._pool):
            if ex is not None:
                ex.shutdown(cancel_futures=True)
        self._planner = self._pool = None

    def prepare(self, job: TensorJob, density: float, shared: list[Threshold] | None
                ) -> "Future[list[Threshold]] | None":
        """Start the threshold pass of a large tensor in the background (fused backend, threads > 1).

        The caller prepares tensors i+1 .. i+PLAN_AHEAD before merging tensor i (one planner thread
        each), so the samples, scan blocks and selections of the next tensors fill the workers while
        this one is merged and written, instead of leaving them idle at every tensor boundary
        (measured on the 1 GB benchmark, 2 vCPUs: 3 ahead 3.44 s, 2 ahead 3.74 s, 4 ahead 3.46 s)."""
        if (self.backend != "fused" or self.threads <= 1 or self.method.name not in fused.METHOD_CODES
                or not self.method.trims or density >= 1.0 or shared is not None
                or job.info.numel <= SAMPLE_RUNS * SAMPLE_RUN):
            return None
        with self._lock:
            if self._planner is None:
                self._planner = ThreadPoolExecutor(PLAN_AHEAD, thread_name_prefix="venus-merge-plan")
        return self._planner.submit(self._fused_thresholds, job, k_for(density, job.info.numel))

    def block_elems(self, job: TensorJob) -> int:
        """Elements per block: the budget over the per-element working set, capped for the cache."""
        per_elem = (self.m + 1) * DTYPES[job.info.dtype].itemsize + 24 * self.m + 24
        n = self.max_working_bytes // per_elem
        if n < 1:
            raise ValueError(f"max_working_bytes={self.max_working_bytes} is too small for one element "
                             f"of {job.info.key!r} ({per_elem} bytes of working memory)")
        return int(min(n, BLOCK_ELEMS))

    def blocks(self, job: TensorJob, fused_blocks: bool = False) -> list[tuple[int, int]]:
        n = job.info.numel
        size = self.fused_block_elems(job) if fused_blocks else self.block_elems(job)
        return [(s, min(n, s + size)) for s in range(0, n, size)]

    def _views(self, job: TensorJob, s: int, e: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
        return self.base.view(job.info.key, s, e), [r.view(k, s, e) for r, k in zip(self.models, job.model_keys)]

    def _release(self, job: TensorJob, s: int, e: int) -> None:
        self.base.release(job.info.key, s, e)
        for r, k in zip(self.models, job.model_keys):
            r.release(k, s, e)

    def _taus(self, job: TensorJob, b: torch.Tensor, xs: list[torch.Tensor],
              check: bool = True) -> tuple[torch.Tensor, torch.Tensor, bool]:
        """fp32 base, [M, c] task vectors of a block and whether they are all zero.

        `check` (merge pass) fails on NaN/Inf in any input.
        """
        b32 = b.to(torch.float32)
        taus = torch.empty(self.m, b32.numel(), dtype=torch.float32)
        for i, x in enumerate(xs):
            if x.dtype == torch.float32:
                torch.sub(x, b32, out=taus[i])
            else:
                taus[i].copy_(x)
                taus[i].sub_(b32)
        zero = False
        if check and taus.numel():
            lo, hi = (float(v) for v in torch.aminmax(taus))
            if not (math.isfinite(lo) and math.isfinite(hi)):  # a NaN/Inf in any input shows here
                self._non_finite(job, b32, xs)
            zero = lo == 0.0 and hi == 0.0
        return b32, taus, zero

    def _non_finite(self, job: TensorJob, b32: torch.Tensor, xs: list[torch.Tensor]) -> None:
        err = non_finite_error(f"{self.base.root}: tensor {job.info.key!r}", b32)
        for r, k, x in zip(self.models, job.model_keys, xs):
            err = err or non_finite_error(f"{r.root}: tensor {k!r}", x.to(torch.float32))
        if err:
            raise MergeInputError(err)
        raise ValueError(f"tensor {job.info.key!r}: a task vector overflows fp32 (finite inputs)")

    def _sample(self, job: TensorJob) -> torch.Tensor:
        """[M, s] task-vector sample: SAMPLE_RUNS contiguous runs spread evenly over the tensor.

        Sliced from whole-tensor views (one mapping per input, no per-run calls); the pages it
        touches are released by the pass over the blocks that follows."""
        n = job.info.numel
        runs = [(0, n)] if n <= SAMPLE_RUNS * SAMPLE_RUN else [
            (st, st + SAMPLE_RUN) for st in ((n - SAMPLE_RUN) * j // (SAMPLE_RUNS - 1) for j in range(SAMPLE_RUNS))]
        b, xs = self._views(job, 0, n)
        if b.dtype in (torch.float32, torch.bfloat16):  # one numpy gather per input (torch.cat of 64
            # slices: ~10x slower); bf16 gathered as its bits and widened exactly (fused.chunk_f32)
            idx = (np.asarray([s for s, _ in runs])[:, None] + np.arange(runs[0][1] - runs[0][0])).ravel()

            def gather(t: torch.Tensor) -> np.ndarray:
                if t.dtype == torch.float32:
                    return t.numpy().take(idx)
                return (t.view(torch.int16).numpy().view(np.uint16).take(idx).astype(np.uint32) << 16).view(np.float32)
            bn = gather(b)
            return torch.from_numpy(np.stack([np.subtract(gather(x), bn) for x in xs]))
        b32 = torch.cat([b[s:e] for s, e in runs]).to(torch.float32)
        out = torch.empty(self.m, b32.numel(), dtype=torch.float32)
        for i, x in enumerate(xs):
            torch.sub(torch.cat([x[s:e] for s, e in runs]).to(torch.float32), b32, out=out[i])
        return out

    def task_vector_chunks(self, job: TensorJob) -> Iterator[torch.Tensor]:
        """[M, c] fp32 task-vector blocks of one tensor, in flat order (threshold passes)."""
        for s, e in self.blocks(job):
            yield self._taus(job, *self._views(job, s, e), check=False)[1]
            self._release(job, s, e)

    def copy_tensor(self, job: TensorJob, writer: ShardedWriter, check_equal: bool,
                    digest: "hashlib._Hash | None" = None) -> TensorStats:
        """Write the base's bytes; with check_equal, every model must hold the same bytes."""
        stats = TensorStats(job.info.key, job.part, job.info.numel, self.m, mode="copied")
        writer.begin(job.info.key)
        for s, e in self.blocks(job):
            b, xs = self._views(job, s, e)
            if check_equal:
                for r, k, x in zip(self.models, job.model_keys, xs):
                    if not _same_bytes(b, x):
                        raise MergeInputError(f"{r.root}: non-float tensor {k!r} differs from the base")
            writer.write(b)
            if digest is not None:
                digest.update(_raw(b).numpy())
            del b, xs
            self._release(job, s, e)
        return stats

    def _trim_target(self, job: TensorJob, density: float, shared: list[Threshold] | None,
                     stats: TensorStats) -> tuple[list[Threshold] | None, int | None]:
        """(shared thresholds, None) for a whole-part trim; (None, k) for a per-tensor trim keeping k
        entries per model (recorded in stats); (None, None) when the method does not trim."""
        if not self.method.trims or density >= 1.0:
            return None, None
        if shared is not None:
            return shared, None
        stats.target_k = k_for(density, job.info.numel)
        return None, stats.target_k

    def merge_tensor(self, job: TensorJob, writer: ShardedWriter, opt: CombineOptions,
                     density: float, shared: list[Threshold] | None,
                     digest: "hashlib._Hash | None" = None,
                     prepared: "Future[list[Threshold]] | None" = None) -> TensorStats:
        """Merge one float tensor; `shared` thresholds come from a whole-part (global) trim,
        `prepared` ones from `prepare` (fused backend)."""
        if self.fuses:
            done = self._merge_tensor_fused(job, writer, opt, density, shared, digest, prepared)
            if done is not None:
                return done
        info = job.info
        stats = TensorStats(info.key, job.part, info.numel, self.m)
        blocks = self.blocks(job)
        first: tuple[torch.Tensor, torch.Tensor, bool] | None = None
        thresholds, k = self._trim_target(job, density, shared, stats)
        if k is not None:
            if len(blocks) == 1:
                first = self._taus(job, *self._views(job, *blocks[0]))
                thresholds = exact_thresholds(first[1], [k] * self.m, self.ties)
            else:
                thresholds = find_thresholds(lambda: self.task_vector_chunks(job), [k] * self.m,
                                             info.numel, self.ties, sample=self._sample(job))
        out_dtype = DTYPES[info.dtype]
        writer.begin(info.key)
        for s, e in blocks:
            b, xs = self._views(job, s, e)
            b32, taus, zero = first if first is not None else self._taus(job, b, xs)
            first = None
            stats.chunks += 1
            if zero and all(_same_bytes(b, x) for x in xs):
                stats.identical_chunks += 1
                writer.write(b)
                if digest is not None:
                    digest.update(_raw(b).numpy())
                del b, xs, b32, taus
                self._release(job, s, e)
                continue
            del xs
            stats.add_taus(taus)
            if thresholds is not None:
                apply_thresholds(taus, thresholds, None if shared is not None else s)
            stats.add_kept(taus)
            combined = self.method.combine(taus, self.weights, opt)
            del taus
            stats.conflicts += combined.conflicts
            stats.touched += combined.touched
            stats.add_delta(combined.delta)
            out = (b32 + combined.delta).to(out_dtype)
            del b, b32, combined
            self._release(job, s, e)
            err = non_finite_error(f"merged tensor {info.key!r}", out.to(torch.float32))
            if err:
                raise ValueError(err + " (overflow while merging)")
            writer.write(out)
            if digest is not None:
                digest.update(_raw(out).numpy())
        if stats.chunks and stats.identical_chunks == stats.chunks:
            stats.mode = "unchanged"
        return stats


    # ---- fused backend (fused.py kernels on worker threads) ----

    def fused_block_elems(self, job: TensorJob) -> int:
        """Elements per fused block: budget over (fp32 copies, scan buffers, output) x blocks in flight,
        plus the output blocks waiting for the hashing thread (io.HASH_QUEUE, and the one it hashes)."""
        itemsize = DTYPES[job.info.dtype].itemsize
        per_elem = 4 * (self.m + 1) + 12 * self.m + 4 + itemsize
        n = self.max_working_bytes // (per_elem * (2 * self.threads + 1) + itemsize * (HASH_QUEUE + 1))
        if n < 1:
            raise ValueError(f"max_working_bytes={self.max_working_bytes} is too small for one element "
                             f"of {job.info.key!r} ({per_elem} bytes of working memory per block in flight)")
        return int(min(n, FUSED_BLOCK))

    def _workers(self) -> ThreadPoolExecutor:
        """The worker pool of the fused kernels, started on first use."""
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.threads, thread_name_prefix="venus-merge")
            return self._pool

    def _ordered(self, fn: Callable[[T], R], items: Iterable[T]) -> Iterator[R]:
        """fn over items on the worker threads; results in item order, at most 2 x threads in flight."""
        if self.threads <= 1:
            yield from map(fn, items)
            return
        pool = self._workers()
        pending: deque[Future[R]] = deque()
        try:
            for it in items:
                pending.append(pool.submit(fn, it))
                if len(pending) >= 2 * self.threads:
                    yield pending.popleft().result()
            while pending:
                yield pending.popleft().result()
        finally:
            for f in pending:
                f.cancel()

    def _buffer(self, name: str, shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
        """A per-thread scratch tensor, reused across blocks (fresh pages cost more than the maths)."""
        bufs: dict[str, torch.Tensor] = self._local.__dict__.setdefault("bufs", {})
        buf = bufs.get(name)
        if buf is None or buf.dtype != dtype or buf.shape != shape:
            if buf is not None and len(shape) == 1 and buf.dtype == dtype and buf.shape[0] >= shape[0]:
                return buf[: shape[0]]
            buf = bufs[name] = torch.empty(shape, dtype=dtype)
        return buf

    def _kernel_array(self, t: torch.Tensor, slot: int, widen_in_kernel: bool) -> np.ndarray:
        """A block as the kernels take it: fp32 as is; bf16 as its raw bits (uint16), widened by
        the kernel chunk by chunk (fused.chunk_f32) when `widen_in_kernel`; else converted."""
        if t.dtype == torch.float32:
            return t.numpy()
        if t.dtype == torch.bfloat16 and widen_in_kernel:
            return t.view(torch.int16).numpy().view(np.uint16)
        buf = self._buffer(f"in{slot}", (t.numel(),), torch.float32)
        buf.copy_(t)
        return buf.numpy()

    def _block_arrays(self, job: TensorJob, s: int, e: int, widen_in_kernel: bool = True
                      ) -> tuple[torch.Tensor, list[torch.Tensor], np.ndarray, tuple[np.ndarray, ...]]:
        b, xs = self._views(job, s, e)
        return b, xs, self._kernel_array(b, 0, widen_in_kernel), tuple(
            self._kernel_array(x, i + 1, widen_in_kernel) for i, x in enumerate(xs))

    def _scan(self, job: TensorJob, lo: np.ndarray, hi: np.ndarray, live: np.ndarray,
              span: tuple[int, int]) -> tuple[np.ndarray, list[torch.Tensor], list[torch.Tensor]]:
        """One block of the threshold pass: (#above the band, band values, band flat positions)."""
        s, e = span
        _, _, bn, xn = self._block_arrays(job, s, e)
        width = self.fused_block_elems(job)  # every block of this tensor fits; one buffer per thread
        mask = self._buffer("cand_mask", (self.m, fused.SCAN_SUB // 64), torch.int64).numpy()
        val = self._buffer("cand_val", (self.m, width), torch.float32).numpy()
        at = self._buffer("cand_at", (self.m, width), torch.int64).numpy()
        above = np.zeros(self.m, np.int64)
        held = np.zeros(self.m, np.int64)
        fused.scan_block(bn, xn, lo, hi, live, above, mask, val, at, held, s)
        vals = [torch.from_numpy(val[i, : held[i]].copy()) for i in range(self.m)]
        where = [torch.from_numpy(at[i, : held[i]].copy()) for i in range(self.m)]
        del bn, xn
        if (self.m + 1) * job.info.nbytes > self.max_working_bytes // 4:
            self._release(job, s, e)  # else the merge pass reads these pages again, mapped, soon
        return above, vals, where

    def _fused_thresholds(self, job: TensorJob, k: int) -> list[Threshold]:
        """Exact per-tensor thresholds: sample bounds, then one fused counting/collecting pass."""
        n = job.info.numel
        ks = [k] * self.m
        out, todo = split_trivial(ks, n)
        if not todo:
            return [t for t in out if t is not None]
        sample = self._sample(job)
        bands = band_bounds(sample, ks, n, todo)
        lo = np.array([bands.get(i, (0.0, 0.0))[0] for i in range(self.m)], np.float32)
        hi = np.array([bands.get(i, (0.0, 0.0))[1] for i in range(self.m)], np.float32)
        live = np.array([i in bands for i in range(self.m)], np.bool_)
        above = np.zeros(self.m, np.int64)
        cands: list[list[torch.Tensor]] = [[] for _ in range(self.m)]
        where: list[list[torch.Tensor]] = [[] for _ in range(self.m)]
        cap = max(1 << 16, n // 16)
        held = [0] * self.m
        spans = self.blocks(job, fused_blocks=True)
        for a, vals, poss in self._ordered(lambda sp: self._scan(job, lo, hi, live, sp), spans):
            above += a
            for i in todo:
                held[i] += vals[i].numel()
                if held[i] <= cap:
                    cands[i].append(vals[i])
                    where[i].append(poss[i])
                else:
                    cands[i], where[i] = [], []
        for i in todo:
            if live[i] and held[i] <= cap:
                out[i] = select_in_band(ks[i], int(above[i]), cands[i], where[i], self.ties)
        if any(out[i] is None for i in todo):  # the sample's bounds missed: exact radix passes
            return find_thresholds(lambda: self.task_vector_chunks(job), ks, n, self.ties, sample=sample)
        return [t for t in out if t is not None]

    def _trim_args(self, thresholds: list[Threshold] | None, shared: bool, s: int, e: int
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
        """(lam [M], keep_pos [M, K], keep_n [M]) of a block for fused.merge_block, or None when a
        threshold must count ties while streaming (torch path)."""
        lam = np.full(self.m, -np.inf, np.float32)  # keep everything
        keep: list[torch.Tensor] = [torch.empty(0, dtype=torch.int64)] * self.m
        for i, t in enumerate(thresholds or []):
            if t.bits == KEEP_ALL:
                continue
            if t.bits >= KEEP_NONE:
                lam[i] = np.inf
            elif t.keeps_all_ties or t.bits == 0:
                lam[i] = _as_float(t.bits - 1) if t.bits > 0 else 0.0
            elif t.keep_at is not None and not shared:
                lam[i] = _as_float(t.bits)
                keep[i] = t.keep_at[(t.keep_at >= s) & (t.keep_at < e)] - s
            else:
                return None
        width = max(x.numel() for x in keep)
        keep_pos = np.zeros((self.m, width), np.int64)
        for i, x in enumerate(keep):
            keep_pos[i, : x.numel()] = x.numpy()
        return lam, keep_pos, np.array([x.numel() for x in keep], np.int64)

    def _merge_block(self, job: TensorJob, consts: tuple[object, ...], thresholds: list[Threshold] | None,
                     shared: bool, fixed: tuple[np.ndarray, np.ndarray, np.ndarray] | None, lands: int,
                     writer: ShardedWriter | None, span: tuple[int, int]
                     ) -> tuple[torch.Tensor, bool, np.ndarray, np.ndarray, np.ndarray]:
        """One fused block; `lands`: the output file position of the tensor's first byte modulo a page
        (the buffer written - fp32 `out`, or bf16 `o16` - is allocated to match: io.py, copy alignment).
        With a `writer`, the block is written to its place in the output file here, on the worker
        that computed it (ShardedWriter.put), and finish_fused only accounts for it in order."""
        s, e = span
        # fused_fast's kernels widen bf16 themselves; fused.merge_block (more models) takes fp32
        b, xs, bn, xn = self._block_arrays(job, s, e, widen_in_kernel=self.m <= fused_fast.MAX_M)
        trim = fixed or self._trim_args(thresholds, shared, s, e)
        assert trim is not None  # checked for the whole tensor before the blocks start
        m = self.m
        narrow = b.dtype == torch.bfloat16
        # fp32 output is written straight from `out`; bf16 is rounded from it into `o16`, which
        # is then the buffer written (either allocated to match its file position)
        out = (self._buffer("out32", (e - s,), torch.float32).numpy() if narrow
               else aligned_empty(4 * (e - s), lands + 4 * s).view(np.float32))
        gram = np.zeros((m, m), np.float64)
        ints = np.zeros(m + 5, np.int64)
        floats = np.zeros(2, np.float64)
        fused_fast.kernel(m)(bn, xn, *trim, *consts, out, gram, ints, floats)
        if ints[m + 2]:
            self._non_finite(job, b.to(torch.float32), xs)  # raises, naming the input
        identical = bool(ints[m + 4]) and all(_same_bytes(b, x) for x in xs)
        if identical:
            data = b.clone()
        elif narrow:
            o16 = aligned_empty(2 * (e - s), lands + 2 * s).view(np.uint16)
            bad = fused.narrow_bf16(out, o16)
            data = torch.from_numpy(o16.view(np.int16)).view(torch.bfloat16)
            if ints[m + 3] or bad:
                err = non_finite_error(f"merged tensor {job.info.key!r}", data)
                if err:
                    raise ValueError(err + " (overflow while merging)")
        else:
            data = torch.from_numpy(out)
            if b.dtype != torch.float32:
                data = data.to(b.dtype)
            if ints[m + 3] or b.dtype != torch.float32:
                err = non_finite_error(f"merged tensor {job.info.key!r}", data)
                if err:
                    raise ValueError(err + " (overflow while merging)")
        del b, xs, bn, xn
        self._release(job, s, e)
        if writer is not None:
            writer.put(job.info.key, s * data.element_size(), _raw(data).numpy())
        return data, identical, gram, ints, floats

    def _merge_tensor_fused(self, job: TensorJob, writer: ShardedWriter, opt: CombineOptions, density: float,
                            shared: list[Threshold] | None, digest: "hashlib._Hash | None",
                            prepared: "Future[list[Threshold]] | None" = None) -> TensorStats | None:
        launch = self.launch_fused(job, writer, opt, density, shared, digest, prepared)
        return None if launch is None else self.finish_fused(launch, writer)

    def launch_fused(self, job: TensorJob, writer: ShardedWriter, opt: CombineOptions, density: float,
                     shared: list[Threshold] | None, digest: "hashlib._Hash | None" = None,
                     prepared: "Future[list[Threshold]] | None" = None) -> "FusedLaunch | None":
        """Thresholds and kernel arguments of one tensor's fused merge; its blocks go to the workers
        from `finish_fused` (this tensor's own, or the previous one's: see there). None when the
        fused kernels cannot merge it (merge_tensor's torch path then does)."""
        info = job.info
        stats = TensorStats(info.key, job.part, info.numel, self.m)
        thresholds, k = self._trim_target(job, density, shared, stats)
        if k is not None:
            if prepared is not None:
                thresholds = prepared.result()
            elif info.numel <= SAMPLE_RUNS * SAMPLE_RUN:
                taus = self._taus(job, *self._views(job, 0, info.numel), check=False)[1]
                thresholds = exact_thresholds(taus, [k] * self.m, self.ties)
                del taus
                self._release(job, 0, info.numel)
            else:
                thresholds = self._fused_thresholds(job, k)
        whole = self._trim_args(thresholds, shared is not None, 0, info.numel)
        if whole is None:
            return None
        w = self.weights.numpy().astype(np.float32)
        positive = w[w > 0]
        consts = (w, fused.METHOD_CODES[self.method.name], fused.ELECTION_CODES[opt.election],
                  opt.zero_sign == "positive", bool((w == 1.0).all()), np.float32(opt.lambda_),
                  np.float32(positive.min() if positive.size else 1.0))
        # the trim arguments are the same for every block unless tied entries are kept by position
        fixed = None if whole[2].any() else whole
        lands = writer.page_offset(info.key)
        is_shared = shared is not None
        # workers write their blocks themselves when the writer hashes on its own thread (threads > 1)
        puts = writer if writer.hashes_aside else None
        return FusedLaunch(job, stats, digest, self.blocks(job, fused_blocks=True),
                           lambda sp: self._merge_block(job, consts, thresholds, is_shared, fixed, lands, puts, sp))

    def finish_fused(self, launch: "FusedLaunch", writer: ShardedWriter,
                     following: "FusedLaunch | None" = None) -> TensorStats:
        """Account for a launched tensor's blocks in order as the workers finish them (and write
        them, when the workers have not: one thread, or a writer that hashes on the calling thread).

        Up to 2 x threads blocks are in flight (plus the one being accounted for), as in `_ordered`;
        once all of this tensor's blocks are submitted, the free slots take `following`'s first
        blocks, so the workers keep computing across the tensor boundary while this thread handles
        the last blocks (most tensors are only 1-3 blocks: without this, every boundary left the
        workers idle for a block's write; measured 2026-11-30 before commit f12ff16, when this
        thread still wrote and hashed)."""
        job, stats, m = launch.job, launch.stats, self.m
        writer.begin(job.info.key)
        try:
            for span in launch.spans:
                if self.threads <= 1:
                    data, identical, gram, ints, floats = launch.fn(span)
                else:
                    self._top_up(launch, following)
                    fut = launch.pending.popleft()
                    self._top_up(launch, following)
                    data, identical, gram, ints, floats = fut.result()
                stats.chunks += 1
                if identical:
                    stats.identical_chunks += 1
                else:
                    g = torch.from_numpy(gram)
                    assert stats.gram is not None
                    stats.gram += g + g.T - torch.diag(torch.diagonal(g))
                    for i in range(m):
                        stats.kept[i] += int(ints[i])
                    stats.conflicts += int(ints[m])
                    stats.touched += int(ints[m + 1])
                    stats.delta_sq += float(floats[0])
                    stats.delta_max = max(stats.delta_max, float(floats[1]))
                if launch.digest is not None:  # before `wrote` may hand the block to the hashing thread
                    launch.digest.update(_raw(data).numpy())
                if writer.hashes_aside:  # the worker wrote it (launch_fused)
                    writer.wrote(data)
                else:
                    writer.write(data)
        except BaseException:
            for f in (*launch.pending, *(following.pending if following is not None else ())):
                f.cancel()
            raise
        if stats.chunks and stats.identical_chunks == stats.chunks:
            stats.mode = "unchanged"
        return stats

    def _top_up(self, launch: "FusedLaunch", following: "FusedLaunch | None") -> None:
        """Submit blocks, this tensor's first, until 2 x threads are in flight."""
        pool = self._workers()
        in_flight = len(launch.pending) + (len(following.pending) if following is not None else 0)
        for t in (launch, following):
            while t is not None and in_flight < 2 * self.threads and t.submitted < len(t.spans):
                t.pending.append(pool.submit(t.fn, t.spans[t.submitted]))
                t.submitted += 1
                in_flight += 1


@dataclass
class FusedLaunch:
    """One tensor's fused merge, ready to run (Engine.launch_fused / finish_fused)."""

    job: TensorJob
    stats: TensorStats
    digest: "hashlib._Hash | None"
    spans: list[tuple[int, int]]
    fn: Callable[[tuple[int, int]], tuple[torch.Tensor, bool, np.ndarray, np.ndarray, np.ndarray]]
    pending: deque[Future[tuple[torch.Tensor, bool, np.ndarray, np.ndarray, np.ndarray]]] = field(
        default_factory=deque)
    submitted: int = 0  # spans handed to the workers so far


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(_raw(a), _raw(b))
