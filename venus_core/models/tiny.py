"""The embedded default model: a tiny Qwen3-VL built from `TinyModelSpec`, written as an HF directory.

Why: laptops and CI have no model hub and no GPU, yet every stage (SFT, GRPO, merge, evaluation,
serving) must run the real code path. The tiny model has the Qwen3-VL architecture (vision tower
with deepstack, MRoPE text decoder), the Qwen tokenizer class and special tokens, and the Qwen-VL
image processor, so the same transformers classes load it as a real checkpoint; only the sizes
differ (~0.8 M parameters with the defaults). Building it takes about a second plus the transformers
import, and writes nothing outside `out_dir`.

Choices (not in the paper, which starts from released Qwen3-VL weights): mrope sections split
head_dim/2 in Qwen3-VL's 24:20:20 proportion; one deepstack level (the last vision block); the
image processor's pixel bounds let exactly `image_size`² pixels through (min 32², max image_size²);
weights are randomly initialised from `TinyModelSpec.seed`, so the tiny model must be trained
(`venus` mid-training) before its answers mean anything.
"""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import AutoModelForImageTextToText, GenerationConfig, Qwen3VLConfig

from venus_core.config.spec import TinyModelSpec
from venus_core.models.integrity import write_manifest
from venus_core.models.processor import VenusVLProcessor, image_processor
from venus_core.models.tokenizer import (
    ENDOFTEXT,
    IM_END,
    IMAGE_PAD,
    VIDEO_PAD,
    VISION_END,
    VISION_START,
    train_tokenizer,
)

TINY_CONFIG_KEY = "venus_tiny"
"""config.json key of every tiny model: the TinyModelSpec it was built from. It travels with
save_pretrained, so a trained tiny checkpoint is still recognised (and gets the tiny pixel bounds)."""


