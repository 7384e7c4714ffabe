"""Exact per-tensor trim thresholds for the fused backend: one counting pass, bounded memory.

Why: the k-th largest |tau| of a tensor is needed before any of it can be merged. Sorting (what
mergekit does) needs ~12 bytes per element; the pass here reads the tensor once and keeps only a
few % of its magnitudes. bf16 fine-tunes are the hard case: most entries of a task vector are
exactly zero, and the rest take a few values (one or two units in the last place of the base),
so millions of entries tie at the threshold. Collecting those made the band overflow and the
tensor fall back to the torch path (issue 21); here they are counted instead.

The pass, per tensor (fused.scan_block on the worker threads, all models at once):
- from a sample (Engine._sample), per model a band lo < |tau| <= hi likely to hold the k-th
  magnitude, and up to fused.HEAVY of the sampled band's most frequent values ("heavy");
- per block: entries above the band counted, entries equal to a heavy value counted, the other
  band entries collected (values only, 4 bytes each, at most `cap` per model in all);
- the k-th magnitude is then selected exactly among the heavy counts and collected values
  (`select_weighted`); with policy "index" the tied entries kept end at a cut (trim.Threshold),
  found from the per-block tie counts and one rescan of the block it falls in (fused.nth_equal).
When the band missed (the k-th magnitude is not in it) or overflowed the cap, two radix-histogram
passes (fused.magnitude_histogram) give the exact value, and one more scan the per-block counts
of its ties. Exact either way; the result is the same whatever the sample.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import numpy as np

from venus_core.merge import fused
from venus_core.merge.trim import KEEP_NONE, Threshold, TiePolicy, _as_float, _sample_bounds, split_trivial

HEAVY = fused.HEAVY
HIST = 1 << 16


@dataclass
class Band:
    """Per model: the band lo < |tau| <= hi, and the band's heavy values (NaN: unused)."""

    lo: np.ndarray  # [M] float32
    hi: np.ndarray  # [M] float32
    live: np.ndarray  # [M] bool: scanned
    heavy: np.ndarray  # [M, HEAVY] float32
    sparse: np.ndarray  # [M] bool: few values to collect expected (fused.scan_block counts first)

    @staticmethod
    def empty(m: int) -> "Band":
        return Band(np.zeros(m, np.float32), np.zeros(m, np.float32), np.zeros(m, np.bool_),
                    np.full((m, HEAVY), np.nan, np.float32), np.ones(m, np.bool_))


@dataclass
class BlockScan:
    """One block's counts: above the band, equal to each heavy value; the other band values."""

    above: np.ndarray  # [M] int64
    heavy_n: np.ndarray  # [M, HEAVY] int64
    values: list[np.ndarray]  # per model, fp32, in flat order


Span = tuple[int, int]


def sample_band(sample: np.ndarray, ks: list[int], n: int, todo: list[int]) -> Band:
    """The band of every model in `todo` from an [M, s] fp32 task-vector sample.

    Bounds from the sample's ranks around the k-th magnitude (trim._sample_bounds; open-ended
    when k is near 0 or n: lo = -1 takes every magnitude from zero up, hi = inf everything above);
    heavy values: the HEAVY most frequent sampled magnitudes inside the band (zero included);
    sparse: under one value to collect expected per fused.QUICK entries (the scan then counts
    first and collects only where it must: bf16 fine-tunes, whose band is nearly all heavy)."""
    m = sample.shape[0]
    band = Band.empty(m)
    bits = np.abs(sample).view(np.int32)
    for i in todo:
        lo_bits, hi_bits = _sample_bounds(bits[i], ks[i] / n)
        lo = -1.0 if lo_bits <= 0 else _as_float(lo_bits - 1)
        hi = np.inf if hi_bits >= KEEP_NONE else _as_float(hi_bits)
        band.lo[i], band.hi[i], band.live[i] = lo, hi, True
        mags = bits[i].view(np.float32)
        inside = bits[i][(mags > np.float32(lo)) & (mags <= np.float32(hi))]
        light = inside.size
        if inside.size:
            values, counts = np.unique(inside, return_counts=True)
            top = np.argsort(-counts, kind="stable")[:HEAVY]
            top = top[counts[top] >= 2]
            band.heavy[i, : top.size] = values[top].view(np.float32)
            light -= int(counts[top].sum())
        band.sparse[i] = light * fused.QUICK < sample.shape[1] // 2
    return band


