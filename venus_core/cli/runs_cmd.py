"""`venus runs compare RUN_A RUN_B` and `venus ui`: reading the tracking store from the shell.

`runs compare` takes two MLflow run ids (pipeline parent runs, as `venus run` prints them) or two
local run directories (`venus run --out DIR`: summary.json, spec.json), or one of each, and prints
what changed (venus_core.io.tracking.compare): rich tables, `--plain` text, or `--json`.

Why `ui` binds to 127.0.0.1 only: the local store has no authentication; the cluster's MLflow
server has its own UI behind the gateway, so `ui` refuses http(s) tracking URIs and says so.
The tracking URI comes from `--tracking-uri`, else `platform.tracking_uri` of `--spec`, else
`$MLFLOW_TRACKING_URI`, else the platform default (sqlite:///runs/mlflow.db).
mlflow is imported inside the commands so that `venus --help` stays fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Annotated, Any

import typer

from venus_core.cli._common import fail

runs_app = typer.Typer(help="Compare pipeline runs (MLflow runs or local run directories).", no_args_is_help=True)

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


def _width() -> int | None:
    """Wide tables when stdout is no terminal (a pipe, a test): rich's 80 columns would fold them."""
    return None if sys.stdout.isatty() else int(os.environ.get("COLUMNS", "160"))


def print_diff(diff: Any, sides: list[Any]) -> None:
    """The diff as rich tables: runs, tags, spec, stages (status and metrics with B - A), run metrics."""
    from rich import box
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from venus_core.io.tracking.compare import short, signed

    console = Console(width=_width(), highlight=False)

    def table(title: str, *cols: str, numbers: bool = False) -> Table:
        t = Table(title=title, title_justify="left", title_style="bold", box=box.SIMPLE_HEAD, show_edge=False,
                  pad_edge=False)
        for c in cols:
            t.add_column(c, justify="right" if numbers and c in ("A", "B", "B - A") else "left", overflow="fold")
        return t

    runs = table("runs", "", "run", "name", "kind", "stages")
    for label, side in zip("AB", sides, strict=True):
        runs.add_row(label, escape(side.ref), escape(side.title), side.kind, str(len(side.stages)))
    console.print(runs)
    if diff.empty:
        console.print("no differences")
        return
    for title, rows in (("tags that differ", diff.tags), ("spec values that differ", diff.spec)):
        if rows:
            console.print()
            t = table(title, "key", "A", "B")
            for k, x, y in rows:
                t.add_row(escape(k), escape(short(x)), escape(short(y)))
            console.print(t)
    if diff.stage_metrics or diff.stage_status or diff.stages_only_a or diff.stages_only_b:
        console.print()
        t = table("stages (what differs)", "stage", "metric", "A", "B", "B - A", numbers=True)
        status = {s: (x, y) for s, x, y in diff.stage_status}
        order = {name: i for i, name in enumerate(sides[0].stages)}  # A's pipeline order, stage by stage
        rows = sorted([*[(s, "status", *status[s], None) for s in status], *diff.stage_metrics],
                      key=lambda r: order.get(r[0], len(order)))
        last = None
        for stage, key, x, y, d in rows:
            shown = stage if stage != last else ""
            style = "" if d is None else "green" if d > 0 else "red" if d < 0 else ""
            t.add_row(escape(shown), escape(key), escape(short(x)), escape(short(y)),
                      f"[{style}]{signed(d)}[/]" if style else signed(d))
            last = stage
        for s in diff.stages_only_a:
            t.add_row(escape(s), "only in A", "", "", "")
        for s in diff.stages_only_b:
            t.add_row(escape(s), "only in B", "", "", "")
        console.print(t)
        if diff.stages_same:
            console.print(f"{diff.stages_same} stage(s) the same in both")
    if diff.metrics:
        console.print()
        t = table("run metrics", "metric", "A", "B", "B - A", numbers=True)
        for k, x, y, d in diff.metrics:
            t.add_row(escape(k), escape(short(x)), escape(short(y)), signed(d))
        console.print(t)


def register(app: typer.Typer) -> None:
    """Add the `runs` group (compare) and the `ui` command to a typer app."""

    @runs_app.command("compare")
    def compare(run_a: Annotated[str, typer.Argument(help="MLflow run id, or a local run directory (venus run --out)")],
                run_b: Annotated[str, typer.Argument(help="MLflow run id, or a local run directory")],
                tracking_uri: UriOpt = None, spec: SpecOpt = None,
                plain: Annotated[bool, typer.Option("--plain", help="plain text instead of tables")] = False,
                as_json: Annotated[bool, typer.Option("--json", help="the diff as JSON")] = False) -> None:
        """What changed between two pipeline runs: spec values, key tags (git revision, spec hash),
        each stage's status and metrics with B - A, and stages present in one run only."""
        from venus_core.io.tracking.compare import is_local_run

        local = {ref: is_local_run(ref) for ref in (run_a, run_b)}
        client, uri = None, ""
        if not all(local.values()):
            os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
            os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # spec.json, stages.json
            from venus_core.io.tracking import make_client

            uri = resolve_tracking_uri(tracking_uri, spec)
            client = make_client(uri)
        from mlflow.exceptions import MlflowException

        from venus_core.io.tracking import compare_sides, format_diff, side_from_dir, side_from_run

        try:
            sides = [side_from_dir(ref) if local[ref] else side_from_run(client, ref) for ref in (run_a, run_b)]
        except MlflowException as exc:
            fail(f"{uri}: {exc.message} (neither a run there nor a local run directory with summary.json)")
        except (OSError, ValueError, KeyError) as exc:
            fail(f"cannot read the local run: {exc}")
        diff = compare_sides(*sides)
        if as_json:
            typer.echo(json.dumps(diff.to_dict(), indent=2, default=str))
        elif plain:
            typer.echo(format_diff(diff))
        else:
            print_diff(diff, sides)

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
