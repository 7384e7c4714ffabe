"""Exact, deterministic top-k-by-magnitude thresholds without sorting (TIES "trim" step).

Why: mergekit finds the top-k entries of each task vector with `argsort`, which allocates
~12 bytes per element of the largest tensor (fp32 copy + int64 indices) per model and breaks ties
in an unspecified order. Here the k-th largest magnitude is found by a two-level radix select
over the IEEE-754 bits of |tau| (non-negative fp32 values order like their int32 bit patterns):
a histogram of the high 16 bits picks the bin holding the k-th value, a histogram of the low 16
bits inside that bin gives the exact value. Memory is two small histograms per model; the data is
streamed in chunks (twice), so the same code serves one tensor, one huge tensor in row chunks,
or a whole model ("global" trimming across every tensor of a part).

Two faster exact paths come first (the radix passes, with their histograms, cost more than the
whole merge arithmetic): `exact_thresholds` selects the k-th magnitude directly
(`kth_smallest`, numpy's introselect) when the data is one in-memory block; `find_thresholds(..., sample=S)` takes
bounds around the k-th magnitude from a small sample, then in ONE streaming pass counts the
entries above the upper bound and collects the few between the bounds, and selects the exact
value among those. The bounds are only a guess: if the k-th entry is not between them (or too
many entries are), that row falls back to the radix passes, so the result is exact either way.

Ties at the threshold: policy "index" keeps exactly k entries, the tied ones in flat row-major
order (chunks arrive in that order), so the result never depends on a sort's internals; policy
"keep" keeps every tied entry (the TIES reference code's `>=`), and the achieved density is
reported either way. k = max(1, floor(density * n)) for density in (0, 1) (mergekit's rule).
Which tied entries "index" keeps is stored as a *cut*, one flat position: the tied entries before
it are kept, those from it on are dropped. bf16 fine-tunes tie by the million at the threshold
(their small updates are one or two units in the last place): a cut costs nothing there, where
the list of kept positions it replaced held millions of entries per tensor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import torch

from venus_core.merge import fused

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
    n_tied: int = -1  # entries equal to the threshold in all the data (-1: unknown)
    cut: int | None = None  # per tensor, when known: the tied entries kept are those before this flat position
    _ties_seen: int = field(default=0, repr=False)

    @property
    def keeps_all_ties(self) -> bool:
        return self.tie_quota < 0 or 0 <= self.n_tied <= self.tie_quota

    @staticmethod
    def keep_all() -> "Threshold":
        return Threshold(KEEP_ALL, 0)

    def lams(self) -> tuple[float, float]:
        """(lam before the cut, lam from the cut on): entries with |tau| > lam are kept.

        Equal when the cut does not matter (all ties kept, none tied, zeros); -inf keeps all."""
        if self.bits == KEEP_ALL:
            return -math.inf, -math.inf
        if self.bits >= KEEP_NONE:
            return math.inf, math.inf
        if self.bits == 0:  # tied zeros need no quota: keeping them changes nothing
            return 0.0, 0.0
        below = _as_float(self.bits - 1)
        if self.keeps_all_ties:
            return below, below
        return below, _as_float(self.bits)


def kth_smallest(x: torch.Tensor | np.ndarray, r: int) -> float | int:
    """The r-th smallest (1-based) entry of a 1-D tensor or array (torch.kthvalue's value; numpy's
    introselect is ~10x faster on CPU)."""
    a = x.contiguous().numpy() if isinstance(x, torch.Tensor) else x
    return np.partition(a, r - 1)[r - 1].item()


def _mag_bits(taus: torch.Tensor) -> torch.Tensor:
    return taus.abs().view(torch.int32)


def split_trivial(ks: list[int], n: int) -> tuple[list[Threshold | None], list[int]]:
    out: list[Threshold | None] = [None] * len(ks)
    todo: list[int] = []
    for i, k in enumerate(ks):
        if k >= n:
            out[i] = Threshold.keep_all()
        elif k <= 0:
            out[i] = Threshold(KEEP_NONE, 0)
        else:
            todo.append(i)
    return out, todo


def _threshold(bits_t: int, n_above: int, k: int, ties: TiePolicy, n_tied: int,
               tied_at: torch.Tensor | None = None) -> Threshold:
    """`tied_at`: ascending flat positions of every entry equal to the threshold (if known)."""
    t = Threshold(bits_t, k - n_above if ties == "index" else -1, n_tied)
    if tied_at is not None and not t.keeps_all_ties:
        t.cut = int(tied_at[t.tie_quota - 1]) + 1 if t.tie_quota > 0 else 0
    return t


def _as_float(bits: int) -> float:
    return float(torch.tensor([bits], dtype=torch.int32).view(torch.float32))


def _as_bits(value: torch.Tensor) -> int:
    return int(value.reshape(1).to(torch.float32).view(torch.int32))


def exact_thresholds(taus: torch.Tensor, ks: list[int], ties: TiePolicy) -> list[Threshold]:
    """Thresholds for a [M, n] block that holds ALL the data (direct selection, one pass)."""
    n = taus.shape[1]
    out, todo = split_trivial(ks, n)
    bits = _mag_bits(taus)
    for i in todo:
        t = int(kth_smallest(bits[i], n - ks[i] + 1))
        above = int((bits[i] > t).sum())
        tied_at = torch.nonzero(bits[i] == t).view(-1)
        out[i] = _threshold(t, above, ks[i], ties, tied_at.numel(), tied_at)
    return [t for t in out if t is not None]


def _sample_bounds(sample: torch.Tensor | np.ndarray, p: float) -> tuple[int, int]:
    """(lo, hi) magnitude bits likely to bracket the top-p quantile; generous for correlated samples."""
    s = sample.shape[0]
    r = p * s
    margin = 4.0 * (s * p * (1.0 - p)) ** 0.5 + 0.01 * s + 16
    r_hi, r_lo = int(r - margin), int(r + margin) + 1  # descending ranks (1 = largest)
    hi = int(kth_smallest(sample, s - r_hi + 1)) if r_hi >= 1 else KEEP_NONE
    lo = int(kth_smallest(sample, s - r_lo + 1)) if r_lo <= s else KEEP_ALL
    return lo, hi


def find_thresholds(
    chunks: Callable[[], Iterable[torch.Tensor]], ks: list[int], n: int, ties: TiePolicy,
    sample: torch.Tensor | None = None,
) -> list[Threshold]:
    """Exact thresholds for keeping the top ks[i] of row i of a stream of [M, c] fp32 chunks.

    `chunks` is called up to three times (sample pass, then one call per histogram pass for the
    rows the sample did not settle) and must yield the same data in the same order each time;
    n is the total number of columns. `sample` ([M, s] fp32, any subset of the data) enables the
    one-pass path.
    """
    m = len(ks)
    out, todo = split_trivial(ks, n)
    if todo and sample is not None and sample.shape[1] > 0:
        todo = _bounded_pass(chunks, ks, n, ties, sample, todo, out)
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
        out[i] = Threshold((bins[i] << 16) | t_lo, quota, int(lo[i, t_lo]))
    return [t for t in out if t is not None]


def _bounded_pass(chunks: Callable[[], Iterable[torch.Tensor]], ks: list[int], n: int, ties: TiePolicy,
                  sample: torch.Tensor, todo: list[int], out: list[Threshold | None]) -> list[int]:
    """One pass: count entries above the sample's upper bound, collect those within the bounds.

    Fills `out` for the rows it settles exactly; returns the rows left for the radix passes.
    Float arithmetic only (hardshrink / sign / sum): comparisons that produce bool tensors and
    boolean indexing cost several times more on CPU.
    """
    lams = band_bounds(sample, ks, n, todo)
    live = list(lams)
    cap = max(1 << 16, n // 16)
    above = dict.fromkeys(todo, 0)
    cands: dict[int, list[torch.Tensor]] = {i: [] for i in todo}
    held = dict.fromkeys(todo, 0)
    for c in chunks():
        mags = c.abs()
        for i in live:
            lo, hi = lams[i]
            over = torch.hardshrink(mags[i], hi)  # |tau| > hi, else 0
            above[i] += int(torch.sign(over).sum())
            within = torch.hardshrink(mags[i], lo).sub_(over)  # lo_bits <= |tau| <= hi, else 0
            idx = torch.nonzero(within).view(-1)
            held[i] += idx.numel()
            cands[i].append(within[idx])
        for i in [i for i in live if held[i] > cap]:
            live.remove(i)
            cands[i] = []
    left = []
    for i in todo:
        t = select_in_band(ks[i], above[i], cands[i], ties) if i in live else None
        if t is None:
            left.append(i)
        else:
            out[i] = t
    return left


def band_bounds(sample: torch.Tensor, ks: list[int], n: int, todo: list[int]) -> dict[int, tuple[float, float]]:
    """Per row to settle: (lo, hi) such that the band is lo < |tau| <= hi around the k-th magnitude.

    Rows whose sample bounds are open-ended (k near 0 or n) are left out: the radix passes get them.
    """
    bits = _mag_bits(sample)
    out = {}
    for i in todo:
        lo, hi = _sample_bounds(bits[i], ks[i] / n)
        if lo > 0 and hi < KEEP_NONE:
            out[i] = (_as_float(lo - 1), _as_float(hi))
    return out


def select_in_band(k: int, above: int, cands: list[torch.Tensor], ties: TiePolicy) -> Threshold | None:
    """The exact threshold from the entries above the band (`above`) and those in it, or None
    when the k-th magnitude is not in the band (the caller falls back to the radix passes).
    Which tied entries are kept is left to the consumer (apply_thresholds counts them in flat
    order as the chunks stream by)."""
    need = k - above
    held = sum(c.numel() for c in cands)
    if not 1 <= need <= held:
        return None
    cand = np.ascontiguousarray(torch.cat(cands).numpy(), np.float32)
    bits, n_gt, n_eq = fused.rank_select(cand, cand.size - need + 1)
    return Threshold(int(bits), k - (above + int(n_gt)) if ties == "index" else -1, int(n_eq))


def apply_thresholds(taus: torch.Tensor, thresholds: list[Threshold], offset: int | None = None) -> None:
    """Zero, in place, the entries of a [M, c] chunk that the thresholds drop.

    Must see the chunks of a tensor (or of a part, for global trimming) in flat order: the tie
    quota is consumed as tied entries are met. When every tied entry is kept (the usual case:
    one entry sits exactly at the k-th magnitude), the trim is a single `hardshrink`; when the
    threshold's cut is known (and the chunk's flat `offset` is given), one `hardshrink` keeping
    ties before the cut and a strict one after it.
    """
    bits: torch.Tensor | None = None
    width = taus.shape[1]
    for i, t in enumerate(thresholds):
        row = taus[i]
        if t.bits == KEEP_ALL:
            continue
        if t.bits >= KEEP_NONE:
            row.zero_()
            continue
        before, after = t.lams()
        if before == after:
            torch.hardshrink(row, before, out=row)
            continue
        if t.cut is not None and offset is not None:
            c = min(max(t.cut - offset, 0), width)
            head, tail = row[:c], row[c:]
            torch.hardshrink(head, before, out=head)
            torch.hardshrink(tail, after, out=tail)
            continue
        bits = _mag_bits(taus) if bits is None else bits
        keep = bits[i] > t.bits
        left = t.tie_quota - t._ties_seen
        if left > 0:
            eq = bits[i] == t.bits
            n_eq = int(eq.sum())
            if n_eq:
                if n_eq > left:
                    eq &= eq.cumsum(0, dtype=torch.int32) <= left
                keep |= eq
                t._ties_seen += min(n_eq, left)
        row.masked_fill_(~keep, 0.0)
