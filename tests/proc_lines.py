"""Waiting for a child process's start-up line with a deadline.

Why: `for line in proc.stdout` (or `readline()`) blocks for as long as the child stays silent, so
a server that hangs while starting hangs the whole suite instead of failing one test. A reader
thread hands the lines over a queue and the test waits on it with a timeout; the thread stops at
the wanted line (or the end of the stream), leaving the rest of the stream to the test.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from typing import IO

import pytest


def wait_for_line(stream: IO[str], wanted: Callable[[str], bool], *, timeout: float, what: str) -> str:
    """The first line of `stream` for which `wanted` is true; fails the test naming `what` and the
    lines seen when the stream ends or `timeout` seconds pass first."""
    lines: queue.Queue[str | None] = queue.Queue()

    def read() -> None:
        for line in stream:
            lines.put(line)
            if wanted(line):
                return
        lines.put(None)

    threading.Thread(target=read, name="wait-for-line", daemon=True).start()
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while True:
        try:
            line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"{what}: no start-up line within {timeout:.0f} s; output: {''.join(seen)[-2000:]!r}")
        if line is None:
            pytest.fail(f"{what}: exited before its start-up line; output: {''.join(seen)[-2000:]!r}")
        seen.append(line)
        if wanted(line):
            return line
