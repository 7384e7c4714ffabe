"""The OpenAI chat-completions request/response format for `venus serve`, without HTTP or torch.

Why separate: validation is where a server earns trust — every bad request gets HTTP 400 with an
OpenAI-style error body whose `param` names the offending field (`messages[0].content[1].image_url.url`),
and this can be tested in milliseconds without a model. The subset accepted is what the platform
sends and what vLLM accepts for Qwen-VL: system / user / assistant turns, text parts, images as
base64 data URLs (no remote URLs: a training cluster's server should not fetch from the internet),
`max_tokens` (or `max_completion_tokens`), `temperature`, `top_p`, `n`, `seed`, `stop`, `stream`
(with `stream_options.include_usage`), `logprobs` / `top_logprobs` (0 to 20, as OpenAI), `logit_bias`
(token id -> bias in [-100, 100], added to the logits before penalties and temperature, as vLLM does;
RL rollouts send -100 for the tokens the learner's sampler suppresses), and vLLM's extras
`repetition_penalty`, `top_k` (-1 or 0: all tokens), `min_p` (0 only) and `return_tokens_as_token_ids`
(with logprobs on, every logprobs token reads `token_id:<id>`; without logprobs it changes nothing,
as in vLLM). RL clients send `top_k` / `min_p` explicitly because vLLM fills fields a request leaves
out from the checkpoint's generation_config.json (Qwen-VL's has a small top_k). Fields a
transformers stand-in cannot honour (tools, penalties other than 0) are rejected by name instead of
being silently ignored; fields that do not change the output (`user`) are accepted. Departure
from vLLM: `response_format` json_object is accepted but not enforced (no guided decoding); clients
must parse strictly, as the judge does. The reply side (completion and chunk bodies, usage,
logprobs) is `serve_responses`.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
from dataclasses import dataclass
from typing import Any

from PIL import Image

from venus_core.data.images import decode_image

DEFAULT_MAX_TOKENS = 256
MAX_TOP_LOGPROBS = 20  # OpenAI's limit; the runner computes this many alternatives when logprobs are asked
MAX_IMAGE_BYTES = 32 << 20
_DATA_URL = re.compile(r"data:(image/[A-Za-z0-9.+-]+)?(;[^,]*)?;base64,(.*)", re.DOTALL)
_ACCEPTED = {"model", "messages", "max_tokens", "max_completion_tokens", "temperature", "top_p", "n", "seed",
             "stop", "stream", "repetition_penalty", "response_format", "user", "presence_penalty",
             "frequency_penalty", "logprobs", "top_logprobs", "tools", "tool_choice", "stream_options",
             "logit_bias", "return_tokens_as_token_ids", "top_k", "min_p"}
MAX_LOGIT_BIAS = 100.0  # OpenAI's range for logit_bias values: [-100, 100]


class BadRequest(ValueError):
    """A request the server refuses: HTTP `status`, the field at fault (`param`) and why."""

    def __init__(self, param: str | None, message: str, status: int = 400, kind: str = "invalid_request_error") -> None:
        super().__init__(f"{param}: {message}" if param else message)
        self.param = param
        self.message = message
        self.status = status
        self.kind = kind

    def body(self) -> dict[str, Any]:
        return error_body(str(self), self.param, self.kind, self.status)


def error_body(message: str, param: str | None = None, kind: str = "invalid_request_error",
               status: int = 400) -> dict[str, Any]:
    """OpenAI-style error JSON: {"error": {"message", "type", "param", "code"}}."""
    return {"error": {"message": message, "type": kind, "param": param, "code": status}}


@dataclass(frozen=True)
class Sampling:
    """Decoding settings; requests with equal settings can share one `generate` batch.

    `logprobs`: record per-token log-probabilities (and the `MAX_TOP_LOGPROBS` best alternatives);
    part of the batch key so that requests without logprobs do not pay for them. `logit_bias`:
    (token id, bias) pairs in id order, added to the logits. `top_k` 0: no top-k cut.
    """

    max_tokens: int
    temperature: float
    top_p: float
    repetition_penalty: float
    seed: int | None
    logprobs: bool = False
    logit_bias: tuple[tuple[int, float], ...] = ()
    top_k: int = 0


@dataclass
class ChatRequest:
    """A validated request: chats in the processor's format (PIL images), `n` samples of each.

    `top_logprobs` is None when logprobs were not asked for, else how many alternatives to list.
    `tokens_as_ids` is the request's `return_tokens_as_token_ids` (None: the server's default).
    """

    model: str
    messages: list[dict[str, Any]]
    sampling: Sampling
    n: int
    stop: tuple[str, ...]
    stream: bool = False
    include_usage: bool = False
    top_logprobs: int | None = None
    tokens_as_ids: bool | None = None


def decode_data_url(url: Any, param: str) -> Image.Image:
    """A base64 `data:image/...` URL -> RGB PIL image; BadRequest naming `param` otherwise."""
    if not isinstance(url, str):
        raise BadRequest(param, f"must be a string, got {type(url).__name__}")
    m = _DATA_URL.fullmatch(url.strip())
    if m is None:
        head = url[:40] + ("…" if len(url) > 40 else "")
        raise BadRequest(param, f"must be a base64 data URL (data:image/png;base64,...), got {head!r}")
    if len(m.group(3)) > MAX_IMAGE_BYTES * 4 // 3 + 4:
        raise BadRequest(param, f"image larger than {MAX_IMAGE_BYTES >> 20} MiB")
    try:
        raw = base64.b64decode(m.group(3), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise BadRequest(param, f"invalid base64: {exc}") from None
    try:  # the pixel count is checked from the header first: a small bomb never allocates its pixels
        with decode_image(raw) as img:
            return img.convert("RGB")
    except (OSError, ValueError, Image.DecompressionBombError) as exc:
        raise BadRequest(param, f"not a readable image: {exc}") from None


def _number(body: dict[str, Any], key: str, default: float, low: float, high: float, *,
            low_open: bool = False) -> float:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise BadRequest(key, f"must be a number, got {value!r}")
    if value < low or (low_open and value == low) or value > high:
        side = "(" if low_open else "["
        raise BadRequest(key, f"must be in {side}{low}, {high}], got {value}")
    return float(value)


def _integer(body: dict[str, Any], key: str, default: int | None, low: int, high: int) -> int | None:
    value = body.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest(key, f"must be an integer, got {value!r}")
    if not low <= value <= high:
        raise BadRequest(key, f"must be between {low} and {high}, got {value}")
    return value


def _flag(body: dict[str, Any], key: str) -> bool:
    value = body.get(key)
    if value is None:
        return False
    if not isinstance(value, bool):
        raise BadRequest(key, f"must be true or false, got {value!r}")
    return value


def _stream_options(options: Any, stream: bool) -> bool:
    """Whether a streamed reply ends with a usage chunk (`stream_options.include_usage`)."""
    if options is None:
        return False
    if not stream:
        raise BadRequest("stream_options", "is only allowed when stream is true")
    if not isinstance(options, dict):
        raise BadRequest("stream_options", f"must be an object, got {type(options).__name__}")
    unknown = sorted(set(options) - {"include_usage"})
    if unknown:
        raise BadRequest(f"stream_options.{unknown[0]}", "unknown option (only include_usage is supported)")
    value = options.get("include_usage")
    if value is not None and not isinstance(value, bool):
        raise BadRequest("stream_options.include_usage", f"must be true or false, got {value!r}")
    return bool(value)


def _logprobs(body: dict[str, Any]) -> int | None:
    """None without `logprobs: true`, else the number of alternatives per token (`top_logprobs`)."""
    wanted = _flag(body, "logprobs")
    top = _integer(body, "top_logprobs", None, 0, MAX_TOP_LOGPROBS)
    if top and not wanted:  # 0 without logprobs asks for nothing, as some clients send by default
        raise BadRequest("top_logprobs", "requires logprobs to be true")
    return (top or 0) if wanted else None


def _logit_bias(value: Any, vocab_size: int | None) -> tuple[tuple[int, float], ...]:
    """OpenAI `logit_bias` ({"<token id>": bias}) -> sorted (id, bias) pairs; 400 naming the entry."""
    if value is None:
        return ()
    if not isinstance(value, dict):
        raise BadRequest("logit_bias", f"must be an object mapping token ids to biases, got {type(value).__name__}")
    out: dict[int, float] = {}
    for key, bias in value.items():
        where = f"logit_bias.{key}"
        if not isinstance(key, str) or not key.isdigit() or (len(key) > 1 and key[0] == "0"):
            raise BadRequest(where, "keys must be token ids written as decimal integers")
        token = int(key)
        if vocab_size is not None and token >= vocab_size:
            raise BadRequest(where, f"token id {token} is out of the vocabulary (size {vocab_size})")
        if isinstance(bias, bool) or not isinstance(bias, (int, float)) or not math.isfinite(bias):
            raise BadRequest(where, f"must be a number, got {bias!r}")
        if abs(bias) > MAX_LOGIT_BIAS:
            raise BadRequest(where, f"must be in [-{MAX_LOGIT_BIAS:g}, {MAX_LOGIT_BIAS:g}], got {bias}")
        if bias:
            out[token] = float(bias)
    return tuple(sorted(out.items()))


def _optional_flag(body: dict[str, Any], key: str) -> bool | None:
    value = body.get(key)
    if value is not None and not isinstance(value, bool):
        raise BadRequest(key, f"must be true, false or null, got {value!r}")
    return value


def _content(content: Any, where: str) -> list[dict[str, Any]] | str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list) or not content:
        raise BadRequest(where, "must be a string or a non-empty list of content parts")
    parts: list[dict[str, Any]] = []
    for j, part in enumerate(content):
        here = f"{where}[{j}]"
        if not isinstance(part, dict):
            raise BadRequest(here, "must be an object with a 'type'")
        kind = part.get("type")
        if kind == "text":
            if not isinstance(part.get("text"), str):
                raise BadRequest(f"{here}.text", "must be a string")
            parts.append({"type": "text", "text": part["text"]})
        elif kind == "image_url":
            spec = part.get("image_url")
            url = spec.get("url") if isinstance(spec, dict) else spec
            parts.append({"type": "image", "image": decode_data_url(url, f"{here}.image_url.url")})
        else:
            raise BadRequest(f"{here}.type", f"must be 'text' or 'image_url', got {kind!r}")
    return parts


def parse_messages(messages: Any) -> list[dict[str, Any]]:
    """OpenAI messages -> processor chat (images decoded); the last turn must be the user's."""
    if not isinstance(messages, list) or not messages:
        raise BadRequest("messages", "must be a non-empty list")
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise BadRequest(where, "must be an object with 'role' and 'content'")
        role = m.get("role")
        if role not in ("system", "user", "assistant"):
            raise BadRequest(f"{where}.role", f"must be system, user or assistant, got {role!r}")
        if "content" not in m:
            raise BadRequest(f"{where}.content", "is required")
        content = _content(m["content"], f"{where}.content")
        if role != "user" and not isinstance(content, str) and any(p["type"] == "image" for p in content):
            raise BadRequest(f"{where}.content", f"images are only accepted in user turns, not {role}")
        out.append({"role": role, "content": content})
    if out[-1]["role"] != "user":
        raise BadRequest(f"messages[{len(out) - 1}].role", "the last message must be the user's")
    return out


