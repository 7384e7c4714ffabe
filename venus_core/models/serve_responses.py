"""The reply side of `venus serve`: chat.completion bodies, streamed chunks, usage and logprobs.

Why separate from `serve_protocol` (requests) and the runner (torch): what a client sees is decided
here from plain `Completion` records, so the OpenAI shapes can be tested without a model, and a
streamed reply is built from the same record as the non-streamed one. A completion is kept as the
text each generated token added (`pieces`), so streaming token by token, cutting at a stop string,
counting `completion_tokens` and aligning `logprobs` with the text all agree by construction:
concatenated stream deltas equal the non-streamed content.

Shapes follow the OpenAI API (and vLLM): `usage` counts the prompt once per request (image tokens
included) and the generated tokens of every choice; `logprobs.content` has one entry per generated
token — the end-of-turn token included, as vLLM reports it — with `token`, `bytes`, `logprob` and the
`top_logprobs` best alternatives; a stop string ends the text before it, while the tokens that
spelled it stay counted (they were generated). With vLLM's `return_tokens_as_token_ids`, every
logprobs `token` (chosen and alternatives) is `token_id:<id>`, so a client gets the exact ids without a
tokenizer (an RL learner scores those ids); as in vLLM (`serving_chat._create_chat_logprobs`), the
chosen token keeps the bytes of its text while an alternative's `bytes` are those of the
`token_id:<id>` string. Streams are Server-Sent Events: a role delta per
choice, one content delta per token, a delta with `finish_reason`, an optional usage chunk
(`stream_options.include_usage`, with `usage: null` on every other chunk), then `data: [DONE]`.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

from venus_core.models.serve_protocol import stop_span


@dataclass(frozen=True)
class TopLogprob:
    """One candidate token: its text (or `bytes:\\x..` for a partial UTF-8 sequence), bytes, logprob,
    and its id (None where unknown; `return_tokens_as_token_ids` needs it)."""

    token: str
    bytes: tuple[int, ...]
    logprob: float
    id: int | None = None

    def placeholder(self) -> str:
        """vLLM's `token_id:<id>` name of this token."""
        if self.id is None:
            raise ValueError(f"token {self.token!r} has no id: cannot name it as token_id:<id>")
        return f"token_id:{self.id}"

    def to_dict(self, as_id: bool = False) -> dict[str, Any]:
        if as_id:  # an alternative: token and bytes both of the placeholder (vLLM's _get_top_logprobs)
            name = self.placeholder()
            return {"token": name, "logprob": self.logprob, "bytes": list(name.encode("utf-8"))}
        return {"token": self.token, "logprob": self.logprob, "bytes": list(self.bytes)}


@dataclass(frozen=True)
class TokenLogprob:
    """A generated token's logprob and the best alternatives at its position (best first)."""

    chosen: TopLogprob
    top: tuple[TopLogprob, ...]

    def to_dict(self, k: int, as_ids: bool = False) -> dict[str, Any]:
        chosen = self.chosen.to_dict()
        if as_ids:  # the chosen token is named by id but keeps its text's bytes (vLLM)
            chosen["token"] = self.chosen.placeholder()
        return {**chosen, "top_logprobs": [t.to_dict(as_ids) for t in self.top[:k]]}


@dataclass(frozen=True)
class Completion:
    """One generated answer: the text each token added (special tokens add ""), why it ended
    ("stop": end of turn or a stop string, "length": max_tokens), the prompt's length in tokens and,
    when asked for, one `TokenLogprob` per token."""

    pieces: tuple[str, ...]
    finish_reason: str
    prompt_tokens: int
    logprobs: tuple[TokenLogprob, ...] | None = None

    def __post_init__(self) -> None:
        if self.logprobs is not None and len(self.logprobs) != len(self.pieces):
            raise ValueError(f"{len(self.logprobs)} logprobs for {len(self.pieces)} tokens")

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def completion_tokens(self) -> int:
        return len(self.pieces)

    def cut(self, stops: tuple[str, ...]) -> Completion:
        """The completion ended at the earliest stop string: text before it, tokens through it.

        >>> Completion(("[1", ",2", "] x"), "length", 5).cut(("]",))
        Completion(pieces=('[1', ',2', ''), finish_reason='stop', prompt_tokens=5, logprobs=None)
        """
        span = stop_span(self.text, stops) if stops else None
        if span is None:
            return self
        start, end = span
        pieces: list[str] = []
        at = 0
        for piece in self.pieces:
            pieces.append(piece[: max(0, start - at)])
            at += len(piece)
            if at >= end:
                break
        logprobs = None if self.logprobs is None else self.logprobs[: len(pieces)]
        return replace(self, pieces=tuple(pieces), finish_reason="stop", logprobs=logprobs)


