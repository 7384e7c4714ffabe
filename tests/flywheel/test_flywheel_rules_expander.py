"""The rules expander's feedback is a real mechanism: it learns which task parameters the policy can
do from the outcomes it is fed, and nothing else. Whole runs on in-process sim phones (level-0/1
boards, 128 x 128) with scripted policies: success that depends on where the target is rises beyond
the first round's interval; success that depends on nothing does not move."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from flywheel_helpers import BOARD_SEEDS, CoinPolicy, PositionalPolicy, run_flywheel, space

from venus_core.flywheel.expanders import Example
from venus_core.flywheel.rules_expander import RuleExpander


def test_the_estimate_favours_candidates_like_the_verified_ones_and_round_zero_is_uniform() -> None:
    sp = space(per_round=64)
    ex = RuleExpander(sp, explore=0.0, seed=1)
    cands = [c for c in sp.candidates(1, 0) if c.point is not None]
    target = cands[0]
    feedback = [Example(target.goal, "s", 1, target.point, True, 0),
                Example(target.goal, "s", 1, (1000 - target.point[0], 1000 - target.point[1]), False, 0)]
    p = ex.estimate(cands, feedback)
    same = [i for i, c in enumerate(cands) if c.goal == target.goal and abs(c.point[0] - target.point[0]) < 60
            and abs(c.point[1] - target.point[1]) < 60]
    other = [i for i, c in enumerate(cands) if c.goal != target.goal]
    assert same and other
    assert p[same].min() > 0.6 and p[other].max() < 0.55  # the prior (2/4 = 0.5) holds unrelated ones at ~0.5
    assert np.allclose(ex.estimate(cands, []), 0.5)  # no feedback: the prior alone
    assert np.allclose(ex.estimate(cands, feedback, ["another seed"] * len(cands)), 0.5)  # other families: apart
    first = ex.expand(BOARD_SEEDS, 10, 0, [])
    assert len(first) == 10 and {p.how for p in first} == {"uniform"} and ex.last["uniform"] == 10
    chosen = ex.expand(BOARD_SEEDS, 10, 0, feedback)
    assert chosen[0].score is not None and chosen[0].score >= max(q.score or 0 for q in chosen[1:])


def test_success_that_depends_on_the_target_position_rises_beyond_the_first_rounds_interval(tmp_path: Path) -> None:
    summary, _ = run_flywheel(tmp_path, PositionalPolicy(), rounds=3, tasks=32)
    rates = [row["success"] for row in summary["rounds"]]
    assert rates[0]["n"] == 32 and 0.25 < rates[0]["value"] < 0.75  # uniform: about half the targets are left
    assert summary["rise"]["beyond_intervals"], rates
    assert rates[-1]["value"] >= 0.75  # the explore share (25 %) keeps trying the rest
    exploit = summary["rounds"][-1]["by_how"]["exploit"]
    assert exploit["value"] >= 0.85  # what it chose by the estimate the policy could do, but near x = 500


def test_success_that_depends_on_nothing_does_not_move(tmp_path: Path) -> None:
    summary, _ = run_flywheel(tmp_path, CoinPolicy(p=0.4, seed=3), rounds=3, tasks=32)
    rates = [row["success"] for row in summary["rounds"]]
    assert not summary["rise"]["beyond_intervals"], rates
    later = sum(r["k"] for r in rates[1:]) / sum(r["n"] for r in rates[1:])
    assert abs(later - 0.4) < 0.15, rates  # seeds 0-5 pooled: 163/384 = 42.4 % in rounds 1-2 (measured)