def parse_chat_request(body: Any, *, served: str, max_n: int, max_tokens_limit: int = 4096,
                       vocab_size: int | None = None) -> ChatRequest:
    """Validate a chat-completions body; BadRequest (400, or 404 for an unknown model) names the field.
    `vocab_size`, when known, bounds the token ids of `logit_bias`."""
    if not isinstance(body, dict):
        raise BadRequest(None, f"request body must be a JSON object, got {type(body).__name__}")
    unknown = sorted(set(body) - _ACCEPTED)
    if unknown:
        raise BadRequest(unknown[0], f"unknown field {unknown[0]!r} (not supported by this server)")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest("model", "is required (a string)")
    if model != served:
        raise BadRequest("model", f"the model {model!r} does not exist; this server serves {served!r}",
                         status=404, kind="NotFoundError")
    stream = _flag(body, "stream")
    include_usage = _stream_options(body.get("stream_options"), stream)
    top_logprobs = _logprobs(body)
    for key in ("presence_penalty", "frequency_penalty", "min_p"):
        if body.get(key) not in (None, 0, 0.0):
            raise BadRequest(key, "only 0 is supported")
    for key in ("tools", "tool_choice"):
        if body.get(key) not in (None, [], "none"):
            raise BadRequest(key, "not supported by this server")
    fmt = body.get("response_format")
    if fmt is not None and (not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object")):
        raise BadRequest("response_format", "only {'type': 'text'} or {'type': 'json_object'} are accepted")
    if "max_tokens" in body and "max_completion_tokens" in body:
        raise BadRequest("max_completion_tokens", "give either max_tokens or max_completion_tokens, not both")
    key = "max_completion_tokens" if "max_completion_tokens" in body else "max_tokens"
    max_tokens = _integer(body, key, DEFAULT_MAX_TOKENS, 1, max_tokens_limit)
    stop = body.get("stop")
    stops = (stop,) if isinstance(stop, str) else stop
    if stops is None:
        stops = ()
    if not isinstance(stops, (list, tuple)) or len(stops) > 4 or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("stop", "must be a non-empty string or a list of up to 4 non-empty strings")
    sampling = Sampling(
        max_tokens=int(max_tokens or DEFAULT_MAX_TOKENS),
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        repetition_penalty=_number(body, "repetition_penalty", 1.0, 0.0, 10.0, low_open=True),
        seed=_integer(body, "seed", None, -(2**63), 2**63 - 1),
        logprobs=top_logprobs is not None,
        logit_bias=_logit_bias(body.get("logit_bias"), vocab_size),
        top_k=max(0, int(_integer(body, "top_k", 0, -1, 2**31 - 1) or 0)),
    )
    n = body.get("n")
    if isinstance(n, int) and not isinstance(n, bool) and n > max_n:
        raise BadRequest("n", f"must be between 1 and {max_n}, got {n}: the n choices of a request are decoded "
                         f"in one batch of at most {max_n} rows (venus serve --max-batch)")
    n = _integer(body, "n", 1, 1, max_n)
    return ChatRequest(model, parse_messages(body.get("messages")), sampling, int(n or 1), tuple(stops),
                       stream=stream, include_usage=include_usage, top_logprobs=top_logprobs,
                       tokens_as_ids=_optional_flag(body, "return_tokens_as_token_ids"))


def parse_json_body(raw: bytes) -> Any:
    """A request body's bytes -> its JSON value; BadRequest for anything `json.loads` refuses, including
    what it refuses with other errors than a JSONDecodeError: nesting past the decoder's recursion
    limit (RecursionError) and integers longer than Python's 4,300-digit parsing limit (ValueError)."""
    try:
        return json.loads(raw)
    except (ValueError, RecursionError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)
        raise BadRequest(None, f"request body is not valid JSON: {reason}") from None


def parse_chat_body(raw: bytes, *, served: str, max_n: int, max_tokens_limit: int = 4096,
                    vocab_size: int | None = None) -> ChatRequest:
    """The bytes of a chat-completions request -> ChatRequest; BadRequest naming the field otherwise."""
    return parse_chat_request(parse_json_body(raw), served=served, max_n=max_n, max_tokens_limit=max_tokens_limit,
                              vocab_size=vocab_size)


def stop_span(text: str, stops: tuple[str, ...]) -> tuple[int, int] | None:
    """(start, end) of the earliest stop string in `text` (the longest one where two start there).

    >>> stop_span("[1,2] and more", ("nd", "]"))
    (4, 5)
    """
    found = [(i, -len(s)) for s in stops if (i := text.find(s)) >= 0]
    if not found:
        return None
    start, neg = min(found)
    return start, start - neg


__all__ = ["DEFAULT_MAX_TOKENS", "MAX_LOGIT_BIAS", "MAX_TOP_LOGPROBS", "BadRequest", "ChatRequest", "Sampling",
           "decode_data_url", "error_body", "parse_chat_request", "parse_messages", "stop_span"]
