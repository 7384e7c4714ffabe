"""Helpers for merge tests: tiny Qwen-VL-shaped safetensors checkpoints written with safetensors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

# new (transformers >= 4.52) Qwen-VL layout -> shape
SHAPES: dict[str, tuple[int, ...]] = {
    "model.visual.blocks.0.attn.qkv.weight": (24, 8),
    "model.visual.blocks.0.norm1.weight": (8,),
    "model.visual.merger.mlp.0.weight": (16, 32),
    "model.language_model.embed_tokens.weight": (40, 16),
    "model.language_model.layers.0.mlp.up_proj.weight": (32, 16),
    "model.language_model.layers.0.self_attn.q_proj.bias": (16,),
    "model.language_model.norm.weight": (16,),
    "lm_head.weight": (40, 16),
}


def old_layout(key: str) -> str:
    if key.startswith("model.visual."):
        return "visual." + key[len("model.visual."):]
    if key.startswith("model.language_model."):
        return "model." + key[len("model.language_model."):]
    return key


def random_base(seed: int = 0, dtype: torch.dtype = torch.float32) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {k: (torch.randn(s, generator=g) * 0.1).to(dtype) for k, s in SHAPES.items()}


def perturb(base: dict[str, torch.Tensor], seed: int, scale: float = 0.01,
            frozen: tuple[str, ...] = ("model.visual.",)) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    out = {}
    for k, v in base.items():
        if k.startswith(frozen):
            out[k] = v.clone()
        else:
            out[k] = (v.float() + torch.randn(v.shape, generator=g) * scale).to(v.dtype)
    return out


def write_ckpt(path: Path, tensors: dict[str, torch.Tensor], *, layout: str = "new",
               tokenizer: str = '{"vocab": 40}', config: dict | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    named = {old_layout(k) if layout == "old" else k: v.contiguous() for k, v in tensors.items()}
    save_file(named, str(path / "model.safetensors"), metadata={"format": "pt"})
    (path / "tokenizer.json").write_text(tokenizer)
    (path / "config.json").write_text(json.dumps(config or {"model_type": "qwen3_vl"}))
    (path / "preprocessor_config.json").write_text('{"patch_size": 16}')
    return path


def load_dir(path: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(path.glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


def tiny_specialist(base: Path, out: Path, seed: int, scale: float = 0.01) -> Path:
    """A copy of the real checkpoint `base` whose language weights are perturbed (vision tower frozen),
    with its SHA256SUMS, as a specialist written by the platform carries (the merge job verifies it)."""
    from venus_core.models.integrity import write_manifest

    shutil.copytree(base, out)
    g = torch.Generator().manual_seed(seed)
    for f in sorted(out.glob("*.safetensors")):
        tensors = load_file(str(f))
        for k, v in tensors.items():
            if v.is_floating_point() and "visual" not in k:
                tensors[k] = v + torch.randn(v.shape, generator=g).to(v.dtype) * scale
        save_file(tensors, str(f), metadata={"format": "pt"})
    write_manifest(out)
    return out
