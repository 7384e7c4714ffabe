"""Helpers shared by the CLI modules: error reporting and the --set option."""

from __future__ import annotations

import sys
from typing import NoReturn

import typer
from rich.console import Console

# Off a terminal (CI logs, pipes) rich would wrap tables at 80 columns; logs read better wider.
_WIDTH = None if sys.stdout.isatty() else 160
err_console = Console(stderr=True, highlight=False, soft_wrap=True, width=_WIDTH)
out_console = Console(highlight=False, soft_wrap=True, width=_WIDTH)

SET_HELP = "override a spec field, KEY=VALUE (repeatable), e.g. --set offline_rl.grounding.lr=1e-6"


def fail(message: str, code: int = 2) -> NoReturn:
    """Print an error (file, line and field are already in the message) and exit."""
    err_console.print(f"[bold red]error:[/] {message}", markup=True)
    sys.stderr.flush()
    raise typer.Exit(code)
