"""The model-count-specialised kernels (fused_fast) compute fused.merge_block's bytes and counts.

Kernel-level: the same block goes through the generated kernel and the generic one with every
method option (election, zero sign, weights, lambda, linear / task arithmetic), with tied
entries kept by position (the fast kernel patches those entries in after its vectorised loop),
and with NaN / overflow inputs (the flags must agree). bf16 inputs given as raw bits (uint16,
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
    lam = np.full(m, 5 / 256, np.float32)
    lam[0] = 3 / 256
    keep = []
    for i, x in enumerate(xs):
        with np.errstate(over="ignore"):
            tied = np.flatnonzero(np.abs(x - b) == lam[i])
        keep.append(np.sort(rng.choice(tied, size=min(len(tied), 40), replace=False)))
    width = max(len(k) for k in keep)
    keep_pos = np.zeros((m, width), np.int64)
    for i, k in enumerate(keep):
        keep_pos[i, : len(k)] = k
    return b, xs, lam, keep_pos, np.array([len(k) for k in keep], np.int64)


def _run(kernel, b, xs, lam, keep_pos, keep_n, w, method, election, zero_positive, lambda_, floor):
    m = len(xs)
    out = np.empty(N, np.float32)
    gram = np.zeros((m, m))
    ints = np.zeros(m + 5, np.int64)
    floats = np.zeros(2)
    kernel(b, xs, lam, keep_pos, keep_n, w, method, election, zero_positive, bool((w == 1).all()),
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
    b, xs, lam, keep_pos, keep_n = _block(m, seed=m * 10 + len(str(case)))
    assert keep_n.sum() > 0  # some chunks hold tied entries kept by position
    if method:
        lam = np.full(m, -np.inf, np.float32)  # linear / task arithmetic do not trim
        keep_pos, keep_n = np.zeros((m, 0), np.int64), np.zeros(m, np.int64)
    w = np.ones(m, np.float32) if unit else np.linspace(0.5, 1.5, m).astype(np.float32)
    floor = float(w[w > 0].min())
    args = (b, xs, lam, keep_pos, keep_n, w, method, election, zero_positive, lambda_, floor)
    fast = _run(fused_fast.kernel(m), *args)
    ref = _run(fused.merge_block, *args)
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
    (merge: the specialised kernel, tied entries kept by position included; scan: any M)."""
    b32, xs32, lam, keep_pos, keep_n = _block(m, seed=3)
    b16, xs16 = _bf16_bits(b32), tuple(_bf16_bits(x) for x in xs32)
    b, xs = _widened(b16), tuple(_widened(x) for x in xs16)
    scratch = np.empty(fused.CHUNK, np.float32)  # chunk_f32's Python body, as the overload
    assert np.array_equal(fused.chunk_f32(b16, 5, 900, scratch), b[5:900])
    assert np.shares_memory(fused.chunk_f32(b, 5, 900, scratch), b)
    lam = np.full(m, 5 / 256, np.float32)  # the grid's values are exact in bf16: ties stay ties
    keep = [np.flatnonzero(np.abs(x - b) == lam[i])[::3][:40] for i, x in enumerate(xs)]
    keep_pos = np.zeros((m, max(len(k) for k in keep)), np.int64)
    for i, k in enumerate(keep):
        keep_pos[i, : len(k)] = k
    keep_n = np.array([len(k) for k in keep], np.int64)
    assert keep_n.sum() > 0
    w = np.linspace(0.5, 1.5, m).astype(np.float32)
    if m <= fused_fast.MAX_M:
        args = (keep_pos, keep_n, w, 0, 1, True, 1.0, float(w.min()))
        got = _run(fused_fast.kernel(m), b16, xs16, lam, *args)
        want = _run(fused_fast.kernel(m), b, xs, lam, *args)
        assert np.array_equal(got[0].view(np.int32), want[0].view(np.int32))
        assert got[2].tolist() == want[2].tolist()
        assert np.array_equal(got[1], want[1]) and np.array_equal(got[3], want[3])
    lo, hi = np.full(m, 3 / 256, np.float32), np.full(m, 6 / 256, np.float32)
    live = np.ones(m, np.bool_)
    res = []
    for bb, xx in ((b16, xs16), (b, xs)):
        above, held = np.zeros(m, np.int64), np.zeros(m, np.int64)
        val, at = np.zeros((m, N), np.float32), np.zeros((m, N), np.int64)
        fused.scan_block(bb, xx, lo, hi, live, above, np.zeros((m, fused.SCAN_SUB // 64), np.int64), val, at, held, 0)
        res.append((above, held, [val[i, : held[i]] for i in range(m)], [at[i, : held[i]] for i in range(m)]))
    (a1, h1, v1, p1), (a2, h2, v2, p2) = res
    assert np.array_equal(a1, a2) and np.array_equal(h1, h2) and h1.sum() > 0
    assert all(np.array_equal(x, y) for x, y in zip(v1 + p1, v2 + p2))


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
    b, xs, lam, keep_pos, keep_n = _block(m, seed=5, nan=bad == "nan", huge=bad == "overflow")
    w = np.ones(m, np.float32)
    args = (b, xs, lam, keep_pos, keep_n, w, 0, 0, False, 1.0, 1.0)
    fast, ref = _run(fused_fast.kernel(m), *args), _run(fused.merge_block, *args)
    assert fast[2][m + 2] == ref[2][m + 2] == 1  # a non-finite task vector is flagged
    assert fast[2].tolist() == ref[2].tolist()


def test_all_zero_block_is_flagged() -> None:
    m = 2
    b = np.linspace(-1, 1, N).astype(np.float32)
    xs = (b.copy(), b.copy())
    lam = np.zeros(m, np.float32)
    none = np.zeros((m, 0), np.int64), np.zeros(m, np.int64)
    out, _, ints, floats = _run(fused_fast.kernel(m), b, xs, lam, *none, np.ones(m, np.float32), 0, 0, False,
                                1.0, 1.0)
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
    """fused.scan_block vs numpy: entries above the band counted, entries in the band collected
    with their flat positions (offset + j) in ascending order, across sub-blocks, the last one
    partial; a model that is not live is left at zero."""
    rng = np.random.default_rng(n)
    m = 3
    b = (rng.standard_normal(n) * 0.1).astype(np.float32)
    xs = tuple((b + rng.standard_normal(n).astype(np.float32) * 0.01).astype(np.float32) for _ in range(m))
    lo = np.array([0.004, 0.006, 0.0], np.float32)
    hi = np.array([0.008, 0.0065, 1.0], np.float32)
    live = np.array([True, True, False])
    above, held = np.full(m, 7, np.int64), np.full(m, 7, np.int64)  # stale values are reset
    masks = np.full((m, fused.SCAN_SUB // 64), -1, np.int64)
    val = np.full((m, n), -1.0, np.float32)
    at = np.full((m, n), -1, np.int64)
    fused.scan_block(b, xs, lo, hi, live, above, masks, val, at, held, 1000)
    for i in range(m):
        t = np.abs(xs[i] - b)
        if not live[i]:
            assert above[i] == 0 and held[i] == 0
            continue
        band = np.flatnonzero((t > lo[i]) & (t <= hi[i]))
        assert above[i] == int((t > hi[i]).sum())
        assert held[i] == band.size and (n < 100 or band.size > 0)
        assert np.array_equal(at[i, : held[i]], band + 1000)
        assert np.array_equal(val[i, : held[i]], t[band])


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
