"""Where tasks are instantiated: per-round windows of training seeds, goal lookup, feasibility reasons."""

from __future__ import annotations

import pytest

from venus_core.config.training import TaskPoolSpec
from venus_core.flywheel.seeds import Seed
from venus_core.flywheel.space import SimPhoneSpace
from venus_core.rl.online import held_out_tasks, sim_phone_tasks

SIZE = (128, 128)


def test_each_round_draws_its_own_training_seeds_and_candidates_carry_their_first_click() -> None:
    sp = SimPhoneSpace([0, 1], SIZE, 16, 40000, max_steps=3)
    r0, r1 = sp.candidates(1, 0), sp.candidates(1, 1)
    assert len(r0) == len(r1) == 16 and not {c.key for c in r0} & {c.key for c in r1}
    assert all("seed=4000" in c.key or "seed=4001" in c.key for c in r0)
    for c in r0:  # level-1 boards: one click on the named button
        assert c.level == 1 and c.point is not None and c.task.expected_steps == 1
    with pytest.raises(ValueError, match="leave the training seeds"):
        SimPhoneSpace([0], SIZE, 1000, 99500, max_steps=3).window(0)


def test_goals_resolve_to_unused_start_states_and_seeds_are_checked() -> None:
    sp = SimPhoneSpace([0, 1], SIZE, 32, 41000, max_steps=3)
    seed = Seed("s", "sim-phone", "board", 1, "Click the <c> button")
    goal = sp.candidates(1, 0)[0].goal
    first = sp.resolve(goal.upper(), seed, 0, set())
    assert first is not None and first.goal == goal
    again = sp.resolve(goal, seed, 0, {first.key})
    assert again is None or (again.key != first.key and again.goal == goal)
    assert sp.resolve("Click the magenta button", seed, 0, set()) is None
    assert {c.goal for c in sp.for_seed(Seed("r", "sim-phone", "board", 1, "Click the red button"), 0)} <= \
        {"Click the red button"}
    with pytest.raises(ValueError, match="level 3 is not among flywheel.levels"):
        sp.check_seed(Seed("x", "sim-phone", "settings", 3, "<...>"))
    with pytest.raises(ValueError, match="env 'miniwob'"):
        sp.check_seed(Seed("x", "miniwob", "click-button", 1, "<...>"))


def test_feasibility_gives_a_reason_for_every_task_it_refuses() -> None:
    sp = SimPhoneSpace([0, 1], SIZE, 8, 42000, max_steps=3)
    ok = sp.candidates(0, 0)[0]
    assert sp.infeasible(ok.task) is None
    assert "no start state" in (sp.infeasible(None, "Click the magenta button", 0) or "")
    other_size = sim_phone_tasks([1], [5], size=(256, 256))[0]
    assert "made for 256x256 screens" in (sp.infeasible(other_size) or "")
    held = held_out_tasks(TaskPoolSpec(held_out=1, held_out_levels=[1]), size=SIZE)[0]
    assert "held-out seed" in (sp.infeasible(held) or "")
    long = SimPhoneSpace([4], (256, 256), 8, 42000, max_steps=1)
    task = sim_phone_tasks([4], [3], size=(256, 256))[0]
    assert "exceed the step limit 1" in (long.infeasible(task) or "")
