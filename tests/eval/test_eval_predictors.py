"""The OpenAI-compatible predictor against a loopback server of our own that answers scripted replies."""

from __future__ import annotations

import base64
import io
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.predictors import OpenAIPredictor, Predictor, PredictorError, Query


class FakeServer:
    """Chat-completions server: replies `script[prompt]`; `fail_first` 503s before answering."""

    def __init__(self) -> None:
        self.script: dict[str, str] = {}
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.fail_first = 0
        self.status = 200
        self.raw: bytes | None = None
        self.lock = threading.Lock()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with server.lock:
                    server.requests.append(body)
                    server.headers.append(dict(self.headers))
                    failing = server.fail_first > 0
                    server.fail_first -= 1
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error":"not found"}')
                if failing:
                    return self._send(503, b'{"error":"busy"}')
                if server.status != 200:
                    return self._send(server.status, b'{"error":"bad request"}')
                if server.raw is not None:
                    return self._send(200, server.raw)
                prompt = body["messages"][0]["content"][1]["text"]
                reply = {"choices": [{"message": {"role": "assistant", "content": server.script.get(prompt, "?")}}]}
                self._send(200, json.dumps(reply).encode())

            def _send(self, code: int, data: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture()
def server() -> Iterator[FakeServer]:
    s = FakeServer()
    yield s
    s.close()


def _queries(n: int) -> list[Query]:
    return [Query(f"q{i}", Image.new("RGB", (8 + i, 8), (i, 0, 0)), f"prompt {i}") for i in range(n)]


def test_posts_chat_completions_in_order(server: FakeServer) -> None:
    server.script = {f"prompt {i}": f"[{i},{i}]" for i in range(7)}
    pred = OpenAIPredictor(server.url, "venus-8b", api_key="k", concurrency=3)
    assert isinstance(pred, Predictor)
    assert pred.predict(_queries(7), 32) == [f"[{i},{i}]" for i in range(7)]
    body = next(b for b in server.requests if b["messages"][0]["content"][1]["text"] == "prompt 2")
    assert body["model"] == "venus-8b" and body["max_tokens"] == 32
    assert body["temperature"] == 0.0 and body["repetition_penalty"] == 1.05
    image_part = body["messages"][0]["content"][0]
    assert image_part["type"] == "image_url"
    url = image_part["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert Image.open(io.BytesIO(base64.b64decode(url.split(",", 1)[1]))).size == (10, 8)
    assert all(h.get("Authorization") == "Bearer k" for h in server.headers)


def test_retries_server_errors(server: FakeServer) -> None:
    server.script = {"prompt 0": "[1,1]"}
    server.fail_first = 2
    pred = OpenAIPredictor(server.url, "m", retries=2, backoff_s=0.01, concurrency=1)
    assert pred.predict(_queries(1), 8) == ["[1,1]"]
    assert len(server.requests) == 3
    server.fail_first = 5
    with pytest.raises(PredictorError, match=r"query 'q0': HTTP 503.*after 2 attempts"):
        OpenAIPredictor(server.url, "m", retries=1, backoff_s=0.01).predict(_queries(1), 8)


def test_client_errors_and_malformed_replies_fail_at_once(server: FakeServer) -> None:
    server.status = 400
    with pytest.raises(PredictorError, match=r"query 'q0': HTTP 400"):
        OpenAIPredictor(server.url, "m", retries=3, backoff_s=0.01).predict(_queries(1), 8)
    assert len(server.requests) == 1  # no retry on 4xx
    server.status = 200
    server.raw = b'{"choices": []}'
    with pytest.raises(PredictorError, match="malformed chat completion"):
        OpenAIPredictor(server.url, "m").predict(_queries(1), 8)
    with pytest.raises(PredictorError, match="q0"):
        OpenAIPredictor("http://127.0.0.1:9/v1", "m", retries=0, timeout_s=2).predict(_queries(1), 8)


def test_bad_settings() -> None:
    with pytest.raises(ValueError, match="base_url"):
        OpenAIPredictor("localhost:8000", "m")
    with pytest.raises(ValueError, match="temperature"):
        OpenAIPredictor("http://x/v1", "m", temperature=-1)


def test_grounding_over_http(server: FakeServer, grounding_data: Path) -> None:
    from venus_core.models.prompts import grounding_prompt

    server.script = {grounding_prompt("find g0"): "[200,200]", grounding_prompt("find r0"): "[-1,-1]"}
    res = evaluate_grounding(grounding_data, OpenAIPredictor(server.url, "served", concurrency=4))
    assert res.model == "served" and (res.summary["overall"]["k"], res.summary["overall"]["n"]) == (2, 7)
    assert res.summary["wrong_format"]["count"] == 5 and res.settings["backend"] == "OpenAIPredictor"
