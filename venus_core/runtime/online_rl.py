"""Runtime job `online_rl`: full-trajectory GRPO of one navigation specialist on live environments.

    python -m venus_core.runtime.online_rl --domain mobile|web --spec AGENT --model CKPT_DIR \
        --out DIR [--set k=v]

Environments per domain: `mobile` plays synthetic-world tasks on simulated phones (levels
`online_rl.levels`); with `online_rl.device_service: gateway` the phones are leased through the
device service and driven over ADB through the gateway: from the lease registry at
`$VENUS_DEVICE_REGISTRY` (a cluster's device pool, whose phones answer `venus-load`), else from a
`SimPhoneFarm` this job starts on loopback (the laptop). `local` runs the phones in process. `web`
plays MiniWoB++ tasks (`online_rl.web_tasks`) in headless Chromium: with `gateway` (or
`web_device_service: gateway`), browsers leased from the same registry (kind `web`, the cluster's
browser pods) or from a `BrowserFarm` of Chromium processes started here, each driven over CDP
through the gateway; with `local`, browser contexts of one Chromium in process.

A training episode's success is the env's rule, or the MLLM judge's verdict (`online_rl.success`:
auto / judge; `scoring.judge`, cached in OUT/judge_cache.sqlite; `rl.online.verdicts`): an episode
the judge gives no verdict on (down, an unparseable reply) is lost and counted, and where both
verdicts exist the report has their agreement (`success`). The held-out tasks (never sampled for
training: seeds from 900000) are played greedily before and after training, judged by rules; the report has both success rates per bucket with 95 % Wilson intervals and
episode counts, the training curve (per-step success rate per bucket, reward, KL, entropy
coefficient, reference moves, devices lost / replaced), the task pool's final state and sample
trajectories. Writes `OUT/model/`, `OUT/metrics.jsonl` and `OUT/report.json`.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import torch

from venus_core.config import AgentSpec
from venus_core.runtime.rl_checkpoint import StoppedAt
from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import job_tracking
from venus_core.train.tracker import JsonlTracker, Tracker

JOB = "online_rl"
DOMAINS = ("mobile", "web")
REGISTRY_ENV = "VENUS_DEVICE_REGISTRY"


def _phone_size(levels: Sequence[int]) -> tuple[int, int]:
    from venus_core.data.synth.levels import level_spec

    sizes = {level_spec(lv).mobile_size for lv in levels}
    if len(sizes) != 1:
        raise ValueError(f"online_rl.levels {list(levels)} have different screen sizes {sorted(sizes)}; "
                         "one device pool serves one size")
    return sizes.pop()


def phone_source(stack: ExitStack, o: Any, size: tuple[int, int], client: str, devices: int) -> Any:
    """Simulated phones of `size` as an EnvSource, per `online_rl.device_service` (module docstring):
    in process (`local`), leased from $VENUS_DEVICE_REGISTRY, or from a SimPhoneFarm of `devices`
    phones started here (stopped by `stack`). Also the data flywheel's devices (`generate_data`)."""
    from venus_core.rl.online.devices import LeasedEnvs, LocalEnvs, SimPhoneFarm

    if o.device_service == "local":
        from venus_core.envs import SimPhoneEnv

        return LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=size), "mobile")
    if os.environ.get(REGISTRY_ENV):
        from venus_core.daas import DevicePool
        from venus_core.envs import AdbServerProcess, RemoteSimPhoneEnv

        adb = stack.enter_context(AdbServerProcess())
        pool = DevicePool(os.environ[REGISTRY_ENV], f"{client}-{os.getpid()}", wait=o.call_timeout_s,
                          io_timeout=o.call_timeout_s)
        return LeasedEnvs(pool, lambda port: RemoteSimPhoneEnv(f"127.0.0.1:{port}", adb_port=adb.port),
                          labels={"size": f"{size[0]}x{size[1]}", "lang": "en"}, adb=adb)
    farm = stack.enter_context(SimPhoneFarm(devices, size=size, io_timeout=o.call_timeout_s))
    return farm.env_source(client)


