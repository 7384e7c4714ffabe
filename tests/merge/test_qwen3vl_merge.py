"""End to end: a tiny Qwen3-VL (transformers) merged with TIES loads and generates."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from merge_helpers import load_dir
from venus_core.merge import MergeConfig, merge_checkpoints

transformers = pytest.importorskip("transformers")


def _tiny_config():  # type: ignore[no-untyped-def]
    return transformers.Qwen3VLConfig(
        text_config=dict(vocab_size=600, hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                         rope_scaling={"rope_type": "default", "mrope_section": [8, 4, 4],
                                       "mrope_interleaved": True},
                         max_position_embeddings=512, tie_word_embeddings=False),
        vision_config=dict(depth=2, hidden_size=64, intermediate_size=128, num_heads=2, patch_size=16,
                           spatial_merge_size=2, out_hidden_size=128, num_position_embeddings=64,
                           deepstack_visual_indexes=[1]),
        image_token_id=590, video_token_id=591, vision_start_token_id=592, vision_end_token_id=593,
    )


@pytest.mark.slow
def test_tiny_qwen3vl_ties_merge_loads_and_generates(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = transformers.AutoModelForImageTextToText.from_config(_tiny_config())
    model.save_pretrained(tmp_path / "base")
    base_sd = {k: v.clone() for k, v in model.state_dict().items()}
    paths = []
    for i in range(3):
        g = torch.Generator().manual_seed(100 + i)
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(base_sd[name])
                if not name.startswith("model.visual."):  # vision tower frozen in the specialists
                    p.add_(torch.randn(p.shape, generator=g) * 0.01)
        model.save_pretrained(tmp_path / f"ft{i}")
        paths.append(tmp_path / f"ft{i}")

    report = merge_checkpoints(tmp_path / "base", paths, tmp_path / "merged", MergeConfig(density=0.2))
    assert report["parts"]["vision"]["unchanged_tensors"] == report["parts"]["vision"]["tensors"]
    assert report["parts"]["projector"]["unchanged_tensors"] == report["parts"]["projector"]["tensors"]
    assert 0.19 < report["parts"]["language"]["achieved_density"][0] <= 0.2

    merged = transformers.AutoModelForImageTextToText.from_pretrained(tmp_path / "merged")
    files = load_dir(tmp_path / "merged")
    sd = merged.state_dict()
    for k, v in files.items():
        assert torch.equal(sd[k], v), k
        if k.startswith("model.visual."):
            assert torch.equal(v, base_sd[k]), k
    assert not torch.equal(sd["lm_head.weight"], base_sd["lm_head.weight"])
    ids = torch.randint(0, 500, (1, 8), generator=torch.Generator().manual_seed(1))
    out = merged.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=5,
                          do_sample=False)
    assert out.shape == (1, 13) and torch.equal(out[:, :8], ids)
