"""The model-count-specialised kernels (fused_fast) compute fused.merge_block's bytes and counts.

Kernel-level: the same block goes through the generated kernel and the generic one with every
method option (election, zero sign, weights, lambda, linear / task arithmetic), with tied
entries kept up to a cut inside a chunk (both kernels split the chunk there), and with NaN /
overflow inputs (the flags must agree). bf16 inputs given as raw bits (uint16,
widened inside the kernels) must give what their fp32 widening gives. The end-to-end byte identity with the torch path
is tested in test_fused_backend.py.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from venus_core.merge import fused, fused_fast

N = 5000  # several 1,024-column chunks, the last one partial


def _block(m: int, seed: int, nan: bool = False, huge: bool = False
           ) -> tuple[np.ndarray, tuple[np.ndarray, ...], np.ndarray, np.ndarray, np.ndarray]:
    """(b, xs, lam_tie, lam_cut, cut): thresholds whose ties are kept before a per-model cut."""
    rng = np.random.default_rng(seed)
    b = (rng.standard_normal(N) * 0.1).astype(np.float32)
    # half the task vectors on a grid of 2**-8 (many magnitudes equal the threshold exactly), half
    # arbitrary (sums whose value depends on the order of the summands)
    grid = np.arange(N) % 2 == 0
    xs = tuple((b + np.where(grid, np.round(rng.standard_normal(N) * 8) / 256, rng.standard_normal(N) * 0.03)
                ).astype(np.float32) for _ in range(m))
    if nan:
        xs[m - 1][N - 7] = np.nan
    if huge:
        b[3] = np.float32(3e38)
        for x in xs:
            x[3] = np.float32(3e38)
        xs[0][3] = np.float32(-3e38)  # tau = -6e38: overflows fp32
    lam_cut = np.full(m, 5 / 256, np.float32)
    lam_cut[0] = 3 / 256
    lam_tie = np.nextafter(lam_cut, np.float32(0))  # just below: ties kept before the cut
    cut = np.array([1234 + 777 * i for i in range(m)], np.int64)  # inside chunks, not at their edges
    return b, xs, lam_tie, lam_cut, cut


def _run(kernel, b, xs, lam_tie, lam_cut, cut, w, method, election, zero_positive, lambda_, floor):
    m = len(xs)
    out = np.empty(N, np.float32)
    gram = np.zeros((m, m))
    ints = np.zeros(m + 5, np.int64)
    floats = np.zeros(2)
    kernel(b, xs, lam_tie, lam_cut, cut, w, method, election, zero_positive, bool((w == 1).all()),
           np.float32(lambda_), np.float32(floor), out, gram, ints, floats)
    return out, gram, ints, floats


CASES = [  # (method, election, zero_positive, unit weights, lambda)
    (0, 0, False, True, 1.0), (0, 1, True, False, 1.0), (0, 2, False, False, 0.7),
    (0, 1, False, True, 1.3), (1, 0, False, False, 1.0), (2, 0, False, False, 0.5),
]


@pytest.mark.parametrize("m", [3, 4])
@pytest.mark.parametrize("case", CASES)
def test_fast_kernel_equals_generic(m: int, case: tuple) -> None:
    method, election, zero_positive, unit, lambda_ = case
    b, xs, lam_tie, lam_cut, cut = _block(m, seed=m * 10 + len(str(case)))
    tied = [np.abs(x - b) == lam_cut[i] for i, x in enumerate(xs)]
    assert all(t[: cut[i]].any() and t[cut[i]:].any() for i, t in enumerate(tied))  # ties on both sides
    if method:
        lam_tie = lam_cut = np.full(m, -np.inf, np.float32)  # linear / task arithmetic do not trim
    w = np.ones(m, np.float32) if unit else np.linspace(0.5, 1.5, m).astype(np.float32)
    floor = float(w[w > 0].min())
    args = (b, xs, lam_tie, lam_cut, cut, w, method, election, zero_positive, lambda_, floor)
    fast = _run(fused_fast.kernel(m), *args)
    ref = _run(fused.merge_block, *args)
    if not method:  # the trim itself: ties kept before the cut, dropped after it
        kept = [int((np.abs(x - b) > lam_tie[i]).sum() - tied[i][cut[i]:].sum()) for i, x in enumerate(xs)]
        assert ref[2][:m].tolist() == kept
    assert np.array_equal(fast[0].view(np.int32), ref[0].view(np.int32))
    assert fast[2].tolist() == ref[2].tolist()  # kept counts, conflicts, touched, flags
    np.testing.assert_allclose(fast[1], ref[1], rtol=1e-5)
    np.testing.assert_allclose(fast[3], ref[3], rtol=1e-5)


def _bf16_bits(a: np.ndarray) -> np.ndarray:
    """The bf16 nearest each value (round to nearest even), as raw bits."""
    u = a.view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def _widened(bits: np.ndarray) -> np.ndarray:
    return (bits.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("m", [3, fused_fast.MAX_M + 2])
def test_bf16_bits_are_widened_inside_the_kernels(m: int) -> None:
    """Kernels given bf16 as uint16 bits compute exactly what they compute on the fp32 widening
    (merge: the specialised kernel, ties kept before a cut included; scan: any M)."""
    b32, xs32, lam_tie, lam_cut, cut = _block(m, seed=3)
    b16, xs16 = _bf16_bits(b32), tuple(_bf16_bits(x) for x in xs32)
    b, xs = _widened(b16), tuple(_widened(x) for x in xs16)
    scratch = np.empty(fused.CHUNK, np.float32)  # chunk_f32's Python body, as the overload
    assert np.array_equal(fused.chunk_f32(b16, 5, 900, scratch), b[5:900])
    assert np.shares_memory(fused.chunk_f32(b, 5, 900, scratch), b)
    lam_cut = np.full(m, 5 / 256, np.float32)  # the grid's values are exact in bf16: ties stay ties
    lam_tie = np.nextafter(lam_cut, np.float32(0))
    assert all((np.abs(x - b)[: cut[i]] == lam_cut[i]).any() for i, x in enumerate(xs))
    w = np.linspace(0.5, 1.5, m).astype(np.float32)
    if m <= fused_fast.MAX_M:
        args = (lam_tie, lam_cut, cut, w, 0, 1, True, 1.0, float(w.min()))
        got = _run(fused_fast.kernel(m), b16, xs16, *args)
        want = _run(fused_fast.kernel(m), b, xs, *args)
        assert np.array_equal(got[0].view(np.int32), want[0].view(np.int32))
        assert got[2].tolist() == want[2].tolist()
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[3], want[3])
    lo, hi = np.full(m, 3 / 256, np.float32), np.full(m, 6 / 256, np.float32)
    live = np.ones(m, np.bool_)
    heavy = np.full((m, fused.HEAVY), np.nan, np.float32)
    heavy[:, 0] = 5 / 256
    res = []
    for bb, xx in ((b16, xs16), (b, xs)):
        res.append(_scan(bb, xx, lo, hi, live, heavy, N))
    (a1, e1, v1), (a2, e2, v2) = res
    assert np.array_equal(a1, a2) and np.array_equal(e1, e2) and e1[:, 0].sum() > 0
    assert all(np.array_equal(x, y) for x, y in zip(v1, v2)) and sum(x.size for x in v1) > 0


def _scan(b, xs, lo, hi, live, heavy, width):
    """fused.scan_block's (above, heavy counts, collected values per model) of one block; the
    same whether each model is scanned as sparse (counted first) or not."""
    m = len(xs)
    got = []
    for sparse in (np.zeros(m, np.bool_), np.ones(m, np.bool_), np.arange(m) % 2 == 0):
        above, held = np.full(m, 7, np.int64), np.full(m, 7, np.int64)  # stale values are reset
        heavy_n = np.full((m, fused.HEAVY), 7, np.int64)
        masks = np.full((m, fused.SCAN_SUB // 64), -1, np.int64)
        val = np.full((m, width), -1.0, np.float32)
        fused.scan_block(b, xs, lo, hi, live, sparse, heavy, above, heavy_n, masks, val, held)
        got.append((above, heavy_n, [val[i, : held[i]].copy() for i in range(m)]))
    for other in got[1:]:
        assert np.array_equal(other[0], got[0][0]) and np.array_equal(other[1], got[0][1])
        assert all(np.array_equal(x, y) for x, y in zip(other[2], got[0][2]))
    return got[0]


def test_narrow_bf16_rounds_like_torch_and_flags_non_finite() -> None:
    """fused.narrow_bf16 = torch's fp32 -> bf16 (nearest, ties to even) bit for bit, and flags
    results that are not finite, including finite fp32 that round to Inf. NaN's bits are not
    compared (torch's vectorised path gives 0xFFFF, its scalar one 0x7FC0; a NaN output is an
    error before anything is written anyway): a NaN must stay a NaN."""
    import torch

    rng = np.random.default_rng(0)
    a = np.concatenate([
        (rng.standard_normal(4096) * 10.0 ** rng.integers(-40, 38, 4096)).astype(np.float32),
        rng.integers(0, 2**32, 4096, dtype=np.uint64).astype(np.uint32).view(np.float32),  # any bits
        _widened(np.arange(0, 2**16, 257, dtype=np.uint16)) + np.float32(0),  # exact bf16 values
        (np.arange(1, 200, dtype=np.uint32) << 15 | 0x3F800000).view(np.float32),  # halfway ties
        np.array([0.0, -0.0, 1e-45, -1e-45, 3.3895314e38, 3.39e38, -3.4e38], np.float32),
    ])
    finite = a[np.isfinite(a)]
    assert finite.size < a.size and bool(torch.isinf(torch.from_numpy(finite.copy()).to(torch.bfloat16)).any())
    for src in (finite, a):
        dst = np.empty(src.shape[0], np.uint16)
        bad = fused.narrow_bf16(src, dst)
        want = torch.from_numpy(src.copy()).to(torch.bfloat16)
        nan = np.isnan(src)
        assert np.array_equal(dst[~nan], want.view(torch.int16).numpy().view(np.uint16)[~nan])
        assert np.isnan(_widened(dst[nan])).all()
        assert bad == int(not bool(torch.isfinite(want).all()))
    ok = np.array([1.0, -2.5, 3.3e38], np.float32)
    assert fused.narrow_bf16(ok, np.empty(3, np.uint16)) == 0


@pytest.mark.parametrize("bad", ["nan", "overflow"])
def test_fast_kernel_flags_bad_values_like_generic(bad: str) -> None:
    m = 3
    b, xs, lam_tie, lam_cut, cut = _block(m, seed=5, nan=bad == "nan", huge=bad == "overflow")
    w = np.ones(m, np.float32)
    args = (b, xs, lam_tie, lam_cut, cut, w, 0, 0, False, 1.0, 1.0)
    fast, ref = _run(fused_fast.kernel(m), *args), _run(fused.merge_block, *args)
    assert fast[2][m + 2] == ref[2][m + 2] == 1  # a non-finite task vector is flagged
    assert fast[2].tolist() == ref[2].tolist()


def test_all_zero_block_is_flagged() -> None:
    m = 2
    b = np.linspace(-1, 1, N).astype(np.float32)
    xs = (b.copy(), b.copy())
    lam = np.zeros(m, np.float32)
    out, _, ints, floats = _run(fused_fast.kernel(m), b, xs, lam, lam, np.zeros(m, np.int64), np.ones(m, np.float32),
                                0, 0, False, 1.0, 1.0)
    assert ints[m + 4] == 1 and ints[:m].tolist() == [0, 0] and floats[0] == 0.0
    assert np.array_equal(out, b)


def test_kernel_files_are_checked_and_regenerated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NUMBA_CACHE_DIR", str(tmp_path))
    path = fused_fast._module_file(2)
    assert path.parent == tmp_path / "venus-kernels"
    assert path.read_text() == fused_fast.source(2)
    path.write_text(path.read_text() + "\nimport os\n")  # tampered: never imported as is
    assert fused_fast._module_file(2).read_text() == fused_fast.source(2)
    assert "m2_" in path.name and fused_fast._module_file(1) != path
    # the compiled kernels include fused.py's functions (numba's cache tracks one file only): a
    # changed fused.py must give a new file, so stale machine code is never reused
    changed = tmp_path / "fused.py"
    changed.write_bytes(Path(fused.__file__).read_bytes() + b"\n# changed\n")
    monkeypatch.setattr(fused, "__file__", str(changed))
    assert fused_fast._module_file(2) != path


def test_model_counts_beyond_the_specialised_ones_use_the_generic_kernel() -> None:
    assert fused_fast.kernel(fused_fast.MAX_M + 1) is fused.merge_block
    with pytest.raises(ValueError, match="1..4"):
        fused_fast.source(fused_fast.MAX_M + 1)


@pytest.mark.parametrize("n", [1, 63, 64 * 3, fused.SCAN_SUB, 3 * fused.SCAN_SUB + 17, 2 * fused.SCAN_SUB + 64 * 5 + 63])
def test_scan_block_counts_and_collects_in_flat_order(n: int) -> None:
    """fused.scan_block vs numpy: entries above the band counted, entries equal to a heavy value
    counted (and not collected), the other band entries collected in flat order, across
    sub-blocks, the last one partial; a model that is not live is left at zero."""
    rng = np.random.default_rng(n)
    m = 3
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    # a grid of 2**-9 for half the entries: a few magnitudes tie often, as bf16 task vectors do
    xs = tuple((b + np.where(np.arange(n) % 2 == 0, np.round(rng.standard_normal(n) * 3) / 512,
                             rng.standard_normal(n).astype(np.float32) * 0.01)).astype(np.float32) for _ in range(m))
    lo = np.array([0.004, -1.0, 0.0], np.float32)  # -1: the band starts at zero (zeros are heavy below)
    hi = np.array([0.008, 0.0065, 1.0], np.float32)
    live = np.array([True, True, False])
    heavy = np.full((m, fused.HEAVY), np.nan, np.float32)
    heavy[0, :2] = [3 / 512, 4 / 512]
    heavy[1, :3] = [0.0, 1 / 512, 2 / 512]
    above, heavy_n, vals = _scan(b, xs, lo, hi, live, heavy, n)
    for i in range(m):
        t = np.abs(xs[i] - b)
        if not live[i]:
            assert above[i] == 0 and heavy_n[i].sum() == 0 and vals[i].size == 0
            continue
        hv = heavy[i][~np.isnan(heavy[i])]
        is_heavy = np.isin(t, hv)
        band = np.flatnonzero((t > lo[i]) & (t <= hi[i]) & ~is_heavy)
        assert above[i] == int((t > hi[i]).sum())
        assert heavy_n[i, : hv.size].tolist() == [int((t == v).sum()) for v in hv]
        assert heavy_n[i, hv.size:].sum() == 0
        assert np.array_equal(vals[i], t[band])
        assert n < 100 or (band.size > 0 and heavy_n[i].sum() > 0)


def test_magnitude_histogram_and_nth_equal_match_numpy() -> None:
    """The radix fallback's histograms (high halves of |tau|'s bits; low halves within one high
    half) and nth_equal (where the r-th tied entry sits), fp32 and bf16 bits alike."""
    rng = np.random.default_rng(11)
    n, m = 3 * fused.CHUNK + 5, 2
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    xs = tuple((b + np.round(rng.standard_normal(n) * 4) / 256).astype(np.float32) for _ in range(m))
    b16, xs16 = _bf16_bits(b), tuple(_bf16_bits(x) for x in xs)
    for bb, xx in ((b, xs), (b16, xs16)):
        bf, xf = (bb, xx) if bb.dtype == np.float32 else (_widened(bb), tuple(_widened(x) for x in xx))
        bits = [np.abs(x - bf).view(np.int32) for x in xf]
        live = np.array([True, True])
        high = np.zeros((m, 1 << 16), np.int64)
        fused.magnitude_histogram(bb, xx, live, np.full(m, -1, np.int64), high)
        for i in range(m):
            assert np.array_equal(high[i], np.bincount(bits[i] >> 16, minlength=1 << 16))
        prefix = np.array([int(np.median(bits[i] >> 16)) for i in range(m)], np.int64)
        low = np.zeros((m, 1 << 16), np.int64)
        fused.magnitude_histogram(bb, xx, live, prefix, low)
        for i in range(m):
            sel = bits[i][(bits[i] >> 16) == prefix[i]] & 0xFFFF
            assert sel.size > 0 and np.array_equal(low[i], np.bincount(sel, minlength=1 << 16))
        value = np.float32(2 / 256)
        where = np.flatnonzero(np.abs(xf[0] - bf) == value)
        assert where.size > 10
        for r in (1, 2, where.size // 2, where.size):
            assert fused.nth_equal(bb, xx[0], value, r) == where[r - 1]
        assert fused.nth_equal(bb, xx[0], value, where.size + 1) == -1


def test_numba_registries_load_without_importing_scipy_linalg() -> None:
    """Importing the kernels loads numba's numpy registries without scipy.linalg (0.3 s saved per
    merge); scipy's BLAS stays importable after, and a kernel using np.dot still compiles."""
    code = (
        "import sys\n"
        "import numpy as np\n"
        "import venus_core.merge.fused\n"
        "assert 'scipy.linalg' not in sys.modules\n"
        "import numba.np.arraymath as am\n"
        "assert am._HAVE_BLAS is False\n"
        "import scipy.linalg.cython_blas\n"
        "from numba import njit\n"
        "dot = njit(lambda a, b: np.dot(a, b))\n"
        "assert dot(np.ones(3), np.ones(3)) == 3.0\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
