"""Load and save Qwen-VL checkpoints (Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE) and the tiny default.

Why one entry point: every stage (mid-training, offline and online RL, merge, evaluation) starts from
`ModelSpec` and must get the same model class, dtype, attention kernel and image pixel limits, and
must write checkpoints that vLLM and plain transformers can read back (safetensors + config +
processor + chat template). Every directory is verified before it is read (`integrity`: no pickle
anywhere, since loading one executes code; SHA256SUMS; valid safetensors headers), and every
checkpoint written here ends with its SHA256SUMS.

Local paths only: `file://` / `s3://` URIs are resolved to a local directory by the storage layer
(`venus_core.io`) before this module is called; algorithm packages never import it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import torch
from transformers import AutoModelForImageTextToText, PreTrainedModel, ProcessorMixin

from venus_core.config.spec import ModelSpec, TinyModelSpec
from venus_core.models.integrity import verify_checkpoint_dir, write_manifest
from venus_core.models.placement import placement_for, resolve_dtype
from venus_core.models.processor import load_processor
from venus_core.models.tiny import TINY_CONFIG_KEY, build_tiny


ARCHITECTURE_MODEL_TYPES: dict[str, tuple[str, ...]] = {
    "qwen3_vl": ("qwen3_vl",),
    "qwen3_vl_moe": ("qwen3_vl_moe",),
    "qwen2_5_vl": ("qwen2_5_vl",),
}
"""ModelSpec.architecture -> the `model_type` a checkpoint's config.json must declare."""

def check_checkpoint(path: Path, architecture: str, *, require_manifest: bool = True) -> None:
    """A loadable, verified HF directory for `architecture` (`integrity.verify_checkpoint_dir`: no
    pickle anywhere, SHA256SUMS matching when present or `require_manifest`, valid safetensors
    headers), with config.json of the right model_type and safetensors weights;
    FileNotFoundError / ValueError (`CheckpointIntegrityError`) naming the file otherwise."""
    if not path.is_dir():
        raise FileNotFoundError(f"model directory not found: {path}")
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        raise FileNotFoundError(f"{path}: no config.json; not a Hugging Face model directory")
    if not any(path.glob("*.safetensors")):
        pickles = sorted(p.name for p in path.glob("*.bin"))
        why = f" (found pickle weights {', '.join(pickles)}: convert them to safetensors)" if pickles else ""
        raise FileNotFoundError(f"{path}: no *.safetensors weights{why}")
    verify_checkpoint_dir(path, require_manifest=require_manifest)
    try:
        model_type = json.loads(cfg_file.read_text(encoding="utf-8")).get("model_type")
    except (OSError, ValueError, RecursionError, AttributeError) as exc:
        raise ValueError(f"{cfg_file}: unreadable config: {exc}") from None
    expected = ARCHITECTURE_MODEL_TYPES.get(architecture)
    if expected is None:
        raise ValueError(f"model.architecture {architecture!r} is not one of {', '.join(ARCHITECTURE_MODEL_TYPES)}")
    if model_type not in expected:
        raise ValueError(
            f"{cfg_file}: model_type {model_type!r} does not match model.architecture {architecture!r}"
            f" (expected {' or '.join(expected)})"
        )
    _check_embeddings_match_config(path)


def _check_embeddings_match_config(path: Path) -> None:
    """The token embedding in the weights has the [vocab_size, hidden_size] shape config.json gives.

    Why: `from_pretrained` allocates the model config.json describes before it reads a weight; a
    config without its sizes (or from another model) builds the architecture's default, e.g. an
    8B-sized model from a 4 KB checkpoint (tens of GB, then an out-of-memory kill instead of an
    error). The embedding is the one tensor every model has whose shape the config fixes; checked
    from the safetensors headers, before anything is allocated."""
    from safetensors import safe_open
    from transformers import AutoConfig

    try:
        text = AutoConfig.from_pretrained(path).get_text_config()
        want = [int(text.vocab_size), int(text.hidden_size)]
    except (OSError, ValueError, TypeError, AttributeError, KeyError) as exc:
        raise ValueError(f"{path / 'config.json'}: no usable text config (vocab_size, hidden_size): {exc}") from None
    for file in sorted(path.glob("*.safetensors")):
        with safe_open(str(file), framework="pt") as f:
            for key in f.keys():
                if key.endswith("embed_tokens.weight"):
                    got = list(f.get_slice(key).get_shape())
                    if got != want:
                        raise ValueError(f"{file}: {key} has shape {got}, but {path / 'config.json'} describes "
                                         f"vocab_size x hidden_size = {want}: the config does not describe these weights")
                    return
    raise ValueError(f"{path}: no *embed_tokens.weight tensor in its safetensors files; config.json "
                     f"({want[0]} x {want[1]} embeddings) does not describe these weights")


