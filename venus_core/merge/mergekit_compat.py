"""Parity modes: mergekit's arithmetic and mergekit's choice of tied entries, for comparisons.

Why: at mergekit's settings (`MergeConfig.mergekit_ties`) our TIES output differs from
mergekit's in two documented ways, and a benchmark must be able to show that those are the only
ones, element by element:
- arithmetic: mergekit computes in the checkpoint's dtype, rounding at every step - the task
  vector x_i - b, the weighted task vector, the election sum, the masked sum, the divisor, the
  division, lambda, the output - where ours computes in fp32 and rounds once; in bf16 that moves
  results by an ulp or two, and ranks magnitudes of the rounded task vector, not the exact one;
- ties at the trim threshold: mergekit keeps the first k of `torch.argsort(|tau|, descending=True)`,
  whose order among equal magnitudes is its sort's (unstable, but deterministic for a given input
  and torch version: ~half the tied pairs in reverse index order), where ours keeps the lowest
  flat indices.
`arithmetic="mergekit"` reproduces the first (sums over models in model order, accumulated in
fp32 and rounded once, as torch's reductions over dim 0 do; every elementwise step a torch op in
the checkpoint's dtype), `threshold_ties="argsort"` the second (the same torch sort of the same
fp32 magnitudes). Neither is for production: the trim mask of each tensor is computed whole,
as mergekit does (the argsort alone needs ~16 bytes per element of the largest tensor), then the
merge runs block by block. Only TIES with mergekit's sign rule (election "weighted_mass" - its
"sum" consensus - or "count", zero sign "positive") has a mergekit arithmetic here.
"""

from __future__ import annotations

import hashlib
import torch

from venus_core.merge.engine import Engine, write_merged
from venus_core.merge.io import DTYPES, ShardedWriter
from venus_core.merge.methods import CombineOptions, _sign_stats
from venus_core.merge.trim import exact_thresholds, k_for
from venus_core.merge.verify import TensorJob, TensorStats


def check_options(method: str, election: str, zero_sign: str, arithmetic: str, trim_scope: str,
                  ties: str) -> None:
    """Fail early on a parity setting that has no meaning here (ValueError naming it)."""
    if arithmetic == "mergekit" and (method != "ties" or election not in ("weighted_mass", "count")
                                     or zero_sign != "positive"):
        raise ValueError("arithmetic 'mergekit' reproduces mergekit's ties: it needs method 'ties', election "
                         f"'weighted_mass' or 'count' and zero_sign 'positive' (got {method}, {election}, {zero_sign})")
    if (arithmetic == "mergekit" or ties == "argsort") and trim_scope != "tensor":
        raise ValueError("the parity modes trim per tensor, as mergekit does (trim_scope 'tensor')")


def _task_vectors(b: torch.Tensor, xs: list[torch.Tensor], arithmetic: str) -> torch.Tensor:
    """[M, c] task vectors: rounded to the checkpoint dtype (mergekit) or exact in fp32."""
    if arithmetic == "mergekit":
        return torch.stack([x - b for x in xs])
    b32 = b.to(torch.float32)
    return torch.stack([x.to(torch.float32) - b32 for x in xs])


def trim_masks(engine: Engine, job: TensorJob, density: float, arithmetic: str, ties: str) -> torch.Tensor | None:
    """[M, n] bool: the entries each model's trim keeps (None: the method does not trim / density 1)."""
    n = job.info.numel
    k = k_for(density, n)
    if not engine.method.trims or k >= n:
        return None
    masks = torch.zeros(engine.m, n, dtype=torch.bool)
    b, xs = engine._views(job, 0, n)
    for i, x in enumerate(xs):
        tau = _task_vectors(b, [x], arithmetic)[0]
        mags = tau.abs().to(torch.float32)
        del tau
        if ties == "argsort":
            masks[i, torch.argsort(mags, descending=True)[:k]] = True
        else:
            t = exact_thresholds(mags.view(1, -1), [k], ties)[0]  # type: ignore[arg-type]
            before, after = t.lams()
            cut = t.cut if t.cut is not None else (n if before == after else 0)
            masks[i, :cut] = mags[:cut] > before
            masks[i, cut:] = mags[cut:] > after
        del mags
        engine._release(job, 0, n)
    return masks


def _mergekit_ties_block(b: torch.Tensor, xs: list[torch.Tensor], mask: torch.Tensor | None, weights: torch.Tensor,
                         opt: CombineOptions) -> torch.Tensor:
    """One block of mergekit's TIES in the checkpoint dtype: every step rounded as it computes it."""
    d = _task_vectors(b, xs, "mergekit")
    if mask is not None:
        d = d * mask.to(d.dtype)  # as mergekit's delta * mask (0 * negative is -0.0, like its)
    w = weights.to(d.dtype).view(-1, *([1] * (d.dim() - 1)))
    d = d * w
    if opt.election == "count":
        score = torch.sign(d).sum(0)
    else:
        score = d.sum(0)
    elected = (score >= 0).to(d.dtype) * 2 - 1
    agree = torch.sign(d) == elected
    mixed = (d * agree).sum(0)
    divisor = (w * agree).sum(0)
    divisor[divisor == 0] = 1
    mixed = mixed / divisor
    if opt.lambda_ != 1.0:
        mixed = mixed * opt.lambda_
    return b + mixed


def merge_tensor(engine: Engine, job: TensorJob, writer: ShardedWriter, opt: CombineOptions, density: float,
                 arithmetic: str, ties: str, digest: "hashlib._Hash | None" = None) -> TensorStats:
    """Merge one float tensor in a parity mode (module docstring), block by block after its masks."""
    info = job.info
    stats = TensorStats(info.key, job.part, info.numel, engine.m)
    masks = trim_masks(engine, job, density, arithmetic, ties)
    if masks is not None:
        stats.target_k = k_for(density, info.numel)
    out_dtype = DTYPES[info.dtype]
    writer.begin(info.key)
    for s, e in engine.blocks(job):
        b, xs = engine._views(job, s, e)
        mask = None if masks is None else masks[:, s:e]
        taus = _task_vectors(b, xs, "fp32")
        stats.chunks += 1
        stats.add_taus(taus)
        trimmed = taus if mask is None else taus * mask
        stats.add_kept(trimmed)
        if arithmetic == "mergekit":
            out = _mergekit_ties_block(b, xs, mask, engine.weights, opt)
            conflicts, touched = _sign_stats(trimmed)
        else:
            combined = engine.method.combine(trimmed, engine.weights, opt)
            out = (b.to(torch.float32) + combined.delta).to(out_dtype)
            conflicts, touched = combined.conflicts, combined.touched
        stats.conflicts += conflicts
        stats.touched += touched
        stats.add_delta(out.to(torch.float32) - b.to(torch.float32))
        del b, xs, taus, trimmed
        engine._release(job, s, e)
        write_merged(info.key, out, writer, digest)
    return stats
