"""The OpenAI-compatible generation backend: chat completions over HTTP (vLLM in production).

Why one client: evaluation (`eval.predictors.OpenAIPredictor`), the MLLM data judge
(`scoring.openai_judge`) and rollouts all talk to the same kind of server, and each needs the same
failure handling, so it lives here once:

- bounded concurrency: a thread pool of `concurrency` workers, one `requests.Session` per worker
  thread (a Session's connection pool is not documented as thread-safe);
- a per-attempt timeout on the whole exchange: connect and each socket read, and a deadline on the
  attempt as a whole, at which its socket is shut down (`_Deadline`): a server that dribbles its
  answer a byte at a time, each within the read timeout, cannot hold a worker past it (not
  enforced through an HTTP proxy, whose connections are not tracked);
- retries with exponential backoff and jitter (`backoff_s * 2**attempt * U[0.5, 1]`, capped at
  `max_backoff_s`) on connection errors (a connection broken in the middle of the reply too),
  timeouts, HTTP 429 and 5xx; `Retry-After` is honoured
  (capped); any other 4xx is a configuration error and fails at once;
- strict reply parsing: a body that is not a chat completion is an error naming the request (retried
  or not, `retry_malformed`), and callers may pass `parse` to validate the text itself, retrying the
  exceptions listed in `retry_on` (a sampling server may answer differently next time).

`generate` has the signature of the transformers backend (`models.generation.generate`): chats in the
processor's format (`{"type": "image", "image": PIL}` items) go out as OpenAI messages with the
images as base64 PNG data URLs, which vLLM (and `venus serve`) accept without shared storage.
`repetition_penalty`, `top_k` style knobs are not OpenAI fields; vLLM reads them from the body, so
`repetition_penalty` is sent as an extra field. `requests` rather than the `openai` SDK: the SDK's
retry policy is not configurable per status and hides the attempts we count.
"""

from __future__ import annotations

import base64
import email.utils
import io
import json
import random
import socket
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TypeVar

import requests
from PIL import Image
from requests.adapters import HTTPAdapter
from urllib3.connection import HTTPConnection, HTTPSConnection
from urllib3.connectionpool import HTTPConnectionPool, HTTPSConnectionPool

T = TypeVar("T")
U = TypeVar("U")


