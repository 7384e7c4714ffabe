"""`venus data …` commands: dataset checks from the shell.

Why: a dataset is produced by one job and consumed by another, often on another machine;
`venus data validate DIR` is the quick, scriptable gate between them (exit status 1 when any
problem is found, `--json` for machines). The checks themselves live in
`venus_core.data.validate`; this module only parses arguments and renders the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from venus_core.data.validate import ValidationReport

data_app = typer.Typer(help="Dataset tools: synthesize, import, collect, generate on devices (flywheel), score, validate.", no_args_is_help=True)


@data_app.callback()
def _data() -> None:
    """Dataset tools (sharded JSONL + content-addressed images + manifest.json)."""


def _render(report: ValidationReport, console: Console) -> None:
    status = "[green]OK[/green]" if report.ok else f"[red]{report.problems_found} problem(s)[/red]"
    console.print(f"dataset [bold]{report.path}[/bold]: {status}")
    console.print(
        f"checked {report.records_checked} records in {report.shards_checked} shards, "
        f"{report.images_checked} images"
    )
    if report.problems_by_type:
        console.print(
            "by type: " + ", ".join(f"{k}={v}" for k, v in sorted(report.problems_by_type.items()))
        )
    for warning in report.warnings:
        console.print(f"[yellow]warning:[/yellow] {warning}")
    if report.problems:
        table = Table(show_lines=False)
        for column in ("type", "where", "record", "field"):
            table.add_column(column, no_wrap=True)
        table.add_column("message", overflow="fold")
        for p in report.problems:
            where = p.file + (f":{p.line}" if p.line is not None else "")
            table.add_row(p.type, where, p.record_id or "-", p.field or "-", p.message)
        console.print(table)
        hidden = report.problems_found - len(report.problems)
        if hidden:
            console.print(f"... {hidden} more not shown (raise --max-problems)")


@data_app.command("validate")
def validate_cmd(
    directory: Annotated[Path, typer.Argument(help="dataset directory (holds manifest.json)")],
    max_problems: Annotated[
        int, typer.Option("--max-problems", min=0, help="list at most this many problems")
    ] = 20,
    no_images: Annotated[
        bool, typer.Option("--no-images", help="skip hashing and decoding images (faster)")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Check a dataset: manifest vs shards, every record, every image. Exit 1 on any problem."""
    from venus_core.data.validate import validate_dataset  # 0.3 s (the schema): only for this command

    report = validate_dataset(directory, max_problems=max_problems, check_images=not no_images)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
    else:
        console = Console()
        if not console.is_terminal:  # logs and pipes: wide enough that paths are not folded
            console = Console(width=160)
        _render(report, console)
    raise typer.Exit(0 if report.ok else 1)