@contextmanager
def open_domain(spec: AgentSpec, domain: str) -> Iterator[tuple[Any, Any, list[Any]]]:
    """(task pool, env source, held-out tasks) of `domain`; everything started is stopped after."""
    from venus_core.rl.online import TaskPool, held_out_tasks, sim_phone_tasks

    o = spec.online_rl
    with ExitStack() as stack:
        if domain == "mobile":
            size = _phone_size(o.levels)
            tasks = sim_phone_tasks(o.levels, range(o.train_tasks), size=size, max_steps=o.max_steps_per_episode)
            held = held_out_tasks(o.task_pool, size=size, max_steps=o.max_steps_per_episode)
            source: Any = phone_source(stack, o, size, f"online-rl-{domain}", o.devices)
        else:
            source, tasks, held = _web(stack, spec)
        stack.callback(source.close)
        yield TaskPool(tasks, o.task_pool, seed=o.seed, held_out=held), source, held


def web_source(stack: ExitStack, o: Any, client: str, devices: int) -> Any:
    """MiniWoB++ envs as an EnvSource, per `o.service_of("web")` (module docstring): browser
    contexts in the process's shared headless Chromium (`local`), or browsers leased over CDP
    through the gateway: from $VENUS_DEVICE_REGISTRY (the cluster's browser pods), else from a
    BrowserFarm of `devices` Chromium processes started here (stopped by `stack`). Also the data
    flywheel's web devices (`generate_data`)."""
    from venus_core.rl.online.devices import LocalEnvs

    if o.service_of("web") == "local":
        from venus_core.envs import MiniWobEnv

        return LocalEnvs(lambda: MiniWobEnv(wait_s=0.0), "web")
    from venus_core.rl.online.browsers import BrowserFarm, leased_miniwob

    if os.environ.get(REGISTRY_ENV):
        from venus_core.daas import DevicePool

        return leased_miniwob(DevicePool(os.environ[REGISTRY_ENV], f"{client}-{os.getpid()}",
                                         wait=o.call_timeout_s, io_timeout=o.call_timeout_s))
    farm = stack.enter_context(BrowserFarm(devices, io_timeout=o.call_timeout_s))
    return farm.env_source(client)


