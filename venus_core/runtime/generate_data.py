"""Runtime job `generate_data`: the data flywheel, grown on devices (`venus_core.flywheel`).

    python -m venus_core.runtime.generate_data --spec AGENT --out DIR [--model CKPT] [--seeds FILE] [--set k=v]

Rounds of seed expansion -> uniqueness -> feasibility -> execution on leased devices -> verification
-> feedback, per the spec's `flywheel` section (docs/flywheel.md). The devices are online RL's:
`online_rl.device_service` (a SimPhoneFarm on loopback, phones leased from $VENUS_DEVICE_REGISTRY,
or in process), with `online_rl.call_timeout_s` and its fault handling; uniqueness uses
`online_rl.task_pool`'s threshold and scope, against its held-out tasks at the flywheel's levels.
With `flywheel.env: miniwob` the tasks are MiniWoB++ pages (`flywheel.web_tasks`, default every
task with a DOM oracle) played in online RL's web envs (`online_rl.web_source`: browsers leased
through the gateway and driven over CDP, or with `device_service: local` browser contexts of one
Chromium in process); the held-out tasks are online RL's web ones. The policy is `--model` (default: the spec's
`model.base`, e.g. the shipped bootstrap), or `flywheel.policy_server`, or the scripted oracle
(`flywheel.policy: oracle`: the synthetic world's planner, or MiniWoB++'s DOM oracles). The judge, when asked for
(`flywheel.judge` or `verifier: judge`), is `scoring.judge` (an MLLM backend), cached in
OUT/judge_cache.sqlite.

Writes OUT/dataset (a Venus dataset of the verified trajectories: the pipeline's score_data reads
it as the source `flywheel`), OUT/tasks.jsonl (every proposal with its status and reason),
OUT/report.json (provenance, the per-round table, totals) and OUT/metrics.jsonl (one step per round).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack, closing
from pathlib import Path
from typing import Any

from venus_core.config import AgentSpec
from venus_core.runtime.common import dir_sha256, job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import job_tracking
from venus_core.train.tracker import JsonlTracker, Tracker

JOB = "generate_data"
CLIENT = "flywheel"


def _policy(spec: AgentSpec, model_dir: str | None, work: Path, device: Any) -> tuple[Any, str, list[str]]:
    """(rollout policy, its revision, provenance inputs)."""
    f = spec.flywheel
    if f.policy == "oracle" and f.env == "miniwob":
        from venus_core.rl.online.miniwob_policy import MiniWobOraclePolicy

        return MiniWobOraclePolicy(), "miniwob-dom-oracles", []
    if f.policy == "oracle":
        from venus_core.envs.simphone import synth_plan
        from venus_core.rl.online.policy import ScriptedPolicy

        return ScriptedPolicy(synth_plan, name="oracle:synth-planner"), "synth-planner", []
    from venus_core.rl.online.policy import ModelPolicy, PredictorPolicy

    if f.policy_server:
        from venus_core.eval.predictors import OpenAIPredictor

        predictor = OpenAIPredictor(f.policy_server, f.policy_model, name=f.policy_model, temperature=f.temperature)
        return (PredictorPolicy(predictor, max_new_tokens=f.max_new_tokens),
                f"server:{f.policy_server}#{f.policy_model}", [])
    from venus_core.eval.predictors import LocalPredictor
    from venus_core.models.loading import load_model
    from venus_core.models.placement import job_device
    from venus_core.train.base import base_is_shipped, resolve_base

    if not model_dir:
        from venus_core.runtime.base_model import localize_base

        spec = localize_base(spec, "generate_data")  # an s3:// / file:// base: fetched to the model cache
    target = Path(model_dir) if model_dir else resolve_base(spec.model, work)
    model, processor = load_model(target, spec.model, job_device(spec, JOB, device), tiny_dir=work / "base-tiny",
                                  require_manifest=bool(model_dir) or base_is_shipped(spec.model))
    name = Path(str(target)).name
    revision = f"{name}@{dir_sha256(target)}" if target != "tiny" else "tiny"
    inputs = [str(target)] if target != "tiny" else []
    if f.temperature == 0:
        predictor = LocalPredictor(model, processor, name=name, temperature=0.0, batch_size=spec.eval.batch_size)
        return PredictorPolicy(predictor, max_new_tokens=f.max_new_tokens), revision, inputs
    policy = ModelPolicy(model, processor, temperature=f.temperature, max_new_tokens=f.max_new_tokens, seed=f.seed,
                         name=name)
    return policy, revision, inputs


def _sim_phone(stack: ExitStack, spec: AgentSpec, seeds_path: str | None) -> tuple[Any, list[Any], list[Any], Any,
                                                                                   dict[str, Any]]:
    """(space, seeds, held-out tasks, env source, report fields) on simulated phones."""
    from venus_core.flywheel.seeds import load_seeds, pool_seeds
    from venus_core.flywheel.space import SimPhoneSpace
    from venus_core.rl.online import held_out_tasks, sim_phone_tasks
    from venus_core.runtime.online_rl import _phone_size, phone_source

    f, o = spec.flywheel, spec.online_rl
    size = _phone_size(f.levels)
    space = SimPhoneSpace(f.levels, size, f.candidates_per_round, f.first_seed, f.max_steps_per_episode, seed=f.seed)
    seeds = load_seeds(seeds_path) if seeds_path else pool_seeds(
        sim_phone_tasks(f.levels, range(o.train_tasks), size=size, max_steps=f.max_steps_per_episode))
    for seed in seeds:
        space.check_seed(seed)
    pool = o.task_pool.model_copy(update={"held_out_levels": list(f.levels)})
    held = held_out_tasks(pool, size=size, max_steps=f.max_steps_per_episode) if pool.held_out else []
    source = phone_source(stack, o, size, CLIENT, f.devices)
    stack.callback(source.close)
    return space, seeds, held, source, {"screen_size": list(size)}


def _miniwob(stack: ExitStack, spec: AgentSpec, seeds_path: str | None) -> tuple[Any, list[Any], list[Any], Any,
                                                                                  dict[str, Any]]:
    """(space, seeds, held-out tasks, env source, report fields) on MiniWoB++ pages: one page of its own
    generates the candidates; the rollouts run in online RL's web envs (`online_rl.web_source`: leased
    browsers over CDP, or browser contexts in process)."""
    from venus_core.envs import MiniWobEnv
    from venus_core.envs.miniwob_oracle import SOLVERS
    from venus_core.flywheel.seeds import load_seeds, pool_seeds
    from venus_core.flywheel.web_space import MiniWobSpace
    from venus_core.runtime.online_rl import web_source

    f, o = spec.flywheel, spec.online_rl
    page = stack.enter_context(MiniWobEnv(wait_s=0.0))
    seeds = load_seeds(seeds_path) if seeds_path else None
    names = list(dict.fromkeys(s.app for s in seeds)) if seeds else (f.web_tasks or sorted(SOLVERS))
    space = MiniWobSpace(page, names, f.web_candidates_per_round, f.first_seed, f.max_steps_per_episode, seed=f.seed)
    if seeds is None:
        seeds = pool_seeds(space.sample())
    for seed in seeds:
        space.check_seed(seed)
    held = space.held_out(o.web_tasks, o.task_pool.held_out) if o.task_pool.held_out else []
    source = web_source(stack, o, CLIENT, f.devices)
    stack.callback(source.close)
    devices = ("MiniWoB++ browser contexts in process" if o.service_of("web") == "local" else
               "browsers leased through the device gateway, driven over CDP")
    return space, seeds, held, source, {"web": {
        "tasks": list(space.tasks), "expected_steps": dict(space.steps), "steps_assumed": list(space.assumed),
        "devices": devices}}


def run(spec: AgentSpec, out: Path, *, model_dir: str | None = None, seeds_file: str | None = None,
        tracker: Tracker | None = None, device: Any = "auto", log: Callable[[str], None] = print) -> dict[str, Any]:
    """The job body (also `venus data generate` and the tests)."""
    from venus_core.data.store import DatasetWriter
    from venus_core.flywheel.expanders import make_expander
    from venus_core.flywheel.loop import Flywheel, Settings
    from venus_core.flywheel.records import SOURCE, ImageMemo
    from venus_core.scoring.judges import make_judge

    f, o = spec.flywheel, spec.online_rl
    out.mkdir(parents=True, exist_ok=True)
    judged = f.judge or f.verifier == "judge"
    if judged and spec.scoring.judge == "rules":
        raise ValueError("flywheel.judge / verifier=judge need an MLLM judge: scoring.judge is 'rules' (the data "
                         "validators, which cannot see whether a goal was reached); set scoring.judge=openai or local")
    memo = ImageMemo()
    tracker = tracker or JsonlTracker(out / "metrics.jsonl")
    tracker.log_params({f"flywheel.{k}": v for k, v in f.model_dump(mode="json").items()})
    with ExitStack() as stack:
        space, seeds, held, source, where = (_miniwob if f.env == "miniwob" else _sim_phone)(
            stack, spec, seeds_file or f.seeds_file)
        policy, revision, inputs = _policy(spec, model_dir, out, device)
        if hasattr(policy, "close"):
            stack.callback(policy.close)
        settings = Settings(rounds=f.rounds, tasks_per_round=f.tasks_per_round, devices=f.devices,
                            history_len=o.history_len, call_timeout_s=o.call_timeout_s,
                            dedupe_similarity=o.task_pool.dedupe_similarity, dedupe_scope=o.task_pool.dedupe_scope,
                            verifier=f.verifier, keep_threshold=spec.scoring.keep_threshold, policy_revision=revision)
        judge = stack.enter_context(closing(make_judge(spec.scoring, open_image=memo,
                                                        cache_path=out / "judge_cache.sqlite"))) if judged else None
        expander = stack.enter_context(closing(make_expander(f, space=space)))
        writer = stack.enter_context(DatasetWriter(out / "dataset", sources=[SOURCE], overwrite=True,
                                                   created_by=f"venus data generate (flywheel, {f.expander})"))
        tasks_log = stack.enter_context(open(out / "tasks.jsonl", "w", encoding="utf-8"))
        flywheel = Flywheel(settings, seeds, space, expander, source, policy, writer, memo, judge=judge,
                            held_out=held, tasks_log=tasks_log, log=log)
        for r in range(f.rounds):
            row = flywheel.round(r)
            flywheel.rounds.append(row)
            tracker.log_metrics(_round_metrics(row), r)
        summary = flywheel.summary()
        devices = dict(source.stats)
    report = {"provenance": provenance(JOB, spec, inputs), "policy": {"name": policy.name, "revision": revision},
              "env": f.env, "seeds": [vars(s) | {"examples": list(s.examples)} for s in seeds], **where,
              "held_out_tasks": len(held), **summary, "device_source": devices}
    write_json_atomic(out / "report.json", report)
    tracker.log_artifact(out / "report.json", "report.json")
    return report


def _round_metrics(row: dict[str, Any]) -> dict[str, float]:
    s = row["success"]
    out = {k: float(row[k]) for k in ("proposed", "unique", "feasible", "executed", "lost", "verified")}
    out.update({"success_rate": float(s["value"]), "success_ci95_low": float(s["ci95_low"]),
                "success_ci95_high": float(s["ci95_high"]), "device_minutes": float(row["devices"]["device_minutes"]),
                "expander_calls": float(row["expander"]["calls"])})
    if row["judge"] is not None:
        out["judge_calls"] = float(row["judge"]["calls"])
    if row["agreement"] is not None:
        out["judge_rule_agreement"] = float(row["agreement"]["agreement"])
    return out


def table(report: dict[str, Any]) -> str:
    """The per-round table (docs/flywheel.md prints it the same way)."""
    head = "round  proposed  unique  feasible  executed  lost  verified  success [95 % CI]        dev-min  calls(exp/judge)"
    lines = [head]
    for row in report["rounds"]:
        s = row["success"]
        judge = (row["judge"] or {}).get("calls", 0)
        lines.append(f"{row['round']:>5}  {row['proposed']:>8}  {row['unique']:>6}  {row['feasible']:>8}  "
                     f"{row['executed']:>8}  {row['lost']:>4}  {row['verified']:>8}  "
                     f"{s['value']:>6.1%} [{s['ci95_low']:.1%}, {s['ci95_high']:.1%}]  "
                     f"{row['devices']['device_minutes']:>7.2f}  {row['expander']['calls']}/{judge}")
    rise = report["rise"]
    lines.append(f"last round beyond the first round's interval: {'yes' if rise['beyond_intervals'] else 'no'}")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser(JOB, "The data flywheel: seeds -> tasks -> devices -> verified trajectories, in rounds.")
    p.add_argument("--model", default=None, help="policy checkpoint directory (default: the spec's model.base)")
    p.add_argument("--seeds", default=None, help="seed task prompts file (default: flywheel.seeds_file, else the "
                   "task pool's static templates)")
    p.add_argument("--device", default="auto", help="torch device of the policy model: auto, cpu, cuda, cuda:N")
    args = p.parse_args(argv)
    spec = load_job_spec(args)
    out = Path(args.out)
    with job_tracking(JOB, spec, out, section="flywheel") as tracker:
        try:
            report = run(spec, out, model_dir=args.model, seeds_file=args.seeds, tracker=tracker, device=args.device,
                         log=lambda m: print(f"[{JOB}] {m}", flush=True))
        except (ValueError, RuntimeError, FileNotFoundError) as exc:
            print(f"{JOB}: error: {exc}", file=sys.stderr)
            tracker.set_tags({"venus.error": str(exc)[:5000]})
            return 1
        tracker.record_provenance(report["provenance"])
    print(table(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
