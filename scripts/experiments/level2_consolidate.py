"""A level-2 consolidation stage after the bootstrap's last stage: grounding back without losing the live click?

The fifteen-stage plan ends with two attention stages at level 2 (the spec's mixture, replay 30 %,
lr 1e-3): they take the live level-2 click from the random-button level to ~75 % and cost held-out
grounding (level 2 85 -> 64 %, level 0 81 -> 64 %, level-1 refusals 66 -> 39 of 89; docs/learning.md).
At level 1 the same loss was won back by two consolidation stages (stages 6-7: lr 5e-4, 60 % then
90 % of each batch grounding rows, attention supervision still on, navigation rows in every batch).
This script runs that stage at level 2 as a sixteenth stage (index 15: its own seeds and checkpoint
directory; `--steps 600,600` a seventeenth too, on fresh episodes), continuing a fifteen-stage
checkpoint (`--init`) with the plan's first fifteen stages skipped (their grounding data is the
replay pool, as one run would have it). Two stages at 90 % are now the plan's stages 15-16
(docs/learning.md, "Level-2 consolidation stages"):

- the level-2 attention stage's data (fresh level-2 episodes, seed `--seed`; level-0/1 episodes and
  fresh level-0/1 grounding records beside; MiniWoB++ oracle and recovery episodes), with
- `--grounding G` of each batch grounding rows (the rest navigation), `--replay R`, `--lr`,
  `--steps`, `--refusal` (the share of refusals in its synthesised grounding records; the plan's
  level-2 stages use 0.3), attention supervision `--attend` (default 1.0).

`--level0-grounding N` sets the level-0 grounding records beside (the plan: 1,000) and `--free N` adds N
level-1 and N level-2 grounding records on boards off the grid (`layout="free"`); both were tried as
a stage 17 and not kept (docs/learning.md, "Level 0 and boards off the grid").

`--data DIR` symlinks already synthesised `level*` / `extra*` directories into the work directory
(the plan's stages 0-14 data of an earlier run, so the replay pool is the one the plan had).

    python scripts/experiments/level2_consolidate.py --init CKPT15 --out OUT --work WORK --data EARLIER_WORK \\
        --grounding 0.9 --steps 600
    venus eval grounding --model OUT --data SUITE/grounding --out EVAL
    venus eval online --model OUT --target sim-phone:levels=2,episodes=200,max_steps=5 --out EVAL-L2
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from plan_run import add_run_args, run_plan


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap, threads=1, init_help="a fifteen-stage checkpoint (a directory with model.safetensors; the one "
                 "shipped before stages 15-16: `git show ac33d77:venus_core/models/assets/venus-tiny-bootstrap/…`)")
    ap.add_argument("--grounding", type=float, default=0.9, help="share of each batch that is grounding rows")
    ap.add_argument("--replay", type=float, default=0.6)
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--steps", default="600", help="steps of each consolidation stage, comma-separated: "
                    "`600,600` runs two (indices 15, 16; fresh episodes each); 0 skips one (continue with --init)")
    ap.add_argument("--seed", type=int, default=1205, help="synthesis seed of the first stage's level-2 episodes (+1 each)")
    ap.add_argument("--refusal", type=float, default=0.3)
    ap.add_argument("--attend", type=float, default=1.0)
    ap.add_argument("--free", type=int, default=0, help="level-1 and level-2 grounding records each on boards "
                    "off the grid (`layout=free`: buttons of random size and place) beside; 0 = none (the plan)")
    ap.add_argument("--level0-grounding", type=int, default=1000, help="level-0 grounding records beside (the plan's "
                    "stages: 1,000; level 0 is the only free-layout board, the others are grids)")
    args = ap.parse_args()
    if not 0.0 < args.grounding < 1.0:
        ap.error("--grounding must be in (0, 1): navigation rows stay in every batch")

    from venus_core.config.spec import MixtureSpec
    from venus_core.train.bootstrap import DEFAULT_STAGES, Extra, with_steps

    base = DEFAULT_STAGES[:15]  # the plan before its consolidation stages (since shipped as stages 15-16:
    # `--grounding 0.9 --steps 600,600` with the defaults below gives them field by field)
    last = base[-1]
    mix = MixtureSpec(perception=0.0, vqa=0.0, grounding=args.grounding, navigation=round(1.0 - args.grounding, 6))
    steps = [int(x) for x in args.steps.split(",")]
    extra = tuple(replace(ex, n=args.level0_grounding) if (ex.level, ex.kind) == (0, "grounding") else ex
                  for ex in last.extra)
    if args.free:
        extra += (Extra(1, args.free, kind="grounding", layout="free"), Extra(2, args.free, kind="grounding", layout="free"))
    consolidate = tuple(replace(last, mixture=mix, replay=args.replay, lr=args.lr, seed=args.seed + i,
                                refusal=args.refusal, attend=args.attend, extra=extra) for i in range(len(steps)))
    report = run_plan(args, with_steps(base + consolidate, [0] * len(base) + steps))
    st = report["stages"][-1]
    print(json.dumps({"index": st["index"], "steps": st["steps"], "train_cpu_s": st["train_cpu_s"],
                      "held_out": st["held_out"]}, indent=2))


if __name__ == "__main__":
    main()
