"""The other supported families (Qwen2.5-VL, Qwen3-VL-MoE) load, train and generate through the
same code path; real checkpoints are not reachable here, so tiny ones are built from configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import transformers

from venus_core.config.spec import ModelSpec
from venus_core.models.batches import Example, collate
from venus_core.models.generation import generate
from venus_core.models.loading import load_model, tiny_spec_of
from venus_core.models.processor import load_processor
from venus_core.models.prompts import build_messages, grounding_prompt

from models_helpers import screen


def _config(arch: str, ids: dict[str, int]) -> transformers.PretrainedConfig:
    text = dict(vocab_size=640, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                num_key_value_heads=2, max_position_embeddings=2048, bos_token_id=None, eos_token_id=None)
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=16, spatial_merge_size=2,
                  out_hidden_size=64)
    if arch == "qwen2_5_vl":
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 1e6, "mrope_section": [2, 3, 3]}
        return transformers.Qwen2_5_VLConfig(
            text_config=text, vision_config={**vision, "window_size": 64, "fullatt_block_indexes": [1]}, **ids
        )
    text.update(head_dim=16, moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, decoder_sparse_step=1,
                rope_parameters={"rope_type": "default", "rope_theta": 1e6, "mrope_section": [4, 2, 2],
                                 "mrope_interleaved": True})
    return transformers.Qwen3VLMoeConfig(
        text_config=text, vision_config={**vision, "num_position_embeddings": 64, "deepstack_visual_indexes": [1]}, **ids
    )


@pytest.mark.parametrize(
    ("arch", "cls"),
    [("qwen2_5_vl", "Qwen2_5_VLForConditionalGeneration"), ("qwen3_vl_moe", "Qwen3VLMoeForConditionalGeneration")],
)
def test_family_loads_trains_and_generates(arch: str, cls: str, tiny_dir: Path, tmp_path: Path) -> None:
    cfg = json.loads((tiny_dir / "config.json").read_text())
    ids = {k: cfg[k] for k in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id")}
    torch.manual_seed(0)
    transformers.AutoModelForImageTextToText.from_config(_config(arch, ids)).save_pretrained(tmp_path)
    load_processor(tiny_dir, 1024, 128 * 128).save_pretrained(tmp_path)
    assert tiny_spec_of(tmp_path) is None  # a "real" checkpoint: the spec's pixel bounds apply
    spec = ModelSpec(architecture=arch, min_pixels=1024, max_pixels=64 * 64)  # type: ignore[arg-type]
    model, processor = load_model(tmp_path, spec, require_manifest=False)  # from elsewhere: no SHA256SUMS
    assert type(model).__name__ == cls and model.dtype == torch.float32
    assert processor.image_processor.size["longest_edge"] == 64 * 64
    examples = [
        Example(build_messages(screen((9, 9, 200)), grounding_prompt("ok")), "[1,2]"),
        Example(build_messages(screen((200, 9, 9), (96, 64)), "hello there"), "fine"),
    ]
    batch = collate(examples, processor)
    assert int(batch["image_grid_thw"][0].prod()) * 16 * 16 <= 64 * 64
    model.train()
    loss = model(**batch).loss
    loss.backward()
    model.eval()
    assert torch.isfinite(loss)
    chats = [e.messages for e in examples]
    out = generate(model, processor, chats, max_new_tokens=4)
    assert out == [generate(model, processor, [c], max_new_tokens=4)[0] for c in chats]
    with pytest.raises(ValueError, match="does not match model.architecture 'qwen3_vl'"):
        load_model(tmp_path, ModelSpec(), require_manifest=False)
