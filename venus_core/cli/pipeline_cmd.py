"""`venus compile` and `venus submit`: the agent's Kubeflow pipeline for a cluster.

The pipeline code lives in the top-level `pipelines/` and `components/` packages (they sit above
`venus_core` in the import graph), so it is imported inside the commands; `venus run` (local
execution of the same pipeline) lives in run_cmd.py and calls `pipelines.local.run_local`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from venus_core.cli._common import SET_HELP, fail, out_console


def _pipelines(module: str) -> Any:
    import importlib

    try:
        return importlib.import_module(f"pipelines.{module}")
    except ModuleNotFoundError as exc:
        if exc.name in ("pipelines", "components"):
            fail(f"the {exc.name!r} package is not importable: install the project with its "
                 "pipelines/ and components/ packages, or run from the repository root")
        raise


def compile_cmd(
    agent: Annotated[Path, typer.Argument(help="agent spec file or directory")],
    output: Annotated[Path, typer.Option("--output", "-o", help="IR YAML file to write")] = Path("pipeline.yaml"),
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
) -> None:
    """Compile the agent's pipeline to Kubeflow Pipelines IR YAML."""
    from venus_core.config import SpecError

    compile_mod = _pipelines("compile")
    gui_agent = _pipelines("gui_agent")
    try:
        path = compile_mod.compile_pipeline(agent, output, overrides or [])
    except (SpecError, gui_agent.PipelineError) as exc:
        fail(str(exc))
    out_console.print(f"wrote {path}")


def submit_cmd(
    agent: Annotated[Path, typer.Argument(help="agent spec file or directory")],
    host: Annotated[str | None, typer.Option(help="Kubeflow Pipelines API URL (default: platform.kfp_host)")] = None,
    experiment: Annotated[str | None, typer.Option(help="experiment name (default: platform.experiment)")] = None,
    run_name: Annotated[str | None, typer.Option(help="run name (default: '<agent> <UTC time>')")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
) -> None:
    """Upload the agent's pipeline (a new version) to Kubeflow Pipelines and start a run; print its URL."""
    from venus_core.config import SpecError, load_spec

    submit_mod = _pipelines("submit")
    gui_agent = _pipelines("gui_agent")
    try:
        host = host or load_spec(agent, overrides or []).platform.kfp_host
        if not host:
            fail("no Kubeflow Pipelines host: pass --host URL or set platform.kfp_host in the spec")
        sub = submit_mod.submit(agent, host, experiment=experiment, overrides=overrides or [], run_name=run_name)
    except (SpecError, gui_agent.PipelineError) as exc:
        fail(str(exc))
    except Exception as exc:  # the API client's HTTP / connection errors, named with the host
        if type(exc).__module__.split(".")[0] not in ("kfp_server_api", "urllib3"):
            raise
        fail(f"Kubeflow Pipelines API at {host}: {type(exc).__name__}: {exc}")
    out_console.print(f"run {sub.run_id} (pipeline {sub.pipeline_id}, version {sub.version_id})")
    out_console.print(sub.url, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command("compile")(compile_cmd)
    app.command("submit")(submit_cmd)
