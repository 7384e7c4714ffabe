"""Shared helpers of the fault tests (issue 22 §2): a child process killed with SIGKILL at a chosen
training step, found by watching its checkpoint pointer (never by sleeping), and weight comparison.

A uniquely named module: several test folders have a conftest.py."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from safetensors.torch import load_file

ROOT = Path(__file__).resolve().parents[2]
TINY_SPEC = ROOT / "agents" / "venus-tiny"
STEP_NAME = "step-{:08d}"


def child_env(**extra: str) -> dict[str, str]:
    """The environment of a job started as a child: one thread, offline, no telemetry, fixed hash seed."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "MLFLOW_DISABLE_TELEMETRY": "true",
           "PYTHONHASHSEED": "0"}
    env.update(extra)
    return env


def job_argv(module: str, args: Sequence[str], *, preload: Sequence[str] = ()) -> list[str]:
    """`python -m module args`, or, when test-only modules must be imported first (a test reward
    registered by import), `python -c` importing them from tests/ and then calling `module.main`."""
    if not preload:
        return [sys.executable, "-m", module, *args]
    code = ("import sys\n" f"sys.path[:0] = {[str(ROOT / 'tests' / d) for d in ('rl', 'faults')]!r}\n"
            + "".join(f"import {m}\n" for m in preload)
            + f"from {module} import main\nsys.exit(main(sys.argv[1:]))\n")
    return [sys.executable, "-c", code, *args]


def run_job(argv: Sequence[str], timeout: float = 300) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(list(argv), env=child_env(), capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def kill_step(seed: int, steps: int) -> int:
    """The step after whose checkpoint the run is killed: drawn from 1 .. steps-1 by `seed`."""
    return random.Random(seed).randint(1, steps - 1)


def wait_for(cond: Callable[[], bool], timeout: float, what: str, proc: subprocess.Popen[bytes] | None = None,
             poll: float = 0.02) -> None:
    """Poll `cond` until it holds; fail after `timeout` s, or at once if `proc` ended meanwhile."""
    deadline = time.monotonic() + timeout
    while not cond():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"the child exited ({proc.returncode}) before: {what}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for: {what}")
        time.sleep(poll)


def latest_step(ckpt: Path) -> int:
    """The step the checkpoint directory's `latest` pointer names (0: none yet)."""
    try:
        name = (ckpt / "latest").read_text()
    except FileNotFoundError:
        return 0
    return int(name.removeprefix("step-")) if name.startswith("step-") else 0


def sigkill_when(argv: Sequence[str], cond: Callable[[], bool], what: str, timeout: float = 300,
                 poll: float = 0.02) -> list[int]:
    """Start `argv` and SIGKILL it as soon as `cond` holds (no cleanup of its own runs); returns the
    pids of its descendants at the kill (they are not killed here)."""
    import psutil

    proc = subprocess.Popen(list(argv), env=child_env(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_for(cond, timeout, what, proc, poll)
        children = [c.pid for c in psutil.Process(proc.pid).children(recursive=True)]
        proc.send_signal(signal.SIGKILL)
        assert proc.wait(timeout=60) == -signal.SIGKILL
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=60)
    return children


def alive(pids: Sequence[int], within: float) -> list[int]:
    """The pids of `pids` still running (not zombies) after waiting up to `within` seconds."""
    import psutil

    deadline = time.monotonic() + within
    while True:
        left = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    left.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.2)


def sigkill_at_checkpoint(argv: Sequence[str], ckpt: Path, step: int, timeout: float = 300) -> int:
    """Start `argv`, SIGKILL it as soon as its `latest` checkpoint reaches `step`; the step the
    pointer named at the kill (the child may have written a later one in between)."""
    sigkill_when(argv, lambda: latest_step(ckpt) >= step, f"checkpoint {STEP_NAME.format(step)} in {ckpt}", timeout)
    return latest_step(ckpt)


def weights(d: Path, name: str = "*.safetensors") -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(d.glob(name)):
        out.update(load_file(f))
    return out


def differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    """Names of the tensors that are not bitwise equal (a key in one only counts too)."""
    return sorted(set(a) ^ set(b)) + [k for k in sorted(set(a) & set(b)) if not torch.equal(a[k], b[k])]
