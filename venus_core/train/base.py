"""Resolve `model.base` to a loaded (model, processor) for training.

`tiny` builds the randomly initialised tiny model from `model.tiny`; `bootstrap` is the shipped
tiny checkpoint pre-trained by `venus bootstrap` on the synthetic curriculum (the default base of
agents/venus-tiny: from random init, instruction-dependent skills need 15–30 CPU-minutes, more than
a laptop run should spend); anything else is a local HF directory (URIs are resolved by the storage
layer before this is called: `runtime.base_model.localize_base`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, ProcessorMixin

from venus_core.config.spec import ModelSpec
from venus_core.models.loading import load_model, tiny_checkpoint_dir, tiny_spec_of

BOOTSTRAP_DIR = Path(__file__).resolve().parents[1] / "models" / "assets" / "venus-tiny-bootstrap"
"""Where the shipped bootstrap checkpoint lives (safetensors + tokenizer + processor, ~3 MB)."""


def resolve_base(model_spec: ModelSpec, work_dir: str | Path) -> Path | str:
    """The directory (or "tiny") `load_model` gets for `model_spec.base`."""
    base = model_spec.base
    if base == "tiny":
        return "tiny"
    if base == "bootstrap":
        if not (BOOTSTRAP_DIR / "config.json").is_file():
            raise FileNotFoundError(
                f"model.base=bootstrap but {BOOTSTRAP_DIR} holds no checkpoint; create it with `venus bootstrap`"
            )
        built = tiny_spec_of(BOOTSTRAP_DIR)
        if built is not None and built.image_size != model_spec.tiny.image_size:
            raise ValueError(
                f"model.base=bootstrap sees {built.image_size}px screens but model.tiny.image_size is "
                f"{model_spec.tiny.image_size}; re-run `venus bootstrap` with this spec"
            )
        return BOOTSTRAP_DIR
    if "://" in base:
        raise ValueError(f"model.base {base!r} is a URI: the job fetches it to a local directory first "
                         "(venus_core.runtime.base_model.localize_base)")
    path = Path(base)
    if not path.is_dir():
        raise FileNotFoundError(f"model.base {base!r}: no such local directory (expected 'tiny', 'bootstrap' or a path)")
    return path


def base_is_shipped(model_spec: ModelSpec) -> bool:
    """True for the bases this project builds (`tiny`) or ships (`bootstrap`), sealed with their
    SHA256SUMS; a directory the user names may come from elsewhere (a hub download) without one."""
    return model_spec.base in ("tiny", "bootstrap")


def base_checkpoint_dir(model_spec: ModelSpec, work_dir: str | Path) -> Path:
    """The directory holding the training base's weights: `resolve_base`, or for `tiny` the
    random-init build in WORK/base-tiny (where `load_base` builds it)."""
    target = resolve_base(model_spec, work_dir)
    if str(target) == "tiny":
        return tiny_checkpoint_dir(Path(work_dir) / "base-tiny", model_spec)
    return Path(target)


def load_base(model_spec: ModelSpec, work_dir: str | Path, device: Any = "cpu", *,
              training: bool = True) -> tuple[PreTrainedModel, ProcessorMixin]:
    """Load the training base (dtype auto: float32 master weights); the tiny model is built into
    `work_dir/base-tiny`. A base directory the user names may come from elsewhere (a hub download)
    without SHA256SUMS; it is verified all the same, and its manifest checked when it has one."""
    target = resolve_base(model_spec, work_dir)
    return load_model(target, model_spec, device, tiny_dir=Path(work_dir) / "base-tiny", training=training,
                      require_manifest=base_is_shipped(model_spec))


__all__ = ["BOOTSTRAP_DIR", "base_checkpoint_dir", "base_is_shipped", "load_base", "resolve_base"]
