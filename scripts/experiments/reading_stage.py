"""Does teaching the vision tower to read let level-2 grounding learn the choice by label?

Level 2 ("click the "Send" button" among 3-9 labelled buttons) stays at the random-button level:
the tiny model's visual tokens carry a button's colour, not its word (docs/learning.md). This runs
the bootstrap's own stages (`venus_core.train.bootstrap`) from a checkpoint (default: the shipped
bootstrap) through one level-2 grounding stage (instruction head, 20 % replay of levels 0-1,
lr 1e-3, the stage the shipped recipe dropped), in one of two arms:

- `seq`: first a reading stage (`Stage(kind="reading")`: the vision tower alone learns the
  buttons' words on fresh level-2 boards, `train.reading`), then the grounding stage;
- `joint`: the grounding stage with the reading task beside it (`Stage.read`, its weight), so the
  grounding loss keeps the tower's position code while it learns to read (`seq --read W` does both:
  the reading stage, then grounding with reading beside it).

`--level0 N` adds N fresh level-0 grounding records to the stage's own data (level 0 is ~4 % of
its rows through the replay alone). Levels 0 and 1 are synthesised only as the replay pool
(skipped stages). Prints the stages' report lines; score the output on the held-out suites with
`venus eval grounding --model OUT --data SUITES/grounding`.

    OMP_NUM_THREADS=1 python scripts/experiments/reading_stage.py --arm joint --read 1.0 --steps 4000 --out OUT --work WORK
    OMP_NUM_THREADS=1 python scripts/experiments/reading_stage.py --arm seq --read-steps 6000 --steps 6000 --out OUT --work WORK
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
    ap.add_argument("--arm", choices=("seq", "joint"), required=True)
    ap.add_argument("--init", default=str(SHIPPED), help="a directory with model.safetensors to start from")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--steps", type=int, default=4000, help="level-2 grounding steps")
    ap.add_argument("--read", type=float, default=None,
                    help="the reading task's weight beside grounding (default: joint 1.0, seq 0)")
    ap.add_argument("--read-steps", type=int, default=6000, help="seq: reading-stage steps")
    ap.add_argument("--replay", type=float, default=0.2)
    ap.add_argument("--level0", type=int, default=0, help="fresh level-0 grounding records added to the stage")
    args = ap.parse_args()

    import torch

    from venus_core.config.loader import load_spec
    from venus_core.train.bootstrap import DEFAULT_STAGES, GROUNDING_ONLY, Extra, Stage, bootstrap

    torch.set_num_threads(1)
    pool = tuple(replace(s, steps=0) for s in DEFAULT_STAGES[:4])  # levels 0-1: the replay pool only
    extra = (Extra(0, args.level0),) if args.level0 else ()
    grounding = Stage(2, "grounding", 8000, args.steps, GROUNDING_ONLY, head=1.0, replay=args.replay, lr=1e-3,
                      read=args.read if args.read is not None else (1.0 if args.arm == "joint" else 0.0), extra=extra)
    reading = (Stage(2, "reading", 16, args.read_steps, lr=1e-3),) if args.arm == "seq" else ()
    report = bootstrap(args.out, load_spec(SPEC), work_dir=args.work, stages=pool + reading + (grounding,),
                       init_checkpoint=args.init)
    for st in report["stages"]:
        print(json.dumps({"index": st["index"], "kind": st["kind"], "steps": st["steps"], "read": st.get("read"),
                          "held_out": {k: v["value"] for k, v in st["held_out"].items()},
                          "cpu_s": st.get("train_cpu_s")}))


if __name__ == "__main__":
    main()
