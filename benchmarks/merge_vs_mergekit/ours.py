"""Run `venus merge` exactly as a user would (the typer command from venus_core.cli.merge_cmd)."""

from __future__ import annotations

import sys

import typer

from venus_core.cli.merge_cmd import register

app = typer.Typer(add_completion=False)
register(app)


@app.command()
def version() -> None:
    """Keeps `merge` a named sub-command."""


if __name__ == "__main__":
    app(["merge", *sys.argv[1:]])
