"""Maths invariants and parity with a dense reference implementation of TIES (Yadav et al.)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from merge_helpers import SHAPES, load_dir, perturb, random_base, write_ckpt
from venus_core.merge import MergeConfig, merge_checkpoints


def reference_ties(base: dict[str, torch.Tensor], models: list[dict[str, torch.Tensor]],
                   density: float, lam: float = 1.0, scope: str = "tensor") -> dict[str, torch.Tensor]:
    """The paper's algorithm, dense: trim top-k |tau| (ties -> lowest index), elect sign by
    total mass, disjoint mean over agreeing entries, scale, add to base."""
    keys = sorted(base)
    taus = [torch.cat([(m[k].float() - base[k].float()).reshape(-1) for k in keys]) if scope == "model"
            else None for m in models]
    out = {}
    for k in keys:
        t = torch.stack([(m[k].float() - base[k].float()).reshape(-1) for m in models])
        if scope == "tensor":
            kk = max(1, int(density * t.shape[1]))
            for i in range(len(models)):
                idx = torch.argsort(t[i].abs(), descending=True, stable=True)[kk:]
                t[i, idx] = 0
        out[k] = t
    if scope == "model":
        flat = torch.stack([x for x in taus if x is not None])
        kk = max(1, int(density * flat.shape[1]))
        keep = torch.zeros_like(flat, dtype=torch.bool)
        for i in range(len(models)):
            keep[i, torch.argsort(flat[i].abs(), descending=True, stable=True)[:kk]] = True
        off = 0
        for k in keys:
            n = base[k].numel()
            out[k] = out[k] * keep[:, off:off + n]
            off += n
    res = {}
    for k in keys:
        t = out[k].double()
        gamma = torch.sign(t.sum(0))
        agree = (torch.sign(t) == gamma) & (t != 0)
        cnt = agree.sum(0)
        merged = torch.where(cnt > 0, (t * agree).sum(0) / cnt.clamp(min=1), 0.0)
        res[k] = (base[k].double().reshape(-1) + lam * merged).reshape(base[k].shape)
    return res


def test_ties_matches_dense_reference(three_models, tmp_path: Path) -> None:
    bp, mps, base, models = three_models
    report = merge_checkpoints(bp, mps, tmp_path / "out", MergeConfig(density=0.3, **{"lambda": 0.8}))
    got = load_dir(tmp_path / "out")
    ref = reference_ties(base, models, 0.3, 0.8)
    for k in SHAPES:
        torch.testing.assert_close(got[k].double(), ref[k], atol=1e-6, rtol=0)
    t = next(x for x in report["tensors"] if x["key"] == "lm_head.weight")
    assert t["achieved_density"] == [round(int(0.3 * 640) / 640, 8)] * 3


def test_ties_global_scope_matches_reference(tmp_path: Path) -> None:
    base = random_base(5)
    models = [perturb(base, s, frozen=()) for s in (6, 7, 8)]
    bp = write_ckpt(tmp_path / "b", base)
    mps = [write_ckpt(tmp_path / f"m{i}", m) for i, m in enumerate(models)]
    cfg = MergeConfig(density=0.25, trim_scope="model", parts={
        p: {"density": 0.25} for p in ("vision", "projector", "language", "embeddings")})
    # one shared threshold per part: build the reference per part
    report = merge_checkpoints(bp, mps, tmp_path / "o", cfg)
    got = load_dir(tmp_path / "o")
    from venus_core.merge.keys import part_of
    for part in ("vision", "projector", "language", "embeddings"):
        keys = [k for k in SHAPES if part_of(k) == part]
        ref = reference_ties({k: base[k] for k in keys}, [{k: m[k] for k in keys} for m in models],
                             0.25, scope="model")
        for k in keys:
            torch.testing.assert_close(got[k].double(), ref[k], atol=1e-6, rtol=0)
        n = sum(base[k].numel() for k in keys)
        assert report["parts"][part]["achieved_density"] == [round(max(1, int(0.25 * n)) / n, 8)] * 3


def test_chunked_streaming_is_bit_identical(three_models, tmp_path: Path) -> None:
    bp, mps, _, _ = three_models
    merge_checkpoints(bp, mps, tmp_path / "a", MergeConfig(density=0.2))
    merge_checkpoints(bp, mps, tmp_path / "b", MergeConfig(density=0.2, max_working_bytes=1 << 16,
                                                           shard_bytes=3000))
    a, b = load_dir(tmp_path / "a"), load_dir(tmp_path / "b")
    assert len(list((tmp_path / "b").glob("*.safetensors"))) > 1
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("method,extra", [("ties", {"density": 1.0}), ("linear", {}), ("task_arithmetic", {})])
def test_one_model_in_gives_that_model(method: str, extra: dict, tmp_path: Path) -> None:
    base = random_base(0, torch.bfloat16)
    m = perturb(base, 1, frozen=())
    bp, mp = write_ckpt(tmp_path / "b", base), write_ckpt(tmp_path / "m", m)
    merge_checkpoints(bp, [mp], tmp_path / "o", MergeConfig(method=method, **extra))
    got = load_dir(tmp_path / "o")
    for k in m:
        assert torch.equal(got[k], m[k]), k


@pytest.mark.parametrize("method", ["ties", "linear", "task_arithmetic"])
def test_identical_models_give_that_model(method: str, tmp_path: Path) -> None:
    base = random_base(0, torch.bfloat16)
    m = perturb(base, 1, frozen=())
    bp = write_ckpt(tmp_path / "b", base)
    mps = [write_ckpt(tmp_path / f"m{i}", m) for i in range(3)]
    cfg = MergeConfig(method=method, density=1.0) if method != "task_arithmetic" else \
        MergeConfig(method=method, weights=[1 / 3] * 3)
    merge_checkpoints(bp, mps, tmp_path / "o", cfg)
    got = load_dir(tmp_path / "o")
    for k in m:
        assert torch.equal(got[k], m[k]), k


@pytest.mark.parametrize("method", ["ties", "linear", "task_arithmetic"])
def test_order_of_models_does_not_matter(method: str, tmp_path: Path) -> None:
    base = random_base(0)
    ms = [perturb(base, s, scale=0.05) for s in (1, 2, 3, 4)]
    bp = write_ckpt(tmp_path / "b", base)
    mps = [write_ckpt(tmp_path / f"m{i}", m) for i, m in enumerate(ms)]
    w = [0.1, 0.2, 0.3, 0.4]
    perm = [2, 0, 3, 1]
    merge_checkpoints(bp, mps, tmp_path / "o1", MergeConfig(method=method, weights=w))
    merge_checkpoints(bp, [mps[i] for i in perm], tmp_path / "o2",
                      MergeConfig(method=method, weights=[w[i] for i in perm]))
    a, b = load_dir(tmp_path / "o1"), load_dir(tmp_path / "o2")
    for k in a:
        assert torch.equal(a[k], b[k]), k


@pytest.mark.parametrize("method", ["ties", "task_arithmetic"])
def test_zero_weights_give_the_base(method: str, tmp_path: Path) -> None:
    base = random_base(0)
    base["model.language_model.norm.weight"][0] = -0.0
    bp = write_ckpt(tmp_path / "b", base)
    mps = [write_ckpt(tmp_path / f"m{i}", perturb(base, i + 1)) for i in range(3)]
    merge_checkpoints(bp, mps, tmp_path / "o", MergeConfig(method=method, weights=[0, 0, 0]))
    got = load_dir(tmp_path / "o")
    for k in base:
        assert torch.allclose(got[k], base[k], atol=0, rtol=0), k


def test_frozen_part_is_copied_bit_exact(tmp_path: Path) -> None:
    base = random_base(0)
    base["model.visual.blocks.0.norm1.weight"][:3] = -0.0  # fp32 base + 0 would give +0.0
    models = [perturb(base, s) for s in (1, 2, 3)]  # vision tower unchanged (frozen in RL)
    bp = write_ckpt(tmp_path / "b", base)
    mps = [write_ckpt(tmp_path / f"m{i}", m) for i, m in enumerate(models)]
    report = merge_checkpoints(bp, mps, tmp_path / "o", MergeConfig(method="task_arithmetic"))
    got = load_dir(tmp_path / "o")
    for k in SHAPES:
        if k.startswith("model.visual."):
            a, b = got[k].view(torch.int32), base[k].view(torch.int32)
            assert torch.equal(a, b), k
        else:
            assert not torch.equal(got[k], base[k]), k
    assert report["parts"]["vision"]["unchanged_tensors"] == 2
    assert report["parts"]["projector"]["unchanged_tensors"] == 1
