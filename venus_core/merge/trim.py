"""Exact, deterministic top-k-by-magnitude thresholds without sorting (TIES "trim" step).

Why: mergekit finds the top-k entries of each task vector with `argsort`, which allocates
~12 bytes per element of the largest tensor (fp32 copy + int64 indices) per model and breaks ties
in an unspecified order. Here the k-th largest magnitude is found by a two-level radix select
over the IEEE-754 bits of |tau| (non-negative fp32 values order like their int32 bit patterns):
a histogram of the high 16 bits picks the bin holding the k-th value, a histogram of the low 16
bits inside that bin gives the exact value. Memory is two small histograms per model; the data is
streamed in chunks (twice), so the same code serves one tensor, one huge tensor in row chunks,
or a whole model ("global" trimming across every tensor of a part).

Ties at the threshold: policy "index" keeps exactly k entries, the tied ones in flat row-major
order (chunks arrive in that order), so the result never depends on a sort's internals; policy
"keep" keeps every tied entry (the TIES reference code's `>=`), and the achieved density is
reported either way. k = max(1, floor(density * n)) for density in (0, 1) (mergekit's rule).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import torch

TiePolicy = Literal["index", "keep"]
_HI = 1 << 15  # sign bit is 0 for magnitudes, so the high half is < 2**15
_LO = 1 << 16
KEEP_ALL = -1  # threshold bits below every magnitude
KEEP_NONE = 0x7FFFFFFF  # above every finite magnitude


def k_for(density: float, n: int) -> int:
    """Number of entries kept out of n at a density (mergekit's rule, at least one)."""
    if density >= 1.0:
        return n
    if density <= 0.0 or n == 0:
        return 0
    return min(n, max(1, int(density * n)))


@dataclass
class Threshold:
    """Keep entries whose |tau| bits exceed `bits`, plus `tie_quota` entries equal to it."""

    bits: int
    tie_quota: int  # -1: keep all tied entries
    _ties_seen: int = field(default=0, repr=False)

    @staticmethod
    def keep_all() -> "Threshold":
        return Threshold(KEEP_ALL, 0)


def _mag_bits(taus: torch.Tensor) -> torch.Tensor:
    return taus.abs().view(torch.int32)


def find_thresholds(
    chunks: Callable[[], Iterable[torch.Tensor]], ks: list[int], n: int, ties: TiePolicy
) -> list[Threshold]:
    """Exact thresholds for keeping the top ks[i] of row i of a stream of [M, c] fp32 chunks.

    `chunks` is called up to twice (one call per histogram pass) and must yield the same data in
    the same order each time; n is the total number of columns.
    """
    m = len(ks)
    out: list[Threshold | None] = [None] * m
    todo: list[int] = []
    for i, k in enumerate(ks):
        if k >= n:
            out[i] = Threshold.keep_all()
        elif k <= 0:
            out[i] = Threshold(KEEP_NONE, 0)
        else:
            todo.append(i)
    if not todo:
        return [t for t in out if t is not None]
    hi = torch.zeros(m, _HI, dtype=torch.int64)
    for c in chunks():
        bits = _mag_bits(c)
        for i in todo:
            hi[i] += torch.bincount(bits[i] >> 16, minlength=_HI)[:_HI]
    bins: dict[int, int] = {}
    above: dict[int, int] = {}
    for i in todo:
        ge = hi[i].flip(0).cumsum(0).flip(0)  # ge[b] = count(hi >= b)
        b = int(torch.nonzero(ge >= ks[i]).max())
        bins[i] = b
        above[i] = int(ge[b + 1]) if b + 1 < _HI else 0
    lo = torch.zeros(m, _LO, dtype=torch.int64)
    for c in chunks():
        bits = _mag_bits(c)
        for i in todo:
            row = bits[i]
            sel = row[(row >> 16) == bins[i]] & 0xFFFF
            lo[i] += torch.bincount(sel, minlength=_LO)
    for i in todo:
        need = ks[i] - above[i]
        ge = lo[i].flip(0).cumsum(0).flip(0)
        t_lo = int(torch.nonzero(ge >= need).max())
        n_above = above[i] + (int(ge[t_lo + 1]) if t_lo + 1 < _LO else 0)
        quota = ks[i] - n_above if ties == "index" else -1
        out[i] = Threshold((bins[i] << 16) | t_lo, quota)
    return [t for t in out if t is not None]


def apply_thresholds(taus: torch.Tensor, thresholds: list[Threshold]) -> torch.Tensor:
    """Zero, in place, the entries of a [M, c] chunk that the thresholds drop; returns the kept mask.

    Must see the chunks of a tensor (or of a part, for global trimming) in flat order: the tie
    quota is consumed as tied entries are met.
    """
    bits = _mag_bits(taus)
    keep = torch.empty_like(taus, dtype=torch.bool)
    for i, t in enumerate(thresholds):
        if t.bits == KEEP_ALL:
            keep[i] = True
            continue
        row = bits[i]
        if t.tie_quota < 0:
            torch.ge(row, t.bits, out=keep[i])
            continue
        torch.gt(row, t.bits, out=keep[i])
        left = t.tie_quota - t._ties_seen
        if left > 0 and t.bits > 0:  # tied zeros need no quota: keeping them changes nothing
            eq = row == t.bits
            n_eq = int(eq.sum())
            if n_eq:
                if n_eq > left:
                    eq &= eq.cumsum(0, dtype=torch.int32) <= left
                keep[i] |= eq
                t._ties_seen += min(n_eq, left)
    taus.masked_fill_(~keep, 0.0)
    return keep
