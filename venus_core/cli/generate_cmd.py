"""`venus data generate -o DIR`: the data flywheel from the shell (issue 24, docs/flywheel.md).

Why thin: the job is `venus_core.runtime.generate_data.run` (the pipeline's `generate_data` stage
runs the same function); this command resolves the spec (`--spec`, `--set`, and the few flags below
as shorthands for `flywheel.*` fields), prints each round as it ends and the per-round table, and
exits 1 when the run fails. It never logs to MLflow (the pipeline stage does).
`register(data_app)` adds the command to `venus data`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import SET_HELP, fail, out_console


def generate_cmd(
    out: Annotated[Path, typer.Option("--out", "-o", help="output directory (dataset/, tasks.jsonl, report.json)")],
    spec: Annotated[Path | None, typer.Option("--spec", help="agent spec (default: the built-in defaults)")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", help=SET_HELP)] = None,
    model: Annotated[str | None, typer.Option("--model", help="policy checkpoint directory (default: the spec's "
                                              "model.base)")] = None,
    seeds: Annotated[Path | None, typer.Option("--seeds", help="seed task prompts, JSONL or YAML (default: the task "
                                               "pool's static templates)")] = None,
    rounds: Annotated[int | None, typer.Option("--rounds", min=1, help="flywheel.rounds")] = None,
    tasks: Annotated[int | None, typer.Option("--tasks", min=1, help="flywheel.tasks_per_round")] = None,
    expander: Annotated[str | None, typer.Option("--expander", help="flywheel.expander: rules or openai")] = None,
    device: Annotated[str, typer.Option("--device", help="torch device of the policy: auto, cpu, cuda")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="print the report as JSON")] = False,
) -> None:
    """Grow a verified trajectory dataset on devices: seeds -> tasks -> unique -> feasible -> executed ->
    verified, in rounds, each round's verified tasks steering the next expansion."""
    from venus_core.cli.score_cmd import _spec
    from venus_core.runtime.generate_data import run, table

    extra = [f"flywheel.{k}={v}" for k, v in (("rounds", rounds), ("tasks_per_round", tasks),
                                              ("expander", expander)) if v is not None]
    agent = _spec(spec, [*(overrides or []), *extra])
    try:
        report = run(agent, out, model_dir=model, seeds_file=str(seeds) if seeds else None, device=device,
                     log=lambda m: out_console.print(m, markup=False, highlight=False))
    except (ValueError, RuntimeError, OSError) as exc:
        fail(str(exc), code=1)
    if as_json:
        typer.echo(json.dumps(report, indent=2, default=str))
        return
    out_console.print(table(report), markup=False, highlight=False)
    out_console.print(f"dataset {out / 'dataset'} ({report['total']['written']} verified trajectories); every "
                      f"proposal in {out / 'tasks.jsonl'}", markup=False, highlight=False)


def register(data_app: typer.Typer) -> None:
    """Add `generate` to the `venus data` command group."""
    data_app.command("generate")(generate_cmd)
