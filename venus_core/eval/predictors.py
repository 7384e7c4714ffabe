"""Inference backends of the evaluators behind one `Predictor` protocol: in process, or over HTTP.

Why two: on a laptop and in CI the model runs in process (batched transformers `generate`, the
tiny default); in a cluster the same evaluation talks to a vLLM server through the OpenAI chat
completions API, so a 30B checkpoint is evaluated without loading it into the evaluator's pod.
The evaluators only ever see `predict(queries, max_new_tokens) -> answers`, in order.

Decoding follows the UI-Venus-1.5 evaluation: greedy (temperature 0) and repetition penalty 1.05.
`repetition_penalty` is not part of the OpenAI API; vLLM accepts it as an extra body field, which
is how it is sent. Images travel as PNG data URLs (what vLLM's OpenAI server accepts without a
media server). The HTTP client is the standard library's urllib: one JSON POST per query does not
justify a dependency; requests run on a small thread pool, results are returned in query order.
"""

from __future__ import annotations

import base64
import io
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from PIL import Image

DEFAULT_TEMPERATURE = 0.0
DEFAULT_REPETITION_PENALTY = 1.05


@dataclass(frozen=True)
class Query:
    """One model call: a screenshot and the user prompt (UI-Venus prompts), tagged with its sample id."""

    id: str
    image: Image.Image
    prompt: str


class PredictorError(RuntimeError):
    """A backend could not answer a query; the message names the query id and the backend."""


@runtime_checkable
class Predictor(Protocol):
    """Answers queries in order. `name` labels the results (model name or checkpoint)."""

    name: str

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]: ...


def _check_decoding(temperature: float, repetition_penalty: float, batch_size: int) -> None:
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if repetition_penalty <= 0:
        raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")


class LocalPredictor:
    """Batched in-process generation (`venus_core.models.generate`) with a loaded model + processor."""

    def __init__(
        self,
        model: Any,
        processor: Any,
        *,
        name: str = "local",
        batch_size: int = 16,
        temperature: float = DEFAULT_TEMPERATURE,
        repetition_penalty: float = DEFAULT_REPETITION_PENALTY,
    ) -> None:
        _check_decoding(temperature, repetition_penalty, batch_size)
        self.model = model
        self.processor = processor
        self.name = name
        self.batch_size = batch_size
        self.temperature = temperature
        self.repetition_penalty = repetition_penalty

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        from venus_core.models.generation import generate
        from venus_core.models.prompts import build_messages

        out: list[str] = []
        for start in range(0, len(queries), self.batch_size):
            chunk = queries[start : start + self.batch_size]
            chats = [build_messages(q.image, q.prompt) for q in chunk]
            try:
                answers = generate(self.model, self.processor, chats, max_new_tokens,
                                   temperature=self.temperature, repetition_penalty=self.repetition_penalty)
            except Exception as exc:
                ids = ", ".join(q.id for q in chunk[:3])
                raise PredictorError(f"{self.name}: generation failed on batch starting with {ids}: {exc}") from exc
            out.extend(answers)
        return out


def image_data_url(image: Image.Image, fmt: str = "PNG") -> str:
    """`data:image/png;base64,…` of a PIL image (RGB)."""
    buf = io.BytesIO()
    (image if image.mode in ("RGB", "L") else image.convert("RGB")).save(buf, format=fmt)
    mime = "image/png" if fmt.upper() == "PNG" else f"image/{fmt.lower()}"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


def chat_request(model: str, query: Query, max_new_tokens: int, temperature: float,
                 repetition_penalty: float) -> dict[str, Any]:
    """The chat-completions body of one query: one user turn, the image first, then the prompt."""
    return {
        "model": model,
        "messages": [{
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": image_data_url(query.image)}},
                {"type": "text", "text": query.prompt},
            ],
        }],
        "max_tokens": int(max_new_tokens),
        "temperature": float(temperature),
        "repetition_penalty": float(repetition_penalty),
    }


class OpenAIPredictor:
    """Posts chat completions to an OpenAI-compatible server (vLLM in production).

    `base_url` is the API root, e.g. `http://vllm:8000/v1`; requests go to `<base_url>/chat/completions`.
    Server errors (5xx) and connection failures are retried `retries` times with exponential
    backoff; a 4xx or a malformed reply fails at once, naming the query.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        name: str | None = None,
        concurrency: int = 4,
        timeout_s: float = 120.0,
        retries: int = 2,
        backoff_s: float = 0.5,
        temperature: float = DEFAULT_TEMPERATURE,
        repetition_penalty: float = DEFAULT_REPETITION_PENALTY,
    ) -> None:
        _check_decoding(temperature, repetition_penalty, concurrency)
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.url = base_url.rstrip("/") + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.name = name or model
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.repetition_penalty = repetition_penalty

    def _post(self, body: dict[str, Any], qid: str) -> str:
        data = json.dumps(body).encode("utf-8")
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        last: Exception | None = None
        for attempt in range(self.retries + 1):
            if attempt:
                time.sleep(self.backoff_s * 2 ** (attempt - 1))
            req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
            try:
                with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:
                    payload = resp.read()
            except urllib.error.HTTPError as exc:
                detail = exc.read()[:300].decode("utf-8", "replace")
                if exc.code < 500:
                    raise PredictorError(f"{self.url}: query {qid!r}: HTTP {exc.code}: {detail}") from None
                last = PredictorError(f"{self.url}: query {qid!r}: HTTP {exc.code}: {detail}")
                continue
            except (urllib.error.URLError, OSError) as exc:
                last = PredictorError(f"{self.url}: query {qid!r}: {exc}")
                continue
            return self._content(payload, qid)
        assert last is not None
        raise PredictorError(f"{last} (after {self.retries + 1} attempts)")

    def _content(self, payload: bytes, qid: str) -> str:
        try:
            reply = json.loads(payload)
            content = reply["choices"][0]["message"]["content"]
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            raise PredictorError(
                f"{self.url}: query {qid!r}: malformed chat completion ({type(exc).__name__}: {exc}): "
                f"{payload[:200]!r}") from None
        if content is None:
            return ""
        if not isinstance(content, str):
            raise PredictorError(f"{self.url}: query {qid!r}: message content is {type(content).__name__}, not text")
        return content

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        bodies = [(chat_request(self.model, q, max_new_tokens, self.temperature, self.repetition_penalty), q.id)
                  for q in queries]
        if not bodies:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(bodies))) as pool:
            return list(pool.map(lambda b: self._post(*b), bodies))
