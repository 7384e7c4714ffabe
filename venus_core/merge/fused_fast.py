"""Merge kernels specialised for the number of models, generated as numba source and cached on disk.

Why generated: fused.merge_block handles any number of models M with loops over models inside
1,024-column chunks; every step is a pass over [M, chunk] scratch rows, so it is bound by the
CPU's L1 traffic (~10 ns per parameter for M = 3 on the benchmark VM). With M fixed, the whole
computation of one parameter - task vectors, trim, sign election, disjoint mean, output - runs
on named local variables (`t0`, `t1`, ...) in a single loop the compiler vectorises (3.3 ns per
parameter for M = 3 with the statistics, on in-memory data). numba cannot unroll a runtime model count into registers, so the loop is written
out per M as Python source (`source(m)`), and numba compiles it like any other function.

Bytes are those of fused.merge_block (and so of the torch reference path): the same fp32
operations in the same order - the ordered sums use the same odd-even transposition network
on local variables - and no fast-math flag on the loop that computes outputs. Statistics (Gram
matrix, sum of squared deltas, checks) need float reductions, which only vectorise when they may
be reassociated, so they run in separate small kernels with `fastmath={"reassoc"}`, chunk by
chunk, accumulated in fp64 as fused.merge_block does. Tied entries at the threshold are kept up
to a flat position per model (the cut: trim.Threshold): chunks are split at the cuts, and each
piece runs the same vectorised loop with the trim value of its side of the cut. Until
2026-12-02 the kept tied entries were listed by position and patched in one by one, scalar; on
bf16 fine-tunes whose small updates tie by the million at the threshold those lists held
millions of positions per tensor (scanned per block) and sent whole tensors to the torch path.

Caching: numba caches compiled code only for functions defined in a file, so `kernel(m)` writes
the source once to `<cache>/venus_merge_m<M>_<digest>.py` (digest of the source and of fused.py,
whose functions the compiled code includes: a changed generator or fused.py never reuses a stale
file; an existing file is used only if its bytes are exactly the generated ones) and imports it;
its numba cache sits next to it or in NUMBA_CACHE_DIR. The cache directory is NUMBA_CACHE_DIR
when set, else $XDG_CACHE_HOME/venus/kernels (~/.cache/...).
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from venus_core.merge import fused

MAX_M = 4  # larger model counts use fused.merge_block (compile time grows with M: ~9 s for 3, ~26 s for 6)

_lock = threading.Lock()
_kernels: dict[int, Callable[..., None]] = {}


def _ordered_sum(names: list[str], out: str) -> list[str]:
    """Lines computing `out` = sum of `names` in ascending order (fused._sorted_row_sum's network)."""
    m = len(names)
    if m == 1:
        return [f"{out} = {names[0]}"]
    if m == 2:
        return [f"{out} = {names[0]} + {names[1]}"]
    cur = list(names)
    lines: list[str] = []
    k = 0
    for rnd in range(m):
        for i in range(rnd % 2, m - 1, 2):
            a, b = cur[i], cur[i + 1]
            lo, hi = f"{out}_{k}", f"{out}_{k + 1}"
            k += 2
            lines += [f"{lo} = {a} if {a} <= {b} else {b}", f"{hi} = {b} if {a} <= {b} else {a}"]
            cur[i], cur[i + 1] = lo, hi
    expr = f"{cur[0]} + {cur[1]}"
    for c in cur[2:]:
        expr = f"({expr}) + {c}"
    return lines + [f"{out} = {expr}"]


def source(m: int) -> str:
    """Python source of the module holding `merge_block` for exactly m models."""
    if not 1 <= m <= MAX_M:
        raise ValueError(f"specialised kernels exist for 1..{MAX_M} models, not {m}")
    rng = range(m)
    xs = ", ".join(f"x{i}" for i in rng)
    xcs = ", ".join(f"xc{i}" for i in rng)
    pairs = [(i, k) for i in rng for k in range(i + 1)]
    lzs = ", ".join(f"lz{i}" for i in rng)
    accs = [f"g{i}_{k}" for i, k in pairs] + ["chk"] + [f"k{i}" for i in rng] + ["touched", "conflicts"]

    def taus(indent: str) -> list[str]:
        return [indent + "bj = bc[j]"] + [f"{indent}r{i} = xc{i}[j] - bj" for i in rng]

    def views(indent: str) -> list[str]:
        # chunk views indexed from 0: an index that may be negative (j - c0, or j from range(c0, c1))
        # makes numba emit a wrap-around branch per access, and the loop no longer vectorises
        return [indent + "bc = b[c0:c1]"] + [f"{indent}xc{i} = x{i}[c0:c1]" for i in rng]

    stats = [
        "@njit(cache=True, nogil=True, fastmath={'reassoc'})",
        f"def _stats(b, {xs}, {lzs}, c0, c1):",
        "    " + " = ".join(accs) + " = ZERO",
        *views("    "),
        "    for j in range(c1 - c0):",
        *taus("        "),
        *[f"        g{i}_{k} += r{i} * r{k}" for i, k in pairs],
        "        chk += " + " + ".join(f"abs(r{i})" for i in rng),
        # counts as exact small fp32 integers (a chunk has < 2**24 entries): t_i != 0 iff
        # |r_i| > max(lam_i, 0), t_i > 0 iff r_i > max(lam_i, 0), t_i < 0 iff r_i < -max(lam_i, 0)
        *[f"        k{i} += ONE if abs(r{i}) > lz{i} else ZERO" for i in rng],
        "        hp = " + " + ".join(f"(ONE if r{i} > lz{i} else ZERO)" for i in rng),
        "        hn = " + " + ".join(f"(ONE if r{i} < -lz{i} else ZERO)" for i in rng),
        "        touched += ONE if hp + hn > ZERO else ZERO",
        "        conflicts += ONE if min(hp, hn) > ZERO else ZERO",
        "    return (" + ", ".join(accs) + ")",
        "",
        "",
        "@njit(cache=True, nogil=True)",
        f"def _non_finite_tau(b, {xs}, c0, c1):",
        *views("    "),
        "    for j in range(c1 - c0):",
        *taus("        "),
        "        if not (" + " and ".join(f"abs(r{i}) <= FLT_MAX" for i in rng) + "):",
        "            return 1",
        "    return 0",
    ]

    trim = [f"{'':16}t{i} = r{i} if abs(r{i}) > l{i} else ZERO" for i in rng]
    ties_body = [
        *[f"{'':16}el{i} = (np.float32(t{i} > ZERO) - np.float32(t{i} < ZERO)) if cnt else t{i} * ew{i}"
          for i in rng],
        *[f"{'':16}{line}" for line in _ordered_sum([f"el{i}" for i in rng], "s")],
        f"{'':16}e = np.copysign(ONE, s) if zp else np.float32(s > ZERO) - np.float32(s < ZERO)",
        *[f"{'':16}a{i} = t{i} * e > ZERO" for i in rng],
        *[f"{'':16}p{i} = t{i} * pw{i} if a{i} else ZERO" for i in rng],
        *[f"{'':16}q{i} = pw{i} if a{i} else ZERO" for i in rng],
        *[f"{'':16}{line}" for line in _ordered_sum([f"p{i}" for i in rng], "num")],
        *[f"{'':16}{line}" for line in _ordered_sum([f"q{i}" for i in rng], "den")],
        f"{'':16}d = (num / (den if den > floor else floor) + ZERO) * lam_eff",
    ]
    sum_body = [
        *[f"{'':16}p{i} = t{i} * w{i}" for i in rng],
        *[f"{'':16}{line}" for line in _ordered_sum([f"p{i}" for i in rng], "d")],
        f"{'':16}d = d * lam_eff",
    ]
    emit = [f"{'':16}dd[j] = d"]  # one store per element: no aliasing checks for the vectoriser

    def loop(body: list[str]) -> list[str]:  # bc, xc0, ...: the chunk, fp32 (chunk_f32), from 0
        return ["            for j in range(c1 - c0):", *taus("                "), *trim, *body, *emit]

    main = [
        "@njit(cache=True, nogil=True, error_model='numpy')",  # no ZeroDivisionError branch in the loop
        "def merge_block(b, xs, lam_tie, lam_cut, cut, w, method, election, zero_positive, unit, lambda_, floor,",
        "                out, gram, ints, floats):",
        f'    """fused.merge_block for exactly {m} model(s); same arguments, same bytes."""',
        "    n = b.shape[0]",
        *[f"    x{i} = xs[{i}]" for i in rng],
        *[f"    lt{i} = lam_tie[{i}]" for i in rng],
        *[f"    lc{i} = lam_cut[{i}]" for i in rng],
        *[f"    cut{i} = cut[{i}]" for i in rng],
        *[f"    w{i} = w[{i}]" for i in rng],
        *[f"    ew{i} = w{i} if election == 1 and not unit else ONE" for i in rng],
        *[f"    pw{i} = w{i} if not unit else ONE" for i in rng],  # disjoint-mean weight
        "    cnt = election == 2",
        "    zp = zero_positive",
        "    lam_eff = lambda_ if lambda_ != ONE and method != 1 else ONE",
        "    dd = np.empty(CHUNK, np.float32)",
        "    " + " = ".join(f"k{i}" for i in rng) + " = 0",
        "    conflicts = touched = bad_tau = bad_out = any_nz = dmax_bits = 0",
        "    dsq = 0.0",
        "    sb = np.empty(CHUNK, np.float32)",  # widened bf16 chunks (chunk_f32); unused for fp32
        *[f"    sx{i} = np.empty(CHUNK, np.float32)" for i in rng],
        "    c0 = 0",
        "    while c0 < n:  # chunks of at most CHUNK columns, split at every model's cut",
        "        c1 = min(n, c0 + CHUNK)",
        *[f"        c1 = cut{i} if c0 < cut{i} < c1 else c1" for i in rng],
        *[f"        l{i} = lt{i} if c0 < cut{i} else lc{i}" for i in rng],
        *[f"        lz{i} = max(l{i}, ZERO)" for i in rng],
        "        nc = c1 - c0",
        "        bc = chunk_f32(b, c0, c1, sb)",
        *[f"        xc{i} = chunk_f32(x{i}, c0, c1, sx{i})" for i in rng],
        f"        g = _stats(bc, {xcs}, {lzs}, 0, nc)",
        *[f"        gram[{i}, {k}] += np.float64(g[{n}])" for n, (i, k) in enumerate(pairs)],
        f"        chk = g[{len(pairs)}]",
        *[f"        k{i} += int(g[{len(pairs) + 1 + i}])" for i in rng],
        f"        touched += int(g[{len(pairs) + 1 + m}])",
        f"        conflicts += int(g[{len(pairs) + 2 + m}])",
        "        if chk != ZERO:",
        "            any_nz = 1",
        "        if not (chk <= FLT_MAX):  # a NaN/Inf task vector, or only the sum overflowed: check exactly",
        f"            bad_tau |= _non_finite_tau(bc, {xcs}, 0, nc)",
        "        if method == 0:",
        *loop(ties_body),
        "        else:",
        *loop(sum_body),
        "        dq, ok, mx = _tail(bc, dd, out[c0:c1], 0, nc)  # out = b + delta, and the chunk statistics",
        "        dsq += np.float64(dq)",
        "        if ok != ZERO:",
        "            bad_out = 1",
        "        dmax_bits = mx if mx > dmax_bits else dmax_bits",
        "        c0 = c1",
        *[f"    ints[{i}] += k{i}" for i in rng],
        f"    ints[{m}] += conflicts",
        f"    ints[{m + 1}] += touched",
        f"    ints[{m + 2}] = bad_tau",
        f"    ints[{m + 3}] = bad_out",
        f"    ints[{m + 4}] = 1 - any_nz",
        "    floats[0] += dsq",
        "    mx = np.float64(np.array([dmax_bits], np.int32).view(np.float32)[0])",
        "    if mx > floats[1]:",
        "        floats[1] = mx",
    ]
    head = [
        f'"""Generated by venus_core.merge.fused_fast.source({m}); do not edit (regenerated on change)."""',
        "",
        "import numpy as np",
        "from numba import njit",
        "",
        "from venus_core.merge.fused import CHUNK, FLT_MAX, chunk_f32, tail as _tail",
        "",
        "ZERO = np.float32(0.0)",
        "ONE = np.float32(1.0)",
        "",
        "",
    ]
    return "\n".join(head + stats + ["", ""] + main) + "\n"


def _cache_dir() -> Path:
    env = os.environ.get("NUMBA_CACHE_DIR")
    if env:
        return Path(env) / "venus-kernels"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg) / "venus" / "kernels"


