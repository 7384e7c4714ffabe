"""`venus spec …`: validate, show and template agent specs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import SET_HELP, fail, out_console

spec_app = typer.Typer(help="Validate, show and template agent specs.", no_args_is_help=True)

SpecFile = Annotated[Path, typer.Argument(help="agent spec: a YAML file or a directory holding agent.yaml")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)]


@spec_app.command("validate")
def validate(files: Annotated[list[Path], typer.Argument(help="agent spec files or directories")]) -> None:
    """Validate agent specs: unknown keys, bad values and unknown plugin names are errors."""
    from venus_core.config import SpecError, load_spec, spec_hash

    failed = 0
    for f in files:
        try:
            spec = load_spec(f)
        except SpecError as exc:
            failed += 1
            out_console.print(f"[red]✗[/] {f}\n{exc}", markup=True)
            continue
        out_console.print(f"[green]✓[/] {f}  (agent {spec.name}, spec sha256 {spec_hash(spec)[:12]})", markup=True)
    if failed:
        raise typer.Exit(1)


@spec_app.command("show")
def show(
    file: SpecFile,
    overrides: SetOpt = None,
    as_json: Annotated[bool, typer.Option("--json", help="print JSON instead of YAML")] = False,
) -> None:
    """Print the resolved spec (defaults filled in, overrides applied)."""
    import json

    from venus_core.config import SpecError, dump_spec, load_spec, spec_to_dict

    try:
        spec = load_spec(file, overrides or [])
    except SpecError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(spec_to_dict(spec), indent=2, ensure_ascii=False))
    else:
        typer.echo(dump_spec(spec), nl=False)


@spec_app.command("template")
def template(
    output: Annotated[Path | None, typer.Option("-o", "--output", help="write here instead of stdout")] = None,
) -> None:
    """Print the commented template: every field with its default and description."""
    from venus_core.config.template import render_template

    text = render_template()
    if output is None:
        typer.echo(text, nl=False)
    else:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text, encoding="utf-8")
        out_console.print(f"wrote {output}")
