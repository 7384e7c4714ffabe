"""Tensor-name layouts of Qwen-VL checkpoints and the model *parts* a merge policy talks about.

Why: Qwen2-VL / Qwen2.5-VL checkpoints saved by transformers < 4.52 name tensors `visual.*`,
`model.embed_tokens.*`, `model.layers.*`; newer saves (and Qwen3-VL) use `model.visual.*` and
`model.language_model.*`. Specialists fine-tuned with different library versions must still merge,
so every name is mapped to one canonical (new) layout for matching, and the output is written in
the *base's* own names. mergekit instead relies on hand-written architecture definitions and
silently drops tensors they do not list; here every tensor is either matched or an error.

Parts (vision tower / projector / language model / embeddings + LM head) let a merge policy
treat them differently (e.g. a smaller density for the vision tower, or copying it from the base).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal

Part = Literal["vision", "projector", "language", "embeddings"]
PARTS: tuple[Part, ...] = ("vision", "projector", "language", "embeddings")

_VISUAL = "model.visual."
_LANGUAGE = "model.language_model."
# Vision-to-language projectors: Qwen2/2.5/3-VL `merger`, Qwen3-VL DeepStack mergers.
_PROJECTOR_PREFIXES = (_VISUAL + "merger.", _VISUAL + "deepstack_merger_list.")
_EMBEDDING_PREFIXES = (_LANGUAGE + "embed_tokens.", "lm_head.")


class KeyLayoutError(ValueError):
    """Two tensor names of one checkpoint map to the same canonical name."""


def canonical_key(key: str) -> str:
    """The canonical (transformers >= 4.52) name of a tensor from either Qwen-VL layout."""
    if key.startswith("visual."):
        return _VISUAL + key[len("visual.") :]
    if key.startswith(_VISUAL) or key.startswith(_LANGUAGE):
        return key
    if key.startswith("model."):
        return _LANGUAGE + key[len("model.") :]
    return key


def canonical_map(keys: Iterable[str], source: str) -> dict[str, str]:
    """Map canonical name -> original name for one checkpoint; a collision is an error."""
    out: dict[str, str] = {}
    for key in keys:
        canon = canonical_key(key)
        if canon in out:
            raise KeyLayoutError(
                f"{source}: tensors {out[canon]!r} and {key!r} both map to {canon!r} "
                "(checkpoint mixes the old and new Qwen-VL key layouts)"
            )
        out[canon] = key
    return out


def part_of(canon: str) -> Part:
    """The part a canonical tensor name belongs to."""
    if canon.startswith(_PROJECTOR_PREFIXES):
        return "projector"
    if canon.startswith(_VISUAL):
        return "vision"
    if canon.startswith(_EMBEDDING_PREFIXES):
        return "embeddings"
    return "language"


EMBED_KEY = _LANGUAGE + "embed_tokens.weight"
LM_HEAD_KEY = "lm_head.weight"
