"""`wait_for_line`: the wanted line, or a failure within the timeout (silent or exited child)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from proc_lines import wait_for_line


def _child(code: str) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-u", "-c", code], stdout=subprocess.PIPE, text=True)


def test_returns_the_wanted_line_and_fails_fast_on_silence_or_exit() -> None:
    proc = _child("print('booting'); print('ready at :1'); import time; time.sleep(30)")
    try:
        assert wait_for_line(proc.stdout, lambda s: s.startswith("ready"), timeout=30, what="c") == "ready at :1\n"
    finally:
        proc.kill()
        proc.wait()
    silent = _child("print('booting'); import time; time.sleep(30)")
    t0 = time.monotonic()
    try:
        with pytest.raises(pytest.fail.Exception, match="no start-up line within 1 s.*booting"):
            wait_for_line(silent.stdout, lambda s: s.startswith("ready"), timeout=1, what="silent")
        assert time.monotonic() - t0 < 10
    finally:
        silent.kill()
        silent.wait()
    gone = _child("print('oops')")
    with pytest.raises(pytest.fail.Exception, match="exited before its start-up line.*oops"):
        wait_for_line(gone.stdout, lambda s: s.startswith("ready"), timeout=30, what="gone")
    gone.wait()
