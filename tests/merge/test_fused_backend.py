"""The fused (numba) merge backend writes the same bytes as the torch reference path.

Tensors here are larger than the exact-selection limit (64 Ki entries), so thresholds go through
the fused sample-bounded scan, and `max_working_bytes` is small so every tensor spans several
fused blocks run on two worker threads. bf16 inputs make many task-vector magnitudes tie at the
threshold (the tied entries kept by position); fp32 inputs with a coarse grid do the same.
"""

from __future__ import annotations

import hashlib
import os
import threading
from pathlib import Path

import pytest
import torch

from merge_helpers import load_dir, write_ckpt
from venus_core.merge import MergeConfig, engine, io, merge_checkpoints
from venus_core.merge.verify import MergeInputError

BIG = {
    "model.language_model.layers.0.mlp.up_proj.weight": (300, 256),  # 76,800 > 65,536
    "model.language_model.embed_tokens.weight": (70_000,),
    "model.visual.blocks.0.attn.qkv.weight": (24, 8),  # small: exact selection
    "lm_head.weight": (40, 16),
}


def _models(tmp: Path, m: int, dtype: torch.dtype = torch.float32, grid: float = 0.0,
            seed: int = 0) -> tuple[Path, list[Path]]:
    g = torch.Generator().manual_seed(seed)
    base = {k: torch.randn(s, generator=g) * 0.1 for k, s in BIG.items()}
    models = []
    for _ in range(m):
        mt = {}
        for k, v in base.items():
            d = torch.randn(v.shape, generator=g) * 0.01
            if grid:
                d = torch.round(d / grid) * grid  # many equal magnitudes: ties at the threshold
            mt[k] = (v + d).to(dtype)
        models.append(mt)
    bp = write_ckpt(tmp / "base", {k: v.to(dtype) for k, v in base.items()})
    return bp, [write_ckpt(tmp / f"m{i}", mt) for i, mt in enumerate(models)]


def _same_outputs(a: Path, b: Path) -> None:
    ta, tb = load_dir(a), load_dir(b)
    assert set(ta) == set(tb)
    for k in ta:
        assert ta[k].dtype == tb[k].dtype, k
        assert torch.equal(ta[k].view(-1).view(torch.uint8), tb[k].view(-1).view(torch.uint8)), k


def _merge_both(tmp: Path, bp: Path, mps: list[Path], **cfg: object) -> tuple[dict, dict]:
    small = {"max_working_bytes": 1 << 21, "threads": 2}
    fused = merge_checkpoints(bp, mps, tmp / "fused", MergeConfig(backend="fused", **small, **cfg))
    ref = merge_checkpoints(bp, mps, tmp / "torch", MergeConfig(backend="torch", **cfg))
    _same_outputs(tmp / "fused", tmp / "torch")
    return fused, ref


CASES = [
    pytest.param(3, {"method": "ties", "density": 0.2}, id="ties-mass"),
    pytest.param(3, {"method": "ties", "density": 0.3, "weights": [0.5, 1.0, 2.0], "election": "weighted_mass",
                     "zero_sign": "positive", "lambda": 0.7}, id="ties-mergekit-weighted-lambda"),
    pytest.param(3, {"method": "ties", "density": 0.25, "election": "count"}, id="ties-count"),
    pytest.param(2, {"method": "ties", "density": 0.2, "weights": [0.3, 0.0]}, id="ties-2-models-zero-weight"),
    pytest.param(5, {"method": "ties", "density": 0.1, "weights": [1, 2, 3, 4, 5]}, id="ties-5-models"),
    pytest.param(9, {"method": "ties", "density": 0.5}, id="ties-9-models"),
    pytest.param(1, {"method": "ties", "density": 0.2}, id="ties-1-model"),
    pytest.param(3, {"method": "linear", "weights": [0.2, 0.3, 0.5]}, id="linear"),
    pytest.param(3, {"method": "task_arithmetic", "weights": [1.0, -0.5, 0.25], "lambda": 1.5}, id="task-arithmetic"),
]


