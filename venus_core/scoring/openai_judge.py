"""The `openai` judge: any OpenAI-compatible chat endpoint (vLLM serving a large Qwen3-VL in production).

The HTTP side is the shared client of `venus_core.models.openai_client` (one client for eval,
rollouts and the judge): bounded concurrency (`spec.concurrency` threads), a per-request timeout,
retries with exponential backoff and jitter on timeouts, connection errors, 5xx and 429 (honouring
`Retry-After`, capped), and strict reply parsing. What is judge-specific stays here: a malformed
completion body and an unparseable verdict (`protocol.parse_reply`) are retried too, since sampling
servers may answer differently; a 4xx other than 429 is a configuration error and is not retried;
a sample that still fails becomes a `JudgeFailure` instead of stopping the run. Images travel as
base64 PNG data URLs, which vLLM accepts without shared storage.

Re-derivation requests (the rebuild path, `protocol.rederive_messages`) send the step's plain
screenshot and ask for a navigation answer in the agent's tagged format, so they go without
`response_format` and may use `max_rederive_tokens`; an answer the action parser rejects is
retried like an unparseable verdict. The API key, when the endpoint needs one, comes from
$VENUS_JUDGE_API_KEY (a Kubernetes Secret in a cluster: `scoring.api_key_secret`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from venus_core.config.registry import JUDGES
from venus_core.config.spec import ScoringSpec
from venus_core.models.openai_client import ChatClient, ChatError, ChatGaveUp, image_data_url, retry_after_seconds
from venus_core.data.schema import NavigationStep
from venus_core.scoring.judges import JudgeBackend, JudgeFailure, JudgeStats, Rederived, Verdict
from venus_core.scoring.overlay import OpenImage, judge_image
from venus_core.scoring.protocol import (
    JudgeReplyError,
    chat_messages,
    parse_rederived,
    parse_reply,
    rederive_messages,
)
from venus_core.scoring.rules import AnyRecord

API_KEY_ENV = "VENUS_JUDGE_API_KEY"
T = TypeVar("T")

__all__ = ["API_KEY_ENV", "OpenAIJudge", "image_data_url", "retry_after_seconds"]


class OpenAIJudge(JudgeBackend):
    """Judge through POST {endpoint}/chat/completions."""

    can_rederive = True

    def __init__(
        self,
        endpoint: str,
        model: str,
        *,
        open_image: OpenImage,
        concurrency: int = 8,
        timeout_s: float = 60.0,
        max_retries: int = 3,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        max_tokens: int = 512,
        max_rederive_tokens: int = 512,
        api_key: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"scoring.endpoint {endpoint!r} must be an http(s) URL such as http://host:8000/v1"
            )
        self.client = ChatClient(
            endpoint, model,
            api_key=api_key if api_key is not None else os.environ.get(API_KEY_ENV),
            concurrency=concurrency, timeout_s=timeout_s, max_retries=max_retries, backoff_s=backoff_s,
            max_backoff_s=max_backoff_s, retry_malformed=True, sleep=sleep,
        )
        self.url = self.client.url
        self.model = model
        self.judge_id = f"openai:{model}"
        self.open_image = open_image
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.max_rederive_tokens = max_rederive_tokens

    @property
    def calls(self) -> int:  # type: ignore[override]
        """HTTP requests made (every attempt counts)."""
        return self.client.calls

    @property
    def retries(self) -> int:
        """Attempts that were retried."""
        return self.client.retries

    def stats(self) -> JudgeStats:
        """Requests made; tokens as the server's `usage` reports them (None when requests were
        made and no reply carried one)."""
        c = self.client
        if c.calls and not c.usage_replies:
            return JudgeStats(calls=c.calls)
        return JudgeStats(calls=c.calls, prompt_tokens=c.prompt_tokens, completion_tokens=c.completion_tokens)

    @classmethod
    def from_spec(cls, spec: ScoringSpec, *, open_image: OpenImage, **options: Any) -> OpenAIJudge:
        if not spec.endpoint:
            raise ValueError("scoring.judge=openai needs scoring.endpoint (an OpenAI-compatible base URL)")
        if not spec.judge_model:
            raise ValueError("scoring.judge=openai needs scoring.judge_model (the served model name)")
        return cls(
            spec.endpoint,
            spec.judge_model,
            open_image=open_image,
            concurrency=spec.concurrency,
            timeout_s=spec.timeout_s,
            max_retries=spec.max_retries,
            **options,
        )

    def judge_one(self, record: AnyRecord) -> Verdict:
        try:
            url = image_data_url(judge_image(record, self.open_image))
        except (OSError, ValueError) as exc:
            return JudgeFailure(f"record {record.id!r}: cannot render its image: {exc}", self.judge_id)
        body = {
            "model": self.model,
            "messages": chat_messages(record, url),
            "temperature": 0.0,
            "max_tokens": self.max_tokens,
            "response_format": {"type": "json_object"},
        }
        return self._ask(body, f"record {record.id!r}", lambda text: parse_reply(text, record.kind, self.judge_id))

    def _ask(self, body: dict[str, Any], label: str, parse: Callable[[str], T]) -> T | JudgeFailure:
        """One request with the client's retries (an unparseable reply is retried too); a
        JudgeFailure when it still fails."""
        try:
            return self.client.request(  # type: ignore[return-value]
                body, label=label, parse=lambda texts: parse(texts[0]), retry_on=(JudgeReplyError,)
            )
        except ChatGaveUp as exc:
            return JudgeFailure(f"gave up after {exc.attempts} attempts: {exc.last}", self.judge_id)
        except ChatError as exc:
            return JudgeFailure(str(exc), self.judge_id)

    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        return self.client.map(self.judge_one, list(records))

    def rederive_one(self, step: NavigationStep) -> Rederived:
        try:
            url = image_data_url(self.open_image(step.image))
        except (OSError, ValueError, KeyError) as exc:
            return JudgeFailure(f"step {step.id!r}: cannot read its screenshot: {exc}", self.judge_id)
        body = {
            "model": self.model,
            "messages": rederive_messages(step, url),
            "temperature": 0.0,
            "max_tokens": self.max_rederive_tokens,
        }
        return self._ask(body, f"re-derive step {step.id!r}", lambda text: parse_rederived(text, step.platform))

    def rederive_many(self, steps: Sequence[NavigationStep]) -> list[Rederived]:
        return self.client.map(self.rederive_one, list(steps))


JUDGES.register("openai", OpenAIJudge, description="any OpenAI-compatible chat endpoint (vLLM in production)")