def _module_file(m: int) -> Path:
    """Write (once) and return the file holding the m-model kernel; its bytes are checked."""
    text = source(m).encode()
    # numba's cache of the generated module tracks that file only, yet its compiled code includes
    # the fused.py functions it calls (chunk_f32, tail): fused.py's bytes are part of the name, so
    # a change there compiles afresh instead of reusing stale machine code
    digest = hashlib.sha256(text + b"numba" + Path(fused.__file__).read_bytes()).hexdigest()[:16]
    for root in (_cache_dir(), Path(tempfile.gettempdir()) / f"venus-kernels-{os.getuid()}"):
        path = root / f"venus_merge_m{m}_{digest}.py"
        try:
            if root.is_dir() and root.stat().st_uid != os.getuid():
                continue  # someone else's directory: never import code from it
            if path.is_file() and path.read_bytes() == text:
                return path
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
            tmp = root / f".{path.name}.{os.getpid()}.{threading.get_ident()}"
            tmp.write_bytes(text)
            os.replace(tmp, path)
            return path
        except OSError:
            continue
    raise OSError(f"no writable directory for the merge kernels ({_cache_dir()} or the temp dir)")


def _load(path: Path) -> ModuleType:
    name = f"venus_merge_kernels_{path.stem}"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


def kernel(m: int) -> Callable[..., None]:
    """The merge_block kernel for m models (specialised for m <= MAX_M, else the generic one)."""
    if m > MAX_M:
        return fused.merge_block
    known = _kernels.get(m)  # called once per block from the worker threads: no lock once loaded
    if known is not None:
        return known
    with _lock:
        if m not in _kernels:
            _kernels[m] = _load(_module_file(m)).merge_block
        return _kernels[m]
