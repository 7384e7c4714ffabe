"""The glibc malloc settings of long CPU training commands (venus_core/runtime/malloc_tunables.py):
when the environment changes, the re-execution itself in a real child process, and which `venus`
commands do it."""

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


@glibc_linux
def test_venus_bootstrap_reexecutes_and_other_commands_do_not() -> None:
    code = ("import os; from venus_core.cli import main; "
            "print('tuned', os.environ.get('VENUS_MALLOC_TUNED'), flush=True); main()")
    env = {k: v for k, v in os.environ.items() if k not in ("GLIBC_TUNABLES", "VENUS_MALLOC_TUNED", "VENUS_MALLOC_TUNING")}
    boot = subprocess.run([sys.executable, "-c", code, "bootstrap", "--help"], env=env, capture_output=True,
                          text=True, timeout=120)
    assert boot.returncode == 0, boot.stderr
    assert boot.stdout.splitlines()[:2] == ["tuned None", "tuned 1"] and "--threads" in boot.stdout
    other = subprocess.run([sys.executable, "-c", code, "version"], env=env, capture_output=True, text=True, timeout=120)
    assert other.returncode == 0 and other.stdout.splitlines()[0] == "tuned None" and "tuned 1" not in other.stdout
