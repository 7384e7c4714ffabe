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

from plan_run import add_run_args, run_plan


def level3_stages(steps: list[int], *, grounding: list[float], replay: float, lr: list[float],
                  attend: float, read: float, grounding3: int, beside: int, refusal: float, seed: int,
                  miniwob: int = 0) -> tuple:  # type: ignore[type-arg]
    """The level-3 stages: one per step count, fresh level-3 episodes (seed, seed + 1, …) each; `grounding`
    (each batch's share of grounding rows) and `lr` one value per stage."""
    from venus_core.config.spec import MixtureSpec
    from venus_core.train.bootstrap import MINIWOB_EASY as easy
    from venus_core.train.bootstrap import Extra, Stage

    if len(grounding) != len(steps) or len(lr) != len(steps):
        raise ValueError(f"level3_stages: {len(steps)} stages, {len(grounding)} grounding shares, {len(lr)} learning rates")
    mixes = [MixtureSpec(perception=0.0, vqa=0.0, grounding=g, navigation=round(1.0 - g, 6)) for g in grounding]
    extra = (Extra(3, grounding3, kind="grounding"),
             *(Extra(level, beside) for level in (0, 1, 2) if beside),
             *((Extra(0, miniwob, "web", miniwob=easy), Extra(0, miniwob // 2, "web", miniwob=easy, misses=1))
               if miniwob else ()))
    return tuple(Stage(3, "navigation", 4000, k, mixes[i], head=1.0, replay=replay, lr=lr[i], attend=attend,
                       read=read, extra=extra, refusal=refusal, seed=seed + i) for i, k in enumerate(steps))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap, init_help="a seventeen-stage checkpoint (a directory with model.safetensors)")
    ap.add_argument("--steps", default="800", help="steps of each level-3 stage, comma-separated")
    ap.add_argument("--grounding", default="0.6", help="share of each batch that is grounding rows (one, or one per "
                    "stage, comma-separated)")
    ap.add_argument("--replay", type=float, default=0.5, help="share of the grounding rows replayed from levels 0-2")
    ap.add_argument("--lr", default="5e-4", help="learning rate (one, or one per stage, comma-separated)")
    ap.add_argument("--attend", type=float, default=1.0)
    ap.add_argument("--read", type=float, default=0.0, help="weight of the level-2 reading task beside")
    ap.add_argument("--grounding3", type=int, default=4000, help="level-3 grounding records beside")
    ap.add_argument("--beside", type=int, default=1000, help="level-0, 1 and 2 navigation episodes beside, each")
    ap.add_argument("--miniwob", type=int, default=300, help="MiniWoB++ oracle episodes per easy task beside "
                    "(and half as many recovery episodes); 0 = none")
    ap.add_argument("--refusal", type=float, default=0.3, help="share of refusals in the synthesised grounding records")
    ap.add_argument("--seed", type=int, default=1301, help="synthesis seed of the first stage's level-3 episodes")
    args = ap.parse_args()
    steps = [int(x) for x in args.steps.split(",")]
    shares = [float(x) for x in args.grounding.split(",")]
    rates = [float(x) for x in args.lr.split(",")]
    if not all(0.0 < g < 1.0 for g in shares):
        ap.error("--grounding must be in (0, 1): navigation rows stay in every batch")
    for name, vals in (("--grounding", shares), ("--lr", rates)):
        if len(vals) not in (1, len(steps)):
            ap.error(f"{name}: one value or one per stage ({len(steps)}), got {len(vals)}")

    from venus_core.train.bootstrap import DEFAULT_STAGES, with_steps

    per_stage = {name: vals * len(steps) if len(vals) == 1 else vals for name, vals in (("g", shares), ("lr", rates))}
    extra = level3_stages(steps, grounding=per_stage["g"], replay=args.replay, lr=per_stage["lr"], attend=args.attend,
                          read=args.read, grounding3=args.grounding3, beside=args.beside, refusal=args.refusal,
                          seed=args.seed, miniwob=args.miniwob)
    report = run_plan(args, with_steps(DEFAULT_STAGES + extra, [0] * len(DEFAULT_STAGES) + steps))
    print(json.dumps([{k: st.get(k) for k in ("index", "steps", "train_wall_s", "train_cpu_s", "held_out")}
                      for st in report["stages"]], indent=2, default=str))


if __name__ == "__main__":
    main()
