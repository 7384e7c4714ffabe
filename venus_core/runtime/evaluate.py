"""The `evaluate` job: every model × every evaluation suite -> result JSONs, one HTML report, provenance.

    python -m venus_core.runtime.evaluate --spec AGENT --model CKPT [--model NAME=CKPT ...]
        [--baselines] [--data DIR ...] [--online TARGET ...] [--base-url URL] [--limit N] --out DIR

Suites come from `--data` (each dataset directory is one suite, its evaluator chosen from the kind
of its records: grounding, or offline navigation at the goal-only level) and `--online` targets
(live episodes on the simulated phone, `venus_core.eval.online_sim`) or, without either, from the
spec: the fixed held-out suites of `eval.held_out_suites` (grounding by level with refusals and
navigation steps from reserved seeds, generated once per spec and cached by digest,
`venus_core.eval.held_out`) followed by `eval.suites` (those with a dataset, and online suites
such as `online_sim`).
Several `--model`s are compared stage by stage in the report in the order given
(e.g. `mid=…/mid_train offline=…/offline_rl merged=…`); `--baselines` puts the spec's
`eval.baselines` first (`random-init`: model.tiny at random initialisation; `base`: model.base as the
training stages load it), so the table starts where the run started.
With `--base-url` the models are names served by an OpenAI-compatible server (vLLM) and nothing is
loaded locally; the API key, if any, comes from $VENUS_EVAL_API_KEY (a credential, not config).
With `eval.workers` > 1 the local checkpoints are evaluated in that many spawned worker processes
side by side (each loads one model at a time; results, files and tracker steps as with one process,
in model order). Decoding settings come from the spec (`eval.batch_size`, `eval.temperature`,
`eval.repetition_penalty`, and the answer budgets `eval.grounding_max_new_tokens` /
`eval.navigation_max_new_tokens`).

Outputs in `--out`: `results/<model>--<suite>.json` (per sample and summary), `report.html`,
`summary.json` (headline rates per model and suite, with k, n and the 95 % interval),
`comparison.json` (the report's stage-by-stage table as rows), `provenance.json` (inputs with
sha256, resolved spec, git revision) and `metrics.jsonl` (the tracker record: params, every rate
of a result - top level and breakdowns, `<model>/<suite>/<metric>[/<category>]` - with `_n`,
`_ci_low` and `_ci_high` beside it, each model's seconds per suite as `time/<model>/<suite>_s`,
one step per model, and the artifacts; the cluster passes an MLflow-backed tracker to `run`).
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import re
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from venus_core.config import AgentSpec
from venus_core.config.spec import EvalSuiteSpec
from venus_core.eval import suites as eval_suites
from venus_core.eval.online_sim import parse_target
from venus_core.eval.report import HEADLINE, comparison_rows, write_report
from venus_core.eval.results import EvalResult, result_from_dict
from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import KFP_RUN_ENV, finish_parent, job_tracking
from venus_core.train.tracker import JsonlTracker, Tracker

JOB = "evaluate"
_SAFE = re.compile(r"[^A-Za-z0-9._-]+")


def _parser() -> Any:
    p = job_parser(JOB, "Evaluate checkpoints on the agent's evaluation suites; write results and an HTML report.")
    p.add_argument("--model", action="append", required=True, metavar="[NAME=]CKPT",
                   help="checkpoint directory, 'tiny', or a served model name with --base-url (repeatable)")
    p.add_argument("--data", action="append", default=[], metavar="DIR",
                   help="dataset directory to evaluate on (repeatable); default: the spec's eval.suites")
    p.add_argument("--online", action="append", default=[], metavar="TARGET",
                   help="also run online episodes on this target, e.g. sim-phone:levels=3-5,episodes=20 (repeatable)")
    p.add_argument("--base-url", default=None, help="OpenAI-compatible API root (e.g. http://vllm:8000/v1)")
    p.add_argument("--baselines", action="store_true",
                   help="first evaluate the spec's eval.baselines (model.base as training loads it; model.tiny at "
                        "random init), named base and random-init (local checkpoints only)")
    p.add_argument("--limit", type=int, default=None, help="at most this many samples / episodes per suite")
    p.add_argument("--viewer", type=int, default=24, help="samples shown in the report's viewer per result")
    p.add_argument("--device", default="auto",
                   help="torch device of local checkpoints: auto (the GPU when there is one; the GPUs "
                        "platform.resources.evaluate asks for must be there), cpu, cuda, cuda:N")
    return p


def resolve_suites(data: Sequence[str], spec_suites: Sequence[EvalSuiteSpec], limit: int | None,
                   online: Sequence[str] = (), held_out: Sequence[EvalSuiteSpec] = ()) -> list[EvalSuiteSpec]:
    """Suites from --data dirs and --online targets, else `held_out` then the spec's runnable suites;
    none is an error."""
    out: list[EvalSuiteSpec] = []
    for d in data:
        if not Path(d).is_dir():
            raise FileNotFoundError(f"--data {d}: not a directory")
        out.append(EvalSuiteSpec(name=Path(d.rstrip("/")).name, evaluator=eval_suites.evaluator_for_dataset(d),
                                 data=d, limit=limit))
    for i, target in enumerate(online):
        parse_target(target)  # fail on a bad target before any model is loaded
        out.append(EvalSuiteSpec(name="online" if len(online) == 1 else f"online-{i}", evaluator="online_sim",
                                 data=target, limit=limit))
    if out:
        return out
    runnable = [s for s in spec_suites if s.data or s.evaluator in eval_suites.NO_DATA_EVALUATORS]
    chosen = [s if limit is None else s.model_copy(update={"limit": limit}) for s in [*held_out, *runnable]]
    if not chosen:
        raise ValueError("nothing to evaluate: pass --data DIR / --online TARGET, enable eval.held_out_suites, "
                         "or list suites in the spec's eval.suites (offline suites need a `data`)")
    names = [s.name for s in chosen]
    if len(set(names)) != len(names):
        raise ValueError(f"suite names must be unique, got {names} (eval.suites may not reuse a held-out suite's name)")
    return chosen


def baseline_refs(spec: AgentSpec, work: Path) -> tuple[list[tuple[str, str]], frozenset[str]]:
    """The spec's eval.baselines as (name, checkpoint) in the ablation's order (random init, then the
    base), and the names whose checkpoint may lack SHA256SUMS: a base directory the user names (a
    hub download), verified all the same and its manifest checked when it has one, as training
    loads it (`train.base.load_base`)."""
    from venus_core.train.base import base_is_shipped, resolve_base

    refs: list[tuple[str, str]] = []
    unsealed: set[str] = set()
    if "random_init" in spec.eval.baselines:
        refs.append(("random-init", "tiny"))
    if "base" in spec.eval.baselines:
        from venus_core.runtime.base_model import localize_base

        local = localize_base(spec, "evaluate")  # an s3:// / file:// base: fetched to the model cache
        refs.append(("base", str(resolve_base(local.model, work))))
        if not base_is_shipped(spec.model):
            unsealed.add("base")
    return refs, frozenset(unsealed)


def _headline(res: EvalResult) -> dict[str, Any]:
    key, _ = HEADLINE[res.evaluator]
    return {"metric": key, **res.summary[key]}


def _rates(tree: dict[str, Any], path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], dict[str, Any]]]:
    """Every rate (a dict with value, k and n) in a summary, with its key path, in summary order."""
    out: list[tuple[tuple[str, ...], dict[str, Any]]] = []
    for key, value in tree.items():
        if not isinstance(value, dict):
            continue
        if {"value", "k", "n"} <= set(value):
            out.append(((*path, str(key)), value))
        else:
            out.extend(_rates(value, (*path, str(key))))
    return out


def flat_metrics(res: EvalResult) -> dict[str, float]:
    """Tracker metrics of a result: `<model>/<suite>/<metric>` for every rate of its summary (top level
    and breakdowns, e.g. `mid/held-out-grounding/by_level/1`), with `_n`, `_ci_low` and `_ci_high`."""
    prefix = f"{_SAFE.sub('_', res.display)}/{_SAFE.sub('_', res.suite)}"
    out: dict[str, float] = {}
    for path, r in _rates(res.summary):
        name = f"{prefix}/{'/'.join(_SAFE.sub('_', p) for p in path)}"
        out[name] = float(r["value"])
        out[f"{name}_n"] = float(r["n"])
        if "ci95_low" in r:
            out[f"{name}_ci_low"] = float(r["ci95_low"])
            out[f"{name}_ci_high"] = float(r["ci95_high"])
    return out


def _result_path(out: Path, model: str, suite: str) -> Path:
    return out / "results" / f"{_SAFE.sub('_', model)}--{_SAFE.sub('_', suite)}.json"


def evaluate_model(spec: AgentSpec, name: str, ckpt: str, suites: Sequence[EvalSuiteSpec], out: Path,
                   base_url: str | None = None, device: Any = "auto",
                   require_manifest: bool = True) -> list[tuple[EvalResult, float]]:
    """One model on every suite, in order: each result written to `out/results/`; (result, seconds).
    A local checkpoint must have its SHA256SUMS unless `require_manifest` is false (`baseline_refs`)."""
    predictor = eval_suites.make_predictor(
        name, ckpt, spec.model, base_url=base_url, api_key=os.environ.get("VENUS_EVAL_API_KEY"),
        batch_size=spec.eval.batch_size, temperature=spec.eval.temperature,
        repetition_penalty=spec.eval.repetition_penalty, tiny_dir=out / "tiny-model",
        device="auto" if device is None else device, require_manifest=require_manifest)
    done: list[tuple[EvalResult, float]] = []
    for suite in suites:
        evaluator = eval_suites.get_evaluator(suite.evaluator)
        print(f"[evaluate] {name} on {suite.name} ({suite.evaluator}, {suite.data})", file=sys.stderr, flush=True)
        t0 = time.perf_counter()
        res = evaluator(predictor, suite.data, suite=suite.name, limit=suite.limit,
                        max_new_tokens=eval_suites.answer_budget(suite.evaluator, spec.eval))
        res.label = name
        done.append((res, time.perf_counter() - t0))
        write_json_atomic(_result_path(out, name, suite.name), res.to_dict())
    del predictor
    gc.collect()
    return done


def _worker_init(threads: int, parent: int) -> None:
    """Worker initializer: this worker's share of the stage's CPU threads (intra-op and inter-op), and
    a watch on the stage process: a worker whose parent is gone (SIGKILLed: no shutdown reaches
    the pool) exits instead of waiting on its task queue forever (it holds that queue's write end
    too, so it would never see end-of-file)."""
    import torch

    torch.set_num_threads(threads)
    torch.set_num_interop_threads(threads)

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        os._exit(70)

    threading.Thread(target=watch, name="parent-watch", daemon=True).start()


def _evaluate_in_worker(spec: AgentSpec, name: str, ckpt: str, suites: Sequence[EvalSuiteSpec], out: Path,
                        device: Any, require_manifest: bool) -> list[tuple[dict[str, Any], float]]:
    """`evaluate_model` in a worker process; results travel back as their JSON documents."""
    return [(res.to_dict(), seconds)
            for res, seconds in evaluate_model(spec, name, ckpt, suites, out, None, device, require_manifest)]


def _evaluate_models(spec: AgentSpec, refs: Sequence[tuple[str, str]], suites: Sequence[EvalSuiteSpec], out: Path,
                     base_url: str | None, device: Any,
                     unsealed: frozenset[str] = frozenset()) -> Iterator[tuple[str, list[tuple[EvalResult, float]]]]:
    """(model, its results) in the order of `refs`. With `eval.workers` > 1 and local checkpoints the
    models are evaluated in that many worker processes (spawned; each loads one model at a time), so
    a CPU pod's cores, or a GPU's spare memory, serve several models at once; results still come back
    in model order, and a worker's error stops the stage with that model named."""
    workers = min(spec.eval.workers, len(refs))
    if base_url or workers <= 1:  # a server batches across requests itself
        for name, ckpt in refs:
            yield name, evaluate_model(spec, name, ckpt, suites, out, base_url, device, name not in unsealed)
        return
    if any(ckpt == "tiny" for _, ckpt in refs):  # built once, here, not by two workers at the same time
        from venus_core.models.loading import tiny_checkpoint_dir

        tiny_checkpoint_dir(out / "tiny-model", spec.model)
    import torch

    # the stage's CPU threads shared out: each worker inherits OMP_NUM_THREADS, so two workers of a
    # two-thread stage would run four threads on two cores (measured: evaluate 2x slower)
    threads = max(1, torch.get_num_threads() // workers)
    print(f"[evaluate] {len(refs)} models in {workers} worker processes, {threads} CPU thread(s) each",
          file=sys.stderr, flush=True)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx, initializer=_worker_init,
                             initargs=(threads, os.getpid())) as pool:
        futures = [pool.submit(_evaluate_in_worker, spec, name, ckpt, list(suites), out, device, name not in unsealed)
                   for name, ckpt in refs]
        try:
            for (name, _), future in zip(refs, futures, strict=True):
                try:
                    done = future.result()
                except Exception as exc:
                    raise RuntimeError(f"evaluate: model {name!r} failed in its worker: {exc}") from exc
                yield name, [(result_from_dict(doc, f"{name} result"), seconds) for doc, seconds in done]
        finally:
            for future in futures:
                future.cancel()


