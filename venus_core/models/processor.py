"""An image-only Qwen-VL processor, and building / loading processors with the spec's pixel limits.

Why a subclass: the stock `Qwen3VLProcessor` (and `Qwen2_5_VLProcessor`) insist on a video
processor, and Qwen's video processors need torchvision, which does not import next to the CPU
torch wheel this project uses (torchvision is not a dependency). GUI agents only look at screenshots, so
`VenusVLProcessor` is the Qwen3-VL processor with the video processor removed; the image side is
the PIL backend `Qwen2VLImageProcessorPil` (no torchvision). It is registered with
`AutoProcessor.register` so `AutoProcessor.from_pretrained` reloads what the tiny model saves.

Real checkpoints keep their stock processor when it loads (torchvision present, e.g. GPU images);
only when it cannot be built is the image-only processor used instead (`load_processor`). A checkpoint
saved from that fallback records `VenusVLProcessor` as its processor class: reload it with this
module imported (vLLM serving images have torchvision and should be given the stock processor files).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import AutoProcessor, PretrainedConfig, ProcessorMixin, Qwen3VLProcessor
from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

log = logging.getLogger(__name__)

# Qwen2-VL / Qwen3-VL normalisation constants (CLIP mean/std for Qwen2.x, 0.5 for Qwen3-VL).
QWEN3_VL_MEAN = (0.5, 0.5, 0.5)
QWEN3_VL_STD = (0.5, 0.5, 0.5)


class VenusVLProcessor(Qwen3VLProcessor):
    """Qwen3-VL processor without the video processor (images and text only)."""

    def __init__(
        self,
        image_processor: Any = None,
        tokenizer: Any = None,
        chat_template: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(image_processor, tokenizer, None, chat_template=chat_template, **kwargs)


class _VenusVLProcessorKey(PretrainedConfig):
    """Registry key only: `AutoProcessor` finds registered processors by class name through it."""

    model_type = "venus_vl_processor"


def _register() -> None:
    try:
        AutoProcessor.register(_VenusVLProcessorKey, VenusVLProcessor)
    except ValueError:  # already registered (module reloaded)
        pass


_register()


def image_processor(
    *, patch_size: int, merge_size: int, min_pixels: int, max_pixels: int, temporal_patch_size: int = 2
) -> Qwen2VLImageProcessorPil:
    """The PIL Qwen-VL image processor with Qwen3-VL normalisation and the given pixel limits."""
    if min_pixels > max_pixels:
        raise ValueError(f"min_pixels ({min_pixels}) > max_pixels ({max_pixels})")
    return Qwen2VLImageProcessorPil(
        patch_size=patch_size,
        merge_size=merge_size,
        temporal_patch_size=temporal_patch_size,
        min_pixels=min_pixels,
        max_pixels=max_pixels,
        image_mean=list(QWEN3_VL_MEAN),
        image_std=list(QWEN3_VL_STD),
    )


def set_pixel_limits(processor: ProcessorMixin, min_pixels: int, max_pixels: int) -> None:
    """Apply the spec's pixel bounds to a loaded processor's image processor (in place)."""
    if min_pixels > max_pixels:
        raise ValueError(f"min_pixels ({min_pixels}) > max_pixels ({max_pixels})")
    ip = processor.image_processor  # type: ignore[attr-defined]
    ip.size = {"shortest_edge": int(min_pixels), "longest_edge": int(max_pixels)}
    for name, value in (("min_pixels", min_pixels), ("max_pixels", max_pixels)):
        if hasattr(ip, name):
            setattr(ip, name, int(value))


def _recorded_class(path: Path) -> str | None:
    for name in ("processor_config.json", "preprocessor_config.json"):
        f = path / name
        if f.is_file():
            try:
                data = json.loads(f.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                raise ValueError(f"{f}: unreadable processor config: {exc}") from None
            if isinstance(data, dict) and isinstance(data.get("processor_class"), str):
                return str(data["processor_class"])
    return None


def load_processor(path: str | Path, min_pixels: int, max_pixels: int) -> ProcessorMixin:
    """The processor saved in `path`, with the image pixel limits set.

    The stock processor when it can be built; the image-only `VenusVLProcessor` when `path` records
    it, or when the stock one needs torchvision and it is missing.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"processor directory not found: {path}")
    if _recorded_class(path) == VenusVLProcessor.__name__:
        proc: ProcessorMixin = VenusVLProcessor.from_pretrained(path)
    else:
        try:
            proc = AutoProcessor.from_pretrained(path)
        except (ImportError, ValueError, OSError, TypeError) as exc:
            log.warning("%s: stock processor unavailable (%s); using the image-only VenusVLProcessor", path, exc)
            proc = VenusVLProcessor.from_pretrained(path)
    if not hasattr(proc, "image_processor"):
        raise ValueError(f"{path}: {type(proc).__name__} has no image processor; not a Qwen-VL checkpoint")
    set_pixel_limits(proc, min_pixels, max_pixels)
    return proc
