"""Fused merge kernels (numba): one pass per block computes what the torch path does in ~40 ops.

Why: the torch block path (engine.py, `backend="torch"`) runs every step of TIES as a separate
vectorised op over [M, block] temporaries - task vectors, trim, sign statistics, election,
agreement, sums, statistics, checks - about 40 single-core float operations per parameter and
model; on the 1 GB benchmark checkpoint it was ~12x the I/O floor. These kernels walk each block
once, element by element, with the task vectors of that element in registers, and release the
GIL, so blocks run on several worker threads (which also write them: io.ShardedWriter.put).

Semantics are the torch path's, bit for bit (tests compare the two outputs byte for byte):
- tau_i = x_i - b in fp32; trim: tau is zeroed where |tau| <= lam_i (torch.hardshrink), where
  lam_i is just below the threshold before the model's cut (a flat position: the tied entries
  kept are those before it) and the threshold itself from the cut on;
- sums over models are taken in ascending order of the summands (methods.ordered_sum), the
  disjoint-mean denominator of unit weights in model order (exact small integers);
- the merged delta of TIES is num / max(den, floor) + 0.0, times lambda when lambda != 1; linear
  and task arithmetic sum w_i tau_i (times lambda for task arithmetic); out = b + delta in fp32.
Every constant is fp32 (an fp64 literal would promote the arithmetic). The statistics are the
torch path's too, accumulated in fp64 per element (the torch path sums fp32 block products), so
report figures may differ from it in the 6th-7th digit; weights never do.

Supported: the three registered methods with M >= 1 models, fp32 blocks or bf16 as raw bits
(widened chunk by chunk: chunk_f32), per-tensor thresholds (ties all kept, or kept up to a cut).
A threshold that must count ties as it streams (global trimming) is stateful across blocks and
stays on the torch path.

The threshold pass's kernels are here too: `scan_block` (count above a band, count the band's
heavily tied values, collect the rest), `magnitude_histogram` (radix fallback), `nth_equal`
(where a cut falls) and `rank_select` (the exact value among the collected candidates).
"""

from __future__ import annotations

import sys

import numpy as np
from numba import njit, types
from numba.extending import overload


