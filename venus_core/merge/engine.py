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
one's are all submitted (launch_fused / finish_fused); that backend lives in fused_engine.py (a
mixin of Engine). "torch" runs the block-wise tensor ops below;
it is the reference the fused kernels are tested against, and the path for what the kernels do not
cover (a threshold that must count ties while streaming, a merge method registered by a plugin).

Per-tensor trim threshold: a tensor that fits in one block gets it by direct selection from the
task vectors already computed for the merge (read once). A larger tensor is read twice: one
pass that counts/collects around bounds taken from a small sample (trim.py; for the fused backend
select.py, which counts the band's heavily tied values instead of collecting them), then the merge
pass; only if the sample's bounds miss (rare, adversarial data) do two radix passes follow.

All maths is fp32 and rounded once to the base's dtype. A block where every model is
byte-identical to the base (e.g. a vision tower frozen during RL) is copied as raw base bytes,
so such parts come out bit-exact (no fp32 round trip, no -0.0/+0.0 surprises); the fused backend
recognises a whole tensor of that kind from its sample and copies it without merging it.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from venus_core.merge import fused
from venus_core.merge.fused_engine import (FUSED_BLOCK, PLAN_AHEAD, SAMPLE_RUN, SAMPLE_RUNS, FusedBackend,
                                           FusedLaunch, TensorPlan, raw_bytes, same_bytes)
from venus_core.merge.io import DTYPES, CheckpointReader, ShardedWriter
from venus_core.merge.methods import CombineOptions, MergeMethod
from venus_core.merge.trim import Threshold, TiePolicy, apply_thresholds, exact_thresholds, find_thresholds, k_for
from venus_core.merge.verify import MergeInputError, TensorJob, TensorStats, non_finite_error

BLOCK_ELEMS = 1 << 17  # elements per model per compute block (512 KiB of fp32)
Backend = Literal["fused", "torch"]
__all__ = ["BLOCK_ELEMS", "FUSED_BLOCK", "PLAN_AHEAD", "Backend", "Engine", "FusedLaunch", "TensorPlan"]


def write_merged(key: str, out: torch.Tensor, writer: ShardedWriter, digest: "hashlib._Hash | None") -> None:
    """Write a merged block (torch path) after checking it is finite, and feed the tensor's digest."""
    err = non_finite_error(f"merged tensor {key!r}", out.to(torch.float32))
    if err:
        raise ValueError(err + " (overflow while merging)")
    writer.write(out)
    if digest is not None:
        digest.update(raw_bytes(out).numpy())


@dataclass
class Engine(FusedBackend):
    base: CheckpointReader
    models: list[CheckpointReader]
    method: MergeMethod
    weights: torch.Tensor  # [M] fp32
    max_working_bytes: int
    ties: TiePolicy
    backend: Backend = "fused"
    threads: int = 1
    working_bytes: int = 0  # the budget the engine sizes its buffers by (api.py: what RSS leaves; 0: all)
    fallbacks: int = field(default=0, init=False)  # models whose threshold pass needed the radix passes
    _pool: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _planner: ThreadPoolExecutor | None = field(default=None, init=False, repr=False)
    _local: threading.local = field(default_factory=threading.local, init=False, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.working_bytes <= 0:
            self.working_bytes = self.max_working_bytes

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
                ) -> "Future[TensorPlan] | None":
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
        return self._planner.submit(self.plan_tensor, job, k_for(density, job.info.numel))

    def block_elems(self, job: TensorJob) -> int:
        """Elements per block: the budget over the per-element working set, capped for the cache."""
        per_elem = (self.m + 1) * DTYPES[job.info.dtype].itemsize + 24 * self.m + 24
        n = self.working_bytes // per_elem
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
        """[M, s] fp32 task-vector sample: SAMPLE_RUNS contiguous runs spread evenly over the tensor.

        Read with pread (CheckpointReader.read_runs), not through the mapping: the kernel maps the
        cached pages around every faulting one (fault-around, 64 KiB), so 1,024 runs mapped up to
        64 MiB of every input of every tensor being planned, and the faults cost twice the reads.
        bf16 is widened exactly (its bits are an fp32's upper half), other dtypes converted by torch."""
        n = job.info.numel
        starts = [0] if n <= SAMPLE_RUNS * SAMPLE_RUN else [
            (n - SAMPLE_RUN) * j // (SAMPLE_RUNS - 1) for j in range(SAMPLE_RUNS)]
        length = n if len(starts) == 1 else SAMPLE_RUN
        dtype = DTYPES[job.info.dtype]

        def gather(reader: CheckpointReader, key: str) -> np.ndarray:
            raw = reader.read_runs(key, starts, length)
            if dtype == torch.float32:
                return raw.view(np.float32)
            if dtype == torch.bfloat16:
                return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
            return torch.frombuffer(bytearray(raw), dtype=dtype).to(torch.float32).numpy()

        bn = gather(self.base, job.info.key)
        return torch.from_numpy(np.stack([np.subtract(gather(r, k), bn) for r, k in zip(self.models, job.model_keys)]))

    def keeps_pages(self, job: TensorJob) -> bool:
        """Whether a threshold pass leaves a tensor's input pages mapped for the merge pass to
        re-read soon (only small tensors: the pages count towards RSS until merged; with the
        tensors planned ahead, at most a quarter of the working budget)."""
        return (self.m + 1) * job.info.nbytes <= self.working_bytes // (4 * (PLAN_AHEAD + 1))

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
                    if not same_bytes(b, x):
                        raise MergeInputError(f"{r.root}: non-float tensor {k!r} differs from the base")
            writer.write(b)
            if digest is not None:
                digest.update(raw_bytes(b).numpy())
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
                     prepared: "Future[TensorPlan] | None" = None) -> TensorStats:
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
            if zero and all(same_bytes(b, x) for x in xs):
                stats.identical_chunks += 1
                writer.write(b)
                if digest is not None:
                    digest.update(raw_bytes(b).numpy())
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
            write_merged(info.key, out, writer, digest)
        if stats.chunks and stats.identical_chunks == stats.chunks:
            stats.mode = "unchanged"
        return stats
