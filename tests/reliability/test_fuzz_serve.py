"""Fuzz `venus serve`'s request parser: the bytes of a chat-completions request body.

Input: valid requests (text, an image as a base64 data URL, sampling fields, stop strings,
logit_bias, logprobs, streaming options) with hostile structural edits (`mutated`) or textual edits
of their JSON, hostile constants (a 5,000-digit integer, 5,000 open brackets) and arbitrary bytes.
The path is the server's own: `serve_protocol.parse_chat_body` (JSON, then `parse_chat_request`),
which `server.py` runs on every POST to /v1/chat/completions before anything is generated.
Documented outcome: a ChatRequest, or BadRequest with HTTP 400 (404 for another model's name)
whose OpenAI error body is JSON and names the field (`param`, a string or None; an unknown field
also by its repr in the message, since JSON allows "" as a name). An accepted
request has finite sampling values in their ranges, 1 <= n <= max_n, at most 4 stop strings and
messages in the processor's format.
"""

from __future__ import annotations

import base64
import io
import json
import math
from typing import Any

import pytest
from fuzz_helpers import BUDGETS, DEEP_JSON, HUGE_INT_TEXT, Budget, fuzz, mutated, mutated_text
from hypothesis import strategies as st
from PIL import Image

from venus_core.models.serve_protocol import BadRequest, ChatRequest, parse_chat_body

SERVED, MAX_N, VOCAB = "bootstrap", 4, 640


def _png() -> str:
    buf = io.BytesIO()
    Image.new("RGB", (8, 6), (10, 200, 30)).save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


PNG_URL = _png()
REQUEST = st.fixed_dictionaries({
    "model": st.just(SERVED),
    "messages": st.just([
        {"role": "system", "content": "You are a GUI agent."},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG_URL}},
                                     {"type": "text", "text": "Tap the OK button"}]},
        {"role": "assistant", "content": "Click(box=(10,20))"},
        {"role": "user", "content": "again"},
    ]),
}, optional={
    "max_tokens": st.integers(1, 64), "temperature": st.floats(0, 2), "top_p": st.floats(0.1, 1),
    "n": st.integers(1, MAX_N), "seed": st.integers(0, 2**31), "stop": st.sampled_from(["\n", ["</s>", "##"]]),
    "stream": st.booleans(), "stream_options": st.just({"include_usage": True}), "logprobs": st.just(True),
    "top_logprobs": st.integers(0, 20), "logit_bias": st.just({"5": -100, "17": 2.5}), "top_k": st.integers(-1, 50),
    "min_p": st.just(0), "repetition_penalty": st.floats(0.5, 2), "response_format": st.just({"type": "json_object"}),
    "user": st.just("u1"), "return_tokens_as_token_ids": st.booleans(),
})
BODY = st.one_of(
    REQUEST.map(lambda r: json.dumps(r).encode()),
    REQUEST.flatmap(mutated).map(lambda r: json.dumps(r, allow_nan=True).encode("utf-8", "surrogatepass")),
    REQUEST.map(json.dumps).flatmap(mutated_text).map(lambda t: t.encode("utf-8", "surrogatepass")),
    st.sampled_from([DEEP_JSON.encode(), HUGE_INT_TEXT.encode(), b'{"model": "bootstrap", "n": ' +
                     HUGE_INT_TEXT.encode() + b"}", b"", b"null", b"\xff\xfe", b'{"model": "other", "messages": []}']),
    st.binary(max_size=200),
)


def _accepted(req: ChatRequest) -> None:
    s = req.sampling
    assert 1 <= req.n <= MAX_N and 1 <= s.max_tokens <= 4096 and len(req.stop) <= 4
    assert all(math.isfinite(v) for v in (s.temperature, s.top_p, s.repetition_penalty))
    assert 0 <= s.temperature <= 2 and 0 < s.top_p <= 1 and s.top_k >= 0
    assert all(0 <= tok < VOCAB and -100 <= bias <= 100 for tok, bias in s.logit_bias)
    assert req.messages and all(isinstance(m, dict) and m.get("role") in ("system", "user", "assistant")
                                for m in req.messages)


def check(raw: bytes) -> str:
    try:
        req = parse_chat_body(raw, served=SERVED, max_n=MAX_N, vocab_size=VOCAB)
    except BadRequest as exc:
        assert exc.status in (400, 404), exc.status
        body: dict[str, Any] = json.loads(json.dumps(exc.body()))["error"]
        assert body["param"] is None or isinstance(body["param"], str), body  # "" is a field's name too
        assert isinstance(body["message"], str) and body["message"], body
        return f"BadRequest {exc.status}"
    _accepted(req)
    return "accepted"


@pytest.mark.parametrize("budget", BUDGETS)
def test_serve_request_parser(budget: Budget) -> None:
    tally = fuzz("serve request parser", BODY, check, budget)
    assert tally.outcomes["accepted"] > 0 and tally.outcomes["BadRequest 400"] > 0


def test_the_bodies_json_refuses_with_other_errors_are_bad_requests() -> None:
    """RecursionError and the integer-digit ValueError escaped the server's JSON handling (HTTP 500)."""
    for raw in (DEEP_JSON.encode(), b'{"max_tokens": ' + HUGE_INT_TEXT.encode() + b"}"):
        with pytest.raises(BadRequest, match="request body is not valid JSON"):
            parse_chat_body(raw, served=SERVED, max_n=MAX_N)
