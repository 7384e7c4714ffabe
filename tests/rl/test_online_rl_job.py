"""The online_rl job end to end on the embedded default: a tiny model, simulated phones leased through the
gateway over ADB, held-out tasks before and after, the report and the saved model."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from venus_core.config import load_spec

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "venus_core" / "models" / "assets" / "venus-tiny-bootstrap"
SMALL = ["platform.tracking_uri=none", "online_rl.steps=2", "online_rl.tasks_per_step=2", "online_rl.group_size=2",
         "online_rl.devices=2", "online_rl.max_steps_per_episode=3", "online_rl.task_pool.held_out=2",
         "online_rl.task_pool.held_out_levels=[3]", "online_rl.levels=[3]", "online_rl.train_tasks=4",
         "online_rl.kl.check_every=1"]


@pytest.mark.parametrize("service,staleness", [("gateway", 0), ("local", 1)])
def test_online_rl_job(tiny_dir: Path, tmp_path: Path, service: str, staleness: int) -> None:
    """Synchronous through the gateway (real adb), and decoupled (staleness 1) on in-process phones."""
    from venus_core.runtime.online_rl import main

    if service == "gateway" and shutil.which("adb") is None:
        pytest.skip("Debian adb not installed")
    out = tmp_path / "out"
    argv = ["--spec", str(ROOT / "agents" / "venus-tiny"), "--domain", "mobile", "--model", str(tiny_dir),
            "--out", str(out), "--set", f"online_rl.device_service={service}",
            "--set", f"online_rl.staleness={staleness}"]
    for s in SMALL:
        argv += ["--set", s]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    held = report["held_out"]
    assert held["tasks"] == 2 and held["before"]["n"] == held["after"]["n"] == 2
    assert set(held["before_by_bucket"]) == {"easy"}
    assert report["rollouts"]["episodes"] == 2 * 2 * 2 and report["rollouts"]["lost"] == 0
    devices = report["devices"]
    if service == "gateway":
        assert devices["leased"] == devices["released"] > 0
    else:
        assert devices["acquired"] == devices["released"] > 0 and devices["made"] <= 2 * 2
    pool = report["pool"]
    assert sum(b["total"] for b in pool["buckets"].values()) == sum(b["active"] + b["set_aside"]
                                                                    for b in pool["buckets"].values())
    assert len(report["reference"]["checks"]) == 1  # check_every=1: once, between the two steps
    assert (out / "model" / "model.safetensors").is_file()
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    steps = [x for x in lines if x.get("kind") == "metrics" and "rollout/episodes" in x["metrics"]]
    assert [x["step"] for x in steps] == [0, 1]
    assert all("success_rate/easy" in x["metrics"] for x in steps)
    assert all(x["metrics"]["staleness"] <= staleness for x in steps)
    assert report["rollouts"].get("dropped_stale", 0) == 0


def test_online_rl_web_job_through_the_gateway_releases_every_browser(tiny_dir: Path, tmp_path: Path) -> None:
    """The web domain on Chromium processes leased through the gateway over CDP: the tasks are made
    on a leased browser, envs stay leased between steps (keep_idle), and by the report every lease
    is back."""
    from venus_core.runtime.online_rl import main

    out = tmp_path / "out"
    argv = ["--spec", str(ROOT / "agents" / "venus-tiny"), "--domain", "web", "--model", str(tiny_dir),
            "--out", str(out), "--set", "online_rl.web_device_service=gateway"]
    for s in ["platform.tracking_uri=none", "online_rl.steps=1", "online_rl.tasks_per_step=2",
              "online_rl.group_size=2", "online_rl.devices=2", "online_rl.max_steps_per_episode=2",
              "online_rl.task_pool.held_out=2", "online_rl.train_tasks=3", "online_rl.kl.check_every=5",
              "online_rl.web_tasks=[click-test,click-test-2,click-color]"]:
        argv += ["--set", s]
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    devices = report["devices"]
    assert devices["leased"] == devices["released"] > 0 and report["rollouts"]["lost"] == 0
    assert report["rollouts"]["episodes"] == 4 and report["held_out"]["after"]["n"] == 2


def test_online_rl_refuses_levels_of_different_screen_sizes() -> None:
    from venus_core.runtime.online_rl import _phone_size

    assert _phone_size([3, 4]) == (256, 256)
    with pytest.raises(ValueError, match="different screen sizes"):
        _phone_size([3, 5])
    with pytest.raises(ValueError, match="online_rl.enabled needs at least one env"):
        load_spec(ROOT / "agents" / "venus-tiny", ["online_rl.enabled=true", "online_rl.envs=[]"])


@pytest.mark.parametrize("kind", ["venus", "vllm"])
def test_online_rl_job_with_a_rollout_server(tiny_dir: Path, tmp_path: Path, kind: str,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    """Rollouts sampled by `venus serve`; weights synced after every update, through
    POST /v1/load_weights (kind venus) or, as on a cluster's vLLM, POST /collective_rpc into
    `VenusWorkerExtension` + POST /reset_prefix_cache (kind vllm, dev mode, weights in a separate
    `--weights-dir` under $VENUS_WEIGHTS_ROOT, as the PVC is on a cluster)."""
    import torch
    from safetensors.torch import load_file

    from venus_core.config.spec import ModelSpec
    from venus_core.models.loading import load_model
    from venus_core.models.serve_rpc import make_worker
    from venus_core.models.serve_runner import logits_size
    from venus_core.models.serve_weights import WeightReloader
    from venus_core.models.server import BackgroundServer, create_app, transformers_runner
    from venus_core.rl.online.vllm_worker import WEIGHTS_ROOT_ENV, VenusWorkerExtension
    from venus_core.runtime.online_rl import main

    served, processor = load_model(tiny_dir, ModelSpec())
    extra = ({"worker": make_worker(served, VenusWorkerExtension)} if kind == "vllm"
             else {"weights": WeightReloader(served)})
    app = create_app(transformers_runner(served, processor), "tiny", max_batch=4, batch_wait_ms=2,
                     vocab_size=logits_size(served), **extra)
    out, pvc = tmp_path / "out", tmp_path / "pvc"
    monkeypatch.setenv(WEIGHTS_ROOT_ENV, str(pvc))
    with BackgroundServer(app) as srv:
        argv = ["--spec", str(ROOT / "agents" / "venus-tiny"), "--domain", "mobile", "--model", str(tiny_dir),
                "--out", str(out), "--set", "online_rl.device_service=local",
                "--set", f"online_rl.rollout_server={srv.base_url}", "--set", "online_rl.rollout_model=tiny",
                "--set", f"online_rl.rollout_server_kind={kind}",
                "--set", "online_rl.freeze_vision=false", "--set", "online_rl.lr=1e-3"]
        if kind == "vllm":
            argv += ["--weights-dir", str(pvc / "run-1" / "online_rl-mobile" / "weights")]
        for s in SMALL:
            argv += ["--set", s]
        assert main(argv) == 0
        import requests

        root = srv.base_url.removesuffix("/v1")
        health = requests.get(f"{root}/health", timeout=10).json()
        if kind == "vllm":
            rpc = requests.post(f"{root}/collective_rpc", json={"method": "venus_weights_version"}, timeout=10)
            version = rpc.json()["results"][0]["version"]
        else:
            version = health["weights_version"]
    report = json.loads((out / "report.json").read_text())
    assert report["rollouts"]["weight_syncs"] == 1 + report["updates"] == version
    if kind == "vllm":
        assert health["dev_calls"]["reset_prefix_cache"] == version
        assert not (pvc / "run-1" / "online_rl-mobile" / "weights").exists()  # the server's copies are removed
    assert not (out / "weights").exists()
    if report["updates"]:  # the server ends on the learner's final weights
        final = load_file(str(out / "model" / "model.safetensors"))
        for name, t in served.state_dict().items():
            if name in final:
                assert torch.equal(t, final[name]), name


def test_the_launcher_gives_online_rl_a_weights_dir_on_the_pvc(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """In a Kubeflow run with a checkpoints PVC, a spec with a rollout server gets
    `--weights-dir /checkpoints/<run>/online_rl-<domain>/weights` (the rollout servers mount the PVC)."""
    from venus_core.runtime import launch
    from venus_core.runtime.online_rl import rollout_server_of

    seen: list[list[str]] = []
    monkeypatch.setattr(launch, "run_in_pod", lambda job, argv, dist: seen.append(list(argv)) or 0)
    monkeypatch.setenv("KFP_RUN_ID", "run-7")
    spec = str(ROOT / "agents" / "ui-venus-1.5-8b")
    base = ["--spec", spec, "--out", str(tmp_path / "o"), "--domain", "web", "--model", "m"]
    assert launch.main(["online_rl", *base]) == 0
    argv = seen[-1]
    assert argv[argv.index("--checkpoints") + 1] == "/checkpoints/run-7/online_rl-web/checkpoints"
    assert argv[argv.index("--weights-dir") + 1] == "/checkpoints/run-7/online_rl-web/weights"
    assert launch.main(["online_rl", *base, "--weights-dir=/elsewhere"]) == 0  # an explicit one is kept
    assert [a for a in seen[-1] if "weights" in a] == ["--weights-dir=/elsewhere"]
    assert launch.main(["online_rl", *base, "--set", "online_rl.rollout_server=null"]) == 0  # in process: none
    assert "--weights-dir" not in seen[-1]
    o = load_spec(ROOT / "agents" / "ui-venus-1.5-8b").online_rl
    assert rollout_server_of(o, "web") == "http://vllm-rollout-web.venus.svc:8000/v1"


def test_sync_server_puts_the_learners_weights_on_the_server(tiny_dir: Path, tmp_path: Path) -> None:
    import torch

    from venus_core.config.spec import ModelSpec
    from venus_core.config.training import OnlineRLSpec
    from venus_core.envs import SimPhoneEnv
    from venus_core.models.loading import load_model
    from venus_core.models.serve_runner import logits_size
    from venus_core.models.serve_weights import WeightReloader
    from venus_core.models.server import BackgroundServer, create_app, transformers_runner
    from venus_core.rl.online import TaskPool, sim_phone_tasks
    from venus_core.rl.online.devices import LocalEnvs
    from venus_core.rl.online.loop import OnlineRL
    from venus_core.train.tracker import NullTracker

    served, processor = load_model(tiny_dir, ModelSpec())
    model, _ = load_model(tiny_dir, ModelSpec())
    app = create_app(transformers_runner(served, processor), "tiny", max_batch=4, batch_wait_ms=2,
                     vocab_size=logits_size(served), weights=WeightReloader(served))
    with BackgroundServer(app) as srv:
        spec = OnlineRLSpec(rollout_server=srv.base_url, rollout_model="tiny")
        pool = TaskPool(sim_phone_tasks([3], range(2), size=(256, 256)), spec.task_pool.model_copy(update={"held_out": 0}),
                        seed=0)
        source = LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=(256, 256)), "mobile")
        trainer = OnlineRL(model, processor, spec, pool, source, NullTracker(), weights_dir=tmp_path / "w")
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        trainer.learner.updates = 1
        trainer.sync_server()
        source.close()
    assert trainer.rollout_policy.version == 1 and trainer.totals["weight_syncs"] == 2
    for (name, a), b in zip(model.state_dict().items(), served.state_dict().values(), strict=True):
        assert torch.equal(a, b), name
    assert sorted(p.name for p in (tmp_path / "w").iterdir()) == ["v00001"]  # the older copy is gone


def test_online_rl_job_stopped_and_resumed_from_its_checkpoint(tiny_dir: Path, tmp_path: Path) -> None:
    from venus_core.runtime.online_rl import main

    out, ck = tmp_path / "out", tmp_path / "ck"
    argv = ["--spec", str(ROOT / "agents" / "venus-tiny"), "--domain", "mobile", "--model", str(tiny_dir),
            "--out", str(out), "--checkpoints", str(ck), "--set", "online_rl.device_service=local",
            "--set", "online_rl.save_every=1"]
    for s in SMALL:
        argv += ["--set", s]
    assert main([*argv, "--stop-at", "1"]) == 3
    assert (ck / "latest").is_file() and not (out / "report.json").exists()
    assert main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["resumed_from_step"] == 1
    assert report["held_out"]["before"]["n"] == 2  # from the checkpoint, not played again


@pytest.mark.parametrize("judge", ["up", "down"])
def test_online_rl_job_with_the_mllm_judge_deciding_success(tmp_path: Path, judge: str) -> None:
    """`online_rl.success=judge` through the data stage's OpenAI-compatible judge (a scripted server on
    loopback): the report has the verdicts, their agreement with the rules and the judge's cost; with
    the judge down (nothing listens) every episode that ran a step is lost and counted, the run ends
    normally and the learner skips what has no verdict. The shipped bootstrap plays (a random model's
    steps are all invalid: nothing to judge)."""
    import socket

    from venus_core.runtime.online_rl import main
    from venus_core.scoring.testing_server import ScriptedChatServer, judgement_reply

    out, ck = tmp_path / "out", tmp_path / "ck"
    with ScriptedChatServer(default=lambda r: judgement_reply(9, 9)) as server:
        endpoint = server.base_url
        if judge == "down":
            with socket.socket() as s:  # a port nobody listens on
                s.bind(("127.0.0.1", 0))
                endpoint = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
        argv = ["--spec", str(ROOT / "agents" / "venus-tiny"), "--domain", "mobile", "--model", str(BOOTSTRAP),
                "--out", str(out), "--checkpoints", str(ck), "--set", "online_rl.device_service=local",
                "--set", "online_rl.success=judge", "--set", "scoring.judge=openai",
                "--set", f"scoring.endpoint={endpoint}", "--set", "scoring.judge_model=judge",
                "--set", "scoring.max_retries=0", "--set", "scoring.timeout_s=5"]
        for s in [*SMALL, "online_rl.levels=[1]", "online_rl.task_pool.held_out_levels=[1]",
                  "online_rl.kl.check_every=5"]:  # one-screen boards: the bootstrap's steps are short
            argv += ["--set", s]
        assert main(argv) == 0
        calls = len(server.requests)
    report = json.loads((out / "report.json").read_text())
    success, rollouts = report["success"], report["rollouts"]
    assert success["mode"] == "judge" and rollouts["episodes"] == 8
    assert report["held_out"]["after"]["n"] == 2  # the held-out check stays on rules
    if judge == "up":
        assert success["judged"] == calls > 0 and success["judge_failures"] == 0
        assert success["decided_by/judge"] == 8 and rollouts["lost"] == 0
        agree = success["agreement"]
        assert agree["n"] == 8 and agree["both_pass"] + agree["judge_only"] == success["judged"]
        assert success["judge_cost"]["calls"] == calls
        lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        assert any("judge/agreement" in x.get("metrics", {}) for x in lines)
        assert (out / "judge_cache.sqlite").is_file()
    else:
        assert calls == 0 and success["judge_failures"] == success["no_verdict"] == success["judged"] > 0
        assert rollouts["lost"] == rollouts["lost/judge"] == success["no_verdict"]
        assert success["decided_by/judge"] == 8 - success["no_verdict"]


def test_online_rl_success_judge_needs_an_mllm_judge() -> None:
    spec = load_spec(ROOT / "agents" / "venus-tiny", ["online_rl.success=auto", "scoring.judge=openai"])
    assert spec.online_rl.success == "auto"
    with pytest.raises(ValueError, match="online_rl.success=judge needs an MLLM judge, but scoring.judge is 'rules'"):
        load_spec(ROOT / "agents" / "venus-tiny", ["online_rl.success=judge", "scoring.judge=rules"])


def test_web_held_out_pages_do_not_knock_out_training_pages_of_the_same_goal() -> None:
    """click-dialog's goal never varies: held-out pages without a start fingerprint collided with every
    training page and the pool dropped them all."""
    from contextlib import ExitStack

    from venus_core.rl.online import TaskPool
    from venus_core.runtime.online_rl import _web

    if shutil.which("chromium") is None:
        pytest.skip("no chromium")
    spec = load_spec(ROOT / "agents" / "venus-tiny", ["online_rl.web_tasks=[click-dialog]", "online_rl.train_tasks=6",
                                                       "online_rl.task_pool.held_out=2"])
    with ExitStack() as stack:
        source, tasks, held = _web(stack, spec)
        stack.callback(source.close)
        assert len({t.task.goal for t in tasks}) == 1 and all(h.start for h in held)
        pool = TaskPool(tasks, spec.online_rl.task_pool, seed=0, held_out=held)
        stats = pool.report()
    assert stats["dedupe"]["held_out_collisions_count"] == 0 and stats["total"] == 6, stats["dedupe"]