def select_weighted(r: int, light: np.ndarray, heavy: np.ndarray, counts: np.ndarray
                    ) -> tuple[int, int, int] | None:
    """(bits, #greater, #equal) of the r-th largest (1-based) of the multiset made of `light`
    (fp32 magnitudes) and `counts[h]` copies of each `heavy[h]` (no light value equals a heavy
    one); None when r is out of range."""
    use = [h for h in range(heavy.size) if counts[h] > 0 and not np.isnan(heavy[h])]
    total = light.size + sum(int(counts[h]) for h in use)
    if not 1 <= r <= total:
        return None
    above_heavy = 0  # heavy entries greater than the current interval
    for h in sorted(use, key=lambda j: -float(heavy[j])):
        light_above = int(np.count_nonzero(light > heavy[h]))
        if r <= light_above + above_heavy:  # a light value above this heavy one
            break
        if r <= light_above + above_heavy + int(counts[h]):
            bits = int(np.array([heavy[h]], np.float32).view(np.int32)[0])
            return bits, light_above + above_heavy, int(counts[h])
        above_heavy += int(counts[h])
    r_light = r - above_heavy  # the r_light-th largest light value
    vals = np.ascontiguousarray(light, np.float32)
    bits, n_gt, n_eq = fused.rank_select(vals, vals.size - r_light + 1)
    return int(bits), int(n_gt) + above_heavy, int(n_eq)


