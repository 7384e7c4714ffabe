"""`merge_checkpoints`: merge local HF-format safetensors checkpoints into one (the seam).

Why a function over local paths: the runtime job resolves artifact URIs (file://, s3://) with the
storage layer and calls this; the algorithm package itself never touches storage or tracking.

Output: sharded safetensors in the base's tensor names with `model.safetensors.index.json`, every
non-weight file of the base (config, processor, tokenizer, chat template) copied, a JSON report
(`merge_report.json`) and a `sha256sum -c` manifest (`SHA256SUMS`). Nothing time- or
machine-dependent is written, so a re-run produces byte-identical files.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import json
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future
from pathlib import Path
from typing import Literal

import torch
from pydantic import BaseModel, ConfigDict, Field, model_validator

from venus_core.config.registry import MERGE_METHODS
from venus_core.merge import mergekit_compat
from venus_core.merge import methods as _methods  # noqa: F401 - registers the built-in methods
from venus_core.merge.engine import PLAN_AHEAD, Backend, Engine, FusedLaunch, TensorPlan
from venus_core.merge.io import REPORT_NAME, CheckpointReader, ShardedWriter, copy_non_weight_files, write_manifest
from venus_core.merge.keys import EMBED_KEY, LM_HEAD_KEY, PARTS, Part
from venus_core.merge.methods import CombineOptions, Election, MergeMethod, ZeroSign
from venus_core.merge.trim import Threshold, TiePolicy, find_thresholds, k_for
from venus_core.merge.verify import TensorJob, TensorStats, check_tokenizers, match_inputs, structural_diff


class PartPolicy(BaseModel):
    """Per-part overrides: density and lambda, or `copy_base` to take the part from the base."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    density: float | None = Field(default=None, gt=0.0, le=1.0)
    lambda_: float | None = Field(default=None, alias="lambda")
    copy_base: bool = False


class MergeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    method: str = "ties"
    weights: list[float] | None = None
    density: float = Field(default=0.2, gt=0.0, le=1.0)
    lambda_: float = Field(default=1.0, alias="lambda")
    trim_scope: Literal["tensor", "model"] = "tensor"
    election: Election = "mass"
    zero_sign: ZeroSign = "none"
    # "argsort": the tied entries mergekit keeps (its sort's order; whole tensors in memory: parity only)
    threshold_ties: Literal["index", "keep", "argsort"] = "index"
    # "mergekit": every step rounded to the checkpoint dtype as mergekit computes it (parity only,
    # mergekit_compat.py); "fp32": computed in fp32, rounded once
    arithmetic: Literal["fp32", "mergekit"] = "fp32"
    parts: dict[Part, PartPolicy] = Field(default_factory=dict)
    # the merge process's peak RSS stays within this (what the process holds when the merge starts -
    # interpreter, torch, numba - is subtracted; at least a quarter of it is used either way)
    max_working_bytes: int = Field(default=1 << 30, ge=1 << 16)
    shard_bytes: int = Field(default=2 * (1 << 30), ge=1)
    backend: Backend = "fused"  # fused numba kernels; "torch" = the block-wise reference path
    threads: int | None = Field(default=None, ge=1)  # worker threads (fused); None: torch's thread count

    @model_validator(mode="after")
    def _known_method(self) -> "MergeConfig":
        MERGE_METHODS.get(self.method)  # unknown name -> error listing the known ones
        mergekit_compat.check_options(self.method, self.election, self.zero_sign, self.arithmetic,
                                      self.trim_scope, self.threshold_ties)
        return self

    @property
    def parity(self) -> bool:
        """Whether a parity mode (mergekit's arithmetic or tie order) merges the float tensors."""
        return self.arithmetic == "mergekit" or self.threshold_ties == "argsort"

    @classmethod
    def mergekit_ties(cls, **kw: object) -> "MergeConfig":
        """Settings that reproduce mergekit's `ties` (normalize: true) semantics."""
        return cls(method="ties", election="weighted_mass", zero_sign="positive", **kw)


