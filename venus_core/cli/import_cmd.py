"""`venus data import --format F SRC -o DIR`: import a public dataset into the Venus layout.

Why a thin command: the mapping, quarantine and counting live in `venus_core.data.importers`
(so pipelines and tests call the same code); this module parses arguments, prints the summary
(read / imported / quarantined, by reason) and exits 1 when the source cannot be imported at all.
Quarantined records do not fail the command: they are counted, listed in DIR/quarantine.jsonl and
summarised in DIR/import_report.json. `register(data_app)` adds the command to `venus data`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import err_console, fail, out_console
from venus_core.cli.progress import progress_bar


def _options(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            fail(f"--option {pair!r}: expected KEY=VALUE")
        out[key.strip()] = value
    return out


def import_cmd(
    src: Annotated[Path, typer.Argument(help="source directory of the public dataset")],
    fmt: Annotated[str, typer.Option("--format", "-f", help="source format: screenspot-v2, screenspot-pro, androidcontrol, guiodyssey, mind2web, venus")] = "",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output dataset directory")] = None,
    option: Annotated[
        list[str] | None, typer.Option("--option", help="importer option KEY=VALUE (repeatable)")
    ] = None,
    resume: Annotated[
        bool, typer.Option("--resume", help="continue a finished import in DIR from its checkpoint")
    ] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace DIR if it exists")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the import report as JSON")] = False,
) -> None:
    """Import SRC (a dataset in --format) into DIR; bad source records go to DIR/quarantine.jsonl."""
    from venus_core.config.registry import IMPORTERS, RegistryError
    from venus_core.data.importers import run_import

    if not fmt:
        fail("--format is required; known: " + ", ".join(IMPORTERS.names()))
    if out is None:
        fail("--out/-o DIR is required")
    try:
        with progress_bar(f"import {fmt}", "records") as progress:
            report = run_import(fmt, src, out, options=_options(option or []), resume=resume,
                                overwrite=overwrite, progress=progress)
    except (RegistryError, ValueError, OSError) as exc:
        fail(str(exc), code=1)
    if as_json:
        typer.echo(report.model_dump_json(indent=2))
        return
    out_console.print(
        f"{fmt}: read {report.read}, imported {report.imported}, quarantined {report.quarantined}"
        f" -> {report.records} records, {report.images} images in {report.output}"
        f" ({report.records_per_s:g} records/s)"
    )
    if report.quarantined_by_code:
        reasons = ", ".join(f"{k}={v}" for k, v in report.quarantined_by_code.items())
        err_console.print(f"quarantined by reason: {reasons} (see {report.output}/quarantine.jsonl)")


def register(data_app: typer.Typer) -> None:
    """Add `import` to the `venus data` command group."""
    data_app.command("import")(import_cmd)
