"""Runtime job: data scoring — validate -> clean -> score -> policy -> mix.

    python -m venus_core.runtime.score_data --spec AGENT [--data DIR ...] --out DIR [--set k=v ...]

Without --data the spec's data sources are materialised first (synthetic sources generated into
OUT/sources/<name>, local `venus` datasets read in place, `s3://bucket/prefix` datasets published
through `venus_core.io.storage` fetched into OUT/remote/<name> first: resumable, every file's
sha256 checked, so a restarted pod only downloads what is missing); with --data each directory is one source
named after the directory. `--generated DIR` adds a generate_data dataset (the data flywheel's
verified trajectories) as one more source, named `flywheel`. Writes the stage layout of `venus_core.scoring.stage` under OUT plus
OUT/report.json (provenance, per-source cleaning and scoring reports, the bucket table, the
mixture summary) and prints the bucket table. Exit status 1 on a dataset that fails validation
or a judge that fails on too many samples.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from venus_core.config.spec import DataSourceSpec
from venus_core.runtime.common import job_parser, load_job_spec, provenance, write_json_atomic
from venus_core.runtime.tracking import job_tracking
from venus_core.scoring.report import DECISIONS

REMOTE_SCHEMES = ("s3://",)
GENERATED_SOURCE = "flywheel"


def main(argv: Sequence[str] | None = None) -> int:
    p = job_parser("score_data", "Data scoring: validate, clean, judge, keep/rewrite/rebuild/discard, mix")
    p.add_argument(
        "--data",
        action="append",
        default=[],
        help="Venus dataset directory (repeatable); default: the spec's data sources",
    )
    p.add_argument("--generated", default=None, metavar="DIR",
                   help=f"a generate_data dataset (the flywheel's), scored as the source {GENERATED_SOURCE!r} besides "
                        "the others")
    p.add_argument(
        "--clean-steps",
        default=None,
        help="comma-separated cleaning steps to run (default: all, in the standard order; '' for none)",
    )
    p.add_argument("--device", default="auto",
                   help="torch device of the local judge (scoring.judge=local): auto (the GPU when there is one; "
                        "the GPUs platform.resources.score_data asks for must be there), cpu, cuda, cuda:N")
    args = p.parse_args(argv)
    spec = load_job_spec(args)

    from venus_core.data.build import build_source, read_collect_report
    from venus_core.data.clean import CleanOptions
    from venus_core.io.storage import StorageError
    from venus_core.scoring.stage import run_data_stage

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    fetched: dict[str, dict[str, object]] = {}
    collected: dict[str, dict[str, Any]] = {}  # kind=collect sources: every attempt counted
    if args.data:
        inputs = [(Path(d).name, Path(d)) for d in args.data]
    else:
        inputs = []
        for source in spec.data.sources:
            if source.uri and source.uri.startswith(REMOTE_SCHEMES):
                try:
                    source, fetched[source.name] = fetch_source(source, out / "remote")
                except (StorageError, OSError, ValueError) as exc:
                    print(f"score_data: error: source {source.name!r}: {exc}", file=sys.stderr)
                    return 1
            try:
                inputs.append((source.name, build_source(source, out / "sources")[0]))
            except (RuntimeError, ValueError) as exc:  # a collect source whose browser or oracle failed
                print(f"score_data: error: {exc}", file=sys.stderr)
                return 1
            if source.kind == "collect":
                c = collected[source.name] = read_collect_report(out / "sources", source.name)
                print(f"score_data: source {source.name!r}: {c['written']} oracle episodes kept "
                      f"of {sum(t['attempted'] for t in c['tasks'].values())} attempted ({c['seconds']:.0f} s)",
                      flush=True)
    if args.generated:
        if any(name == GENERATED_SOURCE for name, _ in inputs):
            print(f"score_data: error: a source is already named {GENERATED_SOURCE!r}; --generated needs that name",
                  file=sys.stderr)
            return 1
        inputs.append((GENERATED_SOURCE, Path(args.generated)))
    clean = (
        CleanOptions()
        if args.clean_steps is None
        else CleanOptions(steps=[s.strip() for s in args.clean_steps.split(",") if s.strip()])
    )
    with job_tracking("score_data", spec, out) as tracker:
        try:
            judge_options: dict[str, object] = {}
            if spec.scoring.judge == "local":  # the judge's model runs here: on the pod's GPU when it has one
                from venus_core.models.placement import job_device

                judge_options = {"tiny_dir": out / "judge_model", "device": job_device(spec, "score_data", args.device)}
            summary = run_data_stage(spec, inputs, out, clean=clean, log=lambda m: print(m, flush=True),
                                     judge_options=judge_options)
        except (ValueError, RuntimeError, FileNotFoundError) as exc:
            print(f"score_data: error: {exc}", file=sys.stderr)
            tracker.set_tags({"venus.error": str(exc)[:5000]})
            return 1
        prov = provenance("score_data", spec, [p for _, p in inputs])
        for item in prov["inputs"]:  # a fetched source is known by its remote URI; the local copy is a cache
            remote = next((f for f in fetched.values() if f["local"] == item["uri"]), None)
            if remote is not None:
                item["fetched_from"] = remote["uri"]
        report = {**prov, **summary, "fetched": fetched, "collected": collected, "wall_s": round(time.perf_counter() - t0, 1)}
        report["metrics"] = _metrics(report)  # what the score_data component copies into its Metrics artifact
        write_json_atomic(out / "report.json", report)
        tracker.log_metrics(report["metrics"], step=0)
        tracker.log_artifact(out / "report.json", "report.json")
        tracker.record_provenance(prov)
    return 0


def _metrics(report: dict[str, Any]) -> dict[str, float]:
    mixture = report.get("mixture") or {}
    out = {f"mixture_{split}_records": float(mixture[split]) for split in ("train", "validation") if split in mixture}
    out.update({f"selected_{d}": float(n) for d, n in (mixture.get("selected_by_domain") or {}).items()})
    scoring = report.get("scoring") or {}
    scored = scoring.values()
    if scored:  # judge decisions summed over the sources (scoring.enabled)
        for decision in DECISIONS:
            out[f"judge_{decision}"] = float(sum(s["decisions"][decision] for s in scored))
        read = sum(s["read"] for s in scored)
        for when in ("before", "after"):
            high = sum(s["high_fidelity"][when] for s in scored)
            out[f"high_fidelity_{when}"] = high / read if read else 0.0
        for name, s in scoring.items():  # per source: the paper's before -> after, and what it cost
            out.update(_source_metrics(f"scoring/{name}/", s))
        judge = report["judge"]
        out["judge_backend_calls"] = float(judge["backend_calls"])
        out["judge_seconds"] = float(judge["seconds"])
        if judge["prompt_tokens"] is not None:
            out["judge_tokens"] = float(judge["prompt_tokens"] + judge["completion_tokens"])
        looked_up = judge["cache"]["hits"] + judge["cache"]["misses"]
        if looked_up:
            out["judge_cache_hit_rate"] = judge["cache"]["hits"] / looked_up
    for name, c in (report.get("collected") or {}).items():  # attempted = kept + failed, per source
        attempted = sum(t["attempted"] for t in c["tasks"].values())
        out[f"collect/{name}/attempted"] = float(attempted)
        out[f"collect/{name}/kept"] = float(c["written"])
        out[f"collect/{name}/failed"] = float(attempted - c["written"])
        out[f"collect/{name}/seconds"] = float(c["seconds"])
    out["wall_s"] = float(report["wall_s"])
    return out


def _source_metrics(prefix: str, s: dict[str, Any]) -> dict[str, float]:
    j = s["judge"]
    out = {
        f"{prefix}high_fidelity_before": float(s["high_fidelity_share"]["before"]),
        f"{prefix}high_fidelity_after": float(s["high_fidelity_share"]["after"]),
        f"{prefix}read": float(s["read"]),
        **{f"{prefix}{d}": float(n) for d, n in s["decisions"].items()},
        **{f"{prefix}bucket_{b}": float(n) for b, n in s["buckets"].items()},
        f"{prefix}judge_backend_calls": float(j["backend_calls"]),
        f"{prefix}judge_seconds": float(j["seconds"]),
    }
    if j["prompt_tokens"] is not None:
        out[f"{prefix}judge_tokens"] = float(j["prompt_tokens"] + j["completion_tokens"])
    if j["cache"]["hit_rate"] is not None:
        out[f"{prefix}judge_cache_hit_rate"] = float(j["cache"]["hit_rate"])
    return out


def fetch_source(source: DataSourceSpec, root: Path) -> tuple[DataSourceSpec, dict[str, object]]:
    """Download an object-store source to `root/<name>` (resumable, sha256-checked); the source now points there."""
    from venus_core.io.storage.fetch import fetch_dir

    assert source.uri is not None
    t0 = time.perf_counter()
    report = fetch_dir(source.uri, root / source.name)
    info = {**report.to_dict(), "seconds": round(time.perf_counter() - t0, 2)}
    print(f"[score_data] {source.name}: {source.uri} -> {report.local} ({len(report.downloaded)} downloaded, "
          f"{len(report.reused)} reused{', up to date' if report.up_to_date else ''})", flush=True)
    return source.model_copy(update={"uri": str(report.local)}), info


if __name__ == "__main__":
    raise SystemExit(main())
