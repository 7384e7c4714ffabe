"""Request batching for `venus serve`: concurrent chat requests share one `generate` call.

Why: a transformers `generate` over 8 chats costs little more than over 1 on an idle machine (the
tiny model is latency-bound, a real one memory-bound), so a server that runs requests one by one
wastes most of its capacity when the evaluator or the rollout workers send requests in parallel.
This is static batching, the simple cousin of vLLM's continuous batching: the first waiting request
opens a window of `wait_s` (a few ms) in which more requests join, up to `max_batch` rows (a request
with `n` samples is `n` rows); requests join a batch only if their decoding settings (`Sampling`)
are equal, since one `generate` call decodes with one setting. While a batch runs (on one worker
thread, so the event loop keeps accepting requests) new requests queue and form the next batch.
A seed applies to a whole batch: with `seed` set, a reply is reproducible for the same batch
composition only (as in vLLM, where batching also changes sampled outputs).
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from venus_core.models.serve_protocol import Sampling

RunBatch = Callable[[list[list[dict[str, Any]]], Sampling], list[Any]]
"""(chats, sampling) -> one result per chat, in order (runs on the worker thread)."""


@dataclass
class _Pending:
    rows: list[list[dict[str, Any]]]
    sampling: Sampling
    future: asyncio.Future[list[Any]]


@dataclass
class BatchStats:
    """What the batcher did: requests and rows served, batches run, and the batch-size histogram."""

    requests: int = 0
    rows: int = 0
    batches: int = 0
    failed_batches: int = 0
    sizes: Counter[int] = field(default_factory=Counter)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "rows": self.rows, "batches": self.batches,
                "failed_batches": self.failed_batches,
                "batch_sizes": {str(k): v for k, v in sorted(self.sizes.items())}}


class Batcher:
    """Collects submitted chats into batches and runs them with `run` on one worker thread."""

    def __init__(self, run: RunBatch, *, max_batch: int = 8, wait_s: float = 0.005) -> None:
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        if wait_s < 0:
            raise ValueError(f"wait_s must be >= 0, got {wait_s}")
        self.run = run
        self.max_batch = max_batch
        self.wait_s = wait_s
        self.stats = BatchStats()
        self._lock = threading.Lock()
        self._queue: asyncio.Queue[_Pending] | None = None
        self._task: asyncio.Task[None] | None = None
        self._worker = ThreadPoolExecutor(max_workers=1, thread_name_prefix="venus-serve-generate")

    def start(self) -> None:
        """Start the batching loop on the running event loop (call from inside it)."""
        if self._task is None:
            self._queue = asyncio.Queue()
            self._task = asyncio.get_running_loop().create_task(self._loop())

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
        self._worker.shutdown(wait=True, cancel_futures=True)

    async def submit(self, rows: Sequence[list[dict[str, Any]]], sampling: Sampling) -> list[Any]:
        """Results for `rows` (one per chat) once the batch holding them has run."""
        if not rows:
            return []
        if len(rows) > self.max_batch:
            raise ValueError(f"{len(rows)} rows exceed max_batch {self.max_batch}")
        self.start()
        assert self._queue is not None
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        await self._queue.put(_Pending(list(rows), sampling, future))
        return await future

    async def exclusive(self, fn: Callable[[], Any]) -> Any:
        """Run `fn` on the generation thread, between batches: no batch runs while it does (a weight
        reload: no request sees half-loaded weights). Batches collected meanwhile run after it."""
        return await asyncio.get_running_loop().run_in_executor(self._worker, fn)

    async def _collect(self) -> list[_Pending]:
        assert self._queue is not None
        loop = asyncio.get_running_loop()
        pending = [await self._queue.get()]
        rows = len(pending[0].rows)
        deadline = loop.time() + self.wait_s
        while rows < self.max_batch:
            try:
                item = self._queue.get_nowait()
            except asyncio.QueueEmpty:
                left = deadline - loop.time()
                if left <= 0:
                    break
                try:
                    item = await asyncio.wait_for(self._queue.get(), left)
                except TimeoutError:
                    break
            pending.append(item)
            rows += len(item.rows)
        return pending

    def _chunks(self, pending: list[_Pending]) -> list[list[_Pending]]:
        """Group by sampling settings (first-come order), each group cut at max_batch rows."""
        groups: dict[Sampling, list[_Pending]] = {}
        for p in pending:
            groups.setdefault(p.sampling, []).append(p)
        chunks: list[list[_Pending]] = []
        for group in groups.values():
            current: list[_Pending] = []
            size = 0
            for p in group:
                if current and size + len(p.rows) > self.max_batch:
                    chunks.append(current)
                    current, size = [], 0
                current.append(p)
                size += len(p.rows)
            chunks.append(current)
        return chunks

    async def _run_chunk(self, chunk: list[_Pending]) -> None:
        live = [p for p in chunk if not p.future.done()]  # a client that went away is not decoded
        if not live:
            return
        chats = [row for p in live for row in p.rows]
        loop = asyncio.get_running_loop()
        try:
            results = await loop.run_in_executor(self._worker, self.run, chats, live[0].sampling)
            if len(results) != len(chats):
                raise RuntimeError(f"generation returned {len(results)} results for {len(chats)} chats")
        except Exception as exc:  # every request of the batch gets the error; the server keeps going
            with self._lock:
                self.stats.failed_batches += 1
            for p in live:
                if not p.future.done():
                    p.future.set_exception(exc)
            return
        with self._lock:
            self.stats.batches += 1
            self.stats.requests += len(live)
            self.stats.rows += len(chats)
            self.stats.sizes[len(chats)] += 1
        start = 0
        for p in live:
            if not p.future.done():
                p.future.set_result(results[start : start + len(p.rows)])
            start += len(p.rows)

    async def _loop(self) -> None:
        while True:
            for chunk in self._chunks(await self._collect()):
                await self._run_chunk(chunk)


__all__ = ["BatchStats", "Batcher", "RunBatch"]
