"""Models: Qwen-VL loading and saving, the tiny embedded default, UI-Venus prompts, batches, generation.

`loading` (load_model / save_model for Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE HF directories and the
tiny default), `tiny` (the tiny Qwen3-VL built from TinyModelSpec), `tokenizer` (its locally trained
BPE tokenizer), `processor` (image-only Qwen-VL processor without torchvision), `prompts`
(UI-Venus-1.5 grounding / navigation prompts, no transformers needed), `batches` (records ->
examples -> training batches), `generation` (batched transformers generation), `openai_client` (the
same batch API over an OpenAI-compatible server), `backends` (the one interface over both) and
`server` (`venus serve`).

Names are resolved lazily: `from venus_core.models.prompts import grounding_prompt` must not pay
for importing transformers (several seconds), which only the model modules need.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS: dict[str, str] = {
    "PROMPT_VERSION": "prompts",
    "build_messages": "prompts",
    "grounding_prompt": "prompts",
    "navigation_prompt": "prompts",
    "Example": "batches",
    "collate": "batches",
    "record_to_example": "batches",
    "target_text": "batches",
    "generate": "generation",
    "ChatClient": "openai_client",
    "GenerationBackend": "backends",
    "TransformersBackend": "backends",
    "make_backend": "backends",
    "load_model": "loading",
    "resolve_dtype": "loading",
    "save_model": "loading",
    "tiny_spec_of": "loading",
    "VenusVLProcessor": "processor",
    "load_processor": "processor",
    "build_tiny": "tiny",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'venus_core.models' has no attribute {name!r}")
    return getattr(importlib.import_module(f"venus_core.models.{module}"), name)