def _check(spec: TinyModelSpec) -> None:
    problems = []
    if spec.num_heads % spec.num_kv_heads:
        problems.append(f"num_heads ({spec.num_heads}) must be a multiple of num_kv_heads ({spec.num_kv_heads})")
    if spec.head_dim % 4:
        problems.append(f"head_dim ({spec.head_dim}) must be a multiple of 4 (rotary halves, 3 mrope sections)")
    heads = _vision_heads(spec)
    if spec.vision_hidden_size % heads or (spec.vision_hidden_size // heads) % 4:
        problems.append(
            f"vision_hidden_size ({spec.vision_hidden_size}) split over {heads} vision heads must give a "
            "per-head width that is a multiple of 4 (2-D rotary)"
        )
    unit = spec.patch_size * spec.spatial_merge_size
    if spec.image_size % unit:
        problems.append(
            f"image_size ({spec.image_size}) must be a multiple of patch_size*spatial_merge_size ({unit})"
        )
    if problems:
        raise ValueError("model.tiny: " + "; ".join(problems))


def _vision_heads(spec: TinyModelSpec) -> int:
    return max(1, spec.vision_hidden_size // 32)


def mrope_section(head_dim: int) -> list[int]:
    """Temporal/height/width rotary sections summing to head_dim/2 (Qwen3-VL: 24/20/20 of 64)."""
    half = head_dim // 2
    hw = max(1, round(half * 20 / 64))
    return [half - 2 * hw, hw, hw]


def _init_vision_path(model: torch.nn.Module, spec: TinyModelSpec) -> None:
    """Re-initialise the two tensors that decide whether a randomly initialised tiny model can
    learn WHERE things are on the screen (measured, docs/learning.md):

    - the vision tower's learned position table (`pos_embed`): transformers draws it with std 0.02,
      ~40x smaller than the patch features, so position is ~2 % of every image token. Drawn here
      with std `vision_pos_init_std` (random, near-orthogonal codes; a smooth 2-D sin/cos table of the
      same norm did NOT learn in the same budget);
    - the merger's output layer, scaled by `merger_output_gain`, so image tokens enter the text
      model at a scale that survives the first layer's residual updates (a trained Qwen-VL's image
      tokens are far larger than its text embeddings). The deepstack mergers keep their default
      scale: scaling them too stalled learning again.

    Column task (where is a square, 4 classes; no information = 0.347 nats/token): default init
    stays at 0.345 after 900 steps; std 2 / gain 30 gives 0.005–0.02 after 250 steps (two data
    seeds). On level-0 screens with coarse targets, a data seed that std 2 / gain 30 left on the
    plateau for 400 steps left it at ~300 with std 3 / gain 100 (the defaults).
    """
    visual = model.model.visual
    with torch.no_grad():
        visual.pos_embed.weight.normal_(0.0, spec.vision_pos_init_std)
        visual.merger.linear_fc2.weight.mul_(spec.merger_output_gain)
        visual.merger.linear_fc2.bias.mul_(spec.merger_output_gain)


def tiny_config(spec: TinyModelSpec, token_ids: dict[str, int], vocab_size: int) -> Qwen3VLConfig:
    """The Qwen3VLConfig of the tiny model (token ids from the locally trained tokenizer)."""
    _check(spec)
    grid = spec.image_size // spec.patch_size
    return Qwen3VLConfig(
        text_config=dict(
            vocab_size=vocab_size,
            hidden_size=spec.hidden_size,
            intermediate_size=spec.intermediate_size,
            num_hidden_layers=spec.num_layers,
            num_attention_heads=spec.num_heads,
            num_key_value_heads=spec.num_kv_heads,
            head_dim=spec.head_dim,
            max_position_embeddings=4096,
            rope_parameters={
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": mrope_section(spec.head_dim),
                "mrope_interleaved": True,
            },
            pad_token_id=token_ids[ENDOFTEXT],
            tie_word_embeddings=False,
        ),
        vision_config=dict(
            depth=spec.vision_depth,
            hidden_size=spec.vision_hidden_size,
            intermediate_size=2 * spec.vision_hidden_size,
            num_heads=_vision_heads(spec),
            patch_size=spec.patch_size,
            spatial_merge_size=spec.spatial_merge_size,
            temporal_patch_size=2,
            out_hidden_size=spec.hidden_size,
            num_position_embeddings=max(4, grid * grid),  # a square, as the vision tower needs
            deepstack_visual_indexes=[spec.vision_depth - 1],
        ),
        image_token_id=token_ids[IMAGE_PAD],
        video_token_id=token_ids[VIDEO_PAD],
        vision_start_token_id=token_ids[VISION_START],
        vision_end_token_id=token_ids[VISION_END],
        tie_word_embeddings=False,
    )


def build_tiny(spec: TinyModelSpec, out_dir: str | Path) -> Path:
    """Build the tiny model (weights, config, tokenizer, processor, chat template) into `out_dir`.

    Deterministic in `spec` (same spec -> identical files). `out_dir` must not exist or be empty.
    Returns `out_dir` as a Path.
    """
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"tiny model output {out} exists and is not an empty directory")
    tokenizer = train_tokenizer(spec.vocab_size, spec.seed)
    ids = {t: int(tokenizer.convert_tokens_to_ids(t)) for t in (ENDOFTEXT, IM_END, IMAGE_PAD, VIDEO_PAD, VISION_START, VISION_END)}
    config = tiny_config(spec, ids, len(tokenizer))
    config.dtype = torch.float32
    setattr(config, TINY_CONFIG_KEY, spec.model_dump(mode="json"))

    state = torch.random.get_rng_state()
    try:
        torch.manual_seed(spec.seed)
        model = AutoModelForImageTextToText.from_config(config, dtype=torch.float32)
        _init_vision_path(model, spec)
    finally:
        torch.random.set_rng_state(state)
    model.generation_config = GenerationConfig(
        eos_token_id=[ids[IM_END], ids[ENDOFTEXT]],
        pad_token_id=ids[ENDOFTEXT],
        do_sample=False,
    )
    processor = VenusVLProcessor(
        image_processor=image_processor(
            patch_size=spec.patch_size,
            merge_size=spec.spatial_merge_size,
            min_pixels=min(32 * 32, spec.image_size**2),
            max_pixels=spec.image_size**2,
        ),
        tokenizer=tokenizer,
        chat_template=tokenizer.chat_template,
    )
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True)
    processor.save_pretrained(out)
    write_manifest(out)  # like every checkpoint the platform writes (models.integrity)
    return out
