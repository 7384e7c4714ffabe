"""Inference backends of the evaluators behind one `Predictor` protocol: in process, or over HTTP.

Why two: on a laptop and in CI the model runs in process (batched transformers `generate`, the
tiny default); in a cluster the same evaluation talks to a vLLM server through the OpenAI chat
completions API, so a 30B checkpoint is evaluated without loading it into the evaluator's pod.
The evaluators only ever see `predict(queries, max_new_tokens) -> answers`, in order.

Decoding follows the UI-Venus-1.5 evaluation: greedy (temperature 0) and repetition penalty 1.05.
`repetition_penalty` is not part of the OpenAI API; vLLM accepts it as an extra body field, which
is how it is sent. Images travel as PNG data URLs (what vLLM's OpenAI server accepts without a
media server). The HTTP side is the shared OpenAI-compatible client of `venus_core.models`
(bounded concurrency, timeouts, retries); results are returned in query order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

from PIL import Image

from venus_core.models.openai_client import ChatClient, ChatError, chat_body, image_data_url
from venus_core.models.prompts import build_messages

DEFAULT_TEMPERATURE = 0.0
DEFAULT_REPETITION_PENALTY = 1.05

__all__ = ["DEFAULT_REPETITION_PENALTY", "DEFAULT_TEMPERATURE", "LocalPredictor", "OpenAIPredictor", "Predictor",
           "PredictorError", "Query", "chat_request", "chunk_size", "image_data_url"]


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
        """Answers in query order. Batches are cut from the queries sorted by screenshot size and
        prompt length, so rows of a batch need little left padding (greedy answers do not depend
        on the batch: tests/eval/test_eval_batching.py)."""
        from venus_core.models.generation import generate

        order = sorted(range(len(queries)), key=lambda i: (queries[i].image.size, len(queries[i].prompt)))
        out: list[str | None] = [None] * len(queries)
        for start in range(0, len(order), self.batch_size):
            idx = order[start : start + self.batch_size]
            chats = [build_messages(queries[i].image, queries[i].prompt) for i in idx]
            try:
                answers = generate(self.model, self.processor, chats, max_new_tokens,
                                   temperature=self.temperature, repetition_penalty=self.repetition_penalty)
            except Exception as exc:
                ids = ", ".join(queries[i].id for i in idx[:3])
                raise PredictorError(f"{self.name}: generation failed on batch starting with {ids}: {exc}") from exc
            for i, answer in zip(idx, answers, strict=True):
                out[i] = answer
        return [a for a in out if a is not None]


def chunk_size(predictor: Predictor, default: int) -> int:
    """Queries an evaluator hands `predictor` at a time: `default`, or its batch size / concurrency
    when larger, so that no batch is cut short by the evaluator."""
    width = getattr(predictor, "batch_size", None) or getattr(predictor, "concurrency", None) or 0
    return max(default, int(width))


def chat_request(model: str, query: Query, max_new_tokens: int, temperature: float,
                 repetition_penalty: float) -> dict[str, Any]:
    """The chat-completions body of one query: one user turn, the image first, then the prompt."""
    return chat_body(model, build_messages(query.image, query.prompt), max_new_tokens,
                     temperature=temperature, repetition_penalty=repetition_penalty)


class OpenAIPredictor:
    """Posts chat completions to an OpenAI-compatible server (vLLM in production, or `venus serve`).

    `base_url` is the API root, e.g. `http://vllm:8000/v1`; requests go to `<base_url>/chat/completions`
    through the shared client (`venus_core.models.openai_client.ChatClient`). Server errors (429,
    5xx), timeouts and connection failures are retried `retries` times with exponential backoff; any
    other 4xx or a malformed reply fails at once, naming the query.
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
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.client = ChatClient(base_url, model, api_key=api_key, concurrency=concurrency, timeout_s=timeout_s,
                                 max_retries=retries, backoff_s=backoff_s, retry_malformed=False)
        self.url = self.client.url
        self.model = model
        self.api_key = api_key
        self.name = name or model
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.retries = retries
        self.backoff_s = backoff_s
        self.temperature = temperature
        self.repetition_penalty = repetition_penalty

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        if max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
        if not queries:
            return []
        bodies = [(chat_request(self.model, q, max_new_tokens, self.temperature, self.repetition_penalty), q.id)
                  for q in queries]

        def one(item: tuple[dict[str, Any], str]) -> str:
            try:
                return self.client.request(item[0], label=f"query {item[1]!r}")[0]
            except ChatError as exc:
                raise PredictorError(str(exc)) from None

        return self.client.map(one, bodies)