class ChatError(RuntimeError):
    """A chat request failed. `retryable` says whether another attempt may succeed."""

    def __init__(self, message: str, *, retryable: bool = False, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class ChatGaveUp(ChatError):
    """All attempts of a request failed with retryable errors; `last` is the final one."""

    def __init__(self, last: ChatError, attempts: int) -> None:
        super().__init__(f"{last} (gave up after {attempts} attempts)", retryable=False, status=last.status)
        self.last = last
        self.attempts = attempts


class _Deadline:
    """One attempt's deadline: `expire` (from a timer thread) shuts down the socket of the
    connection the attempt's request went out on, which ends any read blocked on it at once."""

    def __init__(self) -> None:
        self.expired = False
        self.conn: HTTPConnection | None = None

    def expire(self) -> None:
        self.expired = True
        if self.conn is not None:
            _shutdown(self.conn)


def _shutdown(conn: HTTPConnection) -> None:
    sock = conn.sock
    if sock is not None:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass  # already closed


_attempt = threading.local()  # the _Deadline of the attempt the current thread is making


class _Tracked:
    """Mixed into urllib3's connections: a request registers its connection with the calling
    thread's attempt, so that the attempt's deadline can reach the socket."""

    def request(self, *args: Any, **kwargs: Any) -> None:
        deadline: _Deadline | None = getattr(_attempt, "deadline", None)
        if deadline is not None:
            deadline.conn = self  # type: ignore[assignment]
        super().request(*args, **kwargs)  # type: ignore[misc]  # connects first if need be
        if deadline is not None and deadline.expired:  # it passed while connecting or sending
            _shutdown(self)  # type: ignore[arg-type]


class _TrackedHTTPConnection(_Tracked, HTTPConnection):
    pass


class _TrackedHTTPSConnection(_Tracked, HTTPSConnection):
    pass


class _TrackedHTTPPool(HTTPConnectionPool):
    ConnectionCls = _TrackedHTTPConnection


class _TrackedHTTPSPool(HTTPSConnectionPool):
    ConnectionCls = _TrackedHTTPSConnection


class _DeadlineAdapter(HTTPAdapter):
    """requests' adapter whose connections register with the current attempt's `_Deadline`."""

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        self.poolmanager.pool_classes_by_scheme = {"http": _TrackedHTTPPool, "https": _TrackedHTTPSPool}


def image_data_url(image: Image.Image, fmt: str = "PNG") -> str:
    """`data:image/png;base64,…` of a PIL image (converted to RGB unless RGB or L)."""
    buf = io.BytesIO()
    (image if image.mode in ("RGB", "L") else image.convert("RGB")).save(buf, format=fmt)
    mime = "image/png" if fmt.upper() == "PNG" else f"image/{fmt.lower()}"
    return f"data:{mime};base64,{base64.b64encode(buf.getvalue()).decode('ascii')}"


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


def to_openai_messages(messages: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Processor-format chat -> OpenAI messages: image items (PIL or path) become data-URL parts."""
    out: list[dict[str, Any]] = []
    for i, m in enumerate(messages):
        content = m.get("content")
        if isinstance(content, str):
            out.append({"role": m["role"], "content": content})
            continue
        if not isinstance(content, list):
            raise TypeError(f"message {i}: content must be a string or a list of parts, got {type(content).__name__}")
        parts: list[dict[str, Any]] = []
        for j, item in enumerate(content):
            kind = item.get("type")
            if kind == "text":
                parts.append({"type": "text", "text": str(item["text"])})
            elif kind == "image":
                img = item.get("image")
                if isinstance(img, (str, Path)):
                    with Image.open(img) as f:
                        img = f.convert("RGB")
                if not isinstance(img, Image.Image):
                    raise TypeError(f"message {i} part {j}: image is a {type(img).__name__}, not a PIL image or path")
                parts.append({"type": "image_url", "image_url": {"url": image_data_url(img)}})
            elif kind == "image_url":
                parts.append(item)
            else:
                raise ValueError(f"message {i} part {j}: unknown content type {kind!r}")
        out.append({"role": m["role"], "content": parts})
    return out


def chat_body(model: str, messages: Sequence[dict[str, Any]], max_tokens: int, *, temperature: float = 0.0,
              repetition_penalty: float | None = None, top_p: float = 1.0, n: int = 1,
              seed: int | None = None, **extra: Any) -> dict[str, Any]:
    """A chat-completions request body; fields at their OpenAI defaults are left out, except
    `temperature` and `max_tokens`, which are always explicit."""
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    body: dict[str, Any] = {"model": model, "messages": to_openai_messages(messages),
                            "max_tokens": int(max_tokens), "temperature": float(temperature)}
    if repetition_penalty is not None:
        if repetition_penalty <= 0:
            raise ValueError(f"repetition_penalty must be > 0, got {repetition_penalty}")
        body["repetition_penalty"] = float(repetition_penalty)
    if top_p != 1.0:
        body["top_p"] = float(top_p)
    if n != 1:
        body["n"] = int(n)
    if seed is not None:
        body["seed"] = int(seed)
    body.update(extra)
    return body


def reply_json(content: bytes, where: str, *, retryable: bool = False) -> Any:
    """The JSON of a 200 reply's body, or ChatError: not JSON, not UTF-8, an integer longer than
    Python parses (4,300 digits) or nesting deeper than the decoder's recursion limit."""
    try:
        return json.loads(content)
    except (ValueError, RecursionError) as exc:
        why = "nested too deeply" if isinstance(exc, RecursionError) else str(exc)[:200]
        raise ChatError(f"{where}: reply is not JSON ({why}): {content[:200]!r}",
                        retryable=retryable, status=200) from None


def completion_texts(payload: Any) -> list[str]:
    """The message texts of a chat-completion reply, one per choice in index order; strict.

    A null content (e.g. a refusal or tool call) is the empty string; anything else that is not a
    chat completion with at least one text choice raises ValueError naming what is missing.
    """
    if not isinstance(payload, dict):
        raise ValueError(f"reply is a JSON {type(payload).__name__}, not an object")
    choices = payload.get("choices")
    if not isinstance(choices, list) or not choices:
        raise ValueError("reply has no 'choices' list (or it is empty)")
    texts: list[str] = []
    def index(choice: Any) -> int:
        value = choice.get("index", 0) if isinstance(choice, dict) else 0
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"a choice's index is {value!r}, not an integer")
        return value

    for k, choice in enumerate(sorted(choices, key=index)):
        message = choice.get("message") if isinstance(choice, dict) else None
        if not isinstance(message, dict) or "content" not in message:
            raise ValueError(f"choices[{k}] has no message.content")
        content = message["content"]
        if content is None:
            content = ""
        if not isinstance(content, str):
            raise ValueError(f"choices[{k}].message.content is {type(content).__name__}, not text")
        texts.append(content)
    return texts


class ChatClient:
    """Chat completions against `base_url` (the API root, e.g. `http://vllm:8000/v1`).

    `request` sends one body with retries; `map` runs a function over items on at most
    `concurrency` threads (results in input order); `generate` is the batch API shared with the
    transformers backend. `calls` counts HTTP attempts, `retries` the retried ones, and
    `prompt_tokens` / `completion_tokens` sum the `usage` of the completions received.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        *,
        api_key: str | None = None,
        concurrency: int = 4,
        timeout_s: float = 120.0,
        max_retries: int = 2,
        backoff_s: float = 0.5,
        max_backoff_s: float = 30.0,
        retry_malformed: bool = True,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        if not base_url.startswith(("http://", "https://")):
            raise ValueError(f"base_url must start with http:// or https://, got {base_url!r}")
        if isinstance(concurrency, bool) or not isinstance(concurrency, int) or concurrency < 1:
            raise ValueError(f"concurrency must be an integer >= 1, got {concurrency!r}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if timeout_s <= 0 or backoff_s < 0 or max_backoff_s < 0:
            raise ValueError("timeout_s must be > 0 and backoff_s, max_backoff_s >= 0")
        self.base_url = base_url.rstrip("/")
        self.url = self.base_url + "/chat/completions"
        self.model = model
        self.api_key = api_key
        self.concurrency = concurrency
        self.timeout_s = timeout_s
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retry_malformed = retry_malformed
        self.sleep = sleep
        self.calls = 0
        self.retries = 0
        self.prompt_tokens = 0  # summed from the replies' `usage` (vLLM and `venus serve` send it)
        self.completion_tokens = 0
        self.usage_replies = 0  # replies that carried a valid `usage`
        self._lock = threading.Lock()
        self._local = threading.local()

    def _session(self) -> requests.Session:
        session = getattr(self._local, "session", None)
        if session is None:
            session = requests.Session()
            for prefix in ("http://", "https://"):
                session.mount(prefix, _DeadlineAdapter())
            session.headers["Content-Type"] = "application/json"
            if self.api_key:
                session.headers["Authorization"] = f"Bearer {self.api_key}"
            self._local.session = session
        return session

    def post_json(self, body: dict[str, Any], label: str = "request", *, path: str = "/chat/completions",
                  timeout_s: float | None = None, empty_ok: bool = False) -> Any:
        """One HTTP POST of `body` to `base_url + path`; the reply's JSON, or ChatError (with
        `retryable` set: connection errors, timeouts, 429 and 5xx; a reply that is not JSON as
        `retry_malformed` says). `empty_ok`: an empty 200 reply is None (vLLM's admin routes)."""
        with self._lock:
            self.calls += 1
        url = self.base_url + path
        where = f"{url}: {label}"
        timeout = self.timeout_s if timeout_s is None else timeout_s
        deadline = _attempt.deadline = _Deadline()
        timer = threading.Timer(timeout, deadline.expire)
        timer.daemon = True
        timer.start()
        try:
            resp = self._session().post(url, data=json.dumps(body), timeout=timeout)
        except requests.RequestException as exc:
            if deadline.expired or isinstance(exc, requests.Timeout):
                why = "no whole reply by then" if deadline.expired else type(exc).__name__
                raise ChatError(f"{where}: timeout after {timeout}s ({why})", retryable=True) from None
            if isinstance(exc, (requests.ConnectionError, requests.exceptions.ChunkedEncodingError)):
                raise ChatError(f"{where}: connection error: {exc}", retryable=True) from None
            raise ChatError(f"{where}: {type(exc).__name__}: {exc}", retryable=False) from None
        finally:
            timer.cancel()
            _attempt.deadline = None
        if deadline.expired:  # the shutdown may have cut the reply short where http.client does not notice
            raise ChatError(f"{where}: timeout after {timeout}s (no whole reply by then)", retryable=True)
        if resp.status_code != 200:
            detail = resp.content[:300].decode("utf-8", "replace")
            retryable = resp.status_code == 429 or resp.status_code >= 500
            raise ChatError(f"{where}: HTTP {resp.status_code}: {detail}", retryable=retryable,
                            status=resp.status_code,
                            retry_after=retry_after_seconds(resp.headers.get("Retry-After")))
        if empty_ok and not resp.content.strip():
            return None
        return reply_json(resp.content, where, retryable=self.retry_malformed)

    def post_once(self, body: dict[str, Any], label: str = "request") -> list[str]:
        """One HTTP attempt; the choices' texts, or ChatError (with `retryable` set)."""
        payload = self.post_json(body, label)
        self._count_usage(payload)
        try:
            return completion_texts(payload)
        except ValueError as exc:
            raise ChatError(f"{self.url}: {label}: malformed chat completion ({exc}): {str(payload)[:200]!r}",
                            retryable=self.retry_malformed, status=200) from None

    def _count_usage(self, payload: Any) -> None:
        usage = payload.get("usage") if isinstance(payload, dict) else None
        if not isinstance(usage, dict):
            return
        counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens")]
        if all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in counts):
            with self._lock:
                self.prompt_tokens += counts[0]  # type: ignore[operator]
                self.completion_tokens += counts[1]  # type: ignore[operator]
                self.usage_replies += 1

    def backoff(self, attempt: int, retry_after: float | None = None) -> float:
        """Seconds to wait before retry number `attempt + 1` (attempt counts from 0)."""
        if retry_after is not None:
            return min(retry_after, self.max_backoff_s)
        return min(self.max_backoff_s, self.backoff_s * 2**attempt) * (0.5 + random.random() / 2)

    def request(self, body: dict[str, Any], *, label: str = "request",
                parse: Callable[[list[str]], T] | None = None,
                retry_on: tuple[type[Exception], ...] = ()) -> T | list[str]:
        """Send `body` with retries; returns `parse(texts)` (or the texts when no parse is given).

        Raises ChatError at once for non-retryable failures, ChatGaveUp when the attempts run out.
        """
        def once() -> T | list[str]:
            texts = self.post_once(body, label)
            try:
                return parse(texts) if parse is not None else texts
            except retry_on as exc:  # the caller's validation of the text rejected the reply
                raise ChatError(f"{self.url}: {label}: reply rejected: {exc}", retryable=True) from None

        return self._retrying(once)

    def request_json(self, body: dict[str, Any], *, label: str = "request") -> Any:
        """`post_json` of a chat-completions body with the retries of `request`: the whole reply (for
        callers that need more than the texts: logprobs, finish reasons)."""
        return self._retrying(lambda: self.post_json(body, label))

    def _retrying(self, once: Callable[[], T]) -> T:
        """`once()` until it succeeds, a non-retryable ChatError, or the attempts run out (ChatGaveUp)."""
        last: ChatError | None = None
        for attempt in range(self.max_retries + 1):
            try:
                return once()
            except ChatError as exc:
                if not exc.retryable:
                    raise
                last = exc
            if attempt < self.max_retries:
                with self._lock:
                    self.retries += 1
                self.sleep(self.backoff(attempt, last.retry_after))
        assert last is not None
        raise ChatGaveUp(last, self.max_retries + 1)

    def map(self, fn: Callable[[U], T], items: Sequence[U]) -> list[T]:
        """`fn` over `items` on at most `concurrency` threads; results in input order."""
        if not items:
            return []
        if len(items) == 1 or self.concurrency == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def generate(
        self,
        batch_of_messages: Sequence[Sequence[dict[str, Any]]],
        max_new_tokens: int,
        temperature: float = 0.0,
        repetition_penalty: float = 1.05,
        *,
        top_p: float = 1.0,
        seed: int | None = None,
        labels: Sequence[str] | None = None,
    ) -> list[str]:
        """One answer per chat, in order: the same call as `models.generation.generate`."""
        if labels is not None and len(labels) != len(batch_of_messages):
            raise ValueError(f"labels has {len(labels)} entries for {len(batch_of_messages)} chats")
        names = list(labels) if labels is not None else [f"chat {i}" for i in range(len(batch_of_messages))]
        bodies = [chat_body(self.model, msgs, max_new_tokens, temperature=temperature,
                            repetition_penalty=repetition_penalty, top_p=top_p, seed=seed)
                  for msgs in batch_of_messages]
        def one(pair: tuple[dict[str, Any], str]) -> str:
            return self.request(pair[0], label=pair[1])[0]

        return self.map(one, list(zip(bodies, names)))

    def models(self) -> list[str]:
        """The model ids the server lists at GET /models (one attempt, no retries)."""
        try:
            resp = self._session().get(self.base_url + "/models", timeout=self.timeout_s)
            resp.raise_for_status()
            data = resp.json()["data"]
            return [str(m["id"]) for m in data]
        except (requests.RequestException, ValueError, KeyError, TypeError) as exc:
            raise ChatError(f"{self.base_url}/models: cannot list models: {exc}") from None


__all__ = ["ChatClient", "ChatError", "ChatGaveUp", "chat_body", "completion_texts", "image_data_url",
           "reply_json", "retry_after_seconds", "to_openai_messages"]
