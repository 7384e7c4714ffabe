"""`venus serve` without a model: request validation (400 naming the field) and the batcher's grouping."""

from __future__ import annotations

import asyncio
import doctest
import threading
from typing import Any

import pytest
from PIL import Image

import venus_core.models.serve_protocol as protocol_mod
from venus_core.models.openai_client import image_data_url
from venus_core.models.serve_batcher import Batcher
from venus_core.models.serve_protocol import BadRequest, Sampling, parse_chat_request

PNG = image_data_url(Image.new("RGB", (6, 4), (1, 2, 3)))


def _body(**kw: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"model": "tiny", "messages": [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "image_url", "image_url": {"url": PNG}}, {"type": "text", "text": "hi"}]},
    ]}
    body.update(kw)
    return body


def test_doctests() -> None:
    assert doctest.testmod(protocol_mod).failed == 0


def test_valid_request_is_decoded() -> None:
    req = parse_chat_request(_body(max_tokens=7, temperature=0, n=2, seed=5, stop="]", repetition_penalty=1.05,
                                   response_format={"type": "json_object"}), served="tiny", max_n=4)
    assert req.sampling == Sampling(max_tokens=7, temperature=0.0, top_p=1.0, repetition_penalty=1.05, seed=5)
    assert req.n == 2 and req.stop == ("]",) and req.messages[0] == {"role": "system", "content": "be brief"}
    image = req.messages[1]["content"][0]
    assert image["type"] == "image" and image["image"].size == (6, 4) and image["image"].getpixel((0, 0)) == (1, 2, 3)
    defaults = parse_chat_request(_body(max_completion_tokens=3), served="tiny", max_n=1)
    d = defaults.sampling
    assert (d.max_tokens, d.temperature, d.repetition_penalty) == (3, 1.0, 1.0)
    assert (defaults.stream, defaults.include_usage, defaults.top_logprobs, defaults.sampling.logprobs) == (
        False, False, None, False)
    streamed = parse_chat_request(_body(stream=True, stream_options={"include_usage": True}, logprobs=True,
                                        top_logprobs=20), served="tiny", max_n=1)
    assert (streamed.stream, streamed.include_usage, streamed.top_logprobs, streamed.sampling.logprobs) == (
        True, True, 20, True)
    bare = parse_chat_request(_body(logprobs=True, top_logprobs=None, stream=False, top_p=0.5), served="tiny", max_n=1)
    assert bare.top_logprobs == 0 and bare.sampling.logprobs and bare.sampling != defaults.sampling


@pytest.mark.parametrize(("patch", "param"), [
    ({"model": None}, "model"),
    ({"messages": []}, "messages"),
    ({"messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
    ({"messages": [{"role": "user"}]}, "messages[0].content"),
    ({"messages": [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]}, "messages[1].role"),
    ({"messages": [{"role": "user", "content": [{"type": "audio"}]}]}, "messages[0].content[0].type"),
    ({"messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]}, "messages[0].content[0].text"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "http://x/a.png"}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}}]}]},
     "messages[0].content[0].image_url.url"),
    ({"max_tokens": 0}, "max_tokens"),
    ({"max_tokens": "5"}, "max_tokens"),
    ({"max_tokens": 5000}, "max_tokens"),
    ({"temperature": -0.1}, "temperature"),
    ({"temperature": float("nan")}, "temperature"),
    ({"top_p": 0}, "top_p"),
    ({"n": 9}, "n"),
    ({"n": True}, "n"),
    ({"stop": ["a", ""]}, "stop"),
    ({"stream": "yes"}, "stream"),
    ({"stream_options": {"include_usage": True}}, "stream_options"),
    ({"stream": True, "stream_options": {"include_usage": 1}}, "stream_options.include_usage"),
    ({"logprobs": 1}, "logprobs"),
    ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    ({"logprobs": False, "top_logprobs": 2}, "top_logprobs"),
    ({"tools": [{"type": "function"}]}, "tools"),
    ({"presence_penalty": 0.5}, "presence_penalty"),
    ({"response_format": {"type": "json_schema"}}, "response_format"),
    ({"best_of": 2}, "best_of"),
])
def test_bad_requests_name_the_field(patch: dict[str, Any], param: str) -> None:
    with pytest.raises(BadRequest) as err:
        parse_chat_request(_body(**patch), served="tiny", max_n=8)
    assert err.value.param == param and err.value.status == 400
    body = err.value.body()["error"]
    assert body["param"] == param and body["type"] == "invalid_request_error" and param in body["message"]


def test_unknown_model_is_404_and_body_must_be_an_object() -> None:
    with pytest.raises(BadRequest, match="does not exist") as err:
        parse_chat_request(_body(model="gpt-9"), served="tiny", max_n=1)
    assert err.value.status == 404 and err.value.param == "model"
    with pytest.raises(BadRequest, match="JSON object"):
        parse_chat_request([1], served="tiny", max_n=1)


def test_batcher_groups_by_sampling_and_caps_rows() -> None:
    calls: list[tuple[int, float]] = []
    release = threading.Event()

    def run(chats: list[Any], s: Sampling) -> list[Any]:
        release.wait(5)
        calls.append((len(chats), s.temperature))
        return [f"{c}@{s.temperature}" for c in chats]

    greedy = Sampling(4, 0.0, 1.0, 1.0, None)
    hot = Sampling(4, 0.7, 1.0, 1.0, None)

    async def main() -> list[list[Any]]:
        batcher = Batcher(run, max_batch=4, wait_s=0.05)
        jobs = [batcher.submit([f"a{i}"], greedy) for i in range(6)] + [batcher.submit(["h0", "h1"], hot)]
        asyncio.get_running_loop().call_later(0.2, release.set)
        out = await asyncio.gather(*jobs)
        stats = batcher.stats.to_dict()
        await batcher.stop()
        assert stats["requests"] == 7 and stats["rows"] == 8 and stats["batches"] == 3
        return out

    out = asyncio.run(main())
    assert out[0] == ["a0@0.0"] and out[5] == ["a5@0.0"] and out[6] == ["h0@0.7", "h1@0.7"]
    assert sorted(calls) == [(2, 0.0), (2, 0.7), (4, 0.0)]  # equal settings share a batch of at most 4 rows


def test_batcher_reports_generation_errors_to_every_request() -> None:
    def run(chats: list[Any], s: Sampling) -> list[Any]:
        raise RuntimeError("out of memory")

    async def main() -> tuple[list[Any], dict[str, Any]]:
        batcher = Batcher(run, max_batch=4, wait_s=0.02)
        s = Sampling(4, 0.0, 1.0, 1.0, None)
        out = await asyncio.gather(batcher.submit(["a"], s), batcher.submit(["b"], s), return_exceptions=True)
        with pytest.raises(ValueError, match="exceed max_batch"):
            await batcher.submit(["x"] * 5, s)
        stats = batcher.stats.to_dict()
        await batcher.stop()
        return out, stats

    out, stats = asyncio.run(main())
    assert all(isinstance(e, RuntimeError) and "out of memory" in str(e) for e in out)
    assert stats["failed_batches"] == 1 and stats["batches"] == 0
