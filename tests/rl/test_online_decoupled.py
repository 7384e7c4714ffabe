"""The decoupled rollout worker: bounded staleness, pause while the devices are needed, failures surface."""

from __future__ import annotations

import threading
import time

import pytest

from venus_core.rl.online.decoupled import RolloutWorker


def test_batches_are_never_older_than_the_staleness_bound() -> None:
    made: list[int] = []

    def make(version: int) -> int:
        time.sleep(0.01)
        made.append(version)
        return version

    for staleness in (1, 2):
        made.clear()
        worker = RolloutWorker(make, staleness).start()
        try:
            version, ages = 0, []
            for i in range(12):
                got = worker.get(version)
                ages.append(version - got.version)
                # the learner's update: the worker runs ahead meanwhile (waited for, not slept on:
                # on a loaded machine a fixed 20 ms may pass before the worker thread runs at all)
                deadline = time.monotonic() + 10
                while worker.produced < i + 2:
                    assert time.monotonic() < deadline, "the worker did not run ahead"
                    time.sleep(0.002)
                version += 1
                worker.publish(version)
        finally:
            worker.stop()
        assert max(ages) <= staleness and max(ages) >= 1  # it did run ahead, within the bound
        assert worker.dropped_stale == 0


def test_pause_waits_for_the_batch_in_progress_and_starts_no_new_one() -> None:
    inside = threading.Event()
    leave = threading.Event()
    calls = []

    def make(version: int) -> int:
        calls.append(version)
        inside.set()
        leave.wait(5)
        return version

    worker = RolloutWorker(make, 3).start()
    try:
        assert inside.wait(5)
        t = threading.Thread(target=worker.pause)
        t.start()
        time.sleep(0.1)
        assert t.is_alive()  # waits for the batch in progress
        leave.set()
        t.join(5)
        assert not t.is_alive()
        n = len(calls)
        time.sleep(0.3)
        assert len(calls) == n  # nothing new while paused
        worker.resume()
        deadline = time.time() + 5
        while len(calls) == n and time.time() < deadline:
            time.sleep(0.01)
        assert len(calls) > n
    finally:
        leave.set()
        worker.stop()


def test_a_failing_worker_raises_in_the_learner() -> None:
    def make(version: int) -> int:
        raise OSError("device pool gone")

    worker = RolloutWorker(make, 1, get_timeout=5).start()
    try:
        with pytest.raises(RuntimeError, match="rollout worker failed") as info:
            worker.get(0)
        assert isinstance(info.value.__cause__, OSError)
    finally:
        worker.stop()
    with pytest.raises(ValueError, match="staleness >= 1"):
        RolloutWorker(make, 0)
