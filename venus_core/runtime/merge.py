"""Runtime job `merge`: combine the grounding, mobile and web specialists into one checkpoint.

`python -m venus_core.runtime.merge --spec AGENT --base DIR --model grounding=DIR --model mobile=DIR
--model web=DIR --out DIR` merges with the spec's method and settings (`merge` section) into
`OUT/model`, and writes `OUT/report.json` (the merge report: per-tensor statistics, achieved
density, sign conflicts, structural diff, output sha256s; plus provenance) and `OUT/metrics.jsonl`.

With `--candidates`, every merge method named in `merge.compare` is also written to
`OUT/candidates/<method>`. With `--evaluate` (implies `--candidates`) the job itself runs the
comparison (the UI-Venus-1.5 TIES-vs-linear ablation in miniature): every merged candidate and
every specialist is evaluated on the quick set (`--data DIR ...` or the spec's `eval.suites`,
at most `--limit` samples per suite) with the evaluate job's code, into `OUT/compare/`; the best
single specialist is the one with the highest mean headline rate over the suites, and the table
(`merge.compare` rows x suites, plus the mean) goes to `report.json` under `comparison` and to
`OUT/comparison.md`. The published checkpoint (`OUT/model`) is always the spec's `merge.method`:
the spec chooses, the table records whether that choice won on the quick set.

`distill` (as `merge.method` or a `merge.compare` entry) is not a tensor merge: the specialists are
distilled into one student by multi-teacher on-policy distillation (`venus_core.merge.distill`,
settings `merge.distill`), trained on `--device` (default: the GPU when there is one); its
prompts and its TIES start go to `OUT/distill-work`. Its candidate is compared like the others.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_core.config import AgentSpec
from venus_core.config.registry import registry
from venus_core.config.spec import TRAINED_MERGE_METHODS, EvalSuiteSpec
from venus_core.merge import MergeConfig, PartPolicy, merge_checkpoints
from venus_core.models.integrity import verify_checkpoint_dir
from venus_core.runtime import evaluate
from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import job_tracking, register_merged
from venus_core.train.tracker import JsonlTracker, Tracker

JOB = "merge"
QUICK_LIMIT = 50  # samples / episodes per suite in the candidates' quick evaluation


def merge_config(spec: AgentSpec, method: str | None = None) -> MergeConfig:
    """The merge section of the spec as the merge package's configuration."""
    m = spec.merge
    method = method or m.method
    kwargs: dict[str, Any] = {
        "method": method,
        "density": m.density,
        "trim_scope": m.trim_scope,
        "election": m.sign_election,
        "zero_sign": m.zero_sign,
        "parts": {
            part: PartPolicy(density=p.density, lambda_=p.lambda_, copy_base=p.copy_base)
            for part, p in m.parts.items()
        },
        "max_working_bytes": m.max_working_bytes,
        "shard_bytes": m.shard_bytes,
    }
    if registry("merge_methods").get(method).uses_lambda:
        kwargs["lambda_"] = m.lambda_
    return MergeConfig(**kwargs)


def parse_models(items: Sequence[str], spec: AgentSpec) -> tuple[list[str], list[Path]]:
    """`name=DIR` pairs -> (names, dirs); names must be specialists the spec weighs."""
    names: list[str] = []
    dirs: list[Path] = []
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--model {item!r}: expected NAME=DIR (e.g. grounding=/ckpt/grounding)")
        if name not in spec.merge.weights:
            raise ValueError(f"--model {item!r}: {name!r} has no weight in merge.weights "
                             f"({', '.join(spec.merge.weights)})")
        if name in names:
            raise ValueError(f"--model {item!r}: {name!r} given twice")
        names.append(name)
        dirs.append(Path(path))
    if not names:
        raise ValueError("no --model given")
    return names, dirs


def weights_for(method: str, names: Sequence[str], spec: AgentSpec) -> list[float]:
    """Spec weights in model order; methods whose weights sum to 1 get them normalized."""
    w = [spec.merge.weights[n] for n in names]
    if registry("merge_methods").get(method).weights_sum_to_one:
        total = sum(w)
        if total <= 0:
            raise ValueError(f"merge.weights sum to {total}; {method} needs a positive sum")
        w = [x / total for x in w]
    return w


def method_config(spec: AgentSpec, method: str, names: Sequence[str]) -> MergeConfig:
    """`merge_config` with the spec's weights for `names` (normalized where the method wants)."""
    return merge_config(spec, method).model_copy(update={"weights": weights_for(method, names, spec)})


