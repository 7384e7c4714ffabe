"""Checkpoints like real bf16 fine-tunes (issue 21): most task-vector entries exactly zero after
bf16 rounding and the rest tied at a few magnitudes, frozen (all-zero) task vectors, sharded
inputs with an index file, and the parity modes that reproduce mergekit.

Tensors are larger than the exact-selection limit (64 Ki entries) and `max_working_bytes` is small,
so thresholds go through the fused threshold pass (select.py) over several blocks on two threads.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors.torch import save_file

from merge_helpers import load_dir, write_ckpt
from test_invariants import reference_ties
from venus_core.merge import MergeConfig, engine, fused_engine, merge_checkpoints, select
from venus_core.merge.io import CheckpointReader
from venus_core.merge.methods import TIES
from venus_core.merge.trim import exact_thresholds
from venus_core.merge.verify import match_inputs

SHAPES = {
    "model.language_model.embed_tokens.weight": (400, 256),  # 102,400 entries: the fused pass
    "model.language_model.layers.0.mlp.up_proj.weight": (300, 256),
    "model.language_model.norm.weight": (256,),
    "model.visual.blocks.0.attn.qkv.weight": (320, 256),  # frozen by every model below
    "lm_head.weight": (400, 256),
}
SMALL = {"max_working_bytes": 1 << 21, "threads": 2}


def _bf16_finetunes(tmp: Path, scales: tuple[float, ...] = (1.0, 0.9, 0.8), frozen: tuple[str, ...] = ("model.visual.",),
                    seed: int = 0) -> tuple[Path, list[Path], dict[str, torch.Tensor], list[dict[str, torch.Tensor]]]:
    """A bf16 base and fine-tunes whose updates round away in about half the entries."""
    g = torch.Generator().manual_seed(seed)
    base = {k: (torch.randn(s, generator=g) * 0.02 + (1.0 if k.endswith("norm.weight") else 0.0)).to(torch.bfloat16)
            for k, s in SHAPES.items()}
    models = []
    for c in scales:
        m = {}
        for k, b in base.items():
            if k.startswith(frozen):
                m[k] = b.clone()
                continue
            # bf16's unit in the last place of b is |b| * 2**-7..2**-8: updates of ~|b| * 2**-8 round
            # to zero about half the time, and most others move b by one unit: thousands of ties
            scale = b.float().abs() * (2.0 ** -8) * c
            m[k] = (b.float() + torch.randn(b.shape, generator=g) * scale).to(torch.bfloat16)
        models.append(m)
    bp = write_ckpt(tmp / "base", base)
    return bp, [write_ckpt(tmp / f"m{i}", m) for i, m in enumerate(models)], base, models


def _same(a: Path, b: Path) -> None:
    ta, tb = load_dir(a), load_dir(b)
    assert set(ta) == set(tb)
    for k in ta:
        assert torch.equal(ta[k].reshape(-1).view(torch.uint8), tb[k].reshape(-1).view(torch.uint8)), k


def _fallbacks(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Records each merge's count of models whose threshold pass needed the radix passes."""
    seen: list[int] = []
    close = engine.Engine.close

    def spy(self: engine.Engine) -> None:
        seen.append(self.fallbacks)
        close(self)

    monkeypatch.setattr(engine.Engine, "close", spy)
    return seen


