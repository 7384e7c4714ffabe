"""The `venus` command.

Why typer: every command and option gets `--help` from its signature and docstring, which is
the documentation ML engineers actually read. Sub-command groups live in sibling modules and
are mounted here; each module keeps its heavy imports inside the command functions so that
`venus --help` stays fast.
"""

from __future__ import annotations

import typer

from venus_core import __version__
from venus_core.cli.agent_cmd import register as _register_agent
from venus_core.cli.data_cmd import data_app
from venus_core.cli.eval_cmd import register as _register_eval
from venus_core.cli.import_cmd import register as _register_import
from venus_core.cli.merge_cmd import register as _register_merge
from venus_core.cli.run_cmd import register as _register_run
from venus_core.cli.score_cmd import register as _register_score
from venus_core.cli.synth_cmd import register as _register_synth
from venus_core.cli.spec_cmd import spec_app

app = typer.Typer(
    name="venus",
    help="Venus: train GUI agents (UI-Venus-1.5 recipe) from one agent spec.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
_register_synth(data_app)
_register_import(data_app)
_register_score(data_app)
app.add_typer(spec_app, name="spec")
app.add_typer(data_app, name="data")
_register_agent(app)
_register_run(app)
_register_merge(app)
_register_eval(app)


@app.command()
def version() -> None:
    """Print the Venus version."""
    typer.echo(__version__)


def main() -> None:
    app()
