"""`venus run`: the main job on an agent spec — the whole pipeline on this machine.

It runs the same Kubeflow pipeline the cluster runs (`pipelines.gui_agent.build_pipeline`), with
`kfp.local.SubprocessRunner`: score_data → mid_train → offline_rl (grounding, mobile, web) →
[online_rl] → merge → evaluate, each stage its real runtime job. Stage logs stream as they run;
the end prints the stage table and where the outputs, the evaluation report and the summary are.
"""

from __future__ import annotations

import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import SET_HELP, fail, out_console


def run(
    agent: Annotated[Path, typer.Argument(help="agent spec file or directory")] = Path("agents/venus-tiny"),
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)] = None,
    out: Annotated[Path | None, typer.Option(help="output directory (default runs/<agent>-<UTC time>)")] = None,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="do not stream the stage logs")] = False,
) -> None:
    """Run the agent's whole pipeline locally (default: the embedded tiny agent)."""
    from rich.table import Table

    from pipelines.local import LocalRunError, run_local
    from venus_core.config import SpecError, load_spec

    try:
        spec = load_spec(agent, overrides or [])
    except SpecError as exc:
        fail(str(exc))
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    out = out or Path("runs") / f"{spec.name}-{stamp}"
    out_console.print(f"[bold]venus run[/] agent [cyan]{spec.name}[/] -> {out}")
    try:
        summary = run_local(agent, overrides or [], out, echo=None if quiet else sys.stdout)
    except LocalRunError as exc:
        fail(f"stage {exc.stage} failed:\n{exc.log_tail}\n(summary: {out / 'summary.json'})", code=1)

    table = Table(title=f"{summary['agent']}: {summary['status']} in {summary['seconds']}s")
    for col in ("stage", "status", "seconds", "metrics"):
        table.add_column(col, justify="right" if col == "seconds" else "left")
    for st in summary["stages"]:
        name = st["stage"] + (f" [{st['domain']}]" if st.get("domain") else "")
        metrics = ", ".join(
            f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(st.get("metrics", {}).items())[:6]
        )
        seconds = "-" if st["seconds"] is None else f"{st['seconds']:.1f}"
        table.add_row(name, st["status"], seconds, metrics)
    out_console.print(table)
    reports = sorted(Path(out).rglob("report.html"))
    out_console.print(f"summary: {Path(out) / 'summary.json'}")
    if reports:
        out_console.print(f"evaluation report (open in a browser): {reports[-1]}")
    out_console.print("metrics per stage: metrics.jsonl beside each stage's outputs")
    ml = summary.get("mlflow")
    if ml:
        out_console.print(f"MLflow: run {ml['run_id']} (experiment {ml['experiment']}) in {ml['tracking_uri']}")
        out_console.print(f"  open it: {ml['ui']}  ->  http://127.0.0.1:5000/{ml['run_page']}")
    else:
        out_console.print("MLflow: off (platform.tracking_uri / $MLFLOW_TRACKING_URI is 'none')")


def register(app: typer.Typer) -> None:
    app.command("run")(run)
