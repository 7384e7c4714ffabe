"""`venus serve`: an OpenAI-compatible chat-completions server over the transformers backend.

Why: in a cluster, rollouts, evaluation and the data judge talk to vLLM; on a laptop, in CI and in
tests the same clients need a real server to talk to, and vLLM needs a GPU. This serves a loaded
Qwen-VL model (the tiny default included) with `models.generation.generate`, batching concurrent
requests (`serve_batcher`), and speaks the subset of the OpenAI API that vLLM speaks for
Qwen-VL (`serve_protocol` for requests, `serve_responses` for replies): POST /v1/chat/completions
(with `usage`, `n`, `stream` as Server-Sent Events, `logprobs` / `top_logprobs`, `logit_bias`, and
vLLM's `return_tokens_as_token_ids`, also settable server-wide as vLLM's flag of that name), GET
/v1/models, GET /health (which also reports batching counters and the weights version, used by
tests and the benchmark), and, when enabled, POST /v1/load_weights for online RL (`serve_weights`:
a verified checkpoint replaces the served weights between batches), and, in dev mode, vLLM's
POST /collective_rpc and POST /reset_prefix_cache (`serve_rpc`: the vLLM weight-sync path of online
RL, with the same worker extension). The batch function is `serve_runner.transformers_runner`.

FastAPI + uvicorn: both are already installed as MLflow's server stack and are what vLLM itself
uses. Departures from vLLM: static rather than continuous batching, and streaming is a replay — a
batch is decoded whole, then each answer is sent token by token (same chunks, later first byte).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import socket
import threading
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.requests import ClientDisconnect

from venus_core.models.serve_batcher import Batcher, RunBatch
from venus_core.models.serve_protocol import BadRequest, error_body, parse_chat_body, parse_json_body
from venus_core.models.serve_responses import Completion, completion_body, sse_events, stream_chunks
from venus_core.models.serve_weights import WeightReloader, WeightsError

MAX_BODY_BYTES = 64 << 20


def transformers_runner(model: Any, processor: Any) -> RunBatch:
    """The batch function over a loaded model: see `serve_runner.transformers_runner` (imported
    here lazily, so that importing the server does not import transformers' generation stack)."""
    from venus_core.models.serve_runner import transformers_runner as runner

    return runner(model, processor)


async def _client_left(_request: Request, _exc: Exception) -> Response:
    """A client that closed its connection before its request body arrived: there is nobody to
    answer and nothing failed here. Unhandled, each was an "Exception in ASGI application" with a
    4 kB traceback on the server's output (a pipe nobody reads fills up after ~16 and then blocks
    the server)."""
    return Response(status_code=499)  # nginx's "client closed request"; never sent


def create_app(run: RunBatch, served_name: str, *, max_batch: int = 8, batch_wait_ms: float = 5.0,
               max_tokens_limit: int = 4096, vocab_size: int | None = None,
               return_tokens_as_token_ids: bool = False, weights: WeightReloader | None = None,
               worker: Any | None = None) -> FastAPI:
    """The ASGI app: `run(chats, Sampling) -> [Completion]` answers batches of chats.

    `vocab_size` bounds `logit_bias` token ids (`serve_runner.logits_size`); `return_tokens_as_token_ids`
    is the default of the request field of that name; `weights` (the served model's reloader) enables
    POST /v1/load_weights, which otherwise answers 404; `worker` (`serve_rpc.make_worker`: dev mode)
    enables vLLM's POST /collective_rpc and POST /reset_prefix_cache.
    """
    batcher = Batcher(run, max_batch=max_batch, wait_s=batch_wait_ms / 1000.0)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        batcher.start()
        yield
        await batcher.stop()

    app = FastAPI(title="venus serve", lifespan=lifespan)
    app.add_exception_handler(ClientDisconnect, _client_left)
    app.state.batcher = batcher
    app.state.served_name = served_name
    created = int(time.time())

    def error(exc: BadRequest) -> JSONResponse:
        return JSONResponse(exc.body(), status_code=exc.status)

    @app.get("/health")
    async def health() -> dict[str, Any]:
        reload = weights.status() if weights is not None else {"weights_version": 0, "weights_path": None}
        dev = {"dev_calls": dict(app.state.dev_calls)} if worker is not None else {}
        return {"status": "ok", "model": served_name, "max_batch": max_batch, **batcher.stats.to_dict(), **reload,
                **dev}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list",
                "data": [{"id": served_name, "object": "model", "created": created, "owned_by": "venus"}]}

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        length = request.headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return error(BadRequest(None, f"request body larger than {MAX_BODY_BYTES >> 20} MiB", status=413))
        raw = await request.body()
        try:  # JSON parsing and image decoding are CPU work: off the event loop, which keeps accepting requests
            req = await asyncio.to_thread(parse_chat_body, raw, served=served_name, max_n=max_batch,
                                          max_tokens_limit=max_tokens_limit, vocab_size=vocab_size)
        except BadRequest as exc:
            return error(exc)
        try:
            results = await batcher.submit([req.messages] * req.n, req.sampling)
        except Exception as exc:  # generation failed: a server error, reported as such
            return JSONResponse(error_body(f"generation failed: {type(exc).__name__}: {exc}", None,
                                           "internal_server_error", 500), status_code=500)
        if not all(isinstance(c, Completion) for c in results):
            kinds = sorted({type(c).__name__ for c in results})
            return JSONResponse(error_body(f"generation returned {kinds}, not Completion records", None,
                                           "internal_server_error", 500), status_code=500)
        completions = [c.cut(req.stop) for c in results]
        request_id, now = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        as_ids = return_tokens_as_token_ids if req.tokens_as_ids is None else req.tokens_as_ids
        if req.stream:
            chunks = stream_chunks(request_id, served_name, now, completions, req.top_logprobs, req.include_usage,
                                   as_ids)
            return StreamingResponse(sse_events(chunks), media_type="text/event-stream",
                                     headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
        return JSONResponse(completion_body(request_id, served_name, now, completions, req.top_logprobs, as_ids))

    reload_lock = asyncio.Lock()

    @app.post("/v1/load_weights")
    async def load_weights(request: Request) -> Response:
        """`{"path": dir}` -> `{"loaded": dir, "version": n}` once the served weights are the checkpoint's."""
        if weights is None:
            return JSONResponse(error_body("weight reloading is not enabled on this server (venus serve "
                                           "--allow-load-weights)", None, "NotFoundError", 404), status_code=404)
        try:
            body = parse_json_body(await request.body())
        except BadRequest as exc:
            return error(exc)
        if not isinstance(body, dict):
            return error(BadRequest(None, f"request body must be a JSON object, got {type(body).__name__}"))
        unknown = sorted(set(body) - {"path"})
        if unknown:
            return error(BadRequest(unknown[0], f"unknown field {unknown[0]!r} (load_weights takes only 'path')"))
        path = body.get("path")
        if not isinstance(path, str) or not path.strip():
            return error(BadRequest("path", "is required: a checkpoint directory on the server's filesystem"))
        async with reload_lock:  # one staging copy at a time; reloads apply in the order they arrive
            try:  # reading and verifying runs off the generation thread: serving goes on meanwhile
                staged = await asyncio.to_thread(weights.stage, path)
            except WeightsError as exc:
                return error(BadRequest("path", f"{exc}; the served weights are unchanged"))
            version = await batcher.exclusive(functools.partial(weights.apply, staged, path))
        return JSONResponse({"loaded": path, "version": version})

    if worker is not None:
        from venus_core.models.serve_rpc import add_dev_routes

        add_dev_routes(app, batcher, worker)
    return app


def bind(host: str, port: int) -> socket.socket:
    """A listening TCP socket on host:port (port 0: any free port). Listening before uvicorn starts
    means connections made once the URL is printed wait in the backlog instead of being refused."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    return sock


def serve(app: FastAPI, sock: socket.socket, log_level: str = "info") -> None:
    """Run the app on a bound socket in the foreground until SIGINT / SIGTERM."""
    server = uvicorn.Server(uvicorn.Config(app, log_level=log_level, access_log=log_level == "debug"))
    server.run(sockets=[sock])


class BackgroundServer:
    """Run an app on a loopback port in a daemon thread (tests, benchmarks); a context manager.

    The socket is bound before uvicorn starts, so `port=0` gets a free port with no race.
    """

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, start_timeout_s: float = 30.0) -> None:
        self.app = app
        self.sock = bind(host, port)
        self.host, self.port = self.sock.getsockname()[:2]
        self.start_timeout_s = start_timeout_s
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, loop="asyncio"))
        self.thread = threading.Thread(target=self._run, name=f"venus-serve-{self.port}", daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        try:
            asyncio.run(self.server.serve(sockets=[self.sock]))
        except BaseException as exc:  # reported by start() / stop()
            self.error = exc

    @property
    def base_url(self) -> str:
        """The OpenAI API root, e.g. http://127.0.0.1:PORT/v1."""
        return f"http://{self.host}:{self.port}/v1"

    def start(self) -> BackgroundServer:
        self.thread.start()
        deadline = time.monotonic() + self.start_timeout_s
        while not self.server.started:
            if self.error is not None or not self.thread.is_alive():
                raise RuntimeError(f"venus serve on port {self.port} did not start: {self.error}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"venus serve on port {self.port} did not start in {self.start_timeout_s}s")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=30)
        self.sock.close()

    def __enter__(self) -> BackgroundServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()


__all__ = ["MAX_BODY_BYTES", "BackgroundServer", "bind", "create_app", "serve", "transformers_runner"]
