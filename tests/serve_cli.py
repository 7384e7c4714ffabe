"""`venus serve` as a subprocess for CLI tests: start it on a free port, wait for its URL, stop it.

Shared from tests/ (on sys.path through tests/conftest.py) so each CLI test of the server does not
re-declare the start-up loop.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence

from proc_lines import wait_for_line


@contextlib.contextmanager
def venus_serve(args: Sequence[str], env: Mapping[str, str] | None = None) -> Iterator[str]:
    """Run `venus serve ARGS --port 0` (one thread, offline) and yield its API root (`http://…/v1`)."""
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", **(env or {})}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from venus_core.cli import main; main()", "serve", *args, "--port", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=full_env)
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, lambda s: s.startswith("serving "), timeout=300,
                             what="venus serve")
        yield line.split(" at ", 1)[1].split()[0]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
