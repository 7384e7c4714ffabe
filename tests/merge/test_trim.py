from __future__ import annotations

import torch

from venus_core.merge.trim import apply_thresholds, find_thresholds, k_for


def _reference_mask(row: torch.Tensor, k: int) -> torch.Tensor:
    """Top-k by |x|, ties broken by lowest flat index (stable descending sort)."""
    order = torch.argsort(row.abs(), descending=True, stable=True)[:k]
    mask = torch.zeros_like(row, dtype=torch.bool)
    mask[order] = True
    return mask


def _run(taus: torch.Tensor, k: int, chunk: int, ties: str = "index") -> torch.Tensor:
    n = taus.shape[1]
    parts = lambda: [taus[:, i:i + chunk].clone() for i in range(0, n, chunk)]  # noqa: E731
    ths = find_thresholds(parts, [k] * taus.shape[0], n, ties)  # type: ignore[arg-type]
    kept = []
    for c in parts():
        apply_thresholds(c, ths)
        kept.append(c != 0)
    return torch.cat(kept, dim=1)


def test_exact_topk_matches_sort_with_many_ties() -> None:
    g = torch.Generator().manual_seed(0)
    # quantized values: lots of exact magnitude ties, both signs, zeros
    taus = (torch.randint(-20, 21, (3, 1000), generator=g).float() / 8)
    for k in (1, 7, 200, 333, 999):
        ref = torch.stack([_reference_mask(r, k) | ((r == 0) & False) for r in taus])
        for chunk in (1000, 97, 13):
            got = _run(taus, k, chunk)
            nz = taus != 0
            assert torch.equal(got & nz, ref & nz), (k, chunk)
            assert int((got & nz).sum(1).max()) <= k


def test_keep_policy_keeps_all_ties() -> None:
    taus = torch.tensor([[3.0, 1.0, 2.0, 2.0, 2.0, 0.5]])
    got = _run(taus, 2, 4, ties="keep")
    assert got.tolist() == [[True, False, True, True, True, False]]
    got = _run(taus, 2, 4, ties="index")
    assert got.tolist() == [[True, False, True, False, False, False]]


def test_threshold_is_exact_for_continuous_values() -> None:
    g = torch.Generator().manual_seed(1)
    taus = torch.randn(2, 5000, generator=g) * 1e-3
    got = _run(taus, 1000, 333)
    for i in range(2):
        assert torch.equal(got[i], _reference_mask(taus[i], 1000))


def test_k_for_edges() -> None:
    assert k_for(1.0, 10) == 10
    assert k_for(0.2, 10) == 2
    assert k_for(0.01, 10) == 1  # at least one, as mergekit
    assert k_for(0.5, 0) == 0


def test_select_in_band_matches_a_sort() -> None:
    """select_in_band (radix select in numba) against a plain sort: the k-th magnitude, the count
    above it and the ties, with few distinct values (bf16-like, many ties) and with continuous
    ones, candidates in several lists."""
    import numpy as np

    from venus_core.merge.trim import select_in_band

    rng = np.random.default_rng(3)
    for values in (np.round(rng.random(20_000) * 64) / 64 + 0.25,  # 65 distinct magnitudes
                   rng.random(20_000) * 1e-3,  # continuous
                   np.concatenate([rng.random(9_000), np.full(1_000, np.inf), np.zeros(100)])):
        vals = values.astype(np.float32)
        splits = [0, 3, 5000, 5001, 12_345, vals.size]
        cands = [torch.from_numpy(vals[a:b].copy()) for a, b in zip(splits, splits[1:])]
        order = np.sort(vals)[::-1]
        for above, k in ((0, 1), (10, 4000), (7, 8000), (0, vals.size)):
            t = select_in_band(k, above, cands, "index")
            want = order[k - above - 1]
            assert t is not None and t.bits == int(np.array([want], np.float32).view(np.int32)[0])
            n_gt = int((vals > want).sum())
            assert t.n_tied == int((vals == want).sum()) and t.tie_quota == k - above - n_gt
            assert t.cut is None  # which ties are kept is counted while streaming (apply_thresholds)
        assert select_in_band(10, 11, cands, "index") is None  # the k-th is above the band
        assert select_in_band(vals.size + 1, 0, cands, "index") is None  # below it


def test_a_cut_keeps_the_ties_before_it_in_every_chunking() -> None:
    """exact_thresholds records which ties "index" keeps as a cut (one flat position);
    apply_thresholds with chunk offsets then keeps exactly the ties before it, whatever the
    chunking, and the same entries as the stable sort (lowest indices first)."""
    from venus_core.merge.trim import exact_thresholds

    g = torch.Generator().manual_seed(4)
    taus = torch.randint(-6, 7, (3, 2000), generator=g).float() / 64  # 13 values: ties everywhere
    for k in (1, 150, 999, 1500):
        ths = exact_thresholds(taus, [k] * 3, "index")
        assert all(t.keeps_all_ties or t.cut is not None for t in ths)
        ref = torch.stack([_reference_mask(r, k) for r in taus])
        for chunk in (2000, 333, 64):
            got = []
            for s in range(0, 2000, chunk):
                c = taus[:, s:s + chunk].clone()
                apply_thresholds(c, ths, s)
                got.append(c != 0)
            nz = taus != 0
            assert torch.equal(torch.cat(got, 1) & nz, ref & nz), (k, chunk)
