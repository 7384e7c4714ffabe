"""Generated token ids -> what an OpenAI client sees: per-token text pieces, token strings and bytes.

Why its own module: two things about tokens are easy to get subtly wrong and deserve tests of their
own. (1) Streaming: a byte-level BPE token can hold half of a UTF-8 character, so decoding tokens
one at a time would stream replacement characters; `text_pieces` decodes a sliding window and holds
text back until it is complete, and guarantees the pieces concatenate to the full decode (the
non-streamed content). (2) Logprobs report each token's raw `bytes` (OpenAI's field, there so a
client can rebuild characters split across tokens): for byte-level tokenizers (Qwen's) they come
from the token's symbols through the byte-to-symbol alphabet of byte-level BPE; for others, from
decoding the token alone. A token that is not valid UTF-8 on its own is named `bytes:\\xe4\\xb8`, as
the OpenAI API does. Special tokens (`<|im_end|>`) keep their name as token and bytes.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

_REPLACEMENT = "\ufffd"


def byte_level_alphabet() -> dict[str, int]:
    """Symbol -> byte for byte-level BPE: printable Latin-1 bytes stand for themselves, the other
    bytes (controls, space, ...) for the code points from 256 up, in byte order."""
    printable = {*range(0x21, 0x7F), *range(0xA1, 0xAD), *range(0xAE, 0x100)}
    alphabet: dict[str, int] = {}
    shifted = 0
    for b in range(256):
        if b in printable:
            alphabet[chr(b)] = b
        else:
            alphabet[chr(256 + shifted)] = b
            shifted += 1
    return alphabet


def token_name(raw: bytes) -> str:
    """The token string of OpenAI logprobs: the text, or `bytes:\\x..` when not valid UTF-8 alone.

    >>> token_name("世".encode()), token_name("世".encode()[:2])
    ('世', 'bytes:\\\\xe4\\\\xb8')
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "bytes:" + "".join(f"\\x{b:02x}" for b in raw)


def _is_byte_level(tokenizer: Any) -> bool:
    backend = getattr(tokenizer, "backend_tokenizer", None) or getattr(tokenizer, "_tokenizer", None)
    decoder = getattr(backend, "decoder", None)
    return type(decoder).__name__ == "ByteLevel"


class TokenTexts:
    """Token strings, bytes and streaming pieces for one tokenizer (cached per token id)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._alphabet = byte_level_alphabet() if _is_byte_level(tokenizer) else None
        self._added = {int(i): str(getattr(t, "content", t)) for i, t in
                       (getattr(tokenizer, "added_tokens_decoder", None) or {}).items()}
        self._cache: dict[int, tuple[str, tuple[int, ...]]] = {}

    def decode(self, ids: Sequence[int]) -> str:
        """The text of `ids` as the server returns it: special tokens dropped, no clean-up."""
        return str(self.tokenizer.decode(list(ids), skip_special_tokens=True, clean_up_tokenization_spaces=False))

    def _raw(self, token_id: int) -> bytes:
        if token_id in self._added:
            return self._added[token_id].encode("utf-8")
        if self._alphabet is not None:
            symbols = self.tokenizer.convert_ids_to_tokens(token_id)
            if isinstance(symbols, str) and all(ch in self._alphabet for ch in symbols):
                return bytes(self._alphabet[ch] for ch in symbols)
        text = self.tokenizer.decode([token_id], skip_special_tokens=False, clean_up_tokenization_spaces=False)
        return str(text).encode("utf-8")

    def describe(self, token_id: int) -> tuple[str, tuple[int, ...]]:
        """(token string, its bytes) of one token id."""
        hit = self._cache.get(token_id)
        if hit is None:
            raw = self._raw(int(token_id))
            hit = self._cache[token_id] = (token_name(raw), tuple(raw))
        return hit

    def text_pieces(self, ids: Sequence[int]) -> tuple[str, tuple[str, ...]]:
        """(full text, the text each token adds); the pieces always concatenate to the full text.

        Incremental: each step decodes only the tokens since the last emitted piece, plus that
        piece's tokens for context, and emits the new text once it no longer ends in an unfinished
        character. Should a tokenizer's windowed decode ever disagree with the full decode, the
        whole text goes out with the last token instead (still correct, just not incremental).
        """
        text = self.decode(ids)
        pieces: list[str] = []
        prefix_at = read_at = 0
        before = ""
        for i in range(1, len(ids) + 1):
            now = self.decode(ids[prefix_at:i])
            if len(now) > len(before) and now.startswith(before) and not now.endswith(_REPLACEMENT):
                pieces.append(now[len(before):])
                prefix_at, read_at = read_at, i
                before = self.decode(ids[prefix_at:read_at])
            else:
                pieces.append("")
        joined = "".join(pieces)
        if pieces and joined != text:
            if text.startswith(joined):  # text held back at the end (an unfinished character)
                pieces[-1] += text[len(joined):]
            else:
                pieces = [""] * (len(ids) - 1) + [text]
        return text, tuple(pieces)


__all__ = ["TokenTexts", "byte_level_alphabet", "token_name"]
