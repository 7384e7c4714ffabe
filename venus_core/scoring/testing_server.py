"""A small OpenAI-compatible chat server with scripted replies, for testing judge clients on loopback.

Why our own: the `openai` judge's failure handling (timeouts, 5xx, 429 + Retry-After, malformed
bodies) must be exercised over real HTTP, and no mock library reproduces a server that stalls
past the client's timeout. It binds 127.0.0.1 only, caps request bodies, answers
POST /v1/chat/completions from a script of `Reply` objects (then from a default responder), and
records every request it received. It can also stand in for a judge in local pipeline runs:
`python -m venus_core.scoring.testing_server --port 8011 --score 8`.
"""

from __future__ import annotations

import argparse
import json
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


def completion_body(content: str, model: str = "scripted") -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion",
            "model": model,
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": content}}
            ],
        }
    ).encode()


class ScriptedChatServer:
    """Serve scripted replies on 127.0.0.1:<port>; use as a context manager."""

    def __init__(
        self,
        script: Iterable[Reply] = (),
        *,
        default: Callable[[dict[str, Any]], Reply] | None = None,
        port: int = 0,
    ) -> None:
        self.script: deque[Reply] = deque(script)
        self.default = default
        self.requests: list[dict[str, Any]] = []
        self.in_flight = 0
        self.max_in_flight = 0  # most requests being answered at once (checks client concurrency)
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
                body = reply.body if reply.body is not None else completion_body(reply.content or "")
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
