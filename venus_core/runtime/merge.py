"""Runtime job `merge`: combine the grounding, mobile and web specialists into one checkpoint.

`python -m venus_core.runtime.merge --spec AGENT --base DIR --model grounding=DIR --model mobile=DIR
--model web=DIR --out DIR` merges with the spec's method and settings (`merge` section) into
`OUT/model`, and writes `OUT/report.json` (the merge report: per-tensor statistics, achieved
density, sign conflicts, structural diff, output sha256s; plus provenance) and `OUT/metrics.jsonl`.

With `--candidates`, every merge method named in `merge.compare` is also written to
`OUT/candidates/<method>` so the evaluate stage can compare them with the best single specialist
(the UI-Venus-1.5 TIES-vs-linear ablation in miniature).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_core.config import AgentSpec
from venus_core.config.registry import registry
from venus_core.merge import MergeConfig, PartPolicy, merge_checkpoints
from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import job_tracking, register_merged
from venus_core.train.tracker import JsonlTracker, Tracker

JOB = "merge"


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


def run_merge(spec: AgentSpec, base: Path, names: Sequence[str], dirs: Sequence[Path], out: Path,
              *, candidates: bool = False, tracker: Tracker | None = None) -> dict[str, Any]:
    tracker = tracker or JsonlTracker(out / "metrics.jsonl")
    methods = [spec.merge.method]
    if candidates:
        methods += [c for c in spec.merge.compare if c not in ("best_single", spec.merge.method)]
    results: dict[str, Any] = {}
    for method in methods:
        target = out / "model" if method == spec.merge.method else out / "candidates" / method
        cfg = merge_config(spec, method).model_copy(update={"weights": weights_for(method, names, spec)})
        t0 = time.perf_counter()
        report = merge_checkpoints(base, dirs, target, cfg)
        seconds = time.perf_counter() - t0
        results[method] = {"path": str(target), "seconds": round(seconds, 3), "report": report}
        metrics = {f"{method}/seconds": seconds}
        for part, stats in report["parts"].items():  # type: ignore[union-attr]
            dens = stats["achieved_density"]
            metrics[f"{method}/{part}/achieved_density"] = sum(dens) / len(dens)
            metrics[f"{method}/{part}/sign_conflict_rate"] = stats["sign_conflict_rate"]
        tracker.log_metrics(metrics, step=0)
    out_report = {
        "published": spec.merge.method,
        "specialists": dict(zip(names, map(str, dirs), strict=True)),
        "methods": results,
        "provenance": provenance(JOB, spec, [base, *dirs]),
    }
    write_json_atomic(out / "report.json", out_report)
    tracker.log_artifact(out / "report.json")
    return out_report


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser(JOB, "Merge the specialists into one checkpoint (TIES by default).")
    p.add_argument("--base", required=True, help="base checkpoint the specialists were trained from")
    p.add_argument("--model", action="append", default=[], metavar="NAME=DIR",
                   help="a specialist: grounding=DIR, mobile=DIR, web=DIR (repeatable)")
    p.add_argument("--candidates", action="store_true", help="also write the merge.compare candidates")
    args = p.parse_args(argv)
    spec = load_job_spec(args)
    names, dirs = parse_models(args.model, spec)
    out = Path(args.out)
    with job_tracking(JOB, spec, out, tags={"venus.merge_method": spec.merge.method}) as tracker:
        report = run_merge(spec, Path(args.base), names, dirs, out, candidates=args.candidates, tracker=tracker)
        tracker.record_provenance(report["provenance"])
        version = register_merged(tracker, spec, out / "model", {
            "merge_method": spec.merge.method, "specialists": report["specialists"], "base": str(args.base)})
    if version is not None:
        print(f"registered model {spec.name} version {version}")
    for method, r in report["methods"].items():
        print(f"{method}: {r['path']} ({r['seconds']}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
