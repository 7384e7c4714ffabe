"""The `venus` command's glibc malloc settings (venus_core/runtime/malloc_tunables.py): when the
environment changes, and the re-execution itself in a real child process."""

import os
import subprocess
import sys

import pytest

from venus_core.runtime.malloc_tunables import TUNABLES, tuned_environment

glibc_linux = pytest.mark.skipif(tuned_environment({}) is None, reason="not glibc Linux")


@glibc_linux
def test_tuned_environment_adds_the_tunables_once_and_keeps_the_users() -> None:
    env = tuned_environment({"PATH": "/bin"})
    assert env is not None and env["GLIBC_TUNABLES"] == TUNABLES and env["PATH"] == "/bin"
    assert tuned_environment(env) is None  # done already: no second re-execution
    other = tuned_environment({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"})
    assert other is not None and other["GLIBC_TUNABLES"] == f"glibc.pthread.rseq=0:{TUNABLES}"
    assert tuned_environment({"GLIBC_TUNABLES": "glibc.malloc.arena_max=2"}) is None  # the user's malloc settings win
    assert tuned_environment({"VENUS_MALLOC_TUNING": "0"}) is None


@glibc_linux
def test_the_process_reexecutes_itself_with_the_tunables() -> None:
    code = ("import os; from venus_core.runtime.malloc_tunables import reexec_tuned; print('start', flush=True); "
            "reexec_tuned(); print(os.getpid(), os.environ['GLIBC_TUNABLES'])")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "VENUS_MALLOC_TUNED", "VENUS_MALLOC_TUNING")}
    proc = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 0
    lines = out.splitlines()
    assert lines[:2] == ["start", "start"]  # ran twice: before and after the re-execution
    pid, tunables = lines[2].split(" ", 1)
    assert int(pid) == proc.pid and tunables == TUNABLES  # the same process, now with the settings
    off = subprocess.run([sys.executable, "-c", code], env={**env, "VENUS_MALLOC_TUNING": "0"},
                         capture_output=True, text=True, timeout=120)
    assert off.returncode != 0 and "KeyError" in off.stderr and off.stdout.count("start") == 1


def test_the_base_image_sets_the_same_tunables() -> None:
    from pathlib import Path

    dockerfile = (Path(__file__).resolve().parents[2] / "images" / "base.Dockerfile").read_text(encoding="utf-8")
    assert f"GLIBC_TUNABLES={TUNABLES} " in dockerfile