def run(spec: AgentSpec, models: Sequence[str], suites: Sequence[EvalSuiteSpec], out: Path, *,
        base_url: str | None = None, viewer: int = 24, tracker: Tracker | None = None,
        device: Any = "auto", baselines: bool = False) -> list[EvalResult]:
    """Evaluate every model on every suite; write results, report, summary and provenance to `out`.

    Local checkpoints go on `device` ("auto": the GPU when there is one, after checking the GPUs the
    spec gives `evaluate` are there; `models.placement`); with `base_url` nothing is loaded here."""
    dev = None
    if not base_url:
        import torch

        from venus_core.models.placement import job_device

        dev = device if isinstance(device, torch.device) else job_device(spec, JOB, device)  # fails fast
        print(f"[evaluate] local checkpoints on {dev}", file=sys.stderr)
    out.mkdir(parents=True, exist_ok=True)
    tracker = tracker or JsonlTracker(out / "metrics.jsonl")
    refs = [eval_suites.parse_model_ref(m) for m in models]
    unsealed: frozenset[str] = frozenset()
    if baselines:
        if base_url:
            raise ValueError("--baselines evaluates local checkpoints (model.base, model.tiny); with --base-url "
                             "serve them and name them with --model instead")
        first, unsealed = baseline_refs(spec, out)
        refs = [*first, *refs]
    names = [n for n, _ in refs]
    if len(set(names)) != len(names):
        raise ValueError(f"--model names must be unique, got {names}")
    tracker.log_params({"models": dict(refs), "suites": [s.model_dump() for s in suites], "base_url": base_url or "",
                        "batch_size": spec.eval.batch_size, "temperature": spec.eval.temperature,
                        "grounding_max_new_tokens": spec.eval.grounding_max_new_tokens,
                        "navigation_max_new_tokens": spec.eval.navigation_max_new_tokens,
                        "repetition_penalty": spec.eval.repetition_penalty})
    results: list[EvalResult] = []
    summary: dict[str, dict[str, Any]] = {}
    inputs: list[str] = [s.data for s in suites if s.data and s.evaluator not in eval_suites.NO_DATA_EVALUATORS]
    if not base_url:
        inputs += [str(out / "tiny-model") if ckpt == "tiny" else ckpt for _, ckpt in refs]
    for step, (name, done) in enumerate(_evaluate_models(spec, refs, suites, out, base_url, dev, unsealed)):
        for res, seconds in done:
            path = _result_path(out, name, res.suite)
            tracker.log_metrics({**flat_metrics(res), f"time/{_SAFE.sub('_', name)}/{_SAFE.sub('_', res.suite)}_s":
                                 round(seconds, 2)}, step=step)
            tracker.log_artifact(path, f"results/{path.name}")
            summary.setdefault(name, {})[res.suite] = _headline(res)
            results.append(res)
    write_report(results, out / "report.html", title=f"Venus evaluation: {spec.name}", viewer_limit=viewer)
    write_json_atomic(out / "summary.json", summary)
    write_json_atomic(out / "comparison.json", {"rows": comparison_rows(results)})
    write_json_atomic(out / "provenance.json", provenance(JOB, spec, inputs))
    tracker.log_artifact(out / "report.html", "report.html")
    tracker.log_artifact(out / "comparison.json", "comparison.json")
    print(f"[evaluate] wrote {out / 'report.html'}", file=sys.stderr)
    return results


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    spec = load_job_spec(args)
    held_out: list[EvalSuiteSpec] = []
    if not args.data and not args.online and spec.eval.held_out_suites.enabled:
        from venus_core.eval.held_out import held_out_suites

        t0 = time.perf_counter()
        held_out = held_out_suites(spec.eval.held_out_suites)
        print(f"[evaluate] held-out suites in {Path(held_out[0].data or '').parent} "
              f"({time.perf_counter() - t0:.1f} s)", file=sys.stderr)
    suites = resolve_suites(args.data, spec.eval.suites, args.limit, args.online, held_out)
    device: Any = args.device
    if not args.base_url:  # the start-up check: the GPUs the spec gives `evaluate` must be there
        from venus_core.models.placement import DeviceError, job_device

        try:
            device = job_device(spec, JOB, args.device)
        except DeviceError as exc:
            print(f"{JOB}: error: {exc}", file=sys.stderr, flush=True)
            return 2
    out = Path(args.out)
    with job_tracking(JOB, spec, out) as tracker:
        run(spec, args.model, suites, out, base_url=args.base_url, viewer=args.viewer, tracker=tracker,
            device=device, baselines=args.baselines)
        tracker.record_provenance(json.loads((out / "provenance.json").read_text(encoding="utf-8")))
        if os.environ.get(KFP_RUN_ENV):  # on a cluster the last stage closes the pipeline's parent run
            finish_parent(tracker)
    return 0


if __name__ == "__main__":
    sys.exit(main())
