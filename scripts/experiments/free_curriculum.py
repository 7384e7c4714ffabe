"""The bootstrap plan with level-1 grounding on boards off the grid too: does level 1 become the match?

The shipped plan teaches level 1 (pick the button of the named colour) and level 2 (by its word) on
3 x 3 grid boards only, and what the model learns there is "which of the nine places holds the named
button": off the grid (`synthesize(layout="free")`: 2-6 buttons of random size and place) the
shipped checkpoint hits 24.5 % at level 1 and 11.9 % at level 2, the random-button level, and level
0 (one button anywhere) stays at ~70 % (docs/learning.md, "Level 0 and boards off the grid"). A
level-1 grounding stage with free boards beside, run after the whole plan, took free level 1 to
87.5-93.5 % and level 0 to 96.7-98.0 %, but as any grounding-only stage at that point it cost level 2
and the navigation format. So the free boards go where level 1 is taught: this script runs
`DEFAULT_STAGES` with stage 3 (the second level-1 grounding run, after stage 2 has broken out of the
random-button level on the grid) given `--free N` fresh level-1 grounding records on free boards
beside its grid screens; the level's replay pool then holds them too (`train.bootstrap.add_to_pool`),
so the later stages replay free boards with the grid ones. `--free-reading N` adds as many level-2
records on free boards to each reading stage (9-11). `--misses2 N` adds N MiniWoB++ recovery episodes
per task with two deliberate misses before the click to every stage that has one-miss ones (13-16):
after the rebuilds a third of the MiniWoB++ steps were invalid, every one the step after two missed
clicks (`envs.miniwob_collect.run_oracle(misses=2)`). `--replay-refusal R` makes R of the replayed
grounding items of the level-2 consolidation stages (15-16) refusals (`Stage.replay_refusal`): the
level's replay pool holds ~10 % (the level-1 boards were synthesised with the default share) and
level-1/2 refusals fall over stages 12-16 (66 -> 36 of 89 and 74 -> 42 of 104 in the rebuild).
`--level3 N` puts level 3 inside the plan rather than after it: N level-3 navigation episodes and N
level-3 grounding records beside every stage from `--level3-from` on (a stage after the plan taught
level-3 clicks and broke the lower levels' live format: `level3_stage.py`). `--brief-from K` makes the
synthesised navigation steps of every stage from K on think briefly ("I tap “Notifications”.", not "The
task is: Turn on Notifications. I am on the Settings screen and need to tap …": most invalid live steps
are a garbled copy of the goal).

`--steps` as `venus bootstrap --steps` (one count per stage, 0 skips it): the plan runs in two halves
on 2 cores, stages 0-8 then 9-16 (`--init WORK/ckpt-8-…/step-…` and `--data WORK`).

    GLIBC_TUNABLES=<docs/learning.md, "Malloc settings"> python scripts/experiments/free_curriculum.py \\
        --out OUT --work WORK --threads 2 --steps 2400,600,4000,2000,600,400,300,600,400,0,0,0,0,0,0,0,0
    venus eval grounding --model OUT --data SUITE/grounding --out EVAL
"""

from __future__ import annotations

import argparse
import json
from dataclasses import replace

from plan_run import add_run_args, run_plan


def plan(free: int, free_reading: int, read_layout: str = "grid", misses2: int = 0,
         replay_refusal: float = 0.0, level3: int = 0, level3_from: int = 12,
         brief_from: int | None = None) -> tuple:  # type: ignore[type-arg]
    """`DEFAULT_STAGES` with the free-layout records beside stage 3 (and the reading stages), the
    reading task of every stage that has one on `read_layout` boards, two-miss recovery episodes
    beside the one-miss ones, the consolidation stages' replay refusal share, and `level3` level-3
    navigation episodes and as many level-3 grounding records beside every stage from `level3_from` on,
    and the brief think style (`data.synth.describe.THINKS`) in every stage from `brief_from` on."""
    from venus_core.train.bootstrap import DEFAULT_STAGES, Extra

    stages = list(DEFAULT_STAGES)
    if free:
        stages[3] = replace(stages[3], extra=(*stages[3].extra, Extra(1, free, kind="grounding", layout="free")))
    if free_reading:
        for k in (9, 10, 11):
            stages[k] = replace(stages[k], extra=(*stages[k].extra, Extra(2, free_reading, kind="grounding",
                                                                          layout="free")))
    if misses2:
        for k, st in enumerate(stages):
            once = [e for e in st.extra if e.misses == 1]
            if once:
                stages[k] = replace(st, extra=(*st.extra, replace(once[0], n=misses2, misses=2)))
    if replay_refusal:
        for k in (15, 16):
            stages[k] = replace(stages[k], replay_refusal=replay_refusal)
    if level3:
        for k in range(level3_from, len(stages)):
            stages[k] = replace(stages[k], extra=(*stages[k].extra, Extra(3, level3),
                                                  Extra(3, level3, kind="grounding")))
    if brief_from is not None:
        stages[brief_from:] = [replace(st, think="brief") for st in stages[brief_from:]]
    return tuple(replace(st, read_layout=read_layout) if st.read else st for st in stages)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_run_args(ap)
    ap.add_argument("--free", type=int, default=8000, help="level-1 free-board grounding records beside stage 3")
    ap.add_argument("--free-reading", type=int, default=0, help="level-2 free-board records beside stages 9-11")
    ap.add_argument("--read-layout", default="grid", choices=("grid", "free", "mixed"),
                    help="the reading task's boards in stages 9-16 (mixed: every other screen off the grid)")
    ap.add_argument("--misses2", type=int, default=0,
                    help="MiniWoB++ recovery episodes per task with two misses, beside the one-miss ones (stages 13-16)")
    ap.add_argument("--replay-refusal", type=float, default=0.0,
                    help="share of refusals among the replayed items of stages 15-16 (0: as the pool holds them)")
    ap.add_argument("--level3", type=int, default=0, help="level-3 navigation episodes and as many level-3 grounding "
                    "records beside every stage from --level3-from on (level 3 inside the plan, not after it)")
    ap.add_argument("--level3-from", type=int, default=12, help="the first stage with level-3 records beside")
    ap.add_argument("--brief-from", type=int, default=None, help="the first stage whose synthesised navigation "
                    "steps think briefly (\"I tap X.\", not \"The task is: <goal>. …\"); default: none")
    ap.add_argument("--steps", required=True, help="one step count per stage, comma-separated (0 skips a stage)")
    args = ap.parse_args()

    from venus_core.train.bootstrap import with_steps

    stages = with_steps(plan(args.free, args.free_reading, args.read_layout, args.misses2, args.replay_refusal,
                             args.level3, args.level3_from, args.brief_from),
                        [int(x) for x in args.steps.split(",")])
    report = run_plan(args, stages)
    print(json.dumps({"wall_s": report["wall_s"], "cpu_s": report["cpu_s"],
                      "stages": [{k: st.get(k) for k in ("index", "steps", "train_wall_s", "synth_wall_s", "held_out")}
                                 for st in report["stages"]]}, indent=2, default=str))


if __name__ == "__main__":
    main()
