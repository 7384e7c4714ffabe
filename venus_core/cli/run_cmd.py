"""`venus run`: the main job on an agent spec — the whole pipeline on this machine.

It runs the same Kubeflow pipeline the cluster runs (`pipelines.gui_agent.build_pipeline`), with
`kfp.local.SubprocessRunner`: score_data → mid_train → offline_rl (grounding, mobile, web) →
[online_rl] → merge → evaluate, each stage its real runtime job (`pipelines.local.run_local`).

While it runs: on a terminal a live table (`venus_core.cli.live.LiveView`: per stage its status,
steps, elapsed, ETA and headline metric); on a pipe or in CI one plain line per stage state change
(`PlainView`); kfp.local's own stream goes to `OUT/logs/<stage>.log` and `OUT/logs/pipeline.log`
(`--verbose` prints it instead, `--quiet` prints nothing until the end). At the end: the stage
table, the summary, the evaluation report and the MLflow run, with a command to open each; on a
failure the end of the failing stage's log; on Ctrl-C how to resume.
"""

from __future__ import annotations

import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated, Any

import typer

from venus_core.cli._common import SET_HELP, err_console, fail, out_console


VERBOSE_HELP = ("print kfp.local's raw stream (executor inputs, artifact URIs, every stage's output) instead "
                "of the live view")
CACHE_HELP = ("take the stages that finished in an earlier run into the same --out (same spec and --set "
              "values) from kfp.local's cache")


def _stage_table(summary: dict[str, Any]) -> Any:
    from rich.markup import escape
    from rich.table import Table

    from venus_core.config.stages import stage_display_name

    table = Table(title=f"{summary['agent']}: {summary['status']} in {summary['seconds']}s")
    for col in ("stage", "status", "seconds", "metrics"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for st in summary["stages"]:
        name = stage_display_name(st["stage"], st.get("domain"))
        metrics = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(st.get("metrics", {}).items())[:6]
        )
        seconds = "-" if st["seconds"] is None or st.get("cached") else f"{st['seconds']:.1f}"
        table.add_row(escape(name), "cached" if st.get("cached") else st["status"], seconds, escape(metrics))
    return table


def _report(summary: dict[str, Any], out: Path) -> Path | None:
    """The evaluation report of this run (a cached evaluate stage's too), else the newest under OUT."""
    for st in summary["stages"]:
        results = st.get("outputs", {}).get("results")
        if st["stage"] == "evaluate" and results and (Path(results) / "report.html").is_file():
            return Path(results) / "report.html"
    reports = sorted(out.rglob("report.html"), key=lambda p: p.stat().st_mtime)
    return reports[-1] if reports else None


def _again(agent: Path, overrides: list[str], out: Path, cache: bool) -> str:
    argv = ["venus", "run", str(agent)]
    for item in overrides:
        argv += ["--set", item]
    return shlex.join([*argv, "--out", str(out), *([] if cache else ["--no-cache"])])


def _finished(summary: dict[str, Any]) -> list[str]:
    from venus_core.config.stages import stage_display_name

    return [stage_display_name(st["stage"], st.get("domain")) for st in summary["stages"] if st["status"] == "SUCCESS"]


def run(
    agent: Annotated[Path, typer.Argument(help="agent spec file or directory")] = Path("agents/venus-tiny"),
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    out: Annotated[Path | None, typer.Option(help="output directory (default runs/<agent>-<UTC time>)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="print nothing while it runs, only the end")] = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help=VERBOSE_HELP)] = False,
    cache: Annotated[bool, typer.Option("--cache/--no-cache", help=CACHE_HELP)] = True,
) -> None:
    """Run the agent's whole pipeline locally (default: the embedded tiny agent)."""
    from rich.markup import escape

    from pipelines.local import LocalRunError, LocalRunInterrupted, run_local
    from pipelines.progress import RunProgress
    from venus_core.cli.live import LiveView, PlainView
    from venus_core.config import SpecError, load_spec

    if quiet and verbose:
        fail("--quiet and --verbose exclude each other")
    sets = overrides or []
    try:
        spec = load_spec(agent, sets)
    except SpecError as exc:
        fail(str(exc))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = out or Path("runs") / f"{spec.name}-{stamp}"
    stream = sys.stdout  # the terminal; during the run sys.stdout is kfp.local's stream into the logs

    def view(progress: RunProgress) -> LiveView | PlainView:
        if stream.isatty():
            return LiveView(progress, stream, title=f"venus run {spec.name}")
        return PlainView(progress, stream)

    out_console.print(f"[bold]venus run[/] agent [cyan]{spec.name}[/] -> {out}")
    if not verbose:
        out_console.print(f"stage logs: {out / 'logs'}/<stage>.log (kfp.local's whole stream: pipeline.log; "
                          "--verbose prints it here)")
    try:
        summary = run_local(agent, sets, out, echo=stream if verbose else None,
                            view=None if quiet or verbose else view, cache=cache)
    except LocalRunInterrupted as exc:
        out_console.print(_stage_table(exc.summary))
        where = f"; its log: {exc.log_path}" if exc.log_path else ""
        err_console.print(f"[bold yellow]stopped[/] during {exc.stage} (Ctrl-C; its process was stopped{where})")
        err_console.print(f"summary: {Path(out) / 'summary.json'}")
        finished = _finished(exc.summary)
        err_console.print(f"resume: {_again(agent, sets, out, cache)}", markup=False)
        if cache and finished:
            err_console.print(f"  the {len(finished)} stage(s) that finished ({', '.join(finished)}) come from "
                              f"kfp.local's cache as long as the spec and --set values are the same; {exc.stage} "
                              "and the stages after it run from their start (a local run keeps no checkpoint "
                              "between runs)", markup=False)
        elif cache:
            err_console.print("  no stage had finished: every stage runs from its start", markup=False)
        else:
            err_console.print("  this run had --no-cache: nothing was cached, every stage runs again", markup=False)
        raise typer.Exit(130) from None
    except LocalRunError as exc:
        out_console.print(_stage_table(exc.summary))
        where = f" (last lines of {exc.log_path})" if exc.log_path else ""
        again = ""
        if cache and _finished(exc.summary):
            again = (f"\nre-run from this stage: {_again(agent, sets, out, cache)} (the stages that finished come "
                     "from kfp.local's cache unless the spec or --set values change)")
        summary_path = Path(out) / "summary.json"
        fail(escape(f"stage {exc.stage} failed{where}:\n{exc.log_tail}\n(summary: {summary_path}){again}"), code=1)
    except KeyboardInterrupt:
        err_console.print("[bold yellow]stopped[/] before the pipeline started (Ctrl-C)")
        raise typer.Exit(130) from None

    out_console.print(_stage_table(summary))
    out_console.print(f"summary: {Path(out) / 'summary.json'}")
    report = _report(summary, Path(out))
    if report is not None:
        out_console.print(f"evaluation report: {report}")
        out_console.print(f"  open it: python -m webbrowser -t {report.resolve().as_uri()}", markup=False)
    out_console.print(f"stage logs: {summary['logs']}/<stage>.log; metrics per stage: metrics.jsonl beside each "
                      "stage's outputs")
    ml = summary.get("mlflow")
    if ml:
        out_console.print(f"MLflow: run {ml['run_id']} (experiment {ml['experiment']}) in {ml['tracking_uri']}")
        out_console.print(f"  open it: {ml['ui']}  ->  http://127.0.0.1:5000/{ml['run_page']}")
    else:
        out_console.print("MLflow: off (platform.tracking_uri / $MLFLOW_TRACKING_URI is 'none')")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
