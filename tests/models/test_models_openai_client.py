"""The shared OpenAI-compatible client against a real loopback HTTP server with scripted replies."""

from __future__ import annotations

import base64
import doctest
import io
import json

import pytest
from PIL import Image

import venus_core.models.openai_client as client_mod
from venus_core.models.openai_client import (
    ChatClient,
    ChatError,
    ChatGaveUp,
    chat_body,
    completion_texts,
    to_openai_messages,
)
from venus_core.models.prompts import build_messages
from venus_core.scoring.testing_server import Reply, ScriptedChatServer


def _client(srv: ScriptedChatServer, sleeps: list[float], **kw) -> ChatClient:  # type: ignore[no-untyped-def]
    opts = dict(timeout_s=2.0, max_retries=3, backoff_s=0.01, sleep=sleeps.append)
    opts.update(kw)
    return ChatClient(srv.base_url, "m", **opts)  # type: ignore[arg-type]


def test_doctests() -> None:
    assert doctest.testmod(client_mod).failed == 0


def test_generate_sends_images_as_data_urls_in_order() -> None:
    chats = [build_messages(Image.new("RGBA", (10 + i, 8), (i, 0, 0, 255)), f"p{i}") for i in range(5)]
    with ScriptedChatServer(default=lambda r: Reply(content=r["messages"][0]["content"][1]["text"].upper())) as srv:
        client = ChatClient(srv.base_url, "venus", api_key="k", concurrency=3)
        assert client.generate(chats, 16, temperature=0.0, repetition_penalty=1.05) == [f"P{i}" for i in range(5)]
        body = next(r for r in srv.requests if r["messages"][0]["content"][1]["text"] == "p3")
        peak = srv.max_in_flight
    assert body["model"] == "venus" and body["max_tokens"] == 16 and body["temperature"] == 0.0
    assert body["repetition_penalty"] == 1.05 and "top_p" not in body and "n" not in body
    url = body["messages"][0]["content"][0]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    img = Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1])))
    assert img.size == (13, 8) and img.mode == "RGB"
    assert client.calls == 5 and client.retries == 0 and peak <= 3


def test_retries_429_5xx_and_connection_errors_with_backoff() -> None:
    sleeps: list[float] = []
    script = [Reply(status=429, headers={"Retry-After": "0.05"}), Reply(status=502, body=b"bad gateway"),
              Reply(status=503), Reply(content="ok")]
    with ScriptedChatServer(script) as srv:
        client = _client(srv, sleeps)
        assert client.request(chat_body("m", [{"role": "user", "content": "hi"}], 4)) == ["ok"]
    assert client.calls == 4 and client.retries == 3
    assert sleeps[0] == 0.05  # Retry-After honoured
    for attempt, pause in list(enumerate(sleeps))[1:]:  # exponential backoff, jitter in [0.5, 1] x base
        assert 0.005 * 2**attempt <= pause <= 0.01 * 2**attempt
    dead = ChatClient("http://127.0.0.1:9/v1", "m", max_retries=1, backoff_s=0.0, timeout_s=2)
    with pytest.raises(ChatGaveUp, match=r"chat 0: connection error.*gave up after 2 attempts"):
        dead.generate([[{"role": "user", "content": "x"}]], 4)


def test_timeout_is_retried_and_4xx_is_not() -> None:
    sleeps: list[float] = []
    # the on-time reply gets a whole second: a loaded CI machine once took over 0.25 s to answer it
    with ScriptedChatServer([Reply(delay_s=3.0, content="late"), Reply(content="on time")]) as srv:
        client = _client(srv, sleeps, timeout_s=1.0)
        assert client.request({"model": "m"}) == ["on time"] and client.retries == 1
    with ScriptedChatServer([Reply(status=400, body=b'{"error": "unknown model"}'), Reply(content="x")]) as srv:
        client = _client(srv, sleeps)
        with pytest.raises(ChatError, match=r"req-7: HTTP 400: .*unknown model") as err:
            client.request({"model": "m"}, label="req-7")
        assert err.value.status == 400 and client.calls == 1


def test_malformed_replies_and_parse_retries() -> None:
    sleeps: list[float] = []
    with ScriptedChatServer([Reply(body=b'{"choices": []}'), Reply(content="x")]) as srv:
        strict = _client(srv, sleeps, retry_malformed=False)
        with pytest.raises(ChatError, match="malformed chat completion.*no 'choices'"):
            strict.request({"model": "m"})
        assert strict.calls == 1
    with ScriptedChatServer([Reply(body=b"<html>"), Reply(content="seven"), Reply(content="7")]) as srv:
        client = _client(srv, sleeps)
        assert client.request({"model": "m"}, parse=lambda t: int(t[0]), retry_on=(ValueError,)) == 7
        assert client.calls == 3 and client.retries == 2
    with ScriptedChatServer([Reply(content="seven")] * 2) as srv:
        client = _client(srv, sleeps, max_retries=1)
        with pytest.raises(ChatGaveUp, match="reply rejected: invalid literal") as gave_up:
            client.request({"model": "m"}, parse=lambda t: int(t[0]), retry_on=(ValueError,))
        assert gave_up.value.attempts == 2


def test_completion_texts_is_strict() -> None:
    reply = {"choices": [{"index": 1, "message": {"content": "b"}}, {"index": 0, "message": {"content": None}}]}
    assert completion_texts(reply) == ["", "b"]
    for bad, why in [([], "not an object"), ({"choices": {}}, "no 'choices'"),
                     ({"choices": [{"message": {}}]}, r"choices\[0\] has no message.content"),
                     ({"choices": [{"message": {"content": 3}}]}, "int, not text")]:
        with pytest.raises(ValueError, match=why):
            completion_texts(bad)
    json.dumps(chat_body("m", build_messages(Image.new("RGB", (4, 4)), "p"), 2, top_p=0.9, n=2, seed=3))
    with pytest.raises(ValueError, match="max_tokens"):
        chat_body("m", [], 0)
    with pytest.raises(ValueError, match="unknown content type 'video'"):
        to_openai_messages([{"role": "user", "content": [{"type": "video"}]}])
    with pytest.raises(ValueError, match="base_url"):
        ChatClient("localhost:8000", "m")
    with pytest.raises(ValueError, match="concurrency"):
        ChatClient("http://x/v1", "m", concurrency=0)
