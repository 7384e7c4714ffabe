"""Streaming merge of one tensor: read row chunks of base and models, trim, combine, write.

Why: memory must stay bounded by `max_working_bytes` whatever the model size. A tensor is cut
into row chunks sized from the budget (every input chunk, its fp32 task vectors and the method's
temporaries counted per element). A tensor that fits in one chunk is read once; a larger one is
read three times when it needs a per-tensor trim threshold (two histogram passes, trim.py, then
the merge pass) instead of being sorted in memory.

All maths is fp32 and rounded once to the base's dtype. A chunk where every model is
byte-identical to the base (e.g. a vision tower frozen during RL) is copied as raw base bytes,
so such parts come out bit-exact (no fp32 round trip, no -0.0/+0.0 surprises).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from venus_core.merge.io import DTYPES, CheckpointReader, ShardedWriter, iter_row_chunks
from venus_core.merge.methods import CombineOptions, MergeMethod
from venus_core.merge.trim import Threshold, TiePolicy, apply_thresholds, find_thresholds, k_for
from venus_core.merge.verify import MergeInputError, TensorJob, TensorStats, non_finite_error


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

    def rows_per_chunk(self, job: TensorJob) -> int:
        info = job.info
        if not info.shape:
            return 1
        row = info.numel // max(info.shape[0], 1)
        per_elem = (self.m + 1) * DTYPES[info.dtype].itemsize + 24 * self.m + 24
        rows = self.max_working_bytes // max(row * per_elem, 1)
        if rows < 1:
            raise ValueError(
                f"max_working_bytes={self.max_working_bytes} is too small for one row of "
                f"{info.key!r} ({row * per_elem} bytes of working memory)"
            )
        return int(rows)

    def _read(self, job: TensorJob, start: int | None, stop: int | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        b = self.base.read(job.info.key, start, stop)
        return b, [r.read(k, start, stop) for r, k in zip(self.models, job.model_keys)]

    def _taus(self, job: TensorJob, b: torch.Tensor, raws: list[torch.Tensor],
              check: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
        """fp32 base and task vectors of a chunk; `check` scans inputs for NaN/Inf (merge pass)."""
        b32 = b.to(torch.float32).reshape(-1)
        err = check and non_finite_error(f"{self.base.root}: tensor {job.info.key!r}", b32)
        if err:
            raise MergeInputError(err)
        taus = torch.empty(self.m, b32.numel(), dtype=torch.float32)
        for i, r in enumerate(raws):
            taus[i].copy_(r.reshape(-1))
            err = check and non_finite_error(f"{self.models[i].root}: tensor {job.model_keys[i]!r}", taus[i])
            if err:
                raise MergeInputError(err)
            taus[i].sub_(b32)
        return b32, taus

    def task_vector_chunks(self, job: TensorJob) -> Iterator[torch.Tensor]:
        """[M, c] fp32 task-vector chunks of one tensor, in flat order (threshold passes)."""
        for start, stop in iter_row_chunks(job.info.shape, self.rows_per_chunk(job)):
            b, raws = self._read(job, start, stop)
            yield self._taus(job, b, raws, check=False)[1]

    def copy_tensor(self, job: TensorJob, writer: ShardedWriter, check_equal: bool,
                    digest: "hashlib._Hash | None" = None) -> TensorStats:
        """Write the base's bytes; with check_equal, every model must hold the same bytes."""
        stats = TensorStats(job.info.key, job.part, job.info.numel, self.m, mode="copied")
        writer.begin(job.info.key)
        for start, stop in iter_row_chunks(job.info.shape, self.rows_per_chunk(job)):
            b = self.base.read(job.info.key, start, stop)
            if check_equal:
                for r, k in zip(self.models, job.model_keys):
                    if not _same_bytes(b, r.read(k, start, stop)):
                        raise MergeInputError(f"{r.root}: non-float tensor {k!r} differs from the base")
            writer.write(b)
            if digest is not None:
                digest.update(_raw(b).numpy())
        return stats

    def merge_tensor(self, job: TensorJob, writer: ShardedWriter, opt: CombineOptions,
                     density: float, shared: list[Threshold] | None,
                     digest: "hashlib._Hash | None" = None) -> TensorStats:
        """Merge one float tensor; `shared` thresholds come from a whole-part (global) trim."""
        info = job.info
        stats = TensorStats(info.key, job.part, info.numel, self.m)
        rows = self.rows_per_chunk(job)
        ranges = list(iter_row_chunks(info.shape, rows))
        cached: tuple[torch.Tensor, list[torch.Tensor]] | None = None
        thresholds: list[Threshold] | None = None
        if self.method.trims and density < 1.0:
            if shared is not None:
                thresholds = shared
            else:
                k = k_for(density, info.numel)
                stats.target_k = k
                if len(ranges) == 1:
                    cached = self._read(job, *ranges[0])
                    taus1 = self._taus(job, *cached, check=False)[1]
                    thresholds = find_thresholds(lambda: [taus1], [k] * self.m, info.numel, self.ties)
                    del taus1
                else:
                    thresholds = find_thresholds(lambda: self.task_vector_chunks(job),
                                                 [k] * self.m, info.numel, self.ties)
        out_dtype = DTYPES[info.dtype]
        writer.begin(info.key)
        for start, stop in ranges:
            b, raws = cached if cached is not None else self._read(job, start, stop)
            cached = None
            stats.chunks += 1
            if all(_same_bytes(b, r) for r in raws):
                stats.identical_chunks += 1
                err = non_finite_error(f"{self.base.root}: tensor {info.key!r}", b)
                if err:
                    raise MergeInputError(err)
                writer.write(b)
                if digest is not None:
                    digest.update(_raw(b).numpy())
                continue
            b32, taus = self._taus(job, b, raws)
            del raws
            stats.add_taus(taus)
            if thresholds is not None:
                apply_thresholds(taus, thresholds)
            stats.add_kept(taus)
            combined = self.method.combine(taus, self.weights, opt)
            del taus
            stats.conflicts += combined.conflicts
            stats.touched += combined.touched
            stats.add_delta(combined.delta)
            out = (b32 + combined.delta).to(out_dtype).reshape(b.shape)
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
