"""Level 2 in the bootstrap: the reading stages, then which navigation stages bring the action format back?

Continues a bootstrap checkpoint (default: the shipped one) through the plan's nine stages (skipped;
their grounding data is the replay pool) and four more, with the indices, seeds and checkpoint
directories one 13-stage plan would give them:

- 9, 10: level-2 grounding with the reading task beside it (`Stage.read`), 4,000 fresh level-0
  records beside the stage's 8,000 level-2 ones, instruction head, 20 % replay of levels 0-1,
  lr 1e-3; two runs of the cosine schedule. They teach the choice by label but cost the UI-Venus
  action format (docs/learning.md);
- 11, 12: level-2 navigation (level-2 episodes, 2,000 level-0 and 2,000 level-1 ones beside them,
  grounding replay of levels 0-2, instruction head, reading beside), in one of two arms:
  `A`: the shipped recipe's format stage first (stage 4: the spec's mixture, replay 30 %, lr 1e-3,
  no attention supervision), then a stage-8-like stage (50 % grounding rows, replay 50 %, lr 5e-4,
  attention supervision, MiniWoB++ oracle episodes of click-test / click-test-2 / click-color);
  `B`: two stage-8-like stages (the first without the MiniWoB++ episodes);
  `C`: the shipped recipe's stages 4 and 5 at level 2: the format stage, then the same stage with
  attention supervision on fresh level-2 episodes (seed 1201) and the MiniWoB++ episodes beside;
- 13 (`--third 70` or `--third 90`): one more stage-8-like stage on fresh level-2 episodes (seed
  1204) with 70 % grounding rows and the MiniWoB++ episodes, or 90 % without them; replay 60 %;
  `--third again`: the arm's second navigation stage once more, on fresh level-2 episodes (seed 1204).

`--refusal R` raises the refusal share of the synthesised grounding records of every stage (and
gives the navigation stages 1,000 fresh level-0 and level-1 grounding records each); `--nav-refusal R`
sets the navigation stages' share apart from the reading stages'; `--miniwob N`
sets the MiniWoB++ episodes per task, `--miniwob-first` puts them in the first navigation stage too,
`--miss N` adds N recovery episodes per task beside them (a deliberate miss kept as history, then the click);
`--grounding-runs K` runs the reading stages' schedule K times instead of twice (K more step counts).
`--steps` gives the stages' steps, 4 or with `--third` 5 (0 skips one: `--init WORK/ckpt-10-level2-grounding/step-N
--steps 0,0,600,400` continues after the grounding stages, as one run would); `--data DIR` symlinks
already synthesised `level*` / `extra*` directories into the work directory. Score the output with
`venus eval grounding --model OUT --data SUITE/grounding` and `venus eval online --model OUT
--target sim-phone:levels=L,episodes=200,max_steps=5`.

    OMP_NUM_THREADS=1 python scripts/experiments/reading_consolidate.py --arm A --out OUT --work WORK
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace
from pathlib import Path

SHIPPED = Path(__file__).resolve().parents[2] / "venus_core" / "models" / "assets" / "venus-tiny-bootstrap"
SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--arm", choices=("A", "B", "C"), required=True)
    ap.add_argument("--init", default=str(SHIPPED), help="a directory with model.safetensors to start from")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--data", action="append", default=[], help="a work directory whose level*/extra* data to reuse")
    ap.add_argument("--steps", default="4000,4000,600,400", help="steps of stages 9-12[-13] (0 skips one)")
    ap.add_argument("--third", choices=("none", "70", "90", "again"), default="none",
                    help="stage 13: 70 %% grounding rows with the MiniWoB++ episodes, or 90 %% without them; "
                         "or `again`: the second navigation stage once more on fresh level-2 episodes")
    ap.add_argument("--refusal", type=float, default=0.0,
                    help="refusal share of the stages' synthesised grounding records (0 = the default 10 %%); "
                         "with it the navigation stages also take 1,000 fresh level-0 and level-1 grounding records each")
    ap.add_argument("--nav-refusal", type=float, default=None,
                    help="the navigation stages' refusal share, where it differs from --refusal's (0 = the default 10 %%)")
    ap.add_argument("--miniwob", type=int, default=300, help="MiniWoB++ oracle episodes per task in the navigation stages")
    ap.add_argument("--grounding-runs", type=int, default=2, help="runs of the reading stages' cosine schedule (stages 9..)")
    ap.add_argument("--attend-grounding", type=float, default=0.0,
                    help="arm C: the attention stage's grounding share (the rest navigation; 0 = the spec mixture)")
    ap.add_argument("--miniwob-first", action="store_true", help="the MiniWoB++ episodes in the first navigation stage too")
    ap.add_argument("--miss", type=int, default=0,
                    help="MiniWoB++ recovery episodes per task beside the MiniWoB++ episodes (a deliberate miss kept as "
                         "history only, then the oracle's click; miniwob_collect.run_oracle(misses=1))")
    args = ap.parse_args()

    import torch

    from venus_core.config.loader import load_spec
    from venus_core.config.spec import MixtureSpec
    from venus_core.train.bootstrap import (DEFAULT_STAGES, GROUNDING_ONLY, MINIWOB_EASY, Extra, Stage, bootstrap,
                                            reuse_stage_data)

    torch.set_num_threads(1)
    nav_refusal = args.refusal if args.nav_refusal is None else args.nav_refusal
    half = MixtureSpec(perception=0.0, vqa=0.0, grounding=0.5, navigation=0.5)
    beside = (Extra(0, 2000), Extra(1, 2000))
    if nav_refusal:
        beside += (Extra(0, 1000, kind="grounding"), Extra(1, 1000, kind="grounding"))
    easy = MINIWOB_EASY
    miniwob: tuple[Extra, ...] = (Extra(0, args.miniwob, "web", miniwob=easy),)
    if args.miss:
        miniwob += (Extra(0, args.miss, "web", miniwob=easy, misses=1),)
    last = Stage(2, "navigation", 4000, 400, half, head=1.0, replay=0.5, lr=5e-4, attend=1.0, read=1.0,
                 extra=(*beside, *miniwob), refusal=nav_refusal)
    first_extra = (*beside, *miniwob) if args.miniwob_first else beside
    format_stage = Stage(2, "navigation", 4000, 600, None, head=1.0, replay=0.3, lr=1e-3, read=1.0,
                         extra=first_extra, refusal=nav_refusal)
    first = replace(last, extra=first_extra) if args.arm == "B" else format_stage
    if args.arm == "C":
        last = replace(first, steps=400, attend=1.0, seed=1201, extra=(*beside, *miniwob))
        if args.attend_grounding:
            g = args.attend_grounding
            last = replace(last, mixture=MixtureSpec(perception=0.0, vqa=0.0, grounding=g, navigation=1.0 - g))
    reading = Stage(2, "grounding", 8000, 4000, GROUNDING_ONLY, head=1.0, replay=0.2, lr=1e-3, read=1.0,
                    extra=(Extra(0, 4000),), refusal=args.refusal)
    if args.grounding_runs < 1:
        raise SystemExit(f"--grounding-runs: need >= 1, got {args.grounding_runs}")
    stages_ = [reading] * args.grounding_runs + [first, last]
    if args.third == "again":
        stages_.append(replace(last, seed=1204))
    elif args.third != "none":
        g, n = {"70": (0.7, 0.3), "90": (0.9, 0.1)}[args.third]
        stages_.append(replace(last, mixture=MixtureSpec(perception=0.0, vqa=0.0, grounding=g, navigation=n),
                               replay=0.6, seed=1204, extra=(*beside, *miniwob) if args.third == "70" else beside))
    steps = [int(k) for k in args.steps.split(",")]
    if len(steps) == len(stages_) - 1 and args.third != "none":
        steps.append(400)
    if len(steps) != len(stages_) or min(steps) < 0 or not any(steps):
        raise SystemExit(f"--steps: need {len(stages_)} step counts >= 0, not all 0, got {args.steps}")
    plan = tuple(replace(st, steps=k) for st, k in zip(stages_, steps))
    work = Path(args.work)
    reuse_stage_data(work, [Path(d) for d in args.data])
    stages = tuple(replace(s, steps=0) for s in DEFAULT_STAGES[:9]) + plan
    report = bootstrap(args.out, load_spec(SPEC), work_dir=work, stages=stages, init_checkpoint=args.init)
    for st in report["stages"]:
        print(json.dumps({"index": st["index"], "kind": st["kind"], "steps": st["steps"],
                          "held_out": {k: v["value"] for k, v in st["held_out"].items()},
                          "cpu_s": st.get("train_cpu_s")}))


if __name__ == "__main__":
    main()
