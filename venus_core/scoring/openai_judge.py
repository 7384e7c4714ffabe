"""The `openai` judge: any OpenAI-compatible chat endpoint (vLLM serving a large Qwen3-VL in production).

Why the standard library (urllib) rather than the `openai` SDK: the judge needs one POST route,
and its failure handling must be explicit and testable — bounded concurrency (a thread pool of
`spec.concurrency`), a per-request timeout, retries with exponential backoff and jitter on
timeouts, connection errors, 5xx and 429 (honouring `Retry-After`, capped), and strict reply
parsing (`protocol.parse_reply`; an unparseable reply is retried too, since sampling servers may
answer differently). A 4xx other than 429 is a configuration error and is not retried. Images
travel as base64 PNG data URLs, which vLLM accepts without shared storage.
"""

from __future__ import annotations

import base64
import email.utils
import http.client
import io
import json
import os
import random
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from PIL import Image

from venus_core.config.registry import JUDGES
from venus_core.config.spec import ScoringSpec
from venus_core.scoring.judges import JudgeBackend, JudgeFailure, Verdict
from venus_core.scoring.overlay import OpenImage, judge_image
from venus_core.scoring.protocol import JudgeReplyError, chat_messages, parse_reply
from venus_core.scoring.rules import AnyRecord

API_KEY_ENV = "VENUS_JUDGE_API_KEY"


class _Retryable(Exception):
    def __init__(self, reason: str, retry_after: float | None = None) -> None:
        super().__init__(reason)
        self.retry_after = retry_after


def image_data_url(img: Image.Image) -> str:
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def retry_after_seconds(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a Retry-After header (delta seconds or an HTTP date); None if absent/bad.

    >>> retry_after_seconds("3"), retry_after_seconds(None), retry_after_seconds("soon")
    (3.0, None, None)
    """
    if value is None:
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - (time.time() if now is None else now))


class OpenAIJudge(JudgeBackend):
    """Judge through POST {endpoint}/chat/completions."""

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
        api_key: str | None = None,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not endpoint.startswith(("http://", "https://")):
            raise ValueError(
                f"scoring.endpoint {endpoint!r} must be an http(s) URL such as http://host:8000/v1"
            )
        self.url = endpoint.rstrip("/") + "/chat/completions"
        self.model = model
        self.judge_id = f"openai:{model}"
        self.open_image = open_image
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.max_tokens = max_tokens
        self.api_key = api_key if api_key is not None else os.environ.get(API_KEY_ENV)
        self.sleep = sleep
        self.calls = 0
        self.retries = 0
        self._lock = threading.Lock()

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

    def _post(self, body: bytes) -> str:
        """One HTTP call; returns the reply text or raises _Retryable / RuntimeError."""
        headers = {"Content-Type": "application/json"}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.url, data=body, headers=headers, method="POST")
        with self._lock:
            self.calls += 1
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as resp:  # noqa: S310 - http(s) checked
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:200].decode("utf-8", "replace")
            if exc.code == 429 or exc.code >= 500:
                raise _Retryable(
                    f"HTTP {exc.code}: {detail}", retry_after_seconds(exc.headers.get("Retry-After"))
                ) from None
            raise RuntimeError(f"{self.url}: HTTP {exc.code}: {detail}") from None
        except TimeoutError as exc:
            raise _Retryable(f"timeout after {self.timeout_s}s: {exc}") from None
        except urllib.error.URLError as exc:
            if isinstance(exc.reason, TimeoutError):
                raise _Retryable(f"timeout after {self.timeout_s}s") from None
            raise _Retryable(f"connection error: {exc.reason}") from None
        except (ConnectionError, http.client.HTTPException) as exc:
            raise _Retryable(f"connection error: {exc}") from None
        try:
            payload = json.loads(raw)
            content = payload["choices"][0]["message"]["content"]
        except (json.JSONDecodeError, KeyError, IndexError, TypeError) as exc:
            raise _Retryable(f"malformed response body ({type(exc).__name__}): {raw[:120]!r}") from None
        if not isinstance(content, str):
            raise _Retryable(f"response content is {type(content).__name__}, not text")
        return content

    def _backoff(self, attempt: int, retry_after: float | None) -> float:
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        return min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)

    def judge_one(self, record: AnyRecord) -> Verdict:
        try:
            url = image_data_url(judge_image(record, self.open_image))
        except (OSError, ValueError) as exc:
            return JudgeFailure(f"record {record.id!r}: cannot render its image: {exc}", self.judge_id)
        body = json.dumps(
            {
                "model": self.model,
                "messages": chat_messages(record, url),
                "temperature": 0.0,
                "max_tokens": self.max_tokens,
                "response_format": {"type": "json_object"},
            }
        ).encode()
        last = ""
        for attempt in range(self.max_retries + 1):
            retry_after: float | None = None
            try:
                return parse_reply(self._post(body), record.kind, self.judge_id)
            except _Retryable as exc:
                last, retry_after = str(exc), exc.retry_after
            except JudgeReplyError as exc:
                last = f"bad judge reply: {exc}"
            except RuntimeError as exc:
                return JudgeFailure(str(exc), self.judge_id)
            if attempt < self.max_retries:
                with self._lock:
                    self.retries += 1
                self.sleep(self._backoff(attempt, retry_after))
        return JudgeFailure(f"gave up after {self.max_retries + 1} attempts: {last}", self.judge_id)

    def judge_many(self, records: Sequence[AnyRecord]) -> list[Verdict]:
        if not records:
            return []
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(records))) as pool:
            return list(pool.map(self.judge_one, records))


JUDGES.register("openai", OpenAIJudge, description="any OpenAI-compatible chat endpoint (vLLM in production)")