def distill_candidate(spec: AgentSpec, base: Path, names: Sequence[str], dirs: Sequence[Path], target: Path,
                      work: Path, device: Any = "auto", ties_dir: Path | None = None) -> dict[str, Any]:
    """The `distill` candidate: the specialists distilled into one student at `target` (`merge.distill`).
    `ties_dir`: the TIES merge of the same inputs with the spec's settings, already written by this
    stage; with `merge.distill.init: ties` the student starts from it instead of merging again."""
    from venus_core.merge.distill import distill, distill_prompts
    from venus_core.models.placement import job_device

    cfg = spec.merge.distill
    prompts = distill_prompts(cfg.prompts, names, work, spec.data.history_len)
    init_merge = method_config(spec, "ties", names) if cfg.init == "ties" else None
    return distill(base, dict(zip(names, dirs, strict=True)), target, cfg, prompts, model_spec=spec.model,
                   work=work, device=job_device(spec, JOB, device), init_merge=init_merge,
                   init_dir=ties_dir if cfg.init == "ties" else None)


def run_merge(spec: AgentSpec, base: Path, names: Sequence[str], dirs: Sequence[Path], out: Path,
              *, candidates: bool = False, tracker: Tracker | None = None,
              suites: Sequence[EvalSuiteSpec] | None = None, device: Any = "auto") -> dict[str, Any]:
    """Merge (and with `suites`, evaluate the candidates against the specialists); returns the report.

    The inputs are earlier stages' outputs, so each must pass `verify_checkpoint_dir` with its
    SHA256SUMS (a specialist whose job was killed while writing has none) before anything is read.
    `device`: where `distill` trains (tensor merges run on the CPU)."""
    for d in (base, *dirs):
        verify_checkpoint_dir(d, require_manifest=True)
    tracker = tracker or JsonlTracker(out / "metrics.jsonl")
    methods = [spec.merge.method]
    if candidates or suites is not None:
        methods += [c for c in spec.merge.compare if c not in ("best_single", spec.merge.method)]
    # tensor merges first, so that distill can start from the TIES candidate instead of merging again
    methods.sort(key=lambda m: m in TRAINED_MERGE_METHODS)
    results: dict[str, Any] = {}
    for method in methods:
        target = out / "model" if method == spec.merge.method else out / "candidates" / method
        t0 = time.perf_counter()
        metrics: dict[str, float] = {}
        report: dict[str, Any]
        if method in TRAINED_MERGE_METHODS:
            ties = Path(results["ties"]["path"]) if "ties" in results else None
            report = distill_candidate(spec, base, names, dirs, target, out / f"{method}-work", device, ties)
            for domain, kl in report["last_loss"].items():
                metrics[f"{domain}/first_kl"] = report["first_loss"][domain]
                metrics[f"{domain}/last_kl"] = kl
            metrics["tokens"] = report["tokens"]
        else:
            report = merge_checkpoints(base, dirs, target, method_config(spec, method, names))
            for part, stats in report["parts"].items():
                dens = stats["achieved_density"]
                metrics[f"{part}/achieved_density"] = sum(dens) / len(dens)
                metrics[f"{part}/sign_conflict_rate"] = stats["sign_conflict_rate"]
        seconds = time.perf_counter() - t0
        metrics["seconds"] = seconds
        # `metrics` is what the merge component copies into its Kubeflow Metrics artifact
        results[method] = {"path": str(target), "seconds": round(seconds, 3), "metrics": metrics, "report": report}
        tracker.log_metrics({f"{method}/{k}": v for k, v in metrics.items()}, step=0)
    out_report = {
        "published": spec.merge.method,
        "specialists": dict(zip(names, map(str, dirs), strict=True)),
        "methods": results,
        "provenance": provenance(JOB, spec, [base, *dirs]),
    }
    if suites is not None:
        merged = {m: Path(r["path"]) for m, r in results.items()}
        table = compare_candidates(spec, names, dirs, merged, out / "compare", suites)
        out_report["comparison"] = table
        (out / "comparison.md").write_text(comparison_markdown(table))
        tracker.log_metrics({f"compare/{r['candidate']}/mean": r["mean"] for r in table["rows"]
                             if r["mean"] is not None}, step=0)
    write_json_atomic(out / "report.json", out_report)
    tracker.log_artifact(out / "report.json")
    return out_report