@pytest.mark.parametrize("m,cfg", CASES)
def test_fused_equals_torch_fp32(m: int, cfg: dict, tmp_path: Path) -> None:
    bp, mps = _models(tmp_path, m)
    fused, ref = _merge_both(tmp_path, bp, mps, **cfg)
    for a, b in zip(fused["tensors"], ref["tensors"]):  # type: ignore[arg-type]
        assert a["key"] == b["key"]
        assert a["achieved_density"] == b["achieved_density"]
        assert a["sign_conflict_rate"] == pytest.approx(b["sign_conflict_rate"], abs=1e-12)
        assert a["merged_delta_max_abs"] == pytest.approx(b["merged_delta_max_abs"], rel=1e-6)
        assert a["merged_delta_norm"] == pytest.approx(b["merged_delta_norm"], rel=1e-5)
        assert a["task_vector_norms"] == pytest.approx(b["task_vector_norms"], rel=1e-5)


@pytest.mark.parametrize("dtype,grid", [(torch.bfloat16, 0.0), (torch.float32, 0.002)], ids=["bf16", "fp32-grid"])
@pytest.mark.parametrize("ties", ["index", "keep"])
def test_fused_equals_torch_with_ties_at_the_threshold(dtype: torch.dtype, grid: float, ties: str,
                                                       tmp_path: Path) -> None:
    bp, mps = _models(tmp_path, 3, dtype=dtype, grid=grid, seed=4)
    fused, _ = _merge_both(tmp_path, bp, mps, method="ties", density=0.2, threshold_ties=ties)
    big = next(t for t in fused["tensors"] if t["key"] == "model.language_model.embed_tokens.weight")  # type: ignore[union-attr]
    want = max(1, int(0.2 * 70_000)) / 70_000
    if ties == "index":
        assert big["achieved_density"] == [round(want, 8)] * 3
    else:
        assert all(d >= round(want, 8) for d in big["achieved_density"])


def test_fused_global_trim_and_threads_agree(tmp_path: Path) -> None:
    bp, mps = _models(tmp_path, 3, seed=2)
    _merge_both(tmp_path, bp, mps, method="ties", density=0.2, trim_scope="model")
    merge_checkpoints(bp, mps, tmp_path / "one", MergeConfig(density=0.2, threads=1))
    merge_checkpoints(bp, mps, tmp_path / "four", MergeConfig(density=0.2, threads=4, max_working_bytes=1 << 20))
    _same_outputs(tmp_path / "one", tmp_path / "four")
    def weights(d: Path) -> list[str]:
        return [x for x in (d / "SHA256SUMS").read_text().splitlines() if x.endswith(".safetensors")]
    assert weights(tmp_path / "one") == weights(tmp_path / "four")


def test_sample_bounds_that_miss_fall_back_exactly(tmp_path: Path) -> None:
    """Adversarial data: every sampled run is constant, the rest spread out, so the sample's band
    cannot hold the k-th magnitude; the radix passes must give the exact threshold anyway."""
    n = 70_000
    g = torch.Generator().manual_seed(7)
    base = {"model.language_model.embed_tokens.weight": torch.zeros(n), "lm_head.weight": torch.zeros(40, 16)}
    models = []
    runs, run = engine.SAMPLE_RUNS, engine.SAMPLE_RUN
    for s in range(3):
        d = torch.randn(n, generator=g) * 0.01
        for j in range(runs):
            st = (n - run) * j // (runs - 1)
            d[st:st + run] = 1e-6 * (s + 1)  # the sample sees only tiny magnitudes
        models.append({"model.language_model.embed_tokens.weight": d, "lm_head.weight": torch.randn(40, 16) * 0.01})
    bp = write_ckpt(tmp_path / "base", base)
    mps = [write_ckpt(tmp_path / f"m{i}", m) for i, m in enumerate(models)]
    fused, _ = _merge_both(tmp_path, bp, mps, method="ties", density=0.3)
    big = next(t for t in fused["tensors"] if t["key"] == "model.language_model.embed_tokens.weight")  # type: ignore[union-attr]
    assert big["achieved_density"] == [round(int(0.3 * n) / n, 8)] * 3


def test_fused_non_finite_input_names_the_tensor(tmp_path: Path) -> None:
    bp, mps = _models(tmp_path, 2)
    bad = load_dir(mps[1])
    bad["model.language_model.embed_tokens.weight"][69_999] = float("nan")
    write_ckpt(mps[1], bad)
    with pytest.raises(MergeInputError, match=r"m1: tensor 'model.language_model.embed_tokens.weight': 1 NaN"):
        merge_checkpoints(bp, mps, tmp_path / "o", MergeConfig(density=0.2, threads=2, max_working_bytes=1 << 21))


