"""The rollout, log-prob and update paths keep every tensor that meets the model on the model's device.

A CPU run cannot see a missing `.to(device)` (the model's device is the host), so these tests run the
real paths under `device_trace.DeviceTrace`, which tags each tensor as on the model's device or on
the host and records every op that mixes the two: exactly the ops that raise on CUDA. Covered: an
offline GRPO step (shared-prefix sampling and log-probs, frozen reference, two minibatches), the
plain (non shared-prefix) sampling and log-prob passes, an online trajectory update with behaviour
log-probs, a reference copy and its move, the in-process rollout policy, batched generation (the
evaluation predictor and the local judge call it) and `venus serve`'s generation with log-probs and
logit bias.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from PIL import Image

from venus_core.config.spec import GroundingRLSpec, ModelSpec
from venus_core.config.training import OnlineRLSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.models.prompts import build_messages, grounding_prompt, navigation_prompt
from venus_core.rl.losses import grpo_loss

from device_trace import DEVICE, HOST, device_trace
from rl_helpers import LENGTH_REWARD


@pytest.fixture()
def model(tiny_dir: Path) -> tuple[Any, Any]:
    torch.manual_seed(0)
    return load_model(str(tiny_dir), ModelSpec())


def _chats(n: int) -> list[list[dict[str, Any]]]:
    colours = [(200, 10, 10), (10, 200, 10), (10, 10, 200)]
    return [build_messages(Image.new("RGB", (128, 128), colours[i % 3]), grounding_prompt(f"button {i}"))
            for i in range(n)]


def test_the_trace_sees_a_host_tensor_meeting_the_model() -> None:
    lin = torch.nn.Linear(3, 2)
    with device_trace(lin) as trace:
        dev = next(lin.parameters()).device
        lin(torch.ones(1, 3, device=dev))  # follows the model: fine
        lin(torch.ones(1, 3).to(dev))  # moved: fine
        y = lin(torch.ones(1, 3, device=dev))
        _ = y * torch.tensor(2.0)  # a 0-dim host scalar: CUDA accepts it
        y[torch.tensor([0])] = torch.zeros(1, 2)  # host index / value into a device tensor: CUDA accepts it
        assert getattr(y.detach().cpu(), "_venus_trace_place") == HOST
        assert getattr(y.detach(), "_venus_trace_place") == DEVICE
        assert not trace.violations
        lin(torch.ones(1, 3))  # built without a device: breaks on a GPU
        _ = y * torch.ones(1, 2, device=torch.device("cpu"))  # a hand-made CPU device: breaks too
    assert len(trace.violations) == 2 and all("device and host tensors mixed" in v for v in trace.violations)
    assert "test_rl_devices.py" in trace.violations[0]


def test_grpo_loss_brings_host_mask_and_advantages_to_the_policys_device() -> None:
    lin = torch.nn.Linear(4, 6)
    with device_trace(lin) as trace:
        logp = torch.log_softmax(lin(torch.ones(2, 4, device=next(lin.parameters()).device)), dim=-1)[:, :3]
        ref = logp.detach().cpu()  # a reference elsewhere (another GPU) returns its log-probs there
        out = grpo_loss(logp, logp.detach(), ref, torch.tensor([1.0, -1.0]), torch.ones(2, 3),
                        clip_eps=0.2, kl_coef=0.1, entropy=None)
        out.loss.backward()
    assert not trace.violations, trace.violations


def test_offline_grpo_step_keeps_tensors_on_the_models_device(tiny_dir: Path, grounding_data: Path,
                                                              model: tuple[Any, Any]) -> None:
    from venus_core.rl.grpo import OfflineGRPO
    from venus_core.rl.prompts import grounding_item
    from venus_core.train.tracker import MemoryTracker

    m, proc = model
    reader = DatasetReader(grounding_data)
    items = [grounding_item(r, reader.open_image) for r in list(reader)[:2]]
    spec = GroundingRLSpec(reward=LENGTH_REWARD, group_size=4, prompts_per_step=2, max_new_tokens=6, lr=1e-2,
                           max_steps=4, kl_coef=0.01)
    trainer = OfflineGRPO(m, proc, spec, MemoryTracker(), minibatches=2)
    with device_trace(trainer.model, trainer.ref) as trace:  # type: ignore[arg-type]
        metrics = trainer.step(items, 0)
    assert metrics["updated"] == 1.0 and trace.ops > 1000
    assert not trace.violations, trace.violations


def test_plain_sampling_and_logprob_passes_keep_tensors_on_the_models_device(model: tuple[Any, Any]) -> None:
    from venus_core.rl.rollout import sample_groups, sequence_logprobs

    m, proc = model
    with device_trace(m) as trace:
        batch = sample_groups(m, proc, _chats(2), 2, 5, temperature=1.0, seed=1, shared_prefix=False)
        logp, ent = sequence_logprobs(m, batch, with_entropy=True, shared_prefix=False)
        (logp.sum() + ent.sum()).backward()  # type: ignore[union-attr]
        shared = sample_groups(m, proc, _chats(1), 3, 5, temperature=1.0, top_p=0.9, seed=2)
        sequence_logprobs(m, shared)
    assert not trace.violations, trace.violations


def test_online_update_reference_and_rollout_policy_keep_tensors_on_the_models_device(
        model: tuple[Any, Any]) -> None:
    from venus_core.envs.base import Task
    from venus_core.rl.online.learner import TrajectoryGRPO
    from venus_core.rl.online.policy import ModelPolicy
    from venus_core.rl.online.rollout import StepRecord, StepRequest, Trajectory
    from venus_core.rl.online.sources import pool_task
    from venus_core.rl.rollout import completions_batch, sequence_logprobs

    m, proc = model
    task = pool_task("sim-phone", Task(goal="Open the Settings app",
                                       success_check="synth:level=3,seed=1,lang=en,size=128x128"), 2, "static")
    img = Image.new("RGB", (128, 128), (30, 60, 90))
    prompt = navigation_prompt(task.task.goal, [], "mobile")
    learner = TrajectoryGRPO(m, proc, OnlineRLSpec(lr=1e-3, freeze_vision=False), micro_batch=1)
    policy = ModelPolicy(m, proc, temperature=1.0, max_new_tokens=6, seed=0)
    with device_trace(m, learner.ref) as trace:
        completions = policy.act([StepRequest(f"{task.key}#{i}", img, prompt, task.task) for i in range(2)])
        steps = []
        for c in completions:  # behaviour log-probs, as the decoupled worker records them
            batch = completions_batch(proc, [build_messages(img, prompt)], [c.token_ids])
            with torch.no_grad():
                lp, _ = sequence_logprobs(m, batch)
            steps.append(StepRecord(img, prompt, c, "Click(box=(1,1))", True,
                                    behaviour_logp=lp[0, : len(c.token_ids or ())].cpu().tolist()))
        group = [Trajectory(task, i, 0, steps=[st], success=i == 0, done=True) for i, st in enumerate(steps)]
        metrics = learner.update([group])
        learner.move_reference()
    assert metrics["updated"] == 1.0 and learner.ref_moves == 1
    assert not trace.violations, trace.violations


def test_generation_and_serving_keep_tensors_on_the_models_device(model: tuple[Any, Any]) -> None:
    from venus_core.models.generation import generate
    from venus_core.models.serve_protocol import Sampling
    from venus_core.models.serve_runner import generate_ids

    m, proc = model
    with device_trace(m) as trace:
        assert len(generate(m, proc, _chats(2), 4)) == 2
        generate(m, proc, _chats(2), 4, temperature=0.7, seed=3)
        generate_ids(m, proc, _chats(2), Sampling(max_tokens=3, temperature=0.0, top_p=1.0, repetition_penalty=1.05,
                                                  seed=None, logprobs=True, logit_bias=((5, 1.0),)))
        generate_ids(m, proc, _chats(1), Sampling(max_tokens=3, temperature=1.0, top_p=0.9, repetition_penalty=1.0,
                                                  seed=1, logprobs=True, top_k=5))
    assert not trace.violations, trace.violations
