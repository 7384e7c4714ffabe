"""Trajectory-level GRPO: group scoring, the update's direction, entropy annealing, the reference move,
and the step batch matching the sampler's own log-probs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from venus_core.config.spec import ModelSpec
from venus_core.config.training import OnlineRLSpec
from venus_core.envs.base import Task
from venus_core.models.prompts import build_messages, navigation_prompt
from venus_core.rl.online.learner import TrajectoryGRPO, score_group
from venus_core.rl.online.rollout import Completion, StepRecord, Trajectory
from venus_core.rl.online.sources import pool_task
from venus_core.rl.rollout import completions_batch, sample_groups, sequence_logprobs

TASK = pool_task("sim-phone", Task(goal="Open the Settings app", success_check="synth:level=3,seed=1,lang=en,size=128x128"),
                 2, "static")


@pytest.fixture()
def model(tiny_dir: Path) -> tuple[Any, Any]:
    from venus_core.models.loading import load_model

    torch.manual_seed(0)
    m, p = load_model(str(tiny_dir), ModelSpec())
    return m, p


def _traj(success: bool, length: int = 1, invalid: int = 0, ids: tuple[int, ...] | None = None, replica: int = 0,
          image: Image.Image | None = None) -> Trajectory:
    img = image or Image.new("RGB", (128, 128), (30, 60, 90))
    prompt = navigation_prompt(TASK.task.goal, [], "mobile")
    steps = [StepRecord(img, prompt, Completion("x", ids), "Click(box=(1,1))" if k >= invalid else None, k >= invalid)
             for k in range(length)]
    return Trajectory(TASK, replica, 0, steps=steps, success=success, done=True)


def test_score_group_normalises_and_skips() -> None:
    spec = OnlineRLSpec()
    sc = score_group([_traj(True, 2), _traj(False, 3, invalid=1), _traj(True, 4)], spec)
    assert sc.skipped is None
    r = torch.tensor(sc.rewards)
    assert sc.rewards == pytest.approx([1.0, -0.1, spec.reward.eta ** 1.0])
    assert torch.tensor(sc.advantages) == pytest.approx((r - r.mean()) / (r.std(unbiased=False) + 1e-6), abs=1e-5)
    assert score_group([_traj(True), _traj(True)], spec).skipped == "zero_variance"
    assert score_group([_traj(True)], spec).skipped == "too_few"


def test_completions_batch_scores_what_the_sampler_sampled(model: tuple[Any, Any]) -> None:
    m, p = model
    imgs = [Image.new("RGB", (128, 128), c) for c in ((200, 10, 10), (10, 200, 10))]
    prompts = [build_messages(i, navigation_prompt("Open the Settings app", [], "mobile")) for i in imgs]
    sampled = sample_groups(m, p, prompts, 1, 12, temperature=1.0, seed=3)
    with torch.no_grad():
        want, _ = sequence_logprobs(m, sampled, temperature=1.0, shared_prefix=False)
    lengths = sampled.completion_mask.sum(dim=1).long().tolist()
    ids = [sampled.completion_ids[i, :n].tolist() for i, n in enumerate(lengths)]
    rebuilt = completions_batch(p, prompts, ids)
    with torch.no_grad():
        got, _ = sequence_logprobs(m, rebuilt, temperature=1.0)
    for i, n in enumerate(lengths):
        assert torch.allclose(got[i, :n], want[i, :n], atol=1e-5)
    with pytest.raises(ValueError, match="empty completion"):
        completions_batch(p, prompts, [ids[0], []])


def _completion_logp(m: Any, p: Any, image: Image.Image, ids: tuple[int, ...]) -> float:
    batch = completions_batch(p, [build_messages(image, navigation_prompt(TASK.task.goal, [], "mobile"))], [ids])
    with torch.no_grad():
        lp, _ = sequence_logprobs(m, batch, temperature=1.0)
    return float(lp.sum())


def test_an_update_raises_the_successful_trajectory_and_lowers_the_failed_one(model: tuple[Any, Any]) -> None:
    m, p = model
    tok = p.tokenizer
    end = tok.convert_tokens_to_ids("<|im_end|>")
    good = tuple(tok.encode("<action>Click(box=(500,500))</action>", add_special_tokens=False)) + (end,)
    bad = tuple(tok.encode("<action>Finished()</action>", add_special_tokens=False)) + (end,)
    img = Image.new("RGB", (128, 128), (30, 60, 90))
    before = _completion_logp(m, p, img, good), _completion_logp(m, p, img, bad)
    spec = OnlineRLSpec(lr=5e-3, freeze_vision=False)
    learner = TrajectoryGRPO(m, p, spec, micro_batch=1)
    group = [_traj(True, ids=good, image=img), _traj(False, ids=bad, image=img, replica=1)]
    metrics = learner.update([group, [_traj(True), _traj(True, replica=1)]])
    assert metrics["updated"] == 1.0 and metrics["groups/zero_variance"] == 1.0 and metrics["rows"] == 2.0
    after = _completion_logp(m, p, img, good), _completion_logp(m, p, img, bad)
    assert after[0] > before[0] and after[1] < before[1]
    assert learner.updates == 1


def test_steps_without_sampled_ids_are_counted_not_trained(model: tuple[Any, Any]) -> None:
    m, p = model
    learner = TrajectoryGRPO(m, p, OnlineRLSpec(), micro_batch=4)
    metrics = learner.update([[_traj(True, 2), _traj(False, 3)]])
    assert metrics["rows"] == 0 and metrics["rows/untrainable"] == 5 and metrics["updated"] == 0.0


def test_entropy_coefficient_anneals_and_the_reference_moves_by_alpha(model: tuple[Any, Any]) -> None:
    m, p = model
    spec = OnlineRLSpec(lr=1e-2)
    learner = TrajectoryGRPO(m, p, spec)
    e = spec.entropy
    for k in (0, 9, 10, 25):
        learner.updates = k
        assert learner.entropy_coef() == pytest.approx(e.lambda0 * e.sigma ** (k // e.every))
    ref0 = {n: t.clone() for n, t in learner.ref.state_dict().items()}
    with torch.no_grad():
        for q in m.parameters():
            q.add_(0.5)
    learner.move_reference()
    a = spec.kl.alpha
    pol = m.state_dict()
    for n, t in learner.ref.state_dict().items():
        assert torch.allclose(t, (1 - a) * ref0[n] + a * pol[n], atol=1e-6), n
    assert learner.ref_moves == 1
