"""`venus eval`: grounding and offline-navigation evaluation of one model, and reports over results.

    venus eval grounding  --model M --data D [--limit N] [--batch-size B] [--base-url URL] [--out DIR]
    venus eval nav-offline --model M --data D [--level high|low] [...]
    venus eval online --model M [--target sim-phone:levels=1-3,episodes=20] [--episodes N] [...]
    venus eval report RESULT.json [RESULT.json ...] --out report.html

`--model` is a checkpoint directory, `tiny` (the embedded default, built into `<out>/tiny-model`),
or with `--base-url` a model name served by an OpenAI-compatible server (vLLM). `online` runs the
model live on the simulated phone (see `venus_core.eval.online_sim` for the target string). Each
evaluation writes `<out>/<suite>.json` and `<out>/report.html` and prints the headline rates. `report` builds
one page over several result files in the order given: that is the stage-by-stage comparison
(mid-training → offline RL → merge; TIES vs linear). Heavy imports stay inside the commands.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Any

import typer

from venus_core.cli._common import SET_HELP, fail, out_console
from venus_core.cli.progress import progress_bar

eval_app = typer.Typer(help="Evaluate models: grounding, offline and online navigation, HTML reports.",
                       no_args_is_help=True)

ModelOpt = Annotated[str, typer.Option("--model", "-m", help="checkpoint directory, 'tiny', or served model name")]
DataOpt = Annotated[Path, typer.Option("--data", "-d", help="Venus dataset directory")]
LimitOpt = Annotated[int | None, typer.Option(help="evaluate at most this many samples (episodes for trajectories)")]
BatchOpt = Annotated[int, typer.Option("--batch-size", "-b", help="inference batch size (HTTP: parallel requests)")]
OutOpt = Annotated[Path, typer.Option("--out", "-o", help="output directory")]
UrlOpt = Annotated[str | None, typer.Option(help="OpenAI-compatible API root; key from $VENUS_EVAL_API_KEY")]
SpecOpt = Annotated[Path | None, typer.Option(help="agent spec (model section: architecture, dtype, tiny)")]
SetOpt = Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP)]
NameOpt = Annotated[str | None, typer.Option(help="name of the model in results (default: from --model)")]
TokensOpt = Annotated[int | None, typer.Option(help="max new tokens per answer (default: the evaluator's)")]


def _run(kind: str, model: str, data: Path | str | None, limit: int | None, batch_size: int, out: Path,
         base_url: str | None, spec: Path | None, overrides: list[str] | None, name: str | None,
         max_new_tokens: int | None, **kwargs: Any) -> None:
    from venus_core.config import AgentSpec, SpecError, load_spec
    from venus_core.eval import suites
    from venus_core.eval.report import write_report
    from venus_core.runtime.common import write_json_atomic

    try:
        agent = load_spec(spec, overrides or []) if spec is not None else AgentSpec()
    except (SpecError, ValueError, OSError) as exc:
        fail(str(exc))
    label, ckpt = suites.parse_model_ref(model)
    extra = {"max_new_tokens": max_new_tokens} if max_new_tokens else {}
    try:
        predictor = suites.make_predictor(
            name or label, ckpt, agent.model, base_url=base_url, api_key=os.environ.get("VENUS_EVAL_API_KEY"),
            batch_size=batch_size, temperature=agent.eval.temperature,
            repetition_penalty=agent.eval.repetition_penalty, tiny_dir=out / "tiny-model",
            require_manifest=False)  # a directory the user names: SHA256SUMS checked when present
        if kind == "online":
            suite = "online"
            with progress_bar(f"eval online {predictor.name}", "episodes") as progress:
                res = _online(predictor, str(data) if data else None, limit, progress=progress, **extra)
        else:
            from venus_core.eval.grounding import evaluate_grounding
            from venus_core.eval.navigation import evaluate_nav_offline

            suite = Path(str(data)).name
            evaluate = evaluate_grounding if kind == "grounding" else evaluate_nav_offline
            unit = "samples" if kind == "grounding" else "steps"
            with progress_bar(f"eval {kind} {predictor.name}", unit) as progress:
                res = evaluate(data, predictor, limit=limit, suite=suite, progress=progress,  # type: ignore[arg-type]
                               **kwargs, **extra)
    except (ValueError, OSError, RuntimeError) as exc:
        fail(str(exc))
    res.label = predictor.name
    path = write_json_atomic(out / f"{suite}.json", res.to_dict())
    report = write_report([res], out / "report.html", title=f"Venus evaluation: {predictor.name} on {suite}")
    _print_summary(res)
    out_console.print(f"results: {path}\nreport:  {report}")


def _online(predictor: Any, target_text: str | None, limit: int | None, **extra: Any) -> Any:
    from venus_core.eval.online import evaluate_online
    from venus_core.eval.online_sim import fits, make_envs, parse_target, target_tasks, with_limit

    target = with_limit(parse_target(target_text), limit)
    envs = make_envs(target)
    try:
        return evaluate_online(envs, target_tasks(target), predictor, target=str(target), fits=fits, **extra)
    finally:
        for env in envs:
            env.close()


def _print_summary(res: Any) -> None:
    from rich.table import Table

    from venus_core.eval.report import pct

    table = Table(title=f"{res.display} — {res.suite} ({res.evaluator})")
    for col in ("metric", "k/n", "rate [95% CI]"):
        table.add_column(col)
    for key, value in res.summary.items():
        if isinstance(value, dict) and "value" in value:
            table.add_row(key, f"{value['k']}/{value['n']}", pct(value))
    out_console.print(table)


@eval_app.command("grounding")
def grounding(model: ModelOpt, data: DataOpt, limit: LimitOpt = None, batch_size: BatchOpt = 16,
              out: OutOpt = Path("runs/eval"), base_url: UrlOpt = None, spec: SpecOpt = None,
              overrides: SetOpt = None, name: NameOpt = None, max_new_tokens: TokensOpt = None) -> None:
    """Grounding accuracy (point in box; refusals [-1,-1]) with breakdowns and 95 % intervals."""
    _run("grounding", model, data, limit, batch_size, out, base_url, spec, overrides, name, max_new_tokens)


@eval_app.command("nav-offline")
def nav_offline(model: ModelOpt, data: DataOpt, level: Annotated[str, typer.Option(
                    help="high: goal only (AndroidControl-H, GUI-Odyssey); low: with step instructions")] = "high",
                limit: LimitOpt = None, batch_size: BatchOpt = 16, out: OutOpt = Path("runs/eval"),
                base_url: UrlOpt = None, spec: SpecOpt = None, overrides: SetOpt = None, name: NameOpt = None,
                max_new_tokens: TokensOpt = None) -> None:
    """Offline navigation: type accuracy, step success rate, per-type breakdown and confusion."""
    if level not in ("high", "low"):
        fail(f"--level must be high or low, got {level!r}")
    _run("nav_offline", model, data, limit, batch_size, out, base_url, spec, overrides, name, max_new_tokens,
         level=level)


@eval_app.command("online")
def online(model: ModelOpt, target: Annotated[str, typer.Option(
               help="env and tasks, e.g. sim-phone:levels=1-3,episodes=20,seed=100000,envs=2,transport=adb")] = "sim-phone",
           episodes: Annotated[int | None, typer.Option(help="number of tasks (overrides the target's)")] = None,
           batch_size: BatchOpt = 16, out: OutOpt = Path("runs/eval"), base_url: UrlOpt = None,
           spec: SpecOpt = None, overrides: SetOpt = None, name: NameOpt = None,
           max_new_tokens: TokensOpt = None) -> None:
    """Online task success on the simulated phone (labelled simulated; not AndroidWorld) or on MiniWoB++
    pages in headless Chromium (--target miniwob:tasks=click-button+enter-text,episodes=20)."""
    _run("online", model, target, episodes, batch_size, out, base_url, spec, overrides, name, max_new_tokens)


@eval_app.command("report")
def report(results: Annotated[list[Path], typer.Argument(help="result JSON files, in stage order")],
           out: Annotated[Path, typer.Option("--out", "-o", help="HTML file to write")] = Path("runs/eval/report.html"),
           title: Annotated[str, typer.Option(help="page title")] = "Venus evaluation",
           viewer: Annotated[int, typer.Option(help="samples per result in the viewer")] = 24) -> None:
    """One HTML report over several results (stage-by-stage comparison when they share a dataset)."""
    from venus_core.eval.report import write_report
    from venus_core.eval.results import load_result

    try:
        loaded = [load_result(p) for p in results]
        path = write_report(loaded, out, title=title, viewer_limit=viewer)
    except (ValueError, OSError) as exc:
        fail(str(exc))
    out_console.print(f"report: {path}")


def register(app: typer.Typer) -> None:
    """Mount the `eval` group on a typer app."""
    app.add_typer(eval_app, name="eval")
