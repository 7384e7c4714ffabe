"""A small OpenAI-compatible chat server with scripted replies, for testing judge clients on loopback.

Why our own: the `openai` judge's failure handling (timeouts, 5xx, 429 + Retry-After, malformed
bodies) must be exercised over real HTTP, and no mock library reproduces a server that stalls
past the client's timeout. It binds 127.0.0.1 only, caps request bodies, answers
POST /v1/chat/completions from a script of `Reply` objects (then from a default responder), and
records every request it received. Completions carry `usage` as vLLM's do, with whitespace word
counts standing in for token counts (the request's text parts; the reply's content), summed in
`usage_sent`. It can also stand in for a judge in local pipeline runs:
`python -m venus_core.scoring.testing_server --port 8011 --score 8`.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MAX_BODY_BYTES = 64 << 20


@dataclass
class Reply:
    """One scripted answer: an HTTP status, a chat `content` (wrapped in a completion body) or a raw
    `body`, extra headers, and a delay before answering (to trip client timeouts)."""

    status: int = 200
    content: str | None = None
    body: bytes | None = None
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def judgement_reply(
    alignment: int, reachability: int, rationale: str = "scripted", proposal: dict[str, str] | None = None
) -> Reply:
    return Reply(
        content=json.dumps(
            {
                "alignment": alignment,
                "reachability": reachability,
                "rationale": rationale,
                "proposal": proposal,
            }
        )
    )


def judge_by_goal_word(passing: Iterable[str], garbled: Iterable[str] = (),
                       pattern: str = r"Click the (\w+) button") -> Callable[[dict[str, Any]], Reply]:
    """A responder that judges episodes by one word of their goal (`pattern`'s group, found in the
    request's text): a success for `passing` words, a reply that is not JSON for `garbled` ones, a
    failure otherwise."""
    ok, bad, rx = set(passing), set(garbled), re.compile(pattern)

    def respond(request: dict[str, Any]) -> Reply:
        m = rx.search(json.dumps(request.get("messages", [])))
        word = m.group(1) if m else ""
        if word in bad:
            return Reply(content="I think it worked")
        return judgement_reply(9, 9) if word in ok else judgement_reply(2, 3)

    return respond


def completion_body(content: str, model: str = "scripted", usage: dict[str, int] | None = None) -> bytes:
    body: dict[str, Any] = {
        "id": "chatcmpl-test",
        "object": "chat.completion",
        "model": model,
        "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}],
    }
    if usage is not None:
        body["usage"] = {**usage, "total_tokens": usage["prompt_tokens"] + usage["completion_tokens"]}
    return json.dumps(body).encode()


def word_usage(request: dict[str, Any], content: str) -> dict[str, int]:
    """`usage` with word counts: the text parts of the request's messages, and the reply."""
    words = 0
    for message in request.get("messages") or []:
        parts = message.get("content") if isinstance(message, dict) else None
        if isinstance(parts, str):
            words += len(parts.split())
        elif isinstance(parts, list):
            words += sum(len(str(q.get("text", "")).split()) for q in parts if isinstance(q, dict))
    return {"prompt_tokens": words, "completion_tokens": len(content.split())}


class ScriptedChatServer:
    """Serve scripted replies on 127.0.0.1:<port>; use as a context manager."""

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        default: Callable[[dict[str, Any]], Reply] | None = None,
        port: int = 0,
        api_key: str | None = None,
    ) -> None:
        """`api_key`: answer 401 to requests without `Authorization: Bearer <api_key>`, as vLLM
        started with --api-key does (those requests are not recorded)."""
        self.api_key = api_key
        self.unauthorized = 0
        self.script: deque[Reply] = deque(script)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # most requests being answered at once (checks client concurrency)
        self.usage_sent = {"prompt_tokens": 0, "completion_tokens": 0}  # over the 200 completions sent
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="scripted-chat", daemon=True)

    @property
    def base_url(self) -> str:
        port = self._server.server_address[1]
        return f"http://127.0.0.1:{port}/v1"

    def add(self, *replies: Reply) -> None:
        with self._lock:
            self.script.extend(replies)

    def _next(self, request: dict[str, Any]) -> Reply:
        with self._lock:
            self.requests.append(request)
            if self.script:
                return self.script.popleft()
        if self.default is not None:
            return self.default(request)
        return Reply(status=500, body=b'{"error": "script exhausted"}')

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - stdlib signature
                return

            def _send(self, status: int, body: bytes, headers: dict[str, str]) -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for k, v in headers.items():
                    self.send_header(k, v)
                self.end_headers()
                try:
                    self.wfile.write(body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (timeout)
                    pass

            def do_POST(self) -> None:  # noqa: N802 - stdlib name
                if self.path.rstrip("/") != "/v1/chat/completions":
                    self._send(404, b'{"error": "not found"}', {})
                    return
                length = int(self.headers.get("Content-Length") or 0)
                if server.api_key is not None and self.headers.get("Authorization") != f"Bearer {server.api_key}":
                    self.rfile.read(min(length, MAX_BODY_BYTES))
                    with server._lock:
                        server.unauthorized += 1
                    self._send(401, b'{"error": "Unauthorized"}', {})
                    return
                if length > MAX_BODY_BYTES:
                    self._send(413, b'{"error": "request too large"}', {"Connection": "close"})
                    return
                try:
                    request = json.loads(self.rfile.read(length))
                except json.JSONDecodeError:
                    self._send(400, b'{"error": "request is not JSON"}', {})
                    return
                reply = server._next(request)
                with server._lock:
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if reply.delay_s:
                        time.sleep(reply.delay_s)
                finally:
                    with server._lock:
                        server.in_flight -= 1
                if reply.body is not None:
                    body = reply.body
                else:
                    usage = word_usage(request, reply.content or "")
                    if reply.status == 200:
                        with server._lock:
                            for k, n in usage.items():
                                server.usage_sent[k] += n
                    body = completion_body(reply.content or "", usage=usage)
                self._send(reply.status, body, reply.headers)

        return Handler

    def __enter__(self) -> ScriptedChatServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m venus_core.scoring.testing_server",
        description="OpenAI-compatible judge stand-in that gives every sample one score.",
    )
    p.add_argument("--port", type=int, default=8011)
    p.add_argument("--score", type=int, default=8, choices=range(11), metavar="0..10")
    args = p.parse_args(argv)
    server = ScriptedChatServer(
        default=lambda _req: judgement_reply(args.score, args.score, "constant stand-in"), port=args.port
    )
    print(f"serving {server.base_url} (score {args.score}); Ctrl-C to stop", flush=True)
    with server:
        try:
            server._thread.join()
        except KeyboardInterrupt:
            pass


if __name__ == "__main__":
    main()
