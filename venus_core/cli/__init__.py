"""The `venus` command.

Why typer: every command and option gets `--help` from its signature and docstring, which is
the documentation ML engineers actually read. Sub-command groups live in sibling modules and
are mounted here; each module keeps its heavy imports inside the command functions so that
`venus --help` stays fast.
"""

from __future__ import annotations

import gc
import sys

import typer

from venus_core import __version__
from venus_core.cli import (
    agent_cmd,
    checkpoint_cmd,
    collect_cmd,
    devices_cmd,
    eval_cmd,
    gateway_cmd,
    generate_cmd,
    import_cmd,
    merge_cmd,
    pipeline_cmd,
    run_cmd,
    runs_cmd,
    score_cmd,
    serve_cmd,
    synth_cmd,
    train_cmd,
)
from venus_core.cli.data_cmd import data_app
from venus_core.cli.spec_cmd import spec_app

app = typer.Typer(
    name="venus",
    help="Venus: train GUI agents (UI-Venus-1.5 recipe) from one agent spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
for _module in (synth_cmd, import_cmd, score_cmd, collect_cmd, generate_cmd):
    _module.register(data_app)
app.add_typer(spec_app, name="spec")
app.add_typer(data_app, name="data")
for _module in (agent_cmd, devices_cmd, run_cmd, pipeline_cmd, train_cmd, merge_cmd, eval_cmd, runs_cmd, gateway_cmd,
                serve_cmd, checkpoint_cmd):
    _module.register(app)


@app.command()
def version() -> None:
    """Print the Venus version."""
    typer.echo(__version__)


def main() -> None:
    """The `venus` console script. A long CPU training command (`venus bootstrap`) first re-executes
    itself once with glibc malloc settings (venus_core/runtime/malloc_tunables.py); in-process
    callers of `app` (tests) never re-execute."""
    from venus_core.runtime.malloc_tunables import reexec_tuned, wants_tuning

    if wants_tuning(sys.argv):
        reexec_tuned()
    try:
        app()
    finally:
        # Interpreter shutdown ends with a full garbage collection over every live object; after
        # a command that imported torch and numba, that traversal alone took ~1 s (a `venus merge`
        # of a 1-layer model: 5.8-6.6 s -> 4.7-5.0 s). Frozen objects are skipped by it. Nothing
        # is lost: commands close their files, atexit handlers still run, and Python does not
        # promise __del__ at exit for objects still alive.
        gc.freeze()
