"""Shared pieces of the flywheel tests: small runs on in-process or leased sim phones, and scripted
policies whose success does or does not depend on the task's parameters."""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_core.actions.space import Click, Finished
from venus_core.data.store import DatasetWriter
from venus_core.envs import SimPhoneEnv, synth_plan
from venus_core.flywheel.expanders import Expander
from venus_core.flywheel.loop import Flywheel, Settings
from venus_core.flywheel.records import SOURCE, ImageMemo
from venus_core.flywheel.rules_expander import RuleExpander
from venus_core.flywheel.seeds import Seed
from venus_core.flywheel.space import SimPhoneSpace
from venus_core.rl.online.devices import EnvSource, LocalEnvs
from venus_core.rl.online.policy import answer_text
from venus_core.rl.online.rollout import Completion, StepRequest

SIZE = (128, 128)
BOARD_SEEDS = [Seed(f"sim-phone:board:level={lv}", "sim-phone", "board", lv, "Click the <colour> button")
               for lv in (0, 1)]


class PositionalPolicy:
    """Plays the plan when the target's first click lies in the left half of the screen (x < 500),
    else clicks a corner where no button is: success depends on a task parameter."""

    name = "positional"
    version = 0

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        out = []
        for r in requests:
            plan = synth_plan(r.task)
            if r.step > 0:
                out.append(Completion(answer_text(Finished(content=""))))
            elif plan[0].box[0] < 500:  # type: ignore[attr-defined]
                out.append(Completion(answer_text(plan[0])))
            else:
                out.append(Completion(answer_text(Click(box=(3, 3)))))
        return out


class CoinPolicy:
    """Succeeds on a seeded coin per task, whatever the task: nothing for the expander to learn."""

    name = "coin"
    version = 0

    def __init__(self, p: float = 0.4, seed: int = 0) -> None:
        self.p, self.seed = p, seed

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        out = []
        for r in requests:
            if r.step > 0:
                out.append(Completion(answer_text(Finished(content=""))))
            elif random.Random(f"{self.seed}:{r.episode}").random() < self.p:
                out.append(Completion(answer_text(synth_plan(r.task)[0])))
            else:
                out.append(Completion(answer_text(Click(box=(3, 3)))))
        return out


def space(per_round: int = 96, first_seed: int = 30000) -> SimPhoneSpace:
    return SimPhoneSpace([0, 1], SIZE, per_round, first_seed, max_steps=3)


def local_source() -> LocalEnvs:
    return LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=SIZE), "mobile")


def settings(rounds: int = 3, tasks: int = 24, **kw: Any) -> Settings:
    base = dict(rounds=rounds, tasks_per_round=tasks, devices=2, history_len=5, call_timeout_s=20.0,
                dedupe_similarity=0.9, dedupe_scope="start", policy_revision="test")
    return Settings(**{**base, **kw})  # type: ignore[arg-type]


def run_flywheel(out: Path, policy: Any, *, source: EnvSource | None = None, expander: Expander | None = None,
                 sp: SimPhoneSpace | None = None, seeds: Sequence[Seed] = BOARD_SEEDS, judge: Any = None,
                 memo: ImageMemo | None = None, **kw: Any) -> tuple[dict[str, Any], Flywheel]:
    """A whole run into `out/dataset` and `out/tasks.jsonl`; (summary, the flywheel)."""
    sp = sp or space()
    own = source is None
    source = source or local_source()
    memo = memo or ImageMemo()
    try:
        with DatasetWriter(out / "dataset", sources=[SOURCE], overwrite=True) as writer, \
                open(out / "tasks.jsonl", "w", encoding="utf-8") as log:
            fw = Flywheel(settings(**kw), seeds, sp, expander or RuleExpander(sp), source, policy, writer, memo,
                          judge=judge, tasks_log=log, log=lambda m: None)
            summary = fw.run()
    finally:
        if own:
            source.close()
    return summary, fw
