"""One interface over the generation backends: transformers in process, or an OpenAI-compatible server.

Why: rollouts, evaluation and judging should not care whether the policy runs in the caller's
process (laptop, CI, the trainer's own weights) or behind vLLM / `venus serve` (a cluster, a model
too large for the caller). Both backends answer `generate(chats, max_new_tokens, temperature,
repetition_penalty, *, top_p, seed) -> texts` with chats in the processor's format (image items
hold PIL images) and answers in order: `TransformersBackend` runs `models.generation.generate` in
chunks of `batch_size`, `models.openai_client.ChatClient` sends one request per chat with bounded
concurrency (the server batches them). `make_backend` picks one from a base URL or a loaded model.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class GenerationBackend(Protocol):
    """Answers chats in order; greedy when temperature is 0."""

    def generate(
        self,
        batch_of_messages: Sequence[Sequence[dict[str, Any]]],
        max_new_tokens: int,
        temperature: float = 0.0,
        repetition_penalty: float = 1.05,
        *,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[str]: ...


class TransformersBackend:
    """In-process batched `generate` with a loaded model and processor, `batch_size` chats per call."""

    def __init__(self, model: Any, processor: Any, *, batch_size: int = 16) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
        self.model = model
        self.processor = processor
        self.batch_size = batch_size

    def generate(
        self,
        batch_of_messages: Sequence[Sequence[dict[str, Any]]],
        max_new_tokens: int,
        temperature: float = 0.0,
        repetition_penalty: float = 1.05,
        *,
        top_p: float = 1.0,
        seed: int | None = None,
    ) -> list[str]:
        from venus_core.models.generation import generate

        out: list[str] = []
        for start in range(0, len(batch_of_messages), self.batch_size):
            chunk = batch_of_messages[start : start + self.batch_size]
            out += generate(self.model, self.processor, chunk, max_new_tokens, temperature, repetition_penalty,
                            top_p=top_p, seed=None if seed is None else seed + start)
        return out


def make_backend(*, base_url: str | None = None, model_name: str | None = None, model: Any = None,
                 processor: Any = None, batch_size: int = 16, api_key: str | None = None,
                 **client_options: Any) -> GenerationBackend:
    """A `ChatClient` for `model_name` at `base_url`, else a `TransformersBackend` over `model`."""
    if base_url:
        if not model_name:
            raise ValueError("an OpenAI-compatible backend needs model_name (the served model id)")
        from venus_core.models.openai_client import ChatClient

        return ChatClient(base_url, model_name, api_key=api_key, concurrency=batch_size, **client_options)
    if model is None or processor is None:
        raise ValueError("give base_url + model_name (served model) or model + processor (in process)")
    return TransformersBackend(model, processor, batch_size=batch_size)


__all__ = ["GenerationBackend", "TransformersBackend", "make_backend"]