def _web(stack: ExitStack, spec: AgentSpec) -> tuple[Any, list[Any], list[Any]]:
    from venus_core.envs import MiniWobEnv
    from venus_core.envs.miniwob_collect import oracle_steps
    from venus_core.rl.online import miniwob_tasks
    from venus_core.rl.online.sources import miniwob_held_out_tasks

    o = spec.online_rl
    source = web_source(stack, o, "online-rl-web", o.devices)
    # the pages that generate the tasks: a browser of the source's own (leased: the job's pod needs
    # no Chromium of its own), or one context in the local browser
    local = o.service_of("web") == "local"
    page = stack.enter_context(MiniWobEnv(wait_s=0.0)) if local else source.acquire()

    def make(name: str, seed: int) -> Any:
        return page.make_task(name, seed, max_steps=o.max_steps_per_episode)

    try:
        try:
            steps = oracle_steps(page, o.web_tasks, o.max_steps_per_episode)
        except ValueError as exc:
            raise ValueError(f"online_rl.web_tasks: {exc}") from None
        per_name = max(1, o.train_tasks // len(o.web_tasks))
        tasks = miniwob_tasks(o.web_tasks, range(per_name), make, expected_steps=lambda t: steps[t.app or ""])
        held = miniwob_held_out_tasks(o.web_tasks, o.task_pool.held_out, make, steps)
    finally:
        if not local:
            source.release(page)
    return source, tasks, held


def episode_judge(spec: AgentSpec, mode: str, platform: str, out: Path, stack: ExitStack) -> Any:
    """The `EpisodeJudge` of `online_rl.success` (None for rules): the data stage's judge backend
    (`scoring.judge`), cached in OUT/judge_cache.sqlite, closed by `stack`."""
    if mode == "rules":
        return None
    from contextlib import closing

    from venus_core.rl.online.verdicts import EpisodeJudge, ImageMemo
    from venus_core.scoring.judges import make_judge

    memo = ImageMemo()
    backend = stack.enter_context(closing(make_judge(spec.scoring, open_image=memo,
                                                     cache_path=out / "judge_cache.sqlite")))
    return EpisodeJudge(mode, backend, memo, keep_threshold=spec.scoring.keep_threshold, platform=platform)


def _by_bucket(result: Any) -> dict[str, Any]:
    from venus_core.eval.results import rates_by

    return rates_by(result.samples, "bucket", "success")


def rollout_server_of(o: Any, domain: str) -> str | None:
    """`online_rl.rollout_server` with `{domain}` replaced: each specialist samples from its own
    server (two jobs loading their weights into one server would sample each other's)."""
    return None if o.rollout_server is None else o.rollout_server.replace("{domain}", domain)


def run(spec: AgentSpec, domain: str, model_dir: str, out: Path, *, tracker: Tracker | None = None,
        checkpoints: Path | None = None, stop_at: int | None = None, weights_dir: Path | None = None,
        device: Any = "auto") -> dict[str, Any]:
    """The job body (also called in process by tests). The learner's model goes on `device`
    ("auto": the local rank's / first GPU when there is one, else the CPU, after checking the GPUs
    the spec gives `online_rl` are there: `models.placement`); its reference copy, optimizer state
    and in-process rollout copy follow it (`TrajectoryGRPO`, `OnlineRL`). With `checkpoints` the run is saved there
    every `online_rl.save_every` steps and a run that finds a checkpoint continues from it
    (`online_checkpoint`); `stop_at` (tests) ends training after that many steps, as a kill would.
    With a rollout server the learner's weights go to `weights_dir` (default `OUT/weights`), a
    directory the server must read at the same path (on a cluster: the checkpoints PVC, `launch`)."""
    from venus_core.runtime.online_checkpoint import OnlineCheckpointing

    from venus_core.eval.results import result_from_dict
    from venus_core.models.loading import load_model, save_model
    from venus_core.models.placement import describe_model, job_device, low_precision_note
    from venus_core.rl.online.loop import OnlineRL, success_rate

    if domain not in DOMAINS:
        raise ValueError(f"--domain must be one of {', '.join(DOMAINS)}, got {domain!r}")
    o = spec.online_rl.model_copy(update={"rollout_server": rollout_server_of(spec.online_rl, domain)})
    if not isinstance(device, torch.device):  # main() resolved it already
        device = job_device(spec, JOB, device)  # fails fast when the pod's GPUs are missing
    out.mkdir(parents=True, exist_ok=True)
    weights = (weights_dir or out / "weights") if o.rollout_server else None
    prov = provenance(JOB, spec, [model_dir])
    torch.manual_seed(o.seed)
    random.seed(o.seed)
    tracker = tracker or JsonlTracker(out / "metrics.jsonl")
    tracker.log_params({"domain": domain, **{f"online_rl.{k}": v for k, v in o.model_dump(mode="json").items()}})
    model, processor = load_model(model_dir, spec.model, device, training=True)
    model.eval()
    placement = describe_model(model)
    print(f"[{JOB}] learner on {placement['device']} ({placement['dtype']}, {placement['attn_implementation']})",
          file=sys.stderr, flush=True)
    placement["precision_note"] = low_precision_note(model, o.lr, JOB)
    t0 = time.perf_counter()
    with open_domain(spec, domain) as (pool, source, held), ExitStack() as judging:
        judge = episode_judge(spec, o.success, "web" if domain == "web" else "mobile", out, judging)
        trainer = OnlineRL(model, processor, o, pool, source, tracker, eval_batch_size=spec.eval.batch_size,
                           weights_dir=weights, judge=judge)
        ckpt = OnlineCheckpointing(checkpoints, trainer, o.save_every, stop_at)
        start = ckpt.restore()
        if ckpt.before is not None:
            before = result_from_dict(ckpt.before, "checkpoint before")
        else:
            before = trainer.evaluate(model, held, "before") if held else None
            ckpt.before = before.to_dict() if before is not None else None
        t_eval = time.perf_counter() - t0
        t1 = time.perf_counter()
        history = trainer.train(o.steps, held_out=held, start=start, on_step=ckpt.on_step)
        ckpt.final(o.steps)
        t_train = time.perf_counter() - t1
        after = trainer.evaluate(model, held, "after") if held else None
        pool_report = pool.report()
        success = judge.report() if judge is not None else {"mode": "rules"}
    devices = dict(source.stats)  # after the source closed: envs kept leased while idle are released by then
    report: dict[str, Any] = {
        "provenance": prov, "domain": domain, "steps": o.steps,
        "held_out": None if before is None else {
            "tasks": len(held), "before": before.summary["success"], "after": after.summary["success"],  # type: ignore[union-attr]
            "before_by_bucket": _by_bucket(before), "after_by_bucket": _by_bucket(after),
            "invalid_steps_before": before.summary["invalid_steps"], "invalid_steps_after": after.summary["invalid_steps"],  # type: ignore[union-attr]
        },
        "resumed_from_step": start or None,
        "train_success_first": history[0].get("success_rate") if history else None,
        "train_success_last": history[-1].get("success_rate") if history else None,
        "rollouts": dict(trainer.totals), "devices": devices, "pool": pool_report, "success": success,
        "reference": {"moves": trainer.learner.ref_moves, "checks": trainer.checks},
        "updates": trainer.learner.updates, "sample_trajectories": trainer.samples[-8:],
        "seconds": {"train": round(t_train, 1), "eval_before": round(t_eval, 1)},
        "torch_threads": torch.get_num_threads(),
        "placement": placement,
    }
    if before is not None:
        tracker.log_metrics({"held_out/success_before": success_rate(before),
                             "held_out/success_after": success_rate(after)}, o.steps)  # type: ignore[arg-type]
    save_model(model, processor, out / "model")
    if weights is not None:
        import shutil

        shutil.rmtree(weights, ignore_errors=True)  # the server's copies, not an output
    write_json_atomic(out / "report.json", report)
    tracker.log_artifact(out / "report.json", "report.json")
    return report


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser(JOB, "Full-trajectory GRPO of one navigation specialist on live environments.")
    p.add_argument("--domain", required=True, choices=DOMAINS)
    p.add_argument("--model", required=True, help="HF checkpoint directory to start from (the offline specialist)")
    p.add_argument("--checkpoints", default=None, metavar="DIR",
                   help="checkpoint directory (a PVC on a cluster): saved every save_every steps, resumed when present")
    p.add_argument("--weights-dir", default=None, metavar="DIR",
                   help="where the rollout server reads the learner's weights (default OUT/weights; "
                        "a PVC on a cluster)")
    p.add_argument("--device", default="auto",
                   help="torch device of the learner: auto (the local rank's GPU, else cuda:0, else cpu; the GPUs "
                        "platform.resources.online_rl asks for must be there), cpu, cuda, cuda:N")
    p.add_argument("--stop-at", type=int, default=None, help=argparse.SUPPRESS)  # tests: stop after step N
    args = p.parse_args(argv)
    spec = load_job_spec(args)
    from venus_core.runtime.offline_rl import _startup_device

    device = _startup_device(spec, JOB, args.device)
    if device is None:
        return 2
    out = Path(args.out)
    with job_tracking(JOB, spec, out, section="online_rl", tags={"venus.domain": args.domain}) as tracker:
        try:
            report = run(spec, args.domain, args.model, out, tracker=tracker,
                         checkpoints=Path(args.checkpoints) if args.checkpoints else None, stop_at=args.stop_at,
                         weights_dir=Path(args.weights_dir) if args.weights_dir else None, device=device)
        except StoppedAt as stop:
            print(f"online_rl: stopped after step {stop.step} (--stop-at)", file=sys.stderr)
            return 3
        tracker.record_provenance(report["provenance"])
    h = report["held_out"]
    if h:
        b, a = h["before"], h["after"]
        print(f"held-out success: {b['value']:.3f} [{b['ci95_low']:.3f}, {b['ci95_high']:.3f}] -> "
              f"{a['value']:.3f} [{a['ci95_low']:.3f}, {a['ci95_high']:.3f}] (n={a['n']})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
