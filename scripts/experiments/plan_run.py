"""What the bootstrap-plan experiment scripts share: the run's own arguments, and running a plan.

Every script here that trains stages of the bootstrap plan (free_curriculum, level2_consolidate,
level3_stage) takes the same output, work and reuse arguments and runs its stages the same way:
torch threads set, the earlier work directories' stage data linked into WORK
(`train.bootstrap.reuse_stage_data`), then `train.bootstrap.bootstrap` on the venus-tiny spec from
`--init` (a stage checkpoint or a seventeen-stage model directory).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def add_run_args(ap: argparse.ArgumentParser, *, init_help: str | None = None, threads: int = 2) -> None:
    """--out, --work, --data, --init (required when `init_help` is given), --threads, --eval-limit."""
    ap.add_argument("--out", required=True, help="the trained model's directory")
    ap.add_argument("--work", required=True, help="the stages' data and checkpoints")
    ap.add_argument("--data", action="append", default=[], help="a work directory whose level*/extra* data to reuse")
    if init_help is not None:
        ap.add_argument("--init", required=True, help=init_help)
    else:
        ap.add_argument("--init", default=None, help="continue from a stage checkpoint (WORK/ckpt-K-…/step-N)")
    ap.add_argument("--threads", type=int, default=threads)
    ap.add_argument("--eval-limit", type=int, default=100, help="held-out samples per stage report")


def run_plan(args: argparse.Namespace, stages: tuple[Any, ...]) -> dict[str, Any]:
    """Train `stages` (a whole plan, its skipped stages at 0 steps) as `add_run_args`' arguments say."""
    import torch

    from venus_core.config import load_spec
    from venus_core.train.bootstrap import bootstrap, reuse_stage_data

    torch.set_num_threads(args.threads)
    work = Path(args.work)
    reuse_stage_data(work, [Path(d) for d in args.data])
    return bootstrap(args.out, load_spec(str(SPEC), []), work_dir=work, stages=stages,
                     eval_limit=args.eval_limit, init_checkpoint=args.init)
