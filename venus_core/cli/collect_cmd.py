"""`venus data collect --env miniwob --tasks A,B -n N -o DIR`: oracle web trajectories.

Why a thin command: episodes, oracles and the dataset layout live in
`venus_core.envs.miniwob_collect` (pipelines and tests call the same code); this module parses
arguments, prints the per-task success rate and the failures, and exits 1 when no episode
succeeded at all. `--raw` writes the `miniwob-traces` raw format instead of a dataset.
`register(data_app)` adds the command to `venus data`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import err_console, fail, out_console

ENVS = ("miniwob",)


def collect_cmd(
    env: Annotated[str, typer.Option("--env", help="environment: miniwob")] = "miniwob",
    tasks: Annotated[str, typer.Option("--tasks", help="comma-separated task names (see --list)")] = "",
    n: Annotated[int, typer.Option("-n", min=1, help="episodes attempted per task (seeds seed..seed+n-1)")] = 10,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="output directory")] = None,
    seed: Annotated[int, typer.Option("--seed", help="first seed")] = 0,
    workers: Annotated[int, typer.Option("--workers", min=1,
                                         help="browser contexts playing episodes side by side (same output)")] = 4,
    raw: Annotated[bool, typer.Option("--raw", help="write raw traces (miniwob-traces format), all episodes")] = False,
    overwrite: Annotated[bool, typer.Option("--overwrite", help="replace DIR if it exists")] = False,
    list_tasks: Annotated[bool, typer.Option("--list", help="list the tasks that have an oracle and exit")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Run DOM-aware oracles in MiniWoB++ (headless Chromium); keep successful episodes as trajectories."""
    from venus_core.envs.miniwob_collect import collect
    from venus_core.envs.miniwob_oracle import SOLVERS

    if env not in ENVS:
        fail(f"--env {env!r}: known: {', '.join(ENVS)}")
    if list_tasks:
        for name in sorted(SOLVERS):
            out_console.print(name)
        return
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        fail("--tasks is required; tasks with an oracle: " + ", ".join(sorted(SOLVERS)))
    if out is None:
        fail("--out/-o DIR is required")
    try:
        report = collect(names, n, out, seed=seed, raw=raw, overwrite=overwrite, workers=workers)
    except (ValueError, FileExistsError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(report.to_dict(), indent=2))
    else:
        kind = "raw episodes" if raw else "trajectories"
        out_console.print(f"{env}: wrote {report.written} {kind} to {report.output} in {report.seconds:.1f}s")
        for name, attempted in report.attempted.items():
            out_console.print(f"  {name}: {report.succeeded[name]}/{attempted} succeeded "
                              f"({100 * report.rate(name):.0f} %)")
        for f in report.failures[:20]:
            err_console.print(f"failed: {f['task']} seed {f['seed']}: {f['error']}")
        if len(report.failures) > 20:
            err_console.print(f"... {len(report.failures) - 20} more failures (see --json)")
    if not any(report.succeeded.values()):
        raise typer.Exit(1)


def register(data_app: typer.Typer) -> None:
    """Add `collect` to the `venus data` command group."""
    data_app.command("collect")(collect_cmd)
