"""Streaming merge of one tensor: flat blocks of base and models, trim, combine, write.

Why blocks rather than whole tensors: memory must stay bounded by `max_working_bytes` whatever
the model size, and speed comes from small temporaries. Inputs are zero-copy views of the
memory-mapped files (io.py); every temporary of a block (fp32 task vectors, masks, sums) is
at most `BLOCK_ELEMS` elements per model, so it stays in the CPU cache and the allocator reuses
it instead of page-faulting fresh memory (which, measured on the project's VMs, cost several
times the arithmetic itself). Mapped input pages are released after each block.

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
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from venus_core.merge.io import DTYPES, CheckpointReader, ShardedWriter
from venus_core.merge.methods import CombineOptions, MergeMethod
from venus_core.merge.trim import (Threshold, TiePolicy, apply_thresholds, exact_thresholds,
                                   find_thresholds, k_for)
from venus_core.merge.verify import MergeInputError, TensorJob, TensorStats, non_finite_error

BLOCK_ELEMS = 1 << 17  # elements per model per compute block (512 KiB of fp32)
SAMPLE_RUNS, SAMPLE_RUN = 64, 1024  # threshold sample: evenly spaced contiguous runs


@dataclass
class Engine:
    base: CheckpointReader
    models: list[CheckpointReader]
    method: MergeMethod
    weights: torch.Tensor  # [M] fp32
    max_working_bytes: int
    ties: TiePolicy

    @property
    def m(self) -> int:
        return len(self.models)

    def block_elems(self, job: TensorJob) -> int:
        """Elements per block: the budget over the per-element working set, capped for the cache."""
        per_elem = (self.m + 1) * DTYPES[job.info.dtype].itemsize + 24 * self.m + 24
        n = self.max_working_bytes // per_elem
        if n < 1:
            raise ValueError(f"max_working_bytes={self.max_working_bytes} is too small for one element "
                             f"of {job.info.key!r} ({per_elem} bytes of working memory)")
        return int(min(n, BLOCK_ELEMS))

    def blocks(self, job: TensorJob) -> list[tuple[int, int]]:
        n, size = job.info.numel, self.block_elems(job)
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
        """[M, s] task-vector sample: SAMPLE_RUNS contiguous runs spread evenly over the tensor."""
        n = job.info.numel
        if n <= SAMPLE_RUNS * SAMPLE_RUN:
            runs = [(0, n)]
        else:
            runs = [((n - SAMPLE_RUN) * j // (SAMPLE_RUNS - 1), 0) for j in range(SAMPLE_RUNS)]
            runs = [(s, s + SAMPLE_RUN) for s, _ in runs]
        parts = []
        for s, e in runs:
            parts.append(self._taus(job, *self._views(job, s, e), check=False)[1])
            self._release(job, s, e)
        return torch.cat(parts, dim=1)

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

    def merge_tensor(self, job: TensorJob, writer: ShardedWriter, opt: CombineOptions,
                     density: float, shared: list[Threshold] | None,
                     digest: "hashlib._Hash | None" = None) -> TensorStats:
        """Merge one float tensor; `shared` thresholds come from a whole-part (global) trim."""
        info = job.info
        stats = TensorStats(info.key, job.part, info.numel, self.m)
        blocks = self.blocks(job)
        first: tuple[torch.Tensor, torch.Tensor, bool] | None = None
        thresholds: list[Threshold] | None = None
        if self.method.trims and density < 1.0:
            if shared is not None:
                thresholds = shared
            else:
                k = k_for(density, info.numel)
                stats.target_k = k
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


def _raw(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


def _same_bytes(a: torch.Tensor, b: torch.Tensor) -> bool:
    return torch.equal(_raw(a), _raw(b))