def _weights(cfg: MergeConfig, method: MergeMethod, m: int) -> torch.Tensor:
    if cfg.weights is None:
        w = [1.0 / m] * m if method.weights_sum_to_one else [1.0] * m
    else:
        w = list(cfg.weights)
    if len(w) != m:
        raise ValueError(f"weights: {len(w)} given for {m} models")
    if method.weights_sum_to_one and abs(sum(w) - 1.0) > 1e-6:
        raise ValueError(f"weights: {cfg.method} needs weights summing to 1, got {sum(w)}")
    if method.nonnegative_weights and any(x < 0 for x in w):
        raise ValueError(f"weights: {cfg.method} needs non-negative weights, got {w}")
    return torch.tensor(w, dtype=torch.float32)


def _tied(base: Path) -> bool:
    p = base / "config.json"
    if not p.is_file():
        return False
    cfg = json.loads(p.read_text())
    text = cfg.get("text_config") or {}
    return bool(cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False)))


KERNEL_RESERVE = 96 << 20  # what loading the compiled kernels (numba, LLVM) adds to RSS, measured ~70 MiB


def resident_bytes() -> int:
    """This process's resident set size now (Linux /proc; 0 where unavailable)."""
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        return 0


def working_budget(max_working_bytes: int) -> int:
    """Bytes the engine may fill: `max_working_bytes` less what the process holds already and what
    loading the kernels adds, so that the peak RSS stays within `max_working_bytes`; at least a
    quarter of it (a caller that holds more than that already gets a merge that exceeds the bound)."""
    return max(max_working_bytes - resident_bytes() - KERNEL_RESERVE, max_working_bytes // 4)


def _global_thresholds(engine: Engine, jobs: list[TensorJob], density: float,
                       ties: TiePolicy) -> list[Threshold]:
    n = sum(j.info.numel for j in jobs)

    def chunks() -> Iterator[torch.Tensor]:
        for j in jobs:
            yield from engine.task_vector_chunks(j)

    return find_thresholds(chunks, [k_for(density, n)] * engine.m, n, ties)


def merge_checkpoints(base: Path | str, models: Sequence[Path | str], out: Path | str,
                      config: MergeConfig | None = None, *,
                      progress: Callable[[int, int | None], None] | None = None) -> dict[str, object]:
    """Merge `models` (fine-tunes of `base`) into `out`; returns the report also written there.

    `progress(tensors written, tensors)` is called as each output tensor is complete.

    `out` must be empty or absent; a merge that fails (or is interrupted) removes what it wrote, so
    `out` never holds a partial checkpoint (an interpreter killed outright cannot: its output has
    no SHA256SUMS, which a completed merge always writes last)."""
    cfg = config or MergeConfig()
    method: MergeMethod = MERGE_METHODS.get(cfg.method)
    base_p, model_ps, out_p = Path(base), [Path(m) for m in models], Path(out)
    if not model_ps:
        raise ValueError("no models to merge")
    if not method.uses_lambda and (cfg.lambda_ != 1.0 or any(p.lambda_ not in (None, 1.0) for p in cfg.parts.values())):
        raise ValueError(f"lambda: {cfg.method} has no lambda (got {cfg.lambda_})")
    weights = _weights(cfg, method, len(model_ps))
    base_r = CheckpointReader(base_p)
    model_rs = [CheckpointReader(p) for p in model_ps]
    jobs = match_inputs(base_r, model_rs)
    tokenizer = check_tokenizers(base_p, model_ps)
    if out_p.exists() and any(out_p.iterdir()):
        raise FileExistsError(f"{out_p}: output directory is not empty")
    created = not out_p.exists()
    out_p.mkdir(parents=True, exist_ok=True)

    try:
        return _merge(cfg, method, weights, base_p, model_ps, out_p, base_r, model_rs, jobs, tokenizer, progress)
    except BaseException:
        _remove_partial(out_p, created)
        raise
    finally:
        for r in (base_r, *model_rs):
            r.close()


def _remove_partial(out: Path, created: bool) -> None:
    """Remove what a failed merge wrote: its shards may have holes (workers write blocks ahead, at
    their places), which would load as zeros. `out` was empty or absent when the merge started,
    so all it holds is this merge's; the directory itself goes too when the merge created it."""
    for child in list(out.iterdir()) if out.is_dir() else []:
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    if created:
        with contextlib.suppress(OSError):
            out.rmdir()


def _merge(cfg: MergeConfig, method: MergeMethod, weights: torch.Tensor, base_p: Path, model_ps: list[Path],
           out_p: Path, base_r: CheckpointReader, model_rs: list[CheckpointReader], jobs: list[TensorJob],
           tokenizer: dict[str, str], progress: Callable[[int, int | None], None] | None) -> dict[str, object]:
    torch_threads = torch.get_num_threads()
    ties: TiePolicy = "index" if cfg.threshold_ties == "argsort" else cfg.threshold_ties
    engine = Engine(base_r, model_rs, method, weights, cfg.max_working_bytes, ties,
                    backend="torch" if cfg.parity else cfg.backend, threads=cfg.threads or torch_threads,
                    working_bytes=working_budget(cfg.max_working_bytes))
    if cfg.backend == "fused":
        # the fused kernels run on the engine's own worker threads; torch's few small ops (samples,
        # candidate selection) would otherwise start its intra-op pool, whose idle workers spin
        # on the very cores the kernels need. Process-wide, so restored afterwards.
        torch.set_num_threads(1)
    # the ~200k objects alive now (torch, numba, ...) are not garbage; frozen, the cyclic collector
    # stops re-scanning them at every collection the merge's small allocations trigger (it holds
    # the GIL: 0.25 s of a 1 GB merge, 0.07 s frozen). Skipped when the caller froze already.
    freeze = gc.get_freeze_count() == 0
    if freeze:
        gc.freeze()
    try:
        return _merge_with(engine, cfg, method, base_p, model_ps, out_p, base_r, jobs, tokenizer, progress)
    finally:
        engine.close()
        torch.set_num_threads(torch_threads)
        if freeze:
            gc.unfreeze()


def _merge_with(engine: Engine, cfg: MergeConfig, method: MergeMethod, base_p: Path, model_ps: list[Path],
                out_p: Path, base_r: CheckpointReader, jobs: list[TensorJob],
                tokenizer: dict[str, str], progress: Callable[[int, int | None], None] | None) -> dict[str, object]:
    policy = {p: cfg.parts.get(p, PartPolicy()) for p in PARTS}
    density = {p: policy[p].density or cfg.density for p in PARTS}
    lam = {p: cfg.lambda_ if policy[p].lambda_ is None else policy[p].lambda_ for p in PARTS}
    shared: dict[Part, list[Threshold]] = {}
    if method.trims and cfg.trim_scope == "model":
        for p in PARTS:
            pj = [j for j in jobs if j.part == p and j.is_float]
            if pj and not policy[p].copy_base and density[p] < 1.0:
                shared[p] = _global_thresholds(engine, pj, density[p], engine.ties)

    tied = _tied(base_p)
    digests = {k: hashlib.sha256() for k in (EMBED_KEY, LM_HEAD_KEY)} if tied else {}
    # with worker threads, the output's sha256 runs on a thread of its own and the workers write
    # their blocks: the calling thread then only orders blocks (io.ShardedWriter)
    writer = ShardedWriter(out_p, [j.info for j in jobs], cfg.shard_bytes,
                           hash_thread=engine.fuses and engine.threads > 1)
    try:
        stats = _write_tensors(engine, cfg, jobs, writer, policy, density, lam, shared, digests,
                               _Stats(len(jobs), progress))
        files = writer.finish()
    except BaseException:
        engine.close()  # the workers first: none may still write into a file that abort closes
        writer.abort()
        raise
    files.update(copy_non_weight_files(base_p, out_p))
    diffs = structural_diff(CheckpointReader(out_p), base_r)
    if diffs:
        raise RuntimeError(f"{out_p}: output differs structurally from the base: {diffs[:5]}")
    if tied and len(digests) == 2 and all(k in {j.canon for j in jobs} for k in digests):
        if digests[EMBED_KEY].hexdigest() != digests[LM_HEAD_KEY].hexdigest():
            raise RuntimeError(f"{out_p}: tie_word_embeddings is set but merged lm_head != embed_tokens")

    report = _report(cfg, base_p, model_ps, stats, policy, density, tokenizer, tied)
    raw = (json.dumps(report, indent=1, sort_keys=True) + "\n").encode()
    (out_p / REPORT_NAME).write_bytes(raw)
    files[REPORT_NAME] = hashlib.sha256(raw).hexdigest()
    write_manifest(out_p, files)
    return report


def _write_tensors(engine: Engine, cfg: MergeConfig, jobs: list[TensorJob], writer: ShardedWriter,
                   policy: dict[Part, PartPolicy], density: dict[Part, float], lam: dict[Part, float],
                   shared: dict[Part, list[Threshold]], digests: dict[str, "hashlib._Hash"],
                   stats: _Stats) -> list[TensorStats]:
    """Merge or copy every tensor, in plan order, into `writer`; the per-tensor statistics."""

    def prepare(i: int) -> "Future[TensorPlan] | None":
        if i >= len(jobs) or not jobs[i].is_float or policy[jobs[i].part].copy_base:
            return None
        return engine.prepare(jobs[i], density[jobs[i].part], shared.get(jobs[i].part))

    ahead = {0: prepare(0)}
    launched: FusedLaunch | None = None
    for i, j in enumerate(jobs):
        d = digests.get(j.canon)
        for a in range(i + 1, i + 1 + PLAN_AHEAD):  # the next tensors' threshold passes overlap this merge
            if a not in ahead:
                ahead[a] = prepare(a)
        cur = ahead.pop(i)
        merged = j.is_float and not policy[j.part].copy_base
        opt = CombineOptions(lam[j.part], cfg.election, cfg.zero_sign)
        if merged and cfg.parity:
            stats.append(mergekit_compat.merge_tensor(engine, j, writer, opt, density[j.part], cfg.arithmetic,
                                                      cfg.threshold_ties, d))
            continue
        # a fused tensor is launched before the previous one is written, so that one's last
        # blocks and this one's first share the workers (Engine.finish_fused)
        nxt = engine.launch_fused(j, writer, opt, density[j.part], shared.get(j.part), d, cur) \
            if merged and engine.fuses else None
        if launched is not None:
            stats.append(engine.finish_fused(launched, writer, nxt))
        launched = nxt
        if nxt is not None:
            continue
        if not merged:
            stats.append(engine.copy_tensor(j, writer, check_equal=not j.is_float, digest=d))
        else:
            stats.append(engine.merge_tensor(j, writer, opt, density[j.part], shared.get(j.part), d, cur))
    if launched is not None:
        stats.append(engine.finish_fused(launched, writer))
    return stats.done


class _Stats:
    """The per-tensor statistics in output order, reporting `progress(len, tensors)` as each comes."""

    def __init__(self, tensors: int, progress: Callable[[int, int | None], None] | None) -> None:
        self.done: list[TensorStats] = []
        self.tensors, self.progress = tensors, progress

    def append(self, s: TensorStats) -> None:
        self.done.append(s)
        if self.progress is not None:
            self.progress(len(self.done), self.tensors)


def _report(cfg: MergeConfig, base: Path, models: list[Path], stats: list[TensorStats],
            policy: dict[Part, PartPolicy], density: dict[Part, float],
            tokenizer: dict[str, str], tied: bool) -> dict[str, object]:
    per_part: dict[str, object] = {}
    for p in PARTS:
        ps = [s for s in stats if s.part == p]
        if not ps:
            continue
        n = sum(s.n for s in ps)
        touched = sum(s.touched for s in ps)
        per_part[p] = {
            "tensors": len(ps), "numel": n,
            "policy": "copy_base" if policy[p].copy_base else "merge",
            "density": density[p],
            "unchanged_tensors": sum(s.mode == "unchanged" for s in ps),
            "achieved_density": [round(sum(s.kept[i] for s in ps) / max(n, 1), 8) for i in range(len(models))],
            "sign_conflict_rate": round(sum(s.conflicts for s in ps) / touched, 8) if touched else 0.0,
            "merged_delta_norm": round(sum(s.delta_sq for s in ps) ** 0.5, 8),
        }
    return {
        "config": cfg.model_dump(mode="json", by_alias=True),
        "base": str(base), "models": [str(m) for m in models],
        "tokenizer_sha256": tokenizer, "tie_word_embeddings": tied,
        "checks": {"structure": "identical to base", "non_finite": 0},
        "parts": per_part,
        "tensors": [s.to_json() for s in stats],
    }