def usage_body(completions: Sequence[Completion]) -> dict[str, int]:
    """OpenAI `usage`: the prompt once (the `n` choices share it) plus every choice's tokens."""
    prompt = completions[0].prompt_tokens if completions else 0
    generated = sum(c.completion_tokens for c in completions)
    return {"prompt_tokens": prompt, "completion_tokens": generated, "total_tokens": prompt + generated}


def _logprobs(entries: Sequence[TokenLogprob] | None, k: int | None, as_ids: bool = False) -> dict[str, Any] | None:
    if k is None or entries is None:
        return None
    return {"content": [e.to_dict(k, as_ids) for e in entries], "refusal": None}


def completion_body(request_id: str, model: str, created: int, completions: Sequence[Completion],
                    top_logprobs: int | None = None, tokens_as_ids: bool = False) -> dict[str, Any]:
    """A chat.completion object; `top_logprobs` None leaves `logprobs` null (not asked for), and
    `tokens_as_ids` then changes nothing."""
    return {
        "id": request_id,
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": [
            {"index": i, "message": {"role": "assistant", "content": c.text},
             "logprobs": _logprobs(c.logprobs, top_logprobs, tokens_as_ids), "finish_reason": c.finish_reason}
            for i, c in enumerate(completions)
        ],
        "usage": usage_body(completions),
    }


def stream_chunks(request_id: str, model: str, created: int, completions: Sequence[Completion],
                  top_logprobs: int | None = None, include_usage: bool = False,
                  tokens_as_ids: bool = False) -> Iterator[dict[str, Any]]:
    """chat.completion.chunk objects replaying finished completions token by token, choice by choice.

    A token that adds no text (the end-of-turn token, the first bytes of a multi-byte character)
    gets a chunk of its own only when logprobs were asked for, so each logprob reaches the client.
    """
    head: dict[str, Any] = {"id": request_id, "object": "chat.completion.chunk", "created": created, "model": model}
    if include_usage:
        head["usage"] = None

    def chunk(index: int, delta: dict[str, Any], logprobs: dict[str, Any] | None = None,
              finish_reason: str | None = None) -> dict[str, Any]:
        return {**head, "choices": [{"index": index, "delta": delta, "logprobs": logprobs,
                                     "finish_reason": finish_reason}]}

    for i, c in enumerate(completions):
        yield chunk(i, {"role": "assistant", "content": ""})
        for t, piece in enumerate(c.pieces):
            entry = None if c.logprobs is None else c.logprobs[t : t + 1]
            logprobs = _logprobs(entry, top_logprobs, tokens_as_ids)
            if piece or logprobs is not None:
                yield chunk(i, {"content": piece}, logprobs)
        yield chunk(i, {}, finish_reason=c.finish_reason)
    if include_usage:
        yield {**head, "choices": [], "usage": usage_body(completions)}


def sse_events(chunks: Iterator[dict[str, Any]]) -> Iterator[str]:
    """Server-Sent Events framing: `data: {json}` per chunk, then `data: [DONE]`."""
    for c in chunks:
        yield f"data: {json.dumps(c, ensure_ascii=False, separators=(',', ':'))}\n\n"
    yield "data: [DONE]\n\n"


__all__ = ["Completion", "TokenLogprob", "TopLogprob", "completion_body", "sse_events", "stream_chunks",
           "usage_body"]
