"""`venus bootstrap`: pre-train the tiny base model on the synthetic curriculum (see train/bootstrap.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from venus_core.cli._common import SET_HELP, fail, out_console
from venus_core.cli.progress import progress_bar


def bootstrap_cmd(
    output: Annotated[Path, typer.Option("-o", "--out", help="directory for the checkpoint (must be empty or absent)")],
    spec: Annotated[Path, typer.Option("--spec", help="agent spec whose model.tiny / mid_train settings are used")] = Path("agents/venus-tiny"),
    work: Annotated[Path | None, typer.Option("--work", help="scratch directory for data and stage checkpoints (default: OUT.work)")] = None,
    scale: Annotated[float, typer.Option("--scale", min=0.0001, help="multiply every stage's steps (and data, up to 1)")] = 1.0,
    steps: Annotated[str | None, typer.Option("--steps", help="comma-separated optimizer steps per stage, e.g. 2400,600,4000,2000,600; 0 skips a stage; data sizes stay those of --scale, so watch passes_over_data in the report")] = None,
    init: Annotated[Path | None, typer.Option("--init", help="continue from a stage checkpoint (WORK/ckpt-K/step-N) instead of random init")] = None,
    reuse_data: Annotated[list[Path] | None, typer.Option("--reuse-data", help="an earlier bootstrap work directory whose synthesised stage data (level*, extra*) to link into --work instead of making it again (repeatable; with --init, the stages then train on the data one run would have had)")] = None,
    eval_limit: Annotated[int, typer.Option("--eval-limit", min=1, help="held-out samples per domain per stage")] = 100,
    threads: Annotated[int | None, typer.Option("--threads", min=1, help="torch CPU threads (default: OMP_NUM_THREADS, else 1); the weights depend on it (float order), so the shipped checkpoint's command names it")] = None,
    overrides: Annotated[list[str] | None, typer.Option("--set", "-s", help=SET_HELP + " (e.g. model.tiny.hidden_size=256)")] = None,
) -> None:
    """Pre-train the tiny model through curriculum levels 0 (coarse, then exact) → 1 → 2 (grounding, then navigation) → 3 (about an hour of one core at scale 1)."""
    import os

    import torch

    from venus_core.config import SpecError, load_spec
    from venus_core.train.bootstrap import DEFAULT_STAGES, bootstrap, reuse_stage_data, scaled, with_steps
    from venus_core.train.tracker import JsonlTracker, ProgressTracker, Tracker

    torch.set_num_threads(threads or int(os.environ.get("OMP_NUM_THREADS", "1")))
    try:
        stages = scaled(DEFAULT_STAGES, scale)
        if steps:
            stages = with_steps(stages, [int(x) for x in steps.split(",")])
        agent = load_spec(str(spec), overrides or [])
        work_dir = work or output.with_name(output.name + ".work")
        if reuse_data:
            linked = reuse_stage_data(work_dir, list(reuse_data))
            out_console.print(f"linked {len(linked)} stage data directories into {work_dir}")
        with progress_bar(f"bootstrap {len(stages)} stages", "steps") as progress:
            tracker: Tracker = JsonlTracker(output.with_name(output.name + ".metrics.jsonl"))
            if progress is not None:  # the stages' step numbers run on: one bar over all of them
                tracker = ProgressTracker(tracker, progress, sum(st.steps for st in stages))
            report = bootstrap(output, agent, work_dir=work_dir,
                               stages=stages, eval_limit=eval_limit, init_checkpoint=init, tracker=tracker)
    except (FileExistsError, FileNotFoundError, ValueError, SpecError) as exc:
        fail(str(exc))
    for st in report["stages"]:
        rates = ", ".join(f"{k} {v['value']:.1%} (n={v['n']})" for k, v in st["held_out"].items())
        out_console.print(f"level {st['level']} {st['kind']}: {st['steps']} steps, {st['train_cpu_s']:.0f} CPU-s; {rates}")
    out_console.print(f"wrote {output} in {report['wall_s']:.0f} s wall, {report['cpu_s']:.0f} s CPU")


def register(app: typer.Typer) -> None:
    app.command("bootstrap")(bootstrap_cmd)
