"""SIGKILL at a random step and resume (issue 22 §2, first item): each training job runs as a child
process, is killed with SIGKILL as soon as its checkpoint pointer names a step drawn from a fixed
seed, is started again on the same checkpoint directory, and must end with exactly (bitwise) the
weights of an uninterrupted run. mid_train has the same test in tests/train/test_train_kill_resume.py.

Online RL: the resumed run must also end with the uninterrupted run's reference policy, task pool
(curriculum shares, EMAs, set-aside tasks, its RNG) and counters, all compared from the final
checkpoints the two runs write."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from faults_helpers import (ROOT, STEP_NAME, TINY_SPEC, differing, job_argv, kill_step, latest_step, run_job, sigkill_at_checkpoint,
                            weights)

GRPO_STEPS = 5


def _grpo_argv(domain: str, tiny: Path, data: Path, out: Path, ckpt: Path) -> list[str]:
    sets = [f"offline_rl.{domain}.max_steps={GRPO_STEPS}", f"offline_rl.{domain}.prompts_per_step=4",
            f"offline_rl.{domain}.group_size=2", f"offline_rl.{domain}.max_new_tokens=4",
            f"offline_rl.{domain}.save_every=1", f"offline_rl.{domain}.lr=0.01", "eval.held_out=2",
            "platform.tracking_uri=none",
            f"offline_rl.{domain}.reward=rl_test_length"]  # variance in every group: every step updates
    if domain != "grounding":
        sets.append(f"offline_rl.{domain}.history_alignment.rollouts=1")
    args = ["--domain", domain, "--spec", str(TINY_SPEC), "--model", str(tiny), "--data", str(data), "--out", str(out),
            "--checkpoints", str(ckpt), "--device", "cpu", *[a for s in sets for a in ("--set", s)]]
    return job_argv("venus_core.runtime.offline_rl", args, preload=["rl_helpers"])


@pytest.mark.slow
@pytest.mark.parametrize("domain,seed", [("grounding", 1), ("mobile", 2), ("web", 3)])
def test_offline_grpo_sigkilled_at_a_random_step_resumes_to_the_same_weights(
        domain: str, seed: int, tiny_dir: Path, domain_data: dict[str, Path], tmp_path: Path) -> None:
    run_job(_grpo_argv(domain, tiny_dir, domain_data[domain], tmp_path / "straight", tmp_path / "ck-straight"))

    argv = _grpo_argv(domain, tiny_dir, domain_data[domain], tmp_path / "killed", tmp_path / "ck")
    at = sigkill_at_checkpoint(argv, tmp_path / "ck", kill_step(seed, GRPO_STEPS))
    assert 1 <= at < GRPO_STEPS and not (tmp_path / "killed" / "model").exists()
    assert not (tmp_path / "killed" / "report.json").exists()  # nothing a later stage would take for a result
    run_job(argv)  # the restarted pod: the same command on the same checkpoint volume

    report = json.loads((tmp_path / "killed" / "report.json").read_text())
    assert report["resumed_from_step"] == at
    assert latest_step(tmp_path / "ck") == GRPO_STEPS
    a, b = weights(tmp_path / "straight" / "model"), weights(tmp_path / "killed" / "model")
    assert differing(a, b) == [], f"diverged after resuming from step {at}"
    assert differing(a, weights(tiny_dir)) != []  # it did train
    if domain != "grounding":
        straight = json.loads((tmp_path / "straight" / "report.json").read_text())
        assert report["navigation"] == straight["navigation"]  # aligned histories and thought pool followed



# The shipped bootstrap checkpoint (`model.base: bootstrap`): it answers in the action format and
# sometimes succeeds, so groups have reward variance and online steps update (an untrained tiny
# model fails every episode alike: no advantage, no update, nothing to compare).
BOOTSTRAP = ROOT / "venus_core" / "models" / "assets" / "venus-tiny-bootstrap"
ONLINE_STEPS = {"mobile": 4, "web": 3}
ONLINE_SMALL = ["platform.tracking_uri=none", "online_rl.tasks_per_step=2", "online_rl.group_size=2",
                "online_rl.devices=2", "online_rl.max_steps_per_episode=3", "online_rl.task_pool.held_out=1",
                "online_rl.train_tasks=4", "online_rl.save_every=1", "online_rl.kl.check_every=1",
                "online_rl.staleness=0"]
ONLINE_DOMAIN = {
    "mobile": ["online_rl.device_service=local", "online_rl.levels=[3]", "online_rl.task_pool.held_out_levels=[3]"],
    "web": ["online_rl.web_tasks=[click-button,click-link]"],  # MiniWoB++ in headless Chromium
}


def _untimed(online: dict[str, Any]) -> dict[str, Any]:
    """The online state without its wall-clock totals (`*_ms`: measured, not computed)."""
    totals = {k: v for k, v in online.get("totals", {}).items() if not k.endswith("_ms")}
    return {**online, "totals": totals}


def _online_argv(domain: str, out: Path, ckpt: Path) -> list[str]:
    sets = [*ONLINE_SMALL, *ONLINE_DOMAIN[domain], f"online_rl.steps={ONLINE_STEPS[domain]}"]
    args = ["--domain", domain, "--spec", str(TINY_SPEC), "--model", str(BOOTSTRAP), "--out", str(out),
            "--checkpoints", str(ckpt), "--device", "cpu", *[a for s in sets for a in ("--set", s)]]
    return job_argv("venus_core.runtime.online_rl", args)


@pytest.mark.slow
@pytest.mark.parametrize("domain,seed", [("mobile", 4), ("web", 5)])
def test_online_rl_sigkilled_at_a_random_step_resumes_to_the_same_weights_reference_and_pool(
        domain: str, seed: int, tmp_path: Path) -> None:
    steps = ONLINE_STEPS[domain]
    run_job(_online_argv(domain, tmp_path / "straight", tmp_path / "ck-straight"))
    argv = _online_argv(domain, tmp_path / "killed", tmp_path / "ck")
    at = sigkill_at_checkpoint(argv, tmp_path / "ck", kill_step(seed, steps))
    assert 1 <= at < steps and not (tmp_path / "killed" / "report.json").exists()
    assert not (tmp_path / "killed" / "model").exists()
    run_job(argv)

    straight = json.loads((tmp_path / "straight" / "report.json").read_text())
    report = json.loads((tmp_path / "killed" / "report.json").read_text())
    assert report["resumed_from_step"] == at and straight["resumed_from_step"] is None
    assert straight["updates"] >= 1 and report["updates"] == straight["updates"]
    a, b = weights(tmp_path / "straight" / "model"), weights(tmp_path / "killed" / "model")
    assert differing(a, b) == [], f"policy diverged after resuming from step {at}"
    assert differing(a, weights(BOOTSTRAP)) != []  # it did train
    final = STEP_NAME.format(steps)
    for name in ("model.safetensors", "ref.safetensors"):  # the reference policy is part of the state
        assert differing(weights(tmp_path / "ck-straight" / final, name), weights(tmp_path / "ck" / final, name)) == []
    s = json.loads((tmp_path / "ck-straight" / final / "state.json").read_text())["online"]
    k = json.loads((tmp_path / "ck" / final / "state.json").read_text())["online"]
    assert s["pool"] == k["pool"]  # curriculum shares, EMAs, set-aside tasks, the pool's RNG
    assert _untimed(s) == _untimed(k)  # and the counters, adaptive-KL checks, totals, the held-out result before
    assert report["pool"] == straight["pool"]
    assert _untimed({"totals": report["rollouts"]}) == _untimed({"totals": straight["rollouts"]})
    assert report["held_out"] == straight["held_out"] and report["reference"] == straight["reference"]