def _numba_registries_without_scipy() -> None:
    """Load numba's numpy registries without importing scipy.linalg (~0.3 s of every merge).

    A process's first call of any jitted function loads numba's registries; one of them,
    numba.np.arraymath, imports scipy.linalg only to set a flag (`_HAVE_BLAS`) that picks a plain
    loop over BLAS in one helper none of these kernels uses. With scipy's BLAS module masked while
    that module loads, the flag is False and nothing else changes: np.dot & co. still import
    scipy when a kernel uses them (they check at compile time). Skipped when either module is
    loaded already (then there is nothing to save)."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return
    key = "scipy.linalg.cython_blas"
    sys.modules[key] = None  # type: ignore[assignment]  # `import` raises ImportError
    try:
        import numba.np.arraymath  # noqa: F401
    finally:
        if key in sys.modules and sys.modules[key] is None:
            del sys.modules[key]


_numba_registries_without_scipy()


def chunk_f32(src: np.ndarray, c0: int, c1: int, scratch: np.ndarray) -> np.ndarray:
    """src[c0:c1] as fp32: a view when src is fp32; bf16 bits (a uint16 array) widened into
    scratch (an fp32 array of >= c1 - c0), which is returned. bf16 is the upper half of an fp32,
    so widening is exact and costs a shift per entry, done a cache-sized chunk at a time inside
    the kernels instead of converting whole blocks with torch beforehand (a pass of its own).
    This numpy body serves Python callers; jitted kernels compile the overload below."""
    if src.dtype == np.float32:
        return src[c0:c1]
    n = c1 - c0
    scratch.view(np.uint32)[:n] = src[c0:c1].astype(np.uint32) << 16
    return scratch[:n]


@overload(chunk_f32, inline="always")
def _chunk_f32(src, c0, c1, scratch):  # pragma: no cover - typing
    if isinstance(src, types.Array) and src.dtype == types.float32:
        return lambda src, c0, c1, scratch: src[c0:c1]
    if isinstance(src, types.Array) and src.dtype == types.uint16:
        def widen(src, c0, c1, scratch):
            n = c1 - c0
            u = scratch.view(np.uint32)
            s = src[c0:c1]
            for j in range(n):
                u[j] = np.uint32(s[j]) << np.uint32(16)
            return scratch[:n]
        return widen
    return None


METHOD_CODES = {"ties": 0, "linear": 1, "task_arithmetic": 2}
ELECTION_CODES = {"mass": 0, "weighted_mass": 1, "count": 2}



SCAN_SUB = 2048  # elements per model scanned at a time: data and masks stay in L1/L2
_DEBRUIJN = 0x03F79D71B4CB0A89  # de Bruijn sequence: bit index of an isolated bit by multiplication
_BIT_INDEX = np.zeros(64, np.int64)
for _i in range(64):
    _BIT_INDEX[(((1 << _i) * _DEBRUIJN) & ((1 << 64) - 1)) >> 58] = _i
_DEBRUIJN_I64 = np.int64(_DEBRUIJN)  # < 2**63: the same bits as a signed constant


HEAVY = 4  # magnitudes per model that the scan counts instead of collecting (heavily tied values)
QUICK = 256  # elements counted before deciding to collect (scan_block's `sparse` models)


@njit(cache=True, nogil=True, inline="always")
def _tally(t, lo, hi, h0, h1, h2, h3, a, e0, e1, e2, e3):  # pragma: no cover - jitted
    """One magnitude counted: (above the band, equal to each heavy value: the running counts
    plus this entry), and whether it is to be collected."""
    q0 = t == h0
    q1 = t == h1
    q2 = t == h2
    q3 = t == h3
    return (a + (t > hi), e0 + q0, e1 + q1, e2 + q2, e3 + q3, (t > lo) & (t <= hi) & ~(q0 | q1 | q2 | q3))


@njit(cache=True, nogil=True, inline="always")
def _band_words(x, bs, s0, s1, lo, hi, h0, h1, h2, h3, masks, vals, h, pad_x, pad_b):  # pragma: no cover
    """Collect the band's non-heavy magnitudes of x[s0:s1] - bs[s0:s1] into vals[h:], in flat order;
    returns (h, #above hi, #equal to each heavy value). One branch-free loop per 64 entries
    packs "collect" into a 64-bit mask (masks[w]); the set bits (a few % of entries) are then
    visited lowest first, their index found with a de Bruijn multiplication. A last partial word
    is padded with NaN (|NaN - 0| is counted nowhere and collected never)."""
    size = s1 - s0
    words = (size + 63) // 64
    a = 0
    e0 = 0
    e1 = 0
    e2 = 0
    e3 = 0
    for w in range(words):
        if w * 64 + 64 <= size:
            xw = x[s0 + w * 64: s0 + w * 64 + 64]
            bw = bs[s0 + w * 64: s0 + w * 64 + 64]
        else:
            pad_x[:] = np.nan
            for k in range(size - w * 64):
                pad_x[k] = x[s0 + w * 64 + k]
                pad_b[k] = bs[s0 + w * 64 + k]
            xw = pad_x
            bw = pad_b
        mask = np.uint64(0)
        for k in range(64):
            a, e0, e1, e2, e3, keep = _tally(abs(xw[k] - bw[k]), lo, hi, h0, h1, h2, h3, a, e0, e1, e2, e3)
            mask |= np.uint64(keep) << np.uint64(k)
        masks[w] = np.int64(mask)
    for w in range(words):
        bits = masks[w]
        while bits:
            low = bits & -bits
            j = s0 + w * 64 + _BIT_INDEX[((low * _DEBRUIJN_I64) >> 58) & 63]
            vals[h] = abs(x[j] - bs[j])
            h += 1
            bits ^= low
    return h, a, e0, e1, e2, e3


@njit(cache=True, nogil=True, error_model="numpy")
def scan_block(b, xs, lo, hi, live, sparse, heavy, above, heavy_n, cand_mask, cand_val, held):  # pragma: no cover
    """Bounded threshold pass over one block (trim.py's `_bounded_pass`, fused).

    For each live model i: above[i] = #(|x_i - b| > hi[i]); heavy_n[i, h] = #(|x_i - b| == heavy[i, h])
    (HEAVY values per model, NaN where unused: equal to nothing); the other entries with
    lo[i] < |x_i - b| <= hi[i] go to cand_val[i, :held[i]], in flat order (_band_words). Heavy
    values are the band's heavily tied magnitudes (bf16 task vectors tie by the million at a few
    values): counted, they cost no memory, where collecting them made the band overflow.
    A `sparse` model (its sample put few non-heavy magnitudes in the band) is first only counted,
    QUICK entries at a time, in a flat loop the compiler vectorises well (~0.3 ns per entry on the
    benchmark VM, against ~1 ns for the mask loop); the mask loop then runs only on the pieces that
    hold band entries to collect. Sub-blocks of SCAN_SUB keep the data in cache, and the base's
    sub-block is read from cache for every model after the first.
    """
    n = b.shape[0]
    m = len(xs)
    sb = np.empty(SCAN_SUB, np.float32)  # widened bf16 sub-blocks (chunk_f32); unused for fp32
    sx = np.empty(SCAN_SUB, np.float32)
    pad_x = np.empty(64, np.float32)
    pad_b = np.zeros(64, np.float32)
    for i in range(m):
        above[i] = 0
        held[i] = 0
        for h in range(HEAVY):
            heavy_n[i, h] = 0
    for c0 in range(0, n, SCAN_SUB):
        c1 = min(n, c0 + SCAN_SUB)
        size = c1 - c0
        bs = chunk_f32(b, c0, c1, sb)  # indices from 0 (provably non-negative: no wrap checks)
        for i in range(m):
            if not live[i]:
                continue
            x = chunk_f32(xs[i], c0, c1, sx)
            lo_i = lo[i]
            hi_i = hi[i]
            h0 = heavy[i, 0]
            h1 = heavy[i, 1]
            h2 = heavy[i, 2]
            h3 = heavy[i, 3]
            h = held[i]
            if sparse[i]:
                a = 0
                e0 = 0
                e1 = 0
                e2 = 0
                e3 = 0
                for s0 in range(0, size, QUICK):
                    s1 = min(size, s0 + QUICK)
                    xc = x[s0:s1]
                    bc = bs[s0:s1]
                    inb = 0
                    for j in range(s1 - s0):
                        a, e0, e1, e2, e3, keep = _tally(abs(xc[j] - bc[j]), lo_i, hi_i, h0, h1, h2, h3,
                                                         a, e0, e1, e2, e3)
                        inb += keep
                    if inb:  # counted already: only the values are kept
                        h = _band_words(x, bs, s0, s1, lo_i, hi_i, h0, h1, h2, h3, cand_mask[i], cand_val[i], h,
                                        pad_x, pad_b)[0]
            else:
                h, a, e0, e1, e2, e3 = _band_words(x, bs, 0, size, lo_i, hi_i, h0, h1, h2, h3, cand_mask[i],
                                                   cand_val[i], h, pad_x, pad_b)
            above[i] += a
            heavy_n[i, 0] += e0
            heavy_n[i, 1] += e1
            heavy_n[i, 2] += e2
            heavy_n[i, 3] += e3
            held[i] = h


@njit(cache=True, nogil=True)
def magnitude_histogram(b, xs, live, prefix, hist):  # pragma: no cover - jitted
    """Radix histograms of |x_i - b| as fp32 bits, for the exact fallback of the threshold pass:
    with prefix[i] < 0, hist[i] counts the high 16 bits of every entry; else it counts the low
    16 bits of the entries whose high 16 bits equal prefix[i]. hist: [M, 65536] int64, added to."""
    n = b.shape[0]
    m = len(xs)
    sb = np.empty(CHUNK, np.float32)
    sx = np.empty(CHUNK, np.float32)
    mags = np.empty(CHUNK, np.float32)
    bits = mags.view(np.int32)
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        bs = chunk_f32(b, c0, c1, sb)
        for i in range(m):
            if not live[i]:
                continue
            x = chunk_f32(xs[i], c0, c1, sx)
            for j in range(c1 - c0):
                mags[j] = abs(x[j] - bs[j])
            row = hist[i]
            p = prefix[i]
            if p < 0:
                for j in range(c1 - c0):
                    row[bits[j] >> 16] += 1
            else:
                for j in range(c1 - c0):
                    u = bits[j]
                    if (u >> 16) == p:
                        row[u & 0xFFFF] += 1


@njit(cache=True, nogil=True)
def nth_equal(b, x, value, r):  # pragma: no cover - jitted
    """Index of the r-th (1-based) entry j with |x[j] - b[j]| == value, or -1 if there are fewer."""
    n = b.shape[0]
    sb = np.empty(CHUNK, np.float32)
    sx = np.empty(CHUNK, np.float32)
    seen = 0
    for c0 in range(0, n, CHUNK):
        c1 = min(n, c0 + CHUNK)
        bs = chunk_f32(b, c0, c1, sb)
        xc = chunk_f32(x, c0, c1, sx)
        cnt = 0
        for j in range(c1 - c0):
            cnt += abs(xc[j] - bs[j]) == value
        if seen + cnt >= r:
            for j in range(c1 - c0):
                if abs(xc[j] - bs[j]) == value:
                    seen += 1
                    if seen == r:
                        return c0 + j
        seen += cnt
    return -1


CHUNK = 1024  # elements per model held in the kernel's scratch rows (stay in L1/L2)
FLT_MAX = np.float32(3.4028234663852886e38)


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _dot(a, b, n):  # pragma: no cover - jitted
    """sum(a[:n] * b[:n]) in fp32 over one chunk (statistics only: reassociation vectorises it;
    the caller accumulates chunks in fp64, as the torch path sums fp32 block products)."""
    s = np.float32(0.0)
    for j in range(n):
        s += a[j] * b[j]
    return s


@njit(cache=True, nogil=True)
def _sorted_row_sum(rows, spare, m, n, acc):  # pragma: no cover - jitted
    """acc[:n] = sum over rows[:m, :n] in ascending order per column (methods.ordered_sum).

    Sorts with an odd-even transposition network of compare-exchanges (m rounds sort m rows),
    ping-ponging between `rows` and `spare` (a select written back in place becomes a
    conditional store, which the compiler will not vectorise), then adds the rows in order;
    m <= 2 adds directly (x0 + x1 is exact in either order). Clobbers rows and spare.
    """
    if m == 1:
        for j in range(n):
            acc[j] = rows[0, j]
        return
    src = rows
    dst = spare
    if m > 2:
        for rnd in range(m):
            first = rnd % 2
            if first == 1:
                for j in range(n):
                    dst[0, j] = src[0, j]
            i = first
            while i + 1 < m:
                r0 = src[i]
                r1 = src[i + 1]
                d0 = dst[i]
                d1 = dst[i + 1]
                for j in range(n):
                    u = r0[j]
                    v = r1[j]
                    lo = u if u <= v else v
                    hi = v if u <= v else u
                    d0[j] = lo
                    d1[j] = hi
                i += 2
            if i < m:
                for j in range(n):
                    dst[i, j] = src[i, j]
            src, dst = dst, src
    s0 = src[0]
    s1 = src[1]
    for j in range(n):
        acc[j] = s0[j] + s1[j]
    for i in range(2, m):
        r = src[i]
        for j in range(n):
            acc[j] += r[j]


@njit(cache=True, nogil=True)
def merge_block(b, xs, lam_tie, lam_cut, cut, w, method, election, zero_positive, unit, lambda_, floor,
                out, gram, ints, floats):  # pragma: no cover - jitted
    """Merge one block: trim, combine, out = b + delta (fp32), and the block's statistics.

    Trim of model i: entries j < cut[i] keep |tau| > lam_tie[i], the others |tau| > lam_cut[i]
    (a threshold whose tied entries are kept up to a flat position: lam_tie is just below the
    threshold, lam_cut the threshold itself; equal when no cut falls in the block).

    ints: kept[M], conflicts, touched, non-finite tau flag, non-finite out flag, all-zero flag.
    floats: sum of delta^2, max |delta|. gram: sum of tau_i * tau_k (untrimmed), k <= i.
    Works in CHUNK-column pieces: every step is a branch-free loop over the columns of a few
    scratch rows that the compiler vectorises (data-dependent branches per element would
    mispredict on random signs; a select stored back into the array it read from turns into
    a conditional store and stops vectorisation, so every step writes a different array).
    The steps are those of methods.ties_combine / linear_combine / task_arithmetic_combine.
    """
    n = b.shape[0]
    m = len(xs)
    one = np.float32(1.0)
    zero = np.float32(0.0)
    raw = np.empty((m, CHUNK), np.float32)  # task vectors
    tt = np.empty((m, CHUNK), np.float32)  # trimmed task vectors
    pp = np.empty((m, CHUNK), np.float32)  # summands (sorted, clobbered)
    qq = np.empty((m, CHUNK), np.float32)  # disjoint-mean weights (sorted, clobbered)
    spare = np.empty((m, CHUNK), np.float32)
    ee = np.empty(CHUNK, np.float32)  # elected sign
    ss = np.empty(CHUNK, np.float32)  # election score
    num = np.empty(CHUNK, np.float32)
    den = np.empty(CHUNK, np.float32)
    dd = np.empty(CHUNK, np.float32)  # merged delta
    anypos = np.empty(CHUNK, np.int32)
    anyneg = np.empty(CHUNK, np.int32)
    kept = np.zeros(m, np.int64)
    lam = np.empty(m, np.float32)
    conflicts = 0
    touched = 0
    bad_tau = 0
    bad_out = np.float32(0.0)
    any_nz = 0
    dsq = 0.0
    dmax = 0
    weighted = not unit
    c0 = 0
    while c0 < n:  # chunks of at most CHUNK columns, split at every model's cut
        c1 = min(n, c0 + CHUNK)
        for i in range(m):
            if c0 < cut[i] < c1:
                c1 = cut[i]
            lam[i] = lam_tie[i] if c0 < cut[i] else lam_cut[i]
        ln = c1 - c0
        bb = b[c0:c1]
        for i in range(m):
            x = xs[i][c0:c1]
            ri = raw[i]
            bad = 0
            nz = 0
            for j in range(ln):
                v = x[j] - bb[j]
                ri[j] = v
                a = abs(v)
                bad |= not (a <= FLT_MAX)
                nz |= a != zero
            bad_tau |= bad
            any_nz |= nz
            for k in range(i + 1):
                gram[i, k] += np.float64(_dot(ri, raw[k], ln))
        for j in range(ln):
            anypos[j] = 0
            anyneg[j] = 0
        for i in range(m):
            ri = raw[i]
            ti = tt[i]
            li = lam[i]
            for j in range(ln):
                v = ri[j]
                ti[j] = v if abs(v) > li else zero
            cnt = 0
            for j in range(ln):
                v = ti[j]
                cnt += v != zero
                anypos[j] |= v > zero
                anyneg[j] |= v < zero
            kept[i] += cnt
        cf = 0
        tc = 0
        for j in range(ln):
            tc += anypos[j] | anyneg[j]
            cf += anypos[j] & anyneg[j]
        conflicts += cf
        touched += tc
        if method == 0:
            # elect a sign per column
            if election == 2:
                for j in range(ln):
                    ss[j] = zero
                for i in range(m):
                    ti = tt[i]
                    for j in range(ln):
                        v = ti[j]
                        ss[j] += np.float32(v > zero) - np.float32(v < zero)
            else:
                for i in range(m):
                    ti = tt[i]
                    pi = pp[i]
                    wi = w[i]
                    if election == 0 or unit:
                        for j in range(ln):
                            pi[j] = ti[j]
                    else:
                        for j in range(ln):
                            pi[j] = ti[j] * wi
                _sorted_row_sum(pp, spare, m, ln, ss)
            if zero_positive:
                for j in range(ln):
                    ee[j] = np.copysign(one, ss[j])
            else:
                for j in range(ln):
                    sj = ss[j]
                    ee[j] = np.float32(sj > zero) - np.float32(sj < zero)
            # the agreeing task vectors and their weights
            for i in range(m):
                ti = tt[i]
                pi = pp[i]
                qi = qq[i]
                wi = w[i]
                for j in range(ln):
                    v = ti[j]
                    agree = v * ee[j] > zero
                    pi[j] = (v * wi if weighted else v) if agree else zero
                    qi[j] = (wi if weighted else one) if agree else zero
            _sorted_row_sum(pp, spare, m, ln, num)
            if unit:
                for j in range(ln):
                    den[j] = qq[0, j]
                for i in range(1, m):
                    qi = qq[i]
                    for j in range(ln):
                        den[j] += qi[j]
            else:
                _sorted_row_sum(qq, spare, m, ln, den)
            for j in range(ln):
                dj = den[j]
                dd[j] = num[j] / (dj if dj > floor else floor) + zero
        else:
            for i in range(m):
                ti = tt[i]
                pi = pp[i]
                wi = w[i]
                for j in range(ln):
                    pi[j] = ti[j] * wi
            _sorted_row_sum(pp, spare, m, ln, dd)
        if lambda_ != one and method != 1:
            for j in range(ln):
                dd[j] = dd[j] * lambda_
        oo = out[c0:c1]
        for j in range(ln):
            oo[j] = bb[j] + dd[j]
        bad_out += _nan_if_non_finite(oo, ln)
        dsq += np.float64(_dot(dd, dd, ln))
        dmax = max(dmax, _max_abs_bits(dd[:ln].view(np.int32)))
        c0 = c1
    for i in range(m):
        ints[i] += kept[i]
    ints[m] += conflicts
    ints[m + 1] += touched
    ints[m + 2] = bad_tau
    ints[m + 3] = 1 if bad_out != bad_out else 0
    ints[m + 4] = 1 - any_nz
    floats[0] += dsq
    mx = np.float64(np.array([dmax], np.int32).view(np.float32)[0])
    if mx > floats[1]:
        floats[1] = mx


@njit(cache=True, nogil=True)
def rank_select(vals, r):  # pragma: no cover - jitted
    """(bits, n_gt, n_eq) of the r-th smallest (1-based) of `vals`, non-negative fp32 magnitudes
    compared as int32 bits (their order; NaN last, as in np.partition): a 16-bit radix
    histogram of the high halves, then one of the low halves within the chosen bucket; the
    counts above and equal come from the two histograms. Two passes instead of np.partition
    plus two comparison passes (bf16's many equal magnitudes made introselect slow)."""
    bits = vals.view(np.int32)
    n = bits.shape[0]
    high = np.zeros(1 << 16, np.int64)
    for j in range(n):
        high[bits[j] >> 16] += 1
    below = 0
    hi = 0
    while below + high[hi] < r:
        below += high[hi]
        hi += 1
    n_gt = n - below - high[hi]
    low = np.zeros(1 << 16, np.int64)
    for j in range(n):
        v = bits[j]
        if v >> 16 == hi:
            low[v & 0xFFFF] += 1
    r2 = r - below
    below = 0
    lo = 0
    while below + low[lo] < r2:
        below += low[lo]
        lo += 1
    n_gt += high[hi] - below - low[lo]
    return (hi << 16) | lo, n_gt, low[lo]


@njit(cache=True, nogil=True)
def narrow_bf16(src, dst):  # pragma: no cover - jitted
    """dst = src (fp32) rounded to bf16 as raw bits (uint16): finite values as torch rounds them
    (to nearest, ties to even), NaN -> 0x7FC0; returns 1 when a result is not finite (NaN, or
    Inf: an fp32 beyond bf16's largest finite value rounds to Inf), else 0. One pass, vectorised, instead of torch's
    conversion plus a separate finiteness scan of every bf16 output block."""
    u = src.view(np.uint32)
    bad = 0
    for j in range(src.shape[0]):
        v = u[j]
        r = (v + np.uint32(0x7FFF) + ((v >> np.uint32(16)) & np.uint32(1))) >> np.uint32(16)
        nan = (v & np.uint32(0x7FFFFFFF)) > np.uint32(0x7F800000)
        r = np.uint32(0x7FC0) if nan else r
        dst[j] = np.uint16(r)
        bad |= (r & np.uint32(0x7F80)) == np.uint32(0x7F80)
    return bad


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def tail(b, dd, out, c0, c1):  # pragma: no cover - jitted
    """out[c0:c1] = b[c0:c1] + dd (one fp32 add each: nothing to reassociate) and the chunk's
    statistics for fused_fast's kernels: (sum of dd^2 in fp32, sum of o - o - NaN iff an output
    is NaN/Inf, else 0 -, max |dd| as int32 bits)."""
    dq = np.float32(0.0)
    ok = np.float32(0.0)
    mx = 0
    bits = dd.view(np.int32)
    bc = b[c0:c1]
    oc = out[c0:c1]
    for j in range(c1 - c0):
        d = dd[j]
        dq += d * d
        o = bc[j] + d
        oc[j] = o
        ok += o - o
        v = bits[j] & 0x7FFFFFFF
        mx = v if v > mx else mx
    return dq, ok, mx


@njit(cache=True, nogil=True, fastmath={"reassoc"})
def _nan_if_non_finite(a, n):  # pragma: no cover - jitted
    """NaN when any of a[:n] is NaN or +-Inf (x - x is 0 for finite x), else 0."""
    s = np.float32(0.0)
    for j in range(n):
        s += a[j] - a[j]
    return s


@njit(cache=True, nogil=True)
def _max_abs_bits(bits):  # pragma: no cover - jitted
    """Largest |x| of fp32 values given as int32 bits (non-negative floats order like their bits)."""
    mx = 0
    for j in range(bits.shape[0]):
        v = bits[j] & 0x7FFFFFFF
        mx = v if v > mx else mx
    return mx
