"""`venus new-agent`: template a new GUI agent from an existing spec."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import fail, out_console

_NAME_LINE = re.compile(r"^name:.*$", re.MULTILINE)


def new_agent(
    name: Annotated[str, typer.Argument(help="agent name (lowercase letters, digits, '.', '_', '-')")],
    from_: Annotated[
        str, typer.Option("--from", help="template: an agent name under --agents-dir or a spec file")
    ] = "_template",
    agents_dir: Annotated[Path, typer.Option(help="directory holding agents/<name>/agent.yaml")] = Path("agents"),
    force: Annotated[bool, typer.Option("--force", help="overwrite an existing spec")] = False,
) -> None:
    """Write agents/NAME/agent.yaml from a template (comments kept), then validate it."""
    from venus_core.config import SpecError, load_spec
    from venus_core.config.template import render_template

    source = Path(from_)
    if not source.exists():
        source = agents_dir / from_
    if source.is_dir():
        source = source / "agent.yaml"
    if source.is_file():
        text = source.read_text(encoding="utf-8")
    elif from_ == "_template":
        text = render_template()  # no checkout around: the template is generated from the spec itself
    else:
        fail(f"template {from_!r} not found (looked for {source})")

    target = agents_dir / name / "agent.yaml"
    if target.exists() and not force:
        fail(f"{target} exists (use --force to overwrite)")
    if _NAME_LINE.search(text):
        text = _NAME_LINE.sub(f"name: {name}", text, count=1)
    else:
        text = f"name: {name}\n" + text
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_suffix(".yaml.tmp")
    tmp.write_text(text, encoding="utf-8")
    try:
        load_spec(tmp)
    except SpecError as exc:
        tmp.unlink()
        fail(f"the new spec does not validate:\n{exc}")
    tmp.replace(target)
    out_console.print(f"wrote {target}  (validate: venus spec validate {target})")


def register(app: typer.Typer) -> None:
    app.command("new-agent")(new_agent)
