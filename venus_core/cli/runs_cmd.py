"""`venus runs compare RUN_A RUN_B` and `venus ui`: reading the tracking store from the shell.

Why `ui` binds to 127.0.0.1 only: the local store has no authentication; the cluster's MLflow
server has its own UI behind the gateway, so `ui` refuses http(s) tracking URIs and says so.
The tracking URI comes from `--tracking-uri`, else `platform.tracking_uri` of `--spec`, else
`$MLFLOW_TRACKING_URI`, else the platform default (sqlite:///runs/mlflow.db).
mlflow is imported inside the commands so that `venus --help` stays fast.
"""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Annotated

import typer

from venus_core.cli._common import fail

runs_app = typer.Typer(help="Compare MLflow runs.", no_args_is_help=True)

UriOpt = Annotated[str | None, typer.Option("--tracking-uri", help="MLflow tracking URI")]
SpecOpt = Annotated[str | None, typer.Option("--spec", help="agent spec whose platform.tracking_uri is used")]


def resolve_tracking_uri(tracking_uri: str | None, spec: str | None) -> str:
    if tracking_uri:
        return tracking_uri
    if spec:
        from venus_core.config import SpecError, load_spec

        try:
            return load_spec(spec).platform.tracking_uri
        except (SpecError, OSError) as exc:
            fail(str(exc))
    env = os.environ.get("MLFLOW_TRACKING_URI")
    if env:
        return env
    from venus_core.config.platform import PlatformSpec

    return PlatformSpec().tracking_uri


def ui_command(tracking_uri: str, port: int) -> list[str]:
    """The `mlflow ui` command for a local store, bound to loopback."""
    if tracking_uri.startswith(("http://", "https://", "databricks")):
        raise ValueError(f"tracking URI {tracking_uri} is a server: open its own UI instead of `venus ui`")
    if not 0 < port < 65536:
        raise ValueError(f"port {port} is out of range 1-65535")
    return [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri,
            "--host", "127.0.0.1", "--port", str(port)]


def register(app: typer.Typer) -> None:
    """Add the `runs` group (compare) and the `ui` command to a typer app."""

    @runs_app.command("compare")
    def compare(run_a: str, run_b: str, tracking_uri: UriOpt = None, spec: SpecOpt = None) -> None:
        """Print params, final metrics (with deltas), key tags and stage runs that differ between two runs."""
        uri = resolve_tracking_uri(tracking_uri, spec)
        os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
        from mlflow.exceptions import MlflowException

        from venus_core.io.tracking import compare_runs, format_diff, make_client

        try:
            diff = compare_runs(make_client(uri), run_a, run_b)
        except MlflowException as exc:
            fail(f"{uri}: {exc.message}")
        typer.echo(format_diff(diff))

    @app.command("ui")
    def ui(port: Annotated[int, typer.Option(help="port on 127.0.0.1")] = 5000,
           tracking_uri: UriOpt = None, spec: SpecOpt = None) -> None:
        """Open the MLflow UI of the local tracking store on http://127.0.0.1:PORT."""
        uri = resolve_tracking_uri(tracking_uri, spec)
        try:
            cmd = ui_command(uri, port)
        except ValueError as exc:
            fail(str(exc))
        typer.echo(f"MLflow UI of {uri} on http://127.0.0.1:{port} (Ctrl-C stops it)")
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": os.environ.get("MLFLOW_DISABLE_TELEMETRY", "true")}
        try:
            rc = subprocess.run(cmd, env=env, check=False).returncode
        except KeyboardInterrupt:
            rc = 0
        raise typer.Exit(rc)

    app.add_typer(runs_app, name="runs")
