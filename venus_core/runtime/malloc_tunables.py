"""glibc malloc settings for long CPU training: the same results, ~1.7x faster on this project's models.

Why: a training step of the tiny model allocates and frees activation buffers of tens of MB. glibc
serves each one above its mmap threshold with a fresh `mmap` and returns it with `munmap`, so every
step pays the kernel for zeroing those pages again: 40 steps of the last bootstrap stage on one
core spent 77 s of 181 s in the kernel. Keeping large blocks in the heap (a high mmap threshold, a
high trim threshold and a top pad) reuses the same pages: 106 s, 2 s of it in the kernel, and
bit-identical weights (measured 2026-12-07, docs/learning.md "Malloc settings").

The settings must be in the environment before the process starts (glibc reads `GLIBC_TUNABLES`
once, and `mallopt` caps the mmap threshold at 32 MB, too low to matter), so the `venus` console
script re-executes itself once with them, for the commands in `TUNED_COMMANDS` only: one process
that trains for hours. They are not applied to every command: a heap that keeps up to 16 GiB of
freed memory is right for one long training process and wrong for many short ones side by side
(with every `venus` command re-executed, two pytest-xdist workers of a CI run died, 2026-12-07).
`venus run` is not in the set: its stages are minutes long, and the default run took 807 s with the
tunables and 785 s without them, back to back on the idle 2-core machine, with the same evaluation
table (2026-12-07; the kernel's share 43 s against 81 s, not enough to show in the wall time).
`VENUS_MALLOC_TUNING=0` turns it off; a user's own `glibc.malloc.*` tunables win.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Mapping

TUNABLES = ("glibc.malloc.mmap_threshold=4294967296:glibc.malloc.trim_threshold=17179869184:"
            "glibc.malloc.top_pad=268435456")
"""4 GiB mmap threshold, 16 GiB trim threshold, 256 MiB top pad (what the measurement used)."""

TUNED_COMMANDS = frozenset({"bootstrap"})
"""`venus` subcommands that re-execute with the tunables (cli.main)."""

_MARK = "VENUS_MALLOC_TUNED"


def tuned_environment(env: Mapping[str, str]) -> dict[str, str] | None:
    """The environment to re-execute with, or None when nothing is to change: turned off
    (`VENUS_MALLOC_TUNING=0`), done already, not glibc Linux, or malloc tunables set by the user
    (theirs win; other glibc tunables are kept and ours appended)."""
    if env.get("VENUS_MALLOC_TUNING", "1") == "0" or env.get(_MARK) == "1":
        return None
    if sys.platform != "linux" or platform.libc_ver()[0] != "glibc":
        return None
    current = env.get("GLIBC_TUNABLES", "")
    if "glibc.malloc." in current:
        return None
    out = dict(env)
    out["GLIBC_TUNABLES"] = f"{current}:{TUNABLES}" if current else TUNABLES
    out[_MARK] = "1"
    return out


def wants_tuning(argv: list[str]) -> bool:
    """Whether a `venus` command line (sys.argv) runs a command of `TUNED_COMMANDS`.

    >>> wants_tuning(["venus", "bootstrap", "--out", "x"]), wants_tuning(["venus", "run"]), wants_tuning(["venus"])
    (True, False, False)
    """
    return len(argv) > 1 and argv[1] in TUNED_COMMANDS


def reexec_tuned() -> None:
    """Re-execute this process (the same interpreter and command line) with `tuned_environment`;
    returns only when nothing is to change."""
    env = tuned_environment(os.environ)
    if env is None:
        return
    # the interpreter's own options and `-m` / `-c` / the script as started; argv[0] the full path
    # (an interpreter found on PATH by a bare name could resolve to another install on re-execution)
    argv = [sys.executable, *(getattr(sys, "orig_argv", None) or [sys.executable, *sys.argv])[1:]]
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)
