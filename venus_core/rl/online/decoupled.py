"""Decoupled rollouts: a worker thread collects the next batches while the learner updates on this one.

Why: in the synchronous loop the devices idle while the learner trains and the learner idles while
the devices play (DART-GUI and AReaL report most of the end-to-end gain from decoupling them).
Here a `RolloutWorker` thread runs `make_batch(version)` back to back and queues each batch; the
learner takes batches from the queue. Bounded staleness: a batch is collected with the newest
weights the learner has published when the batch starts, and a batch starts only while fewer than
`staleness` batches are queued or in progress (a semaphore of `staleness` permits, one returned
per batch the learner takes). Batch k then starts after the learner took batch k − staleness, at
version ≥ k − staleness, and is taken at version k: at most `staleness` updates old (`staleness = 0` is the synchronous loop and does not use this module). A batch
older than that (it cannot happen with a single worker; the check guards the invariant) is
dropped and counted.

Weights reach the worker as a snapshot the learner publishes after each update (a copy of the
state dict, taken after `optimizer.step`, so the worker never reads half-updated parameters);
the worker loads it into its own copy of the model between batches. Off-policy correction: the
worker also scores each sampled completion under the weights that sampled it (the behaviour
log-probs), and the learner's ratio is taken against those, so a stale batch is a clipped
importance-weighted update, as in PPO, not an on-policy one.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

B = TypeVar("B")


@dataclass
class Stamped(Generic[B]):
    batch: B
    version: int  # learner version whose weights collected it
    seconds: float


class RolloutWorker(Generic[B]):
    """Runs `make_batch(version)` on a thread, `staleness` batches ahead at most."""

    def __init__(self, make_batch: Callable[[int], B], staleness: int, *, get_timeout: float = 600.0) -> None:
        if staleness < 1:
            raise ValueError(f"RolloutWorker needs staleness >= 1 (0 is the synchronous loop), got {staleness}")
        self.make_batch = make_batch
        self.staleness = staleness
        self.get_timeout = get_timeout
        self._queue: queue.Queue[Stamped[B] | BaseException] = queue.Queue()
        self._slots = threading.Semaphore(staleness)
        self._stop = threading.Event()
        self._version = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._run_ok = threading.Event()  # cleared by pause(): no new batch starts
        self._run_ok.set()
        self._idle = threading.Event()  # set while the worker is not inside make_batch
        self._idle.set()
        self.dropped_stale = 0
        self.produced = 0
        self.wait_s = 0.0  # learner time spent waiting for a batch (learner idle)

    def publish(self, version: int) -> None:
        """The learner's weights are now at `version` (the snapshot is published by the caller)."""
        with self._lock:
            self._version = version

    def start(self) -> RolloutWorker[B]:
        self._thread = threading.Thread(target=self._run, name="venus-rollout-worker", daemon=True)
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.is_set():
            if not self._run_ok.wait(0.1) or not self._slots.acquire(timeout=0.1):
                continue
            with self._lock:
                version = self._version
            self._idle.clear()
            if not self._run_ok.is_set():  # paused between the check and here
                self._idle.set()
                self._slots.release()
                continue
            t0 = time.perf_counter()
            try:
                item: Stamped[B] | BaseException = Stamped(self.make_batch(version), version, time.perf_counter() - t0)
            except BaseException as exc:  # noqa: BLE001 - handed to the learner, which re-raises it
                item = exc
            finally:
                self._idle.set()
            self._queue.put(item)
            if isinstance(item, BaseException):
                return
            self.produced += 1

    def pause(self, timeout: float = 600.0) -> None:
        """Start no new batch and wait until the one in progress is done (its envs are free)."""
        self._run_ok.clear()
        if not self._idle.wait(timeout):
            raise TimeoutError(f"the rollout worker did not finish its batch within {timeout:.0f} s")

    def resume(self) -> None:
        self._run_ok.set()

    def get(self, learner_version: int) -> Stamped[B]:
        """The next batch not older than `staleness` updates (older ones are dropped and counted)."""
        t0 = time.perf_counter()
        try:
            while True:
                try:
                    item = self._queue.get(timeout=self.get_timeout)
                except queue.Empty:
                    raise TimeoutError(f"no rollout batch within {self.get_timeout:.0f} s") from None
                if isinstance(item, BaseException):
                    raise RuntimeError("the rollout worker failed") from item
                self._slots.release()
                if learner_version - item.version <= self.staleness:
                    return item
                self.dropped_stale += 1
        finally:
            self.wait_s += time.perf_counter() - t0

    def stop(self) -> None:
        self._stop.set()
        self._run_ok.set()
        if self._thread is not None:
            self._thread.join(timeout=60)


def copy_weights(src: Any) -> dict[str, Any]:
    """A detached copy of a model's parameters and buffers (the snapshot the learner publishes)."""
    return {k: v.detach().clone() for k, v in src.state_dict().items()}


__all__ = ["RolloutWorker", "Stamped", "copy_weights"]