class TensorPass:
    """The threshold pass of one tensor; the engine supplies the per-block work:

    scan(band, span) -> BlockScan; histogram(live, prefix, span) -> [M, HIST] counts;
    nth(model, value, r, span) -> block-local index of the r-th entry with |tau| == value;
    ordered(fn, spans) -> fn's results in span order (on the worker threads)."""

    def __init__(self, m: int, n: int, spans: list[Span], ties: TiePolicy, cap: int,
                 scan: Callable[[Band, Span], BlockScan],
                 histogram: Callable[[np.ndarray, np.ndarray, Span], np.ndarray],
                 nth: Callable[[int, float, int, Span], int],
                 ordered: Callable[[Callable[[Span], object], Iterable[Span]], Iterator[object]]) -> None:
        self.m, self.n, self.spans, self.ties, self.cap = m, n, spans, ties, cap
        self.scan, self.histogram, self.nth, self.ordered = scan, histogram, nth, ordered
        self.fallbacks = 0  # models whose band missed or overflowed (radix passes)

    def run(self, ks: list[int], sample: np.ndarray) -> list[Threshold]:
        out, todo = split_trivial(ks, self.n)
        if not todo:
            return [t for t in out if t is not None]
        band = sample_band(sample, ks, self.n, todo)
        above, heavy_n, values, overflow = self._scan_all(band)
        left = []
        for i in todo:
            light = np.concatenate(values[i]) if not overflow[i] and values[i] else np.zeros(0, np.float32)
            got = None if overflow[i] else select_weighted(
                ks[i] - int(above[i]), light, band.heavy[i], heavy_n[:, i].sum(0))
            del light
            if got is None:
                left.append(i)
                continue
            bits, n_gt, n_eq = got
            t = self._threshold(ks[i], int(above[i]) + n_gt, bits, n_eq)
            if t.cut is None and not t.keeps_all_ties:
                value = np.float32(_as_float(bits))
                hv = np.flatnonzero(band.heavy[i] == value)
                per_block = heavy_n[:, i, hv[0]] if hv.size else np.array(
                    [np.count_nonzero(v == value) for v in values[i]], np.int64)
                t.cut = self._cut(i, value, t.tie_quota, per_block)
            out[i] = t
        del values
        if left:
            self.fallbacks += len(left)
            for i, t in self._radix(ks, left).items():
                out[i] = t
        return [t for t in out if t is not None]

    def _scan_all(self, band: Band) -> tuple[np.ndarray, np.ndarray, list[list[np.ndarray]], list[bool]]:
        """Scan every block: total above, [blocks, M, HEAVY] heavy counts, values per block and model."""
        m = self.m
        above = np.zeros(m, np.int64)
        heavy_n = []
        values: list[list[np.ndarray]] = [[] for _ in range(m)]
        held = [0] * m
        overflow = [False] * m
        for res in self.ordered(lambda sp: self.scan(band, sp), self.spans):
            assert isinstance(res, BlockScan)
            above += res.above
            heavy_n.append(res.heavy_n)
            for i in range(m):
                if overflow[i] or not band.live[i]:
                    continue
                held[i] += res.values[i].size
                if held[i] > self.cap:
                    overflow[i], values[i] = True, []
                else:
                    values[i].append(res.values[i])
        return above, np.stack(heavy_n) if heavy_n else np.zeros((0, m, HEAVY), np.int64), values, overflow

    def _threshold(self, k: int, n_above: int, bits: int, n_eq: int) -> Threshold:
        t = Threshold(bits, k - n_above if self.ties == "index" else -1, n_eq)
        if not t.keeps_all_ties and t.tie_quota == 0:
            t.cut = 0
        return t

    def _cut(self, i: int, value: np.float32, quota: int, per_block: np.ndarray) -> int:
        """The flat position just past the quota-th entry of model i tied at `value`."""
        cum = np.cumsum(per_block)
        b = int(np.searchsorted(cum, quota))  # first block whose running count reaches the quota
        before = int(cum[b - 1]) if b else 0
        span = self.spans[b]
        j = self.nth(i, float(value), quota - before, span)
        if j < 0:
            raise AssertionError(f"tie count of block {span} disagrees with its rescan")
        return span[0] + j + 1

    def _radix(self, ks: list[int], rows: list[int]) -> dict[int, Threshold]:
        """Exact thresholds of `rows` by two radix-histogram passes (+ one scan for the cut)."""
        m = self.m
        live = np.zeros(m, np.bool_)
        live[rows] = True

        def hist(prefix: np.ndarray) -> np.ndarray:
            total = np.zeros((m, HIST), np.int64)
            for h in self.ordered(lambda sp: self.histogram(live, prefix, sp), self.spans):
                total += h  # type: ignore[operator]
            return total

        high = hist(np.full(m, -1, np.int64))
        prefix = np.full(m, -1, np.int64)
        above_hi: dict[int, int] = {}
        for i in rows:
            ge = np.cumsum(high[i][::-1])[::-1]  # ge[b] = #(high bits >= b)
            b = int(np.flatnonzero(ge >= ks[i]).max())
            prefix[i] = b
            above_hi[i] = int(ge[b + 1]) if b + 1 < HIST else 0
        low = hist(prefix)
        out: dict[int, Threshold] = {}
        band = Band.empty(m)
        for i in rows:
            need = ks[i] - above_hi[i]
            ge = np.cumsum(low[i][::-1])[::-1]
            lo = int(np.flatnonzero(ge >= need).max())
            n_gt = above_hi[i] + (int(ge[lo + 1]) if lo + 1 < HIST else 0)
            bits = (int(prefix[i]) << 16) | lo
            out[i] = t = self._threshold(ks[i], n_gt, bits, int(low[i, lo]))
            if t.cut is None and not t.keeps_all_ties:
                value = _as_float(bits)
                band.lo[i] = band.hi[i] = value  # nothing in the band: only the tie count
                band.heavy[i, 0] = value
                band.live[i] = True
        if band.live.any():
            counts = [res.heavy_n for res in self.ordered(lambda sp: self.scan(band, sp), self.spans)]  # type: ignore[attr-defined]
            per = np.stack(counts)
            for i in np.flatnonzero(band.live):
                out[i].cut = self._cut(int(i), band.heavy[i, 0], out[i].tie_quota, per[:, i, 0])
        return out