def test_bf16_ties_at_the_threshold_with_mostly_zero_task_vectors(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """Half the entries of every task vector are exactly zero and the threshold magnitude is tied
    by thousands: the fused pass counts those ties (no radix fallback), keeps exactly k per tensor
    (the lowest flat indices among the tied), writes the torch reference's bytes and matches the
    dense reference of TIES."""
    bp, mps, base, models = _bf16_finetunes(tmp_path)
    key = "model.language_model.embed_tokens.weight"
    taus = [(m[key].float() - base[key].float()).reshape(-1) for m in models]
    assert all(0.45 < float((t == 0).float().mean()) < 0.7 for t in taus)
    k = int(0.2 * taus[0].numel())
    kth = [t.abs().sort(descending=True).values[k - 1] for t in taus]
    assert all(int((t.abs() == v).sum()) > 1000 for t, v in zip(taus, kth))  # heavily tied threshold
    fallbacks = _fallbacks(monkeypatch)
    torch_path = []
    merge_tensor = engine.Engine.merge_tensor
    monkeypatch.setattr(engine.Engine, "merge_tensor", lambda self, job, *a, **kw: (
        torch_path.append((self.backend, job.info.key)), merge_tensor(self, job, *a, **kw))[1])
    report = merge_checkpoints(bp, mps, tmp_path / "fused", MergeConfig(density=0.2, **SMALL))
    assert fallbacks == [0]
    assert [t for t in torch_path if t[0] == "fused"] == []  # no tensor left the fused kernels
    merge_checkpoints(bp, mps, tmp_path / "torch", MergeConfig(density=0.2, backend="torch"))
    _same(tmp_path / "fused", tmp_path / "torch")
    big = next(t for t in report["tensors"] if t["key"] == key)  # type: ignore[union-attr]
    assert big["achieved_density"] == [round(k / taus[0].numel(), 8)] * 3
    got = load_dir(tmp_path / "fused")
    ref = reference_ties(base, models, 0.2)
    for name in SHAPES:  # fp32 maths rounded once to bf16: at most one unit in the last place apart
        assert torch.allclose(got[name].double(), ref[name], rtol=2 ** -7, atol=0), name


def test_fused_thresholds_equal_exact_selection_with_ties_and_zeros(tmp_path: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """plan_tensor's thresholds (value, tie quota, cut) are those of direct selection over the whole
    tensor, both when the sample's band holds the k-th magnitude and when the band is made to miss
    (radix fallback), for every density; the cut keeps the quota's tied entries and no more."""
    bp, mps, _, _ = _bf16_finetunes(tmp_path, seed=3)
    base_r, model_rs = CheckpointReader(bp), [CheckpointReader(p) for p in mps]
    try:
        eng = engine.Engine(base_r, model_rs, TIES, torch.ones(3), 1 << 21, "index", threads=2)
        job = next(j for j in match_inputs(base_r, model_rs) if j.info.key.endswith("embed_tokens.weight"))
        taus = eng._taus(job, *eng._views(job, 0, job.info.numel), check=False)[1]
        for density in (0.01, 0.2, 0.45, 0.7):
            k = max(1, int(density * job.info.numel))
            want = exact_thresholds(taus, [k] * 3, "index")
            for miss in (False, True):
                before = eng.fallbacks
                with monkeypatch.context() as mp:
                    if miss:  # a band that can hold nothing: every model goes to the radix passes
                        mp.setattr(select, "sample_band", _missing_band)
                    plan = eng.plan_tensor(job, k)
                assert eng.fallbacks - before == (3 if miss else 0) or (not miss and density != 0.2)
                assert not plan.unchanged
                got = [(t.bits, t.tie_quota, t.n_tied, t.cut if not t.keeps_all_ties else None)
                       for t in plan.thresholds]
                assert got == [(t.bits, t.tie_quota, t.n_tied, t.cut if not t.keeps_all_ties else None)
                               for t in want], (density, miss)
        eng.close()
    finally:
        for r in (base_r, *model_rs):
            r.close()


def _missing_band(sample: np.ndarray, ks: list[int], n: int, todo: list[int]) -> select.Band:
    band = select.Band.empty(sample.shape[0])
    band.lo[todo] = 10.0  # above every magnitude: the k-th is never in (lo, hi]
    band.hi[todo] = 11.0
    band.live[todo] = True
    return band


def test_select_weighted_matches_a_sort() -> None:
    """The k-th largest of collected values plus counted heavy values, against a sort of the
    whole multiset: below, between and above the heavy values, at them, out of range."""
    rng = np.random.default_rng(5)
    light = (rng.integers(1, 200, 3000) / 64).astype(np.float32)
    heavy = np.array([0.5, 1.0, np.nan, 2.25], np.float32)
    light = light[~np.isin(light, heavy)]
    counts = np.array([500, 40, 0, 7], np.int64)
    full = np.sort(np.concatenate([light, np.repeat(heavy[[0, 1, 3]], counts[[0, 1, 3]])]))[::-1]
    for r in (1, 2, 100, 1500, 2000, full.size - 1, full.size):
        bits, n_gt, n_eq = select.select_weighted(r, light, heavy, counts)
        v = full[r - 1]
        assert bits == int(np.array([v], np.float32).view(np.int32)[0])
        assert n_gt == int((full > v).sum()) and n_eq == int((full == v).sum())
    assert select.select_weighted(0, light, heavy, counts) is None
    assert select.select_weighted(full.size + 1, light, heavy, counts) is None


def test_frozen_tensors_are_copied_without_merging(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor no model changed (all-zero task vectors: the frozen vision tower) is recognised from
    its sample and copied block by block; its bytes are the base's and the report says unchanged.
    A tensor frozen in one model only is merged, and equals the torch path."""
    bp, mps, base, models = _bf16_finetunes(tmp_path, frozen=("model.visual.", "lm_head."))
    one = load_dir(mps[1])
    one["model.language_model.layers.0.mlp.up_proj.weight"] = base["model.language_model.layers.0.mlp.up_proj.weight"]
    write_ckpt(mps[1], one)  # frozen in model 1 only
    copied: list[str] = []
    copy_block = fused_engine.FusedBackend._copy_block
    monkeypatch.setattr(fused_engine.FusedBackend, "_copy_block", lambda self, job, *a: (
        copied.append(job.info.key), copy_block(self, job, *a))[1])
    report = merge_checkpoints(bp, mps, tmp_path / "fused", MergeConfig(density=0.2, **SMALL))
    assert set(copied) == {"model.visual.blocks.0.attn.qkv.weight", "lm_head.weight"}
    got = load_dir(tmp_path / "fused")
    for key in set(copied):
        assert torch.equal(got[key].view(torch.int16), base[key].view(torch.int16))
        t = next(t for t in report["tensors"] if t["key"] == key)  # type: ignore[union-attr]
        assert t["mode"] == "unchanged" and t["achieved_density"] == [0.0] * 3
    assert report["parts"]["vision"]["unchanged_tensors"] == 1  # type: ignore[index]
    merge_checkpoints(bp, mps, tmp_path / "torch", MergeConfig(density=0.2, backend="torch"))
    _same(tmp_path / "fused", tmp_path / "torch")


def _write_sharded(path: Path, tensors: dict[str, torch.Tensor], shards: int) -> Path:
    """A checkpoint in `shards` files with model.safetensors.index.json, as transformers saves it."""
    path.mkdir(parents=True, exist_ok=True)
    keys = sorted(tensors)
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = {k: tensors[k].contiguous() for k in keys[i::shards]}
        save_file(part, str(path / name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, name)
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    (path / "model.safetensors.index.json").write_text(json.dumps({"metadata": {"total_size": total},
                                                                   "weight_map": weight_map}))
    (path / "tokenizer.json").write_text('{"vocab": 40}')
    (path / "config.json").write_text(json.dumps({"model_type": "qwen3_vl"}))
    (path / "preprocessor_config.json").write_text('{"patch_size": 16}')
    return path


def test_sharded_inputs_with_an_index_merge_like_single_files(tmp_path: Path) -> None:
    """Base and models in shards listed by an index file (each sharded differently) merge to the
    same weights as the same checkpoints in one file each; a shard the index names but that is
    missing is an error naming it."""
    bp, mps, base, models = _bf16_finetunes(tmp_path / "single")
    sharded = [_write_sharded(tmp_path / "sharded" / "base", base, 3)]
    sharded += [_write_sharded(tmp_path / "sharded" / f"m{i}", m, 2 + i) for i, m in enumerate(models)]
    assert len(list(sharded[3].glob("*.safetensors"))) == 4
    merge_checkpoints(bp, mps, tmp_path / "out_single", MergeConfig(density=0.2, **SMALL))
    merge_checkpoints(sharded[0], sharded[1:], tmp_path / "out_sharded",
                      MergeConfig(density=0.2, shard_bytes=300_000, **SMALL))
    _same(tmp_path / "out_single", tmp_path / "out_sharded")
    index = json.loads((tmp_path / "out_sharded" / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(SHAPES) and len(set(index["weight_map"].values())) > 1
    (sharded[2] / "model-00002-of-00003.safetensors").unlink()
    with pytest.raises(ValueError, match=re.escape("lists missing shard 'model-00002-of-00003.safetensors'")):
        merge_checkpoints(sharded[0], sharded[1:], tmp_path / "out_bad", MergeConfig(density=0.2))


def test_sampling_a_large_tensor_leaves_its_pages_unmapped(tmp_path: Path) -> None:
    """The threshold sample reads 1,024 places of every input; through the mapping, the kernel
    mapped the cached pages around each (fault-around), up to 64 MiB per input and tensor until
    the merge released them. Read with pread, nothing of the inputs stays mapped."""
    n = 4 << 20  # 8 MiB per bf16 input
    g = torch.Generator().manual_seed(1)
    b = (torch.randn(n, generator=g) * 0.02).to(torch.bfloat16)
    bp = write_ckpt(tmp_path / "base", {"lm_head.weight": b})
    mps = [write_ckpt(tmp_path / f"m{i}", {"lm_head.weight": (b.float() + torch.randn(n, generator=g) * 1e-3)
                                           .to(torch.bfloat16)}) for i in range(2)]
    for p in (bp, *mps):  # in the page cache, as after a first read
        (p / "model.safetensors").read_bytes()
    base_r, model_rs = CheckpointReader(bp), [CheckpointReader(p) for p in mps]
    try:
        eng = engine.Engine(base_r, model_rs, TIES, torch.ones(2), 1 << 24, "index")
        job = match_inputs(base_r, model_rs)[0]
        assert eng._sample(job).shape == (2, engine.SAMPLE_RUNS * engine.SAMPLE_RUN)
        mapped = _mapped_kib(tmp_path)
        assert mapped < 1024, mapped  # KiB still mapped of the 24 MiB of inputs
    finally:
        for r in (base_r, *model_rs):
            r.close()


def _mapped_kib(under: Path) -> int:
    """Resident KiB of this process's mappings of files below `under` (/proc/self/smaps)."""
    total, inside = 0, False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = re.match(r"^[0-9a-f]+-[0-9a-f]+ \S+ \S+ \S+ \S+\s*(.*)$", line)
        if head:
            inside = head.group(1).startswith(str(under))
        elif inside and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def _mergekit_reference(base: dict[str, torch.Tensor], models: list[dict[str, torch.Tensor]],
                        density: float, weights: list[float]) -> dict[str, torch.Tensor]:
    """mergekit's TIES as its documentation describes it, whole tensors in the checkpoint dtype:
    delta = x - b, top-k of |delta| by torch.argsort (descending), weighted, sign of the weighted
    sum (>= 0: +), sum of the agreeing weighted deltas over the sum of their weights (0 -> 1)."""
    out = {}
    for key, b in base.items():
        deltas = []
        for m in models:
            d = (m[key] - b).reshape(-1)
            k = max(1, int(density * d.numel()))
            mask = torch.zeros_like(d)
            mask[torch.argsort(d.abs().float(), descending=True)[:k]] = 1
            deltas.append(d * mask)
        d = torch.stack(deltas)
        w = torch.tensor(weights, dtype=d.dtype).view(-1, 1)
        d = d * w
        sign = torch.where(d.sum(0) >= 0, 1.0, -1.0).to(d.dtype)
        agree = d.sign() == sign
        total = (d * agree).sum(0)
        den = (w * agree).sum(0)
        den = torch.where(den == 0, torch.ones_like(den), den)
        out[key] = (b.reshape(-1) + total / den).reshape(b.shape)
    return out


def test_parity_modes_reproduce_mergekit_arithmetic_and_ties(tmp_path: Path) -> None:
    """arithmetic "mergekit" + threshold ties "argsort" give, bit for bit, the whole-tensor bf16
    computation mergekit documents, block by block; the default (fp32, lowest indices first)
    differs from it, and mostly by the tied entries it keeps (argsort alone removes most)."""
    bp, mps, base, models = _bf16_finetunes(tmp_path, seed=6)
    weights = [1.0, 0.5, 2.0]
    ref = _mergekit_reference(base, models, 0.2, weights)
    runs = {"default": {}, "argsort": {"threshold_ties": "argsort"},
            "both": {"arithmetic": "mergekit", "threshold_ties": "argsort"}}
    differing = {}
    for name, kw in runs.items():
        cfg = MergeConfig.mergekit_ties(density=0.2, weights=weights, max_working_bytes=1 << 21, **kw)
        merge_checkpoints(bp, mps, tmp_path / name, cfg)
        got = load_dir(tmp_path / name)
        differing[name] = sum(int((got[k].view(torch.int16) != ref[k].view(torch.int16)).sum()) for k in SHAPES)
    assert differing["both"] == 0
    assert differing["default"] > 2 * differing["argsort"]


def test_parity_options_are_checked() -> None:
    with pytest.raises(ValueError, match="arithmetic 'mergekit' reproduces mergekit's ties"):
        MergeConfig(arithmetic="mergekit")  # election "mass" is not mergekit's
    with pytest.raises(ValueError, match="trim per tensor"):
        MergeConfig(threshold_ties="argsort", trim_scope="model")
    assert MergeConfig.mergekit_ties(arithmetic="mergekit").parity
