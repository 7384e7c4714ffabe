"""Exact resume of online RL: killed after a checkpoint and resumed, the run ends with the weights, the
reference and the task pool of the uninterrupted run."""

from __future__ import annotations

from pathlib import Path
import pytest
import torch

from venus_core.config.spec import ModelSpec
from venus_core.config.training import OnlineRLSpec
from venus_core.envs import SimPhoneEnv, synth_plan
from venus_core.models.loading import load_model
from venus_core.rl.online import TaskPool, sim_phone_tasks
from venus_core.rl.online.devices import LocalEnvs
from venus_core.rl.online.loop import OnlineRL
from venus_core.rl.online.policy import PlannedSampling, ScriptedPolicy
from venus_core.runtime.online_checkpoint import OnlineCheckpointing
from venus_core.runtime.rl_checkpoint import StoppedAt
from venus_core.train.tracker import NullTracker

SIZE = (256, 256)


def _trainer(tiny_dir: Path) -> tuple[OnlineRL, LocalEnvs]:
    torch.manual_seed(0)
    model, processor = load_model(tiny_dir, ModelSpec())
    spec = OnlineRLSpec(tasks_per_step=2, group_size=2, devices=2, max_new_tokens=8, lr=1e-3, freeze_vision=False,
                        kl={"adaptive": False, "coef": 1e-3})
    tasks = sim_phone_tasks([4], range(4), size=SIZE)
    pool = TaskPool(tasks, spec.task_pool.model_copy(update={"held_out": 0}), seed=0)
    source = LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=SIZE), "mobile")
    t = OnlineRL(model, processor, spec, pool, source, NullTracker())
    t.policy = t.rollout_policy = PlannedSampling(t.policy, ScriptedPolicy(synth_plan, noise=0.4, seed=2))
    return t, source


def test_a_killed_online_run_resumes_to_the_uninterrupted_weights(tiny_dir: Path, tmp_path: Path) -> None:
    a, src = _trainer(tiny_dir)
    a.train(3)
    src.close()
    assert a.learner.updates == 3  # the noisy plan gives every group variance

    b, src = _trainer(tiny_dir)
    ckpt = OnlineCheckpointing(tmp_path / "ck", b, every=1, stop_at=2)
    with pytest.raises(StoppedAt):
        b.train(3, on_step=ckpt.on_step)
    src.close()

    c, src = _trainer(tiny_dir)
    resume = OnlineCheckpointing(tmp_path / "ck", c, every=1)
    assert resume.restore() == 2
    c.train(3, start=2, on_step=resume.on_step)
    src.close()
    for (name, x), y in zip(a.learner.model.state_dict().items(), c.learner.model.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    for x, y in zip(a.learner.ref.state_dict().values(), c.learner.ref.state_dict().values(), strict=True):
        assert torch.equal(x, y)
    assert a.pool.state_dict() == c.pool.state_dict()
    assert c.learner.updates == 3 and c.policy.calls == a.policy.calls


def test_resume_refuses_a_checkpoint_of_another_job(tiny_dir: Path, tmp_path: Path) -> None:
    from venus_core.train.checkpoint import save_checkpoint

    t, src = _trainer(tiny_dir)
    src.close()
    save_checkpoint(tmp_path / "ck", 1, t.learner.model, t.learner.optimizer, {"loop": {}},
                    extra_models={"ref": t.learner.ref})
    with pytest.raises(ValueError, match="not from an online_rl job"):
        OnlineCheckpointing(tmp_path / "ck", t, every=1).restore()


def test_a_resumed_run_puts_the_checkpoints_weights_on_its_rollout_server(tiny_dir: Path, tmp_path: Path) -> None:
    """The server still serves the weights the resumed process started from (the job's `--model`);
    restoring a checkpoint syncs it, or the first steps would sample the wrong policy."""
    from venus_core.models.serve_rpc import make_worker
    from venus_core.models.serve_runner import logits_size
    from venus_core.models.server import BackgroundServer, create_app, transformers_runner
    from venus_core.rl.online.vllm_worker import VenusWorkerExtension

    served, processor = load_model(tiny_dir, ModelSpec())
    app = create_app(transformers_runner(served, processor), "tiny", vocab_size=logits_size(served),
                     worker=make_worker(served, VenusWorkerExtension))
    with BackgroundServer(app) as srv:
        spec = OnlineRLSpec(rollout_server=srv.base_url, rollout_server_kind="vllm", rollout_model="tiny",
                            kl={"adaptive": False, "coef": 1e-3})
        source = LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=SIZE), "mobile")

        def trainer() -> OnlineRL:
            model, _ = load_model(tiny_dir, ModelSpec())
            pool = TaskPool(sim_phone_tasks([4], range(2), size=SIZE), spec.task_pool.model_copy(update={"held_out": 0}),
                            seed=0)
            return OnlineRL(model, processor, spec, pool, source, NullTracker(), weights_dir=tmp_path / "w")

        a = trainer()
        with torch.no_grad():
            for p in a.learner.model.parameters():
                p.add_(0.01)
        a.learner.updates = 1
        OnlineCheckpointing(tmp_path / "ck", a, every=1).save(1)
        b = trainer()  # a fresh process: the server is back on --model's weights
        assert not torch.equal(served.state_dict()["lm_head.weight"], a.learner.model.state_dict()["lm_head.weight"])
        assert OnlineCheckpointing(tmp_path / "ck", b, every=1).restore() == 1
        source.close()
    for (name, x), y in zip(a.learner.model.state_dict().items(), served.state_dict().values(), strict=True):
        assert torch.equal(x, y), name
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["v00001"]