def test_fused_overflow_is_an_error(tmp_path: Path) -> None:
    big = {"lm_head.weight": torch.full((300, 256), 3.0e38)}
    bp = write_ckpt(tmp_path / "base", big)
    mps = [write_ckpt(tmp_path / f"m{i}", {"lm_head.weight": torch.full((300, 256), 3.3e38)}) for i in range(2)]
    with pytest.raises(ValueError, match="merged tensor 'lm_head.weight'.*overflow while merging"):
        merge_checkpoints(bp, mps, tmp_path / "o", MergeConfig(method="task_arithmetic", **{"lambda": 4.0}))


def test_next_tensor_blocks_start_while_the_previous_is_written(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Engine.finish_fused hands the next tensor's first blocks to the workers once all of its own
    are submitted (most tensors are only a few blocks: otherwise every tensor boundary idles the
    workers while the last block is hashed and written); the bytes stay those of one thread."""
    bp, mps = _models(tmp_path, 3, seed=5)
    seen: list[tuple[str, int, int]] = []
    finish = engine.Engine.finish_fused

    def spy(self: engine.Engine, launch: engine.FusedLaunch, writer: object,
            following: engine.FusedLaunch | None = None) -> object:
        stats = finish(self, launch, writer, following)  # type: ignore[arg-type]
        if following is not None:
            seen.append((following.job.info.key, following.submitted, len(following.spans)))
        return stats

    monkeypatch.setattr(engine.Engine, "finish_fused", spy)
    cfg = {"density": 0.2, "max_working_bytes": 1 << 21}
    merge_checkpoints(bp, mps, tmp_path / "two", MergeConfig(threads=2, **cfg))
    monkeypatch.undo()
    merge_checkpoints(bp, mps, tmp_path / "one", MergeConfig(threads=1, **cfg))
    _same_outputs(tmp_path / "one", tmp_path / "two")
    assert len(seen) == len(BIG) - 1  # every tensor but the first followed one launched before it
    assert any(sub > 0 and spans > 1 for _, sub, spans in seen), seen
    assert all(0 <= sub <= min(spans, 4) for _, sub, spans in seen), seen  # 2 x threads in flight at most


def test_workers_write_their_blocks_and_the_hash_runs_aside(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """With worker threads, each fused block is written to its place by the worker that computed it
    (ShardedWriter.put) and hashed in order on the hashing thread; the calling thread writes none.
    Bytes and manifest equal those of one thread, across several output shards."""
    bp, mps = _models(tmp_path, 3, seed=6)
    writers: list[str] = []
    puts: list[str] = []
    put, write = io.ShardedWriter.put, io.ShardedWriter.write

    def spy_put(self: io.ShardedWriter, key: str, byte: int, data: object) -> None:
        puts.append(threading.current_thread().name)
        put(self, key, byte, data)  # type: ignore[arg-type]

    def spy_write(self: io.ShardedWriter, chunk: torch.Tensor) -> None:
        writers.append(threading.current_thread().name)
        write(self, chunk)

    monkeypatch.setattr(io.ShardedWriter, "put", spy_put)
    monkeypatch.setattr(io.ShardedWriter, "write", spy_write)
    cfg = {"density": 0.2, "max_working_bytes": 1 << 21, "shard_bytes": 200_000}
    merge_checkpoints(bp, mps, tmp_path / "two", MergeConfig(threads=2, **cfg))
    assert puts and all(name.startswith("venus-merge_") for name in puts), set(puts)
    assert not writers
    monkeypatch.undo()
    merge_checkpoints(bp, mps, tmp_path / "one", MergeConfig(threads=1, **cfg))
    _same_outputs(tmp_path / "one", tmp_path / "two")
    sums = (tmp_path / "two" / "SHA256SUMS").read_text()
    def weights(text: str) -> list[str]:  # the report differs: it records the thread count
        return [x for x in text.splitlines() if x.endswith(".safetensors")]
    assert weights(sums) == weights((tmp_path / "one" / "SHA256SUMS").read_text())
    shards = sorted((tmp_path / "two").glob("*.safetensors"))
    assert len(shards) > 2
    for f in shards:
        assert f"{hashlib.sha256(f.read_bytes()).hexdigest()}  {f.name}" in sums.splitlines()
    assert not [t for t in threading.enumerate() if t.name == "venus-merge-sha256"]


def test_a_failed_merge_leaves_no_hashing_thread_or_open_output(tmp_path: Path) -> None:
    bp, mps = _models(tmp_path, 2, seed=8)
    bad = load_dir(mps[0])
    bad["lm_head.weight"][3, 3] = float("inf")  # the last tensor: earlier blocks are written and queued
    write_ckpt(mps[0], bad)
    out = tmp_path / "o"
    with pytest.raises(MergeInputError, match=r"m0: tensor 'lm_head.weight': 1 NaN/Inf"):
        merge_checkpoints(bp, mps, out, MergeConfig(density=0.2, threads=2, max_working_bytes=1 << 21))
    assert not [t for t in threading.enumerate() if t.name == "venus-merge-sha256"]
    fds = Path("/proc/self/fd")
    assert not [p for p in fds.iterdir() if str(out) in os.path.realpath(p)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_threshold_sample_is_the_task_vectors_at_the_sampled_runs(tmp_path: Path, dtype: torch.dtype) -> None:
    """Engine._sample: SAMPLE_RUNS evenly spaced runs of SAMPLE_RUN task-vector entries in fp32; fp32
    and bf16 are gathered with numpy (bf16 as its bits, widened exactly), other dtypes with torch."""
    from venus_core.merge.io import CheckpointReader
    from venus_core.merge.methods import TIES
    from venus_core.merge.verify import match_inputs

    bp, mps = _models(tmp_path, 2, dtype=dtype, seed=9)
    base, models = CheckpointReader(bp), [CheckpointReader(p) for p in mps]
    try:
        eng = engine.Engine(base, models, TIES, torch.ones(2), 1 << 21, "index")
        job = next(j for j in match_inputs(base, models) if j.info.numel == 70_000)
        got = eng._sample(job)
        b, xs = load_dir(bp)[job.info.key].reshape(-1), [load_dir(p)[job.info.key].reshape(-1) for p in mps]
        runs, run = engine.SAMPLE_RUNS, engine.SAMPLE_RUN
        starts = [(70_000 - run) * j // (runs - 1) for j in range(runs)]
        idx = torch.cat([torch.arange(s, s + run) for s in starts])
        want = torch.stack([x[idx].to(torch.float32) - b[idx].to(torch.float32) for x in xs])
        assert got.dtype == torch.float32 and got.shape == (2, runs * run)
        assert torch.equal(got, want)
    finally:
        for r in (base, *models):
            r.close()


@pytest.mark.parametrize("existed", [False, True])
def test_a_failed_merge_removes_its_partial_output(tmp_path: Path, existed: bool) -> None:
    """Workers write blocks ahead at their places, so a failed merge's shards would have holes that
    load as zeros: nothing it wrote may stay. An empty output directory given by the caller stays."""
    bp, mps = _models(tmp_path, 2, seed=10)
    bad = load_dir(mps[1])
    bad["model.visual.blocks.0.attn.qkv.weight"][23, 7] = float("nan")  # the last tensor in plan order
    write_ckpt(mps[1], bad)
    out = tmp_path / "out" / "merged"
    if existed:
        out.mkdir(parents=True)
    wrote: list[str] = []
    put = io.ShardedWriter.put

    def spy(self: io.ShardedWriter, key: str, byte: int, data: object) -> None:
        wrote.append(key)
        put(self, key, byte, data)  # type: ignore[arg-type]

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(io.ShardedWriter, "put", spy)
        with pytest.raises(MergeInputError, match="model.visual.blocks.0.attn.qkv.weight"):
            merge_checkpoints(bp, mps, out, MergeConfig(density=0.2, threads=2, max_working_bytes=1 << 21))
    assert len(set(wrote)) >= 3  # the earlier tensors were written before the failure
    assert (out.is_dir() and not any(out.iterdir())) if existed else not out.exists()
    assert (tmp_path / "out").is_dir()  # only what the merge created goes
    merge_checkpoints(bp, [mps[0], mps[0]], out, MergeConfig(density=0.2))  # the same target works again
    assert (out / "SHA256SUMS").is_file()