def compare_candidates(spec: AgentSpec, names: Sequence[str], dirs: Sequence[Path], merged: dict[str, Path],
                       out: Path, suites: Sequence[EvalSuiteSpec]) -> dict[str, Any]:
    """Evaluate the merged candidates and every specialist; the `merge.compare` table."""
    if set(merged) & set(names):
        raise ValueError(f"a specialist is named like a merge method: {sorted(set(merged) & set(names))}")
    models = [f"{m}={p}" for m, p in merged.items()] + [f"{n}={d}" for n, d in zip(names, dirs, strict=True)]
    evaluate.run(spec, models, suites, out)
    summary = json.loads((out / "summary.json").read_text())
    suite_names = [s.name for s in suites]

    def scores(model: str) -> dict[str, float | None]:
        return {s: summary[model][s].get("value") for s in suite_names}

    def mean(sc: dict[str, float | None]) -> float | None:
        vals = [v for v in sc.values() if v is not None]
        return sum(vals) / len(vals) if vals else None

    single = {n: mean(scores(n)) for n in names}
    best = max(names, key=lambda n: -1.0 if single[n] is None else single[n])  # ties: first given
    rows = []
    for cand in spec.merge.compare:
        model = best if cand == "best_single" else cand
        if model not in summary:
            continue
        sc = scores(model)
        rows.append({"candidate": cand, "model": model, "scores": sc, "mean": mean(sc)})
    ranked = [r for r in rows if r["mean"] is not None]
    winner = max(ranked, key=lambda r: r["mean"])["candidate"] if ranked else None
    return {
        "suites": suite_names,
        "metrics": {s: summary[best][s]["metric"] for s in suite_names},
        "rows": rows, "best_single": best, "specialists": single,
        "winner": winner, "published": spec.merge.method, "results": str(out),
    }


def comparison_markdown(table: dict[str, Any]) -> str:
    """The comparison table as Markdown (rows: merge.compare candidates; columns: suites, mean)."""
    def fmt(v: float | None) -> str:
        return "–" if v is None else f"{v:.3f}"

    suites = table["suites"]
    head = "| candidate | model | " + " | ".join(f"{s} ({table['metrics'][s]})" for s in suites) + " | mean |"
    lines = [head, "|" + "---|" * (len(suites) + 3)]
    for r in table["rows"]:
        lines.append(f"| {r['candidate']} | {r['model']} | " + " | ".join(fmt(r["scores"][s]) for s in suites)
                     + f" | {fmt(r['mean'])} |")
    lines.append("")
    lines.append(f"Published: {table['published']} (chosen by the spec); best on this quick set: {table['winner']}.")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser(JOB, "Merge the specialists into one checkpoint (TIES by default).")
    p.add_argument("--base", required=True, help="base checkpoint the specialists were trained from")
    p.add_argument("--model", action="append", default=[], metavar="NAME=DIR",
                   help="a specialist: grounding=DIR, mobile=DIR, web=DIR (repeatable)")
    p.add_argument("--candidates", action="store_true", help="also write the merge.compare candidates")
    p.add_argument("--evaluate", action="store_true",
                   help="evaluate the candidates and the specialists on the quick set (implies --candidates)")
    p.add_argument("--data", action="append", default=[], metavar="DIR",
                   help="quick-set dataset directory (repeatable); default: the spec's eval.suites")
    p.add_argument("--limit", type=int, default=QUICK_LIMIT,
                   help=f"samples / episodes per suite in the quick set (default {QUICK_LIMIT})")
    p.add_argument("--device", default="auto",
                   help="where distill trains: auto (the GPU when there is one), cpu, cuda, cuda:N")
    args = p.parse_args(argv)
    spec = load_job_spec(args)
    names, dirs = parse_models(args.model, spec)
    out = Path(args.out)
    suites = evaluate.resolve_suites(args.data, spec.eval.suites, args.limit) if args.evaluate else None
    with job_tracking(JOB, spec, out, tags={"venus.merge_method": spec.merge.method}) as tracker:
        report = run_merge(spec, Path(args.base), names, dirs, out, candidates=args.candidates, tracker=tracker,
                           suites=suites, device=args.device)
        tracker.record_provenance(report["provenance"])
        version = register_merged(tracker, spec, out / "model", {
            "merge_method": spec.merge.method, "specialists": report["specialists"], "base": str(args.base)})
    if version is not None:
        print(f"registered model {spec.name} version {version}")
    for method, r in report["methods"].items():
        print(f"{method}: {r['path']} ({r['seconds']}s)")
    if "comparison" in report:
        print((out / "comparison.md").read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
