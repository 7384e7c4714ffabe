"""A level-3 stage after the bootstrap's seventeen: does the model learn to click on app screens?

The bootstrap teaches levels 0-2 (board screens, 128 x 128); level 3 (the synthetic world's real
app screens: settings lists, home screens of app icons, messages, shop, forms; 256 x 256 phones,
320 x 200 web) comes only in mid-training's four-domain mixture, and every model of the pipeline
clicks the right element on 1-10 % of the held-out level-3 Click steps (docs/learning.md). Offline
navigation GRPO then has nothing to raise: its groups almost never hold a correct Click, and its
history alignment pools no Click thoughts. (An early plan trained the level-3 mixture at lr 2e-3
with no replay and lost levels 0-1: level 0 86 -> 40 %.)

This script runs one or more level-3 stages (index 17 on, fresh episodes each) after a seventeen-stage
checkpoint (`--init`), the plan's stages skipped (their grounding data is the replay pool, as one
run would have it): level-3 navigation episodes (Click then Finished, and the level's other actions),
`--grounding3 N` level-3 grounding records and `--beside N` level-0/1/2 navigation episodes beside
(the live click of the lower levels), `--miniwob N` MiniWoB++ oracle episodes per task and half as many
recovery episodes (the plan's level-2 stages have 300 + 150: the web click), `--grounding G` of each batch grounding rows, replay of the
levels 0-2 grounding pools `--replay R`, attention supervision `--attend`, the instruction head on.

    python scripts/experiments/level3_stage.py --init venus_core/models/assets/venus-tiny-bootstrap \\
        --out OUT --work WORK --data EARLIER_WORK --steps 800
    venus eval nav-offline --model OUT --data SUITE/navigation --out EVAL
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def level3_stages(steps: list[int], *, grounding: float, replay: float, lr: float, attend: float, read: float,
                  grounding3: int, beside: int, refusal: float, seed: int, miniwob: int = 0) -> tuple:  # type: ignore[type-arg]
    """The level-3 stages: one per step count, fresh level-3 episodes (seed, seed + 1, …) each."""
    from venus_core.config.spec import MixtureSpec
    from venus_core.train.bootstrap import Extra, Stage

    mix = MixtureSpec(perception=0.0, vqa=0.0, grounding=grounding, navigation=round(1.0 - grounding, 6))
    easy = ("click-test", "click-test-2", "click-color")
    extra = (Extra(3, grounding3, kind="grounding"),
             *(Extra(level, beside) for level in (0, 1, 2) if beside),
             *((Extra(0, miniwob, "web", miniwob=easy), Extra(0, miniwob // 2, "web", miniwob=easy, misses=1))
               if miniwob else ()))
    return tuple(Stage(3, "navigation", 4000, k, mix, head=1.0, replay=replay, lr=lr, attend=attend, read=read,
                       extra=extra, refusal=refusal, seed=seed + i) for i, k in enumerate(steps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--init", required=True, help="a seventeen-stage checkpoint (a directory with model.safetensors)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--data", action="append", default=[], help="a work directory whose level*/extra* data to reuse")
    ap.add_argument("--steps", default="800", help="steps of each level-3 stage, comma-separated")
    ap.add_argument("--grounding", type=float, default=0.6, help="share of each batch that is grounding rows")
    ap.add_argument("--replay", type=float, default=0.5, help="share of the grounding rows replayed from levels 0-2")
    ap.add_argument("--lr", type=float, default=5e-4)
    ap.add_argument("--attend", type=float, default=1.0)
    ap.add_argument("--read", type=float, default=0.0, help="weight of the level-2 reading task beside")
    ap.add_argument("--grounding3", type=int, default=4000, help="level-3 grounding records beside")
    ap.add_argument("--beside", type=int, default=1000, help="level-0, 1 and 2 navigation episodes beside, each")
    ap.add_argument("--miniwob", type=int, default=300, help="MiniWoB++ oracle episodes per easy task beside "
                    "(and half as many recovery episodes); 0 = none")
    ap.add_argument("--refusal", type=float, default=0.3, help="share of refusals in the synthesised grounding records")
    ap.add_argument("--seed", type=int, default=1301, help="synthesis seed of the first stage's level-3 episodes")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-limit", type=int, default=100)
    args = ap.parse_args()
    if not 0.0 < args.grounding < 1.0:
        ap.error("--grounding must be in (0, 1): navigation rows stay in every batch")

    import torch

    from venus_core.config import load_spec
    from venus_core.train.bootstrap import DEFAULT_STAGES, bootstrap, reuse_stage_data, with_steps

    torch.set_num_threads(args.threads)
    steps = [int(x) for x in args.steps.split(",")]
    extra = level3_stages(steps, grounding=args.grounding, replay=args.replay, lr=args.lr, attend=args.attend,
                          read=args.read, grounding3=args.grounding3, beside=args.beside, refusal=args.refusal,
                          seed=args.seed, miniwob=args.miniwob)
    stages = with_steps(DEFAULT_STAGES + extra, [0] * len(DEFAULT_STAGES) + steps)
    work = Path(args.work)
    reuse_stage_data(work, [Path(d) for d in args.data])
    report = bootstrap(args.out, load_spec(str(SPEC), []), work_dir=work, stages=stages,
                       eval_limit=args.eval_limit, init_checkpoint=args.init)
    print(json.dumps([{k: st.get(k) for k in ("index", "steps", "train_wall_s", "train_cpu_s", "held_out")}
                      for st in report["stages"]], indent=2, default=str))


if __name__ == "__main__":
    main()
