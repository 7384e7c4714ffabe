"""`venus serve` and the judge client under concurrent, timed-out and malformed requests (issue 22 §3,
second item), on loopback only.

The client side (`models.openai_client.ChatClient`, shared by evaluation, rollouts and the `openai`
judge) is driven against `FaultyUpstream`, a loopback HTTP server whose answer to each request is
chosen by a `mode:<name>` marker in the request: a chat completion (at once or slowly), garbage,
JSON that is not a completion, a verdict the judge cannot read, HTTP 500, no answer at all, the
socket closed or reset without an answer, a body cut short, or a valid answer dribbled one byte at
a time (each read well within the read timeout, the whole far beyond it). Every request must be
answered or fail with a `ChatError` naming the cause within its timeout (per attempt), and the
attempts the server received must equal the client's count.

The server side is `venus serve` itself (a child process serving the shipped tiny checkpoint), sent
a bounded mix at once: valid requests with and without an image, malformed ones (not JSON, each
of four bad fields), requests whose client gives up after 20 ms, clients that vanish (reset) after
sending a whole request, and requests whose body never arrives in full. Every valid request is
answered, every malformed one refused with a 400 naming the field, every impatient client gets a
timeout error, no traceback appears on the server's output, and the server still answers
afterwards with its open fds back to where they were. VENUS_LOAD_REQUESTS (default 480) sets the
size of the mix (sent by 32 client threads).

Found and fixed by these tests: the dribbled answer held a client for ~16 s against its 1 s timeout
(the timeout bounded each socket read only; `openai_client` now also shuts an attempt's socket down
at its deadline); a reply cut short after its headers was not retried (`ChunkedEncodingError` was
not a connection error); a client gone before its body arrived was an unhandled `ClientDisconnect`
in `venus serve`, one 4 kB traceback each (`models/server.py`).
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import psutil
import pytest
import requests
from PIL import Image
from proc_lines import wait_for_line

from venus_core.data.store import DatasetReader
from venus_core.data.synth import synthesize
from venus_core.models.openai_client import ChatClient, ChatError, chat_body, image_data_url
from venus_core.scoring.judges import JudgeFailure
from venus_core.scoring.openai_judge import OpenAIJudge
from venus_core.scoring.rules import Judgement
from venus_core.scoring.testing_server import completion_body, judgement_reply

TIMEOUT_S = 1.0
SLACK_S = 1.5  # scheduling on a loaded 2-core machine
SLOW_S = 0.3
TRICKLE_GAP_S = 0.05  # one byte of the answer every 50 ms: ~12 s for the whole
LOAD_REQUESTS = int(os.environ.get("VENUS_LOAD_REQUESTS", "480"))
LOAD_CLIENTS = 32
VERDICT = judgement_reply(7, 9, "scripted").content or ""

# what a client sees for each upstream behaviour: None = answered, else a phrase of its ChatError
EXPECTED: dict[str, str | None] = {
    "ok": None,
    "slow": None,
    "garbage": "reply is not JSON",
    "malformed": "malformed chat completion",
    "http500": "HTTP 500",
    "hang": "timeout after",
    "close": "connection error",
    "reset": "connection error",
    "truncated": "connection error",
    "trickle": "timeout after",
}
RETRIED = {"garbage", "malformed", "http500", "hang", "close", "reset", "truncated", "trickle"}


def _response(status: int, body: bytes, length: int | None = None) -> bytes:
    reason = {200: "OK", 500: "Internal Server Error"}[status]
    head = (f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body) if length is None else length}\r\n\r\n")
    return head.encode() + body


class FaultyUpstream:
    """An OpenAI-compatible chat endpoint on 127.0.0.1 answering each request as the `mode:<name>`
    in its body says (`EXPECTED`, plus `unparseable`: a completion that is no verdict). HTTP/1.1
    keep-alive; `received` counts the requests read whole, per mode."""

    def __init__(self) -> None:
        self.received: Counter[str] = Counter()
        self._lock = threading.Lock()
        self._loop = asyncio.new_event_loop()
        self._server = self._loop.run_until_complete(asyncio.start_server(self._handle, "127.0.0.1", 0))
        self._tasks: set[asyncio.Task[None]] = set()
        self._thread = threading.Thread(target=self._loop.run_forever, name="faulty-upstream", daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.sockets[0].getsockname()[1]}/v1"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = re.search(rb"(?i)\r\ncontent-length:\s*(\d+)", head)
                body = await reader.readexactly(int(length.group(1))) if length else b""
                found = re.search(rb"mode:(\w+)", body)
                mode = found.group(1).decode() if found else "ok"
                with self._lock:
                    self.received[mode] += 1
                if not await self._answer(mode, reader, writer):
                    return
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.CancelledError):
            pass  # the client left, or the server is stopping
        finally:
            self._tasks.discard(task)
            writer.close()

    async def _answer(self, mode: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
        """Answer one request; False ends the connection."""
        if mode in ("ok", "slow", "unparseable"):
            if mode == "slow":
                await asyncio.sleep(SLOW_S)
            writer.write(_response(200, completion_body(VERDICT if mode != "unparseable" else "looks fine")))
        elif mode == "garbage":
            writer.write(_response(200, b"\x00\xff<html>upstream error</html>"))
        elif mode == "malformed":
            writer.write(_response(200, b'{"object": "chat.completion", "choices": []}'))
        elif mode == "http500":
            writer.write(_response(500, b'{"error": "engine dead"}'))
        elif mode == "hang":
            await reader.read()  # until the client gives up
            return False
        elif mode == "close":
            return False
        elif mode == "reset":
            writer.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            return False
        elif mode == "truncated":
            body = completion_body(VERDICT)
            writer.write(_response(200, body[:40], length=len(body)))
            await writer.drain()
            return False
        elif mode == "trickle":
            for byte in _response(200, completion_body(VERDICT)):
                writer.write(bytes([byte]))
                await writer.drain()
                await asyncio.sleep(TRICKLE_GAP_S)
        else:
            raise AssertionError(f"unknown mode {mode!r}")
        await writer.drain()
        return True

    def __enter__(self) -> FaultyUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        async def stop() -> None:
            self._server.close()
            for t in list(self._tasks):
                t.cancel()
            await asyncio.gather(*self._tasks, return_exceptions=True)

        asyncio.run_coroutine_threadsafe(stop(), self._loop).result(10)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(10)
        self._loop.close()


def outcome(call: Callable[[], Any]) -> tuple[str | None, float]:
    """(None when answered, else the ChatError's message; seconds taken)."""
    t0 = time.monotonic()
    try:
        call()
        return None, time.monotonic() - t0
    except ChatError as exc:
        return str(exc), time.monotonic() - t0


def _mode_body(mode: str) -> dict[str, Any]:
    return chat_body("judge-model", [{"role": "user", "content": f"mode:{mode}"}], 16)


@pytest.mark.parametrize("mode", sorted(EXPECTED))
def test_one_request_is_answered_or_fails_with_its_cause_within_its_timeout(mode: str) -> None:
    with FaultyUpstream() as upstream:
        client = ChatClient(upstream.base_url, "judge-model", timeout_s=TIMEOUT_S, max_retries=0)
        error, seconds = outcome(lambda: client.request(_mode_body(mode)))
    expected = EXPECTED[mode]
    assert seconds <= TIMEOUT_S + SLACK_S, f"{mode}: {seconds:.1f} s for a {TIMEOUT_S} s timeout ({error})"
    assert (error is None) == (expected is None) and (expected is None or expected in (error or "")), error
    assert upstream.received == {mode: 1} and client.calls == 1


@pytest.fixture(scope="module")
def grounding(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, DatasetReader]:
    out = tmp_path_factory.mktemp("load_judge") / "synth"
    synthesize("grounding", 1, 0, 3, out)
    reader = DatasetReader(out)
    return next(iter(reader)), reader


def test_the_judge_under_concurrent_faulty_answers_accounts_for_every_record(
        grounding: tuple[Any, DatasetReader]) -> None:
    """88 records judged 16 at a time, 8 per upstream behaviour: each a Judgement or a JudgeFailure
    with its cause, within its attempts' timeouts; attempts sent = attempts received."""
    base, reader = grounding
    modes = [*sorted(EXPECTED), "unparseable"]
    records = [base.model_copy(update={"id": f"{mode}-{k}", "instruction": f"mode:{mode} tap {k}"})
               for k in range(8) for mode in modes]
    with FaultyUpstream() as upstream:
        judge = OpenAIJudge(upstream.base_url, "judge-model", open_image=reader.open_image, concurrency=16,
                            timeout_s=TIMEOUT_S, max_retries=1, backoff_s=0.01)
        results = judge.client.map(lambda r: (r, *timed(judge.judge_one, r)), records)
        received = Counter(upstream.received)
    answered = [v for _, v, _ in results if isinstance(v, Judgement)]
    failed = [v for _, v, _ in results if isinstance(v, JudgeFailure)]
    assert len(answered) + len(failed) == len(records)
    for record, verdict, seconds in results:
        mode = record.instruction.split()[0].removeprefix("mode:")
        expected = EXPECTED.get(mode, "reply rejected")
        if expected is None:
            assert isinstance(verdict, Judgement) and (verdict.alignment, verdict.reachability) == (7, 9), verdict
        else:
            assert isinstance(verdict, JudgeFailure) and expected in verdict.reason, (mode, verdict)
        assert seconds <= 2 * TIMEOUT_S + SLACK_S, f"{record.id}: {seconds:.1f} s"
    attempts = {m: 8 * (2 if m in RETRIED or m == "unparseable" else 1) for m in modes}
    assert received == attempts and judge.calls == sum(attempts.values())
    print(f"\njudge: {len(records)} records, {len(answered)} judged, {len(failed)} failed with their cause; "
          f"attempts {judge.calls} sent = {sum(received.values())} received; "
          f"slowest {max(s for _, _, s in results):.2f} s")


def timed(fn: Callable[[Any], Any], arg: Any) -> tuple[Any, float]:
    t0 = time.monotonic()
    return fn(arg), time.monotonic() - t0


# -- venus serve -----------------------------------------------------------------------------------

GOOD = {"model": "bootstrap", "messages": [{"role": "user", "content": "Tap the OK button"}], "max_tokens": 4,
        "temperature": 0.0}
MALFORMED: list[tuple[dict[str, Any] | bytes, str | None]] = [
    (b"{not json", None),
    (b"[" * 5000, None),  # past the JSON decoder's recursion limit (was an unhandled RecursionError: HTTP 500)
    (b'{"model": "bootstrap", "max_tokens": ' + b"9" * 5000 + b"}", None),  # past int parsing's 4,300 digits
    ({**GOOD, "messages": []}, "messages"),
    ({**GOOD, "max_tokens": 0}, "max_tokens"),
    ({**GOOD, "temperature": "hot"}, "temperature"),
    ({**GOOD, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,!!!!"}}]}]},
     "messages[0].content[0].image_url.url"),
]


@dataclass(frozen=True)
class Sent:
    kind: str
    outcome: str  # answered | bad_request:<param> | timeout | gone
    seconds: float
    limit: float


def _raw_post(url: str, body: bytes, length: int) -> socket.socket:
    host, port = url.split("//")[1].split("/")[0].split(":")
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(f"POST /v1/chat/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {length}\r\n\r\n".encode() + body)
    return sock


def send(url: str, i: int) -> Sent:
    """Request number `i` of the mix (its kind from i), from a client of its own."""
    kinds = ["valid", "image", "malformed", "impatient", "vanish", "short_body"]
    kind = kinds[i % len(kinds)]
    t0 = time.monotonic()
    if kind in ("vanish", "short_body"):
        whole = json.dumps(GOOD).encode()
        sock = _raw_post(url, whole if kind == "vanish" else whole[:10], len(whole))
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        sock.close()
        return Sent(kind, "gone", time.monotonic() - t0, 10)
    if kind == "malformed":
        body, param = MALFORMED[(i // len(kinds)) % len(MALFORMED)]
        resp = requests.post(url + "/chat/completions", timeout=60,
                             **({"data": body} if isinstance(body, bytes) else {"json": body}))
        error = resp.json().get("error", {}) if resp.headers.get("content-type") == "application/json" else {}
        ok = resp.status_code == 400 and error.get("param") == param
        return Sent(kind, f"bad_request:{param}" if ok else f"unexpected {resp.status_code}: {resp.text[:200]}",
                    time.monotonic() - t0, 60)
    timeout = 0.02 if kind == "impatient" else 60.0
    client = ChatClient(url, "bootstrap", timeout_s=timeout, max_retries=0)
    body = GOOD if kind != "image" else {**GOOD, "messages": [{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": image_data_url(Image.new("RGB", (64, 96), (i, 90, 160)))}},
        {"type": "text", "text": "Where is the OK button?"}]}]}
    error, seconds = outcome(lambda: client.request(body))
    if error is None:
        return Sent(kind, "answered", seconds, timeout)
    return Sent(kind, "timeout" if "timeout after" in error else f"error: {error[:200]}", seconds, timeout)


@contextmanager
def serve_process(args: list[str]) -> Iterator[tuple[str, psutil.Process, list[str]]]:
    """`venus serve ARGS --port 0` as a child: (its API root, the process, its output so far). The
    output after the start-up line is drained into the list as it comes: a pipe nobody reads would
    block the server once full."""
    proc = subprocess.Popen([sys.executable, "-c", "from venus_core.cli import main; main()", "serve", *args,
                             "--port", "0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"})
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, lambda s: s.startswith("serving "), timeout=300, what="venus serve")
        output: list[str] = []
        threading.Thread(target=output.extend, args=(proc.stdout,), name="serve-output", daemon=True).start()
        yield line.split(" at ", 1)[1].split()[0], psutil.Process(proc.pid), output
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_venus_serve_answers_or_refuses_every_request_of_a_concurrent_faulty_mix() -> None:
    """Before the fix of `models/server.py`, each client that left before its body arrived was an
    "Exception in ASGI application" traceback on the server's output."""
    with serve_process(["--model", "bootstrap", "--threads", "1", "--max-batch", "8", "--batch-wait-ms", "50"]) \
            as (url, proc, output):
        assert send(url, 0).outcome == "answered"  # warm-up: the first batch allocates what later ones reuse
        gc.collect()
        fds_start, rss_start = proc.num_fds(), proc.memory_info().rss
        t0 = time.monotonic()
        with ThreadPoolExecutor(LOAD_CLIENTS, thread_name_prefix="serve-client") as ex:
            sent = list(ex.map(lambda i: send(url, i), range(LOAD_REQUESTS)))
        wall = time.monotonic() - t0
        gc.collect()  # the clients' sessions, and their keep-alive sockets, are gone
        after = send(url, 0)
        health = requests.get(url.removesuffix("/v1") + "/health", timeout=10).json()
        deadline = time.monotonic() + 15
        while proc.num_fds() > fds_start and time.monotonic() < deadline:  # idle keep-alives time out
            time.sleep(0.2)
        fds_after, rss_after = proc.num_fds(), proc.memory_info().rss
        errors = [line for line in output if "Traceback" in line or "Exception in ASGI" in line]
    tally = Counter((s.kind, s.outcome.split(":")[0]) for s in sent)
    figures = {"requests": LOAD_REQUESTS, "seconds": round(wall, 1), "outcomes": {f"{k} {o}": n for (k, o), n in
                                                                                   sorted(tally.items())},
               "served": {k: health.get(k) for k in ("requests", "batches")}, "fds": [fds_start, fds_after],
               "rss_mib": [rss_start >> 20, rss_after >> 20], "slowest_s": round(max(s.seconds for s in sent), 2)}
    print(f"\nvenus serve: {json.dumps(figures)}")
    expected = {"valid": "answered", "image": "answered", "impatient": "timeout", "vanish": "gone",
                "short_body": "gone"}
    wrong = [s for s in sent if s.outcome != expected.get(s.kind, s.outcome)]
    assert not wrong, wrong[:5]
    assert all(s.outcome.startswith("bad_request") for s in sent if s.kind == "malformed")
    assert sum(tally.values()) == LOAD_REQUESTS
    # the server generated for the warm-up, every valid and impatient request, the last one and the
    # vanished clients' requests it read before their reset (the kernel may drop the rest)
    generated = 2 + sum(s.kind in ("valid", "image", "impatient") for s in sent)
    assert generated <= health["requests"] <= generated + tally["vanish", "gone"], health
    late = [s for s in sent if s.seconds > s.limit + SLACK_S]
    assert not late, late[:5]
    assert after.outcome == "answered"
    assert not errors, errors[:3]
    assert fds_after <= fds_start, (fds_start, fds_after)