def load_model(
    path_or_tiny: str | Path,
    model_spec: ModelSpec,
    device: str | torch.device = "cpu",
    *,
    tiny_dir: str | Path | None = None,
    training: bool = False,
    require_manifest: bool = True,
) -> tuple[PreTrainedModel, ProcessorMixin]:
    """(model, processor) from a local HF directory, or the tiny default when given "tiny".

    The directory is verified first (`check_checkpoint`); `require_manifest=False` is for a
    checkpoint brought from elsewhere (the spec's base, a judge), which may lack SHA256SUMS.

    For "tiny" the model is built from `model_spec.tiny` into `tiny_dir` (required: nothing is
    cached elsewhere), or loaded from it when it already holds a tiny build of the same spec.
    A tiny checkpoint (its config.json has a `venus_tiny` section) keeps the tiny pixel bounds.
    The model is put in eval mode on `device` ("auto": `placement.resolve_device`); dtype and
    attention kernel come from the spec, as that device can run them (`placement.placement_for`;
    `training`: a trainer's model, whose dtype auto is float32 master weights on every device).
    """
    if str(path_or_tiny) == "tiny":
        if tiny_dir is None:
            raise ValueError("load_model('tiny', ...) needs tiny_dir: the directory to build the tiny model in")
        path = tiny_checkpoint_dir(Path(tiny_dir), model_spec)
        architecture = "qwen3_vl"
    else:
        path = Path(path_or_tiny)
        architecture = model_spec.architecture
    check_checkpoint(path, architecture, require_manifest=require_manifest)
    place = placement_for(model_spec, device, training=training)
    model = AutoModelForImageTextToText.from_pretrained(
        path,
        dtype=place.dtype,
        attn_implementation=place.attn_implementation,
        use_safetensors=True,
    )
    model.to(place.device)
    model.eval()
    processor = load_processor(path, *_pixel_bounds(path, model_spec))
    return model, processor


def tiny_spec_of(path: Path) -> TinyModelSpec | None:
    """The TinyModelSpec a tiny-model directory was built from; None for other checkpoints."""
    cfg_file = path / "config.json"
    if not cfg_file.is_file():
        return None
    try:
        data = json.loads(cfg_file.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValueError(f"{cfg_file}: unreadable config: {exc}") from None
    raw = data.get(TINY_CONFIG_KEY) if isinstance(data, dict) else None
    if raw is None:
        return None
    try:
        return TinyModelSpec.model_validate(raw)
    except ValueError as exc:
        raise ValueError(f"{cfg_file}: invalid {TINY_CONFIG_KEY} section: {exc}") from None


def tiny_checkpoint_dir(tiny_dir: Path, model_spec: ModelSpec) -> Path:
    """The tiny model of `model_spec.tiny` in `tiny_dir`: built there once, reused after (a directory
    built from another tiny spec is an error)."""
    built = tiny_spec_of(tiny_dir)
    if built is None:
        return build_tiny(model_spec.tiny, tiny_dir)
    if built != model_spec.tiny:
        raise ValueError(
            f"{tiny_dir} holds a tiny model built from a different model.tiny spec; "
            "pass an empty directory to rebuild"
        )
    return tiny_dir


def _pixel_bounds(path: Path, spec: ModelSpec) -> tuple[int, int]:
    # A tiny model sees its own screen size; the spec's bounds are meant for real checkpoints.
    tiny = tiny_spec_of(path)
    if tiny is not None:
        return min(32 * 32, tiny.image_size**2), tiny.image_size**2
    return spec.min_pixels, spec.max_pixels


def save_model(model: PreTrainedModel, processor: ProcessorMixin, out_dir: str | Path, *,
               state_dict: dict[str, Any] | None = None, **extra: Any) -> Path:
    """Write `model` and `processor` as an HF directory: safetensors, config, processor, template,
    then SHA256SUMS over all of it, last (`integrity.write_manifest`). `state_dict` (default the
    model's own) are the weights to write, e.g. the whole weights gathered from FSDP2 shards.

    `extra` files are written as `<name>` → text (e.g. provenance JSON) before the manifest: a
    file added to the directory afterwards makes loaders refuse it. Returns `out_dir`.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out, safe_serialization=True, **({"state_dict": state_dict} if state_dict is not None else {}))
    processor.save_pretrained(out)
    for name, text in extra.items():
        if "/" in name or name.startswith("."):
            raise ValueError(f"save_model: extra file name {name!r} must be a plain file name")
        (out / name).write_text(str(text), encoding="utf-8")
    if not any(out.glob("*.safetensors")):
        raise RuntimeError(f"{out}: save_pretrained wrote no safetensors file")
    write_manifest(out)
    return out


def vision_tower(model: torch.nn.Module) -> torch.nn.Module:
    """The vision encoder of a Qwen-VL model (also under a peft wrapper)."""
    seen: list[torch.nn.Module] = [model]
    while seen:
        m = seen.pop()
        if isinstance(getattr(m, "visual", None), torch.nn.Module):
            return m.visual  # type: ignore[return-value]
        for attr in ("model", "base_model"):
            child = getattr(m, attr, None)
            if isinstance(child, torch.nn.Module) and child is not m:
                seen.append(child)
    raise ValueError(f"{type(model).__name__} has no vision tower ('visual')")


__all__ = ["ARCHITECTURE_MODEL_TYPES", "check_checkpoint", "load_model", "resolve_dtype", "save_model", "tiny_spec_of",
           "vision_tower"]
