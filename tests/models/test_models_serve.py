"""`venus serve` for real: the tiny model behind FastAPI/uvicorn on loopback, called over HTTP.

Greedy answers must equal in-process `generate` (the server adds transport, not behaviour),
concurrent requests must share `generate` calls (the batch counters of /health), and bad requests
must get 400 naming the field. Usage, streaming and logprobs through the official `openai` client:
`test_models_serve_openai`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from PIL import Image

from models_helpers import screen
from serve_cli import venus_serve
from venus_core.models.backends import GenerationBackend, TransformersBackend, make_backend
from venus_core.models.generation import generate
from venus_core.models.openai_client import ChatClient, ChatError, chat_body, image_data_url
from venus_core.models.prompts import build_messages, grounding_prompt
from venus_core.models.server import BackgroundServer, create_app, transformers_runner


def _chats(k: int) -> list[list[dict[str, Any]]]:
    return [build_messages(screen((30 * i, 90, 200 - 20 * i), (96 + 8 * i, 128)), grounding_prompt(f"button {i}"))
            for i in range(k)]


@pytest.fixture()
def served(tiny) -> Iterator[BackgroundServer]:  # type: ignore[no-untyped-def]
    model, processor = tiny
    app = create_app(transformers_runner(model, processor), "tiny", max_batch=8, batch_wait_ms=400)
    with BackgroundServer(app) as srv:
        yield srv


def _health(srv: BackgroundServer) -> dict[str, Any]:
    return requests.get(f"http://{srv.host}:{srv.port}/health", timeout=10).json()


def test_concurrent_greedy_requests_are_batched_and_match_in_process(tiny, served) -> None:  # type: ignore[no-untyped-def]
    model, processor = tiny
    chats = _chats(8)
    expected = generate(model, processor, chats, 10, temperature=0.0, repetition_penalty=1.05)
    client = ChatClient(served.base_url, "tiny", concurrency=8)
    assert client.models() == ["tiny"]
    assert client.generate(chats, 10, temperature=0.0, repetition_penalty=1.05) == expected
    health = _health(served)
    assert health["requests"] == 8 and health["rows"] == 8
    assert health["batches"] <= 2 and max(int(k) for k in health["batch_sizes"]) >= 4, health
    sequential = make_backend(base_url=served.base_url, model_name="tiny", batch_size=1)
    local = make_backend(model=model, processor=processor, batch_size=3)
    assert isinstance(sequential, GenerationBackend) and isinstance(local, TransformersBackend)
    assert isinstance(local, GenerationBackend)
    assert sequential.generate(chats[:2], 10, temperature=0.0, repetition_penalty=1.05) == expected[:2]
    assert _health(served)["batches"] == health["batches"] + 2  # one at a time: one batch each
    assert local.generate(chats, 10, temperature=0.0, repetition_penalty=1.05) == expected  # chunks of 3


def test_sampling_n_and_stop(served) -> None:  # type: ignore[no-untyped-def]
    client = ChatClient(served.base_url, "tiny")
    [chat] = _chats(1)
    body = chat_body("tiny", chat, 6, temperature=1.0, n=3, seed=11)
    texts = client.request(body)
    assert len(texts) == 3 and len(set(texts)) > 1  # independent samples of a random-init model differ
    greedy = client.request(chat_body("tiny", chat, 6, temperature=0.0, n=2))
    assert greedy[0] == greedy[1]
    reply = requests.post(served.base_url + "/chat/completions", timeout=30,
                          json=chat_body("tiny", chat, 6, temperature=0.0, stop=[greedy[0][2:4]])).json()
    assert reply["object"] == "chat.completion" and reply["model"] == "tiny"
    [choice] = reply["choices"]
    assert choice["message"]["content"] == greedy[0][: greedy[0].find(greedy[0][2:4])]
    assert choice["finish_reason"] == "stop"
    long = requests.post(served.base_url + "/chat/completions", timeout=30,
                         json=chat_body("tiny", [{"role": "user", "content": "hello"}], 3)).json()
    assert long["choices"][0]["finish_reason"] in ("length", "stop")


def test_bad_requests_get_400_naming_the_field(served) -> None:  # type: ignore[no-untyped-def]
    url = served.base_url + "/chat/completions"
    good = {"model": "tiny", "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_data_url(Image.new("RGB", (8, 8)))}},
        {"type": "text", "text": "hi"}]}], "max_tokens": 2}
    cases: list[tuple[Any, int, str | None]] = [
        ({**good, "max_tokens": -1}, 400, "max_tokens"),
        ({**good, "n": 99}, 400, "n"),
        ({**good, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "data:x"}}]}]},
         400, "messages[0].content[0].image_url.url"),
        ({**good, "model": "other"}, 404, "model"),
        ({**good, "stream_options": {"include_usage": True}}, 400, "stream_options"),  # without stream: true
    ]
    for body, status, param in cases:
        resp = requests.post(url, json=body, timeout=30)
        assert resp.status_code == status, (param, resp.text)
        assert resp.json()["error"]["param"] == param
    resp = requests.post(url, data=b"{not json", headers={"Content-Type": "application/json"}, timeout=30)
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["error"]["message"]
    client = ChatClient(served.base_url, "tiny", max_retries=3)
    with pytest.raises(ChatError, match="HTTP 400.*temperature") as err:
        client.request({**good, "temperature": 5})
    assert client.calls == 1 and err.value.status == 400  # a bad request is not retried
    assert requests.post(url, json=good, timeout=30).status_code == 200


@pytest.mark.slow
def test_venus_serve_command() -> None:
    """The CLI: `venus serve --model bootstrap --port 0` (the shipped checkpoint) prints its URL and
    answers until terminated."""
    with venus_serve(["--model", "bootstrap", "--max-batch", "4", "--threads", "1"]) as base_url:
        client = ChatClient(base_url, "bootstrap")
        assert client.models() == ["bootstrap"]
        [answer] = client.generate(_chats(1), 4)
        assert isinstance(answer, str)
        health = requests.get(base_url.removesuffix("/v1") + "/health", timeout=10).json()
        assert health["max_batch"] == 4 and health["requests"] == 1
