"""Fail-closed input checks, key layouts, output files, manifest and reproducibility."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open

from merge_helpers import load_dir, perturb, random_base, write_ckpt
from venus_core.merge import MergeConfig, merge_checkpoints
from venus_core.merge.io import CheckpointError
from venus_core.merge.keys import KeyLayoutError, canonical_key, part_of
from venus_core.merge.verify import MergeInputError


def _pair(tmp_path: Path, **over: object) -> tuple[Path, Path, dict]:
    base = random_base(0)
    m = perturb(base, 1)
    m.update(over)  # type: ignore[arg-type]
    return write_ckpt(tmp_path / "b", base), write_ckpt(tmp_path / "m", m), base


def test_key_layouts_and_parts() -> None:
    assert canonical_key("visual.blocks.0.attn.qkv.weight") == "model.visual.blocks.0.attn.qkv.weight"
    assert canonical_key("model.embed_tokens.weight") == "model.language_model.embed_tokens.weight"
    assert canonical_key("model.language_model.layers.1.x") == "model.language_model.layers.1.x"
    assert canonical_key("lm_head.weight") == "lm_head.weight"
    assert part_of("model.visual.merger.mlp.0.weight") == "projector"
    assert part_of("model.visual.deepstack_merger_list.0.norm.weight") == "projector"
    assert part_of("model.visual.blocks.0.mlp.weight") == "vision"
    assert part_of("lm_head.weight") == "embeddings"
    assert part_of("model.language_model.norm.weight") == "language"


def test_old_layout_inputs_merge_into_base_layout(tmp_path: Path) -> None:
    base = random_base(0)
    ms = [perturb(base, s) for s in (1, 2)]
    bp = write_ckpt(tmp_path / "b", base)  # new layout
    mps = [write_ckpt(tmp_path / "m0", ms[0], layout="old"), write_ckpt(tmp_path / "m1", ms[1])]
    merge_checkpoints(bp, mps, tmp_path / "o", MergeConfig(method="linear"))
    got = load_dir(tmp_path / "o")
    assert set(got) == set(base)
    k = "model.language_model.layers.0.mlp.up_proj.weight"
    torch.testing.assert_close(got[k], (ms[0][k] + ms[1][k]) / 2)


def test_mixed_layout_in_one_checkpoint_is_refused(tmp_path: Path) -> None:
    base = random_base(0)
    base["model.embed_tokens.weight"] = base["model.language_model.embed_tokens.weight"].clone()
    bp = write_ckpt(tmp_path / "b", base)
    with pytest.raises(KeyLayoutError, match="embed_tokens"):
        merge_checkpoints(bp, [bp], tmp_path / "o")


@pytest.mark.parametrize("change,match", [
    ({"lm_head.weight": torch.zeros(41, 16)}, r"lm_head.weight.*shape \[41, 16\]"),
    ({"model.language_model.norm.weight": torch.zeros(16, dtype=torch.float16)}, "norm.weight.*dtype F16"),
    ({"model.language_model.extra.weight": torch.zeros(2)}, "extra.weight.*not in the base"),
    ({"lm_head.weight": torch.full((40, 16), float("nan"))}, "lm_head.weight.*NaN"),
])
def test_mismatches_are_errors_naming_the_tensor(tmp_path: Path, change: dict, match: str) -> None:
    bp, mp, _ = _pair(tmp_path, **change)
    with pytest.raises(MergeInputError, match=match):
        merge_checkpoints(bp, [mp], tmp_path / "o")


def test_missing_tensor_and_tokenizer_and_pickle_refused(tmp_path: Path) -> None:
    base = random_base(0)
    m = perturb(base, 1)
    del m["model.visual.merger.mlp.0.weight"]
    bp = write_ckpt(tmp_path / "b", base)
    with pytest.raises(MergeInputError, match="merger.mlp.0.weight.*missing"):
        merge_checkpoints(bp, [write_ckpt(tmp_path / "m", m)], tmp_path / "o")
    other_tok = write_ckpt(tmp_path / "t", perturb(base, 2), tokenizer='{"vocab": 41}')
    with pytest.raises(MergeInputError, match="tokenizer file 'tokenizer.json' differs"):
        merge_checkpoints(bp, [other_tok], tmp_path / "o")
    pk = write_ckpt(tmp_path / "p", perturb(base, 3))
    (pk / "pytorch_model.bin").write_bytes(b"\x80\x04")
    with pytest.raises(CheckpointError, match="pytorch_model.bin: pickle file refused: checkpoints are safetensors; pickles are never loaded"):
        merge_checkpoints(bp, [pk], tmp_path / "o")


def test_output_files_manifest_and_byte_identical_rerun(three_models, tmp_path: Path) -> None:
    bp, mps, base, _ = three_models
    (bp / "chat_template.jinja").write_text("{{ messages }}")
    for m in mps:
        (m / "chat_template.jinja").write_text("{{ messages }}")
    cfg = MergeConfig(shard_bytes=4096)
    merge_checkpoints(bp, mps, tmp_path / "a", cfg)
    merge_checkpoints(bp, mps, tmp_path / "b", cfg)
    a, b = tmp_path / "a", tmp_path / "b"
    names = sorted(p.name for p in a.iterdir())
    assert names == sorted(p.name for p in b.iterdir())
    for n in names:
        assert (a / n).read_bytes() == (b / n).read_bytes(), n
    for n in ("config.json", "tokenizer.json", "preprocessor_config.json", "chat_template.jinja",
              "model.safetensors.index.json", "merge_report.json"):
        assert n in names
    index = json.loads((a / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and set(index["weight_map"]) == set(base)
    for shard in shards:
        with safe_open(a / shard, framework="pt") as h:
            for k in h.keys():
                assert index["weight_map"][k] == shard
    lines = (a / "SHA256SUMS").read_text().splitlines()
    assert len(lines) == len(names) - 1
    for line in lines:
        digest, name = line.split("  ")
        assert hashlib.sha256((a / name).read_bytes()).hexdigest() == digest


def test_out_dir_must_be_empty(three_models, tmp_path: Path) -> None:
    bp, mps, _, _ = three_models
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "x").write_text("x")
    with pytest.raises(FileExistsError):
        merge_checkpoints(bp, mps, tmp_path / "o")


def test_tied_embeddings_without_lm_head(tmp_path: Path) -> None:
    base = random_base(0)
    del base["lm_head.weight"]
    cfg = {"model_type": "qwen3_vl", "text_config": {"tie_word_embeddings": True}}
    bp = write_ckpt(tmp_path / "b", base, config=cfg)
    mps = [write_ckpt(tmp_path / f"m{i}", perturb(base, i + 1), config=cfg) for i in range(2)]
    report = merge_checkpoints(bp, mps, tmp_path / "o")
    assert report["tie_word_embeddings"] is True
    assert "lm_head.weight" not in load_dir(tmp_path / "o")


def test_tied_embeddings_with_both_copies_stay_equal(tmp_path: Path) -> None:
    base = random_base(0)
    base["lm_head.weight"] = base["model.language_model.embed_tokens.weight"].clone()
    cfg = {"model_type": "qwen3_vl", "tie_word_embeddings": True}
    ms = []
    for i in range(3):
        m = perturb(base, i + 1)
        m["lm_head.weight"] = m["model.language_model.embed_tokens.weight"].clone()
        ms.append(write_ckpt(tmp_path / f"m{i}", m, config=cfg))
    merge_checkpoints(write_ckpt(tmp_path / "b", base, config=cfg), ms, tmp_path / "o")
    got = load_dir(tmp_path / "o")
    assert torch.equal(got["lm_head.weight"], got["model.language_model.embed_tokens.weight"])


def test_methods_are_registered() -> None:
    from venus_core.config.registry import MERGE_METHODS

    for name in ("ties", "linear", "task_arithmetic"):
        entry = MERGE_METHODS.entry(name)
        assert entry.obj.name == name and entry.module == "venus_core.merge.methods"
