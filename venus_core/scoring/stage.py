"""The data stage end to end: validate -> clean -> score -> policy -> mix, over named datasets.

Why here and not in the runtime job: the CLI, the runtime job (container entry point) and tests
run the same sequence; the job adds only arguments, provenance and printing. Layout under `out`:

    out/cleaned/<source>/{dataset/, clean_report.json, dropped.jsonl}
    out/scored/<source>/{dataset/, report.json, decisions.jsonl, histogram.png}
    out/mixture/{train/, validation/, mix_manifest.json}
    out/judge_cache.sqlite                      (kept between runs into the same `out`)

An input that fails validation stops the stage with the validation report (fail closed: a broken
import must be fixed, not silently thinned out by the judge). With `scoring.enabled=false` the
cleaned datasets go to the mixture unjudged. One judge (and its cache) serves every source; each
source's report carries what the judge cost on it, and the summary's `judge` the totals.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from venus_core.config.spec import AgentSpec
from venus_core.data.clean import CleanOptions, clean_dataset
from venus_core.data.mix import build_mixture
from venus_core.data.validate import validate_dataset
from venus_core.scoring.judges import make_judge
from venus_core.scoring.policy import DatasetImages, score_dataset
from venus_core.scoring.report import DECISIONS

Log = Callable[[str], None]


def bucket_table(scores: dict[str, dict[str, Any]]) -> str:
    """Per source and in total: decision counts, the high-fidelity shares before and after
    refinement, and what the judge cost (backend calls, tokens, seconds, cache hit rate)."""
    cols = ("source", "read", *DECISIONS, "hi-fi before", "hi-fi after", "calls", "tokens", "judge s", "cache hit")
    rows: list[tuple[str, ...]] = [cols]

    def cost_cells(calls: int, tokens: int | None, seconds: float, hits: int, looked_up: int) -> tuple[str, ...]:
        return (str(calls), "-" if tokens is None else str(tokens), f"{seconds:.1f}",
                f"{hits / looked_up:.1%}" if looked_up else "-")

    total = dict.fromkeys(("read", "high_before", "high_after", *DECISIONS), 0)
    calls = hits = looked_up = 0
    tokens: int | None = None
    seconds = 0.0
    for name, rep in scores.items():
        j = rep["judge"]
        t = None if j["prompt_tokens"] is None else j["prompt_tokens"] + j["completion_tokens"]
        rows.append(
            (
                name,
                str(rep["read"]),
                *(str(rep["decisions"][d]) for d in DECISIONS),
                f"{rep['high_fidelity_share']['before']:.1%}",
                f"{rep['high_fidelity_share']['after']:.1%}",
                *cost_cells(j["backend_calls"], t, j["seconds"], j["cache"]["hits"],
                            j["cache"]["hits"] + j["cache"]["misses"]),
            )
        )
        total["read"] += rep["read"]
        total["high_before"] += rep["high_fidelity"]["before"]
        total["high_after"] += rep["high_fidelity"]["after"]
        for d in DECISIONS:
            total[d] += rep["decisions"][d]
        calls += j["backend_calls"]
        tokens = t if tokens is None else tokens + (t or 0)
        seconds += j["seconds"]
        hits += j["cache"]["hits"]
        looked_up += j["cache"]["hits"] + j["cache"]["misses"]
    if total["read"]:
        rows.append(
            (
                "TOTAL",
                str(total["read"]),
                *(str(total[d]) for d in DECISIONS),
                f"{total['high_before'] / total['read']:.1%}",
                f"{total['high_after'] / total['read']:.1%}",
                *cost_cells(calls, tokens, seconds, hits, looked_up),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(cols))]
    return "\n".join(
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in rows
    )


def run_data_stage(
    spec: AgentSpec,
    inputs: Sequence[tuple[str, Path]],
    out: str | Path,
    *,
    clean: CleanOptions | None = None,
    log: Log = print,
    judge_options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """Run the stage over (source name, dataset dir) pairs; returns the stage summary."""
    out = Path(out)
    names = [n for n, _ in inputs]
    if len(set(names)) != len(names):
        raise ValueError(f"data stage: duplicate source names {names}")
    summary: dict[str, Any] = {"sources": {}, "clean": {}, "scoring": {}, "mixture": None}
    for name, path in inputs:
        check = validate_dataset(path)
        if not check.ok:
            raise ValueError(f"source {name!r}: dataset {path} failed validation:\n{check.to_text()}")
        summary["sources"][name] = {"path": str(path), "records": check.records_checked}
        log(f"validated {name}: {check.records_checked} records")
    cleaned: list[tuple[str, Path]] = []
    for name, path in inputs:
        rep = clean_dataset(path, out / "cleaned" / name, clean)
        summary["clean"][name] = {k: rep[k] for k in ("read", "written", "dropped", "added")} | {
            "steps": {
                s["step"]: {k: s[k] for k in ("before", "after", "dropped", "changed", "added")}
                for s in rep["steps"]
            }
        }
        cleaned.append((name, out / "cleaned" / name / "dataset"))
        log(f"cleaned {name}: {rep['read']} read, {rep['dropped']} dropped, {rep['added']} added")
    mix_inputs = cleaned
    if spec.scoring.enabled:
        images = DatasetImages()
        judge = make_judge(
            spec.scoring, open_image=images, cache_path=out / "judge_cache.sqlite", **(judge_options or {})
        )
        try:
            mix_inputs = []
            for name, path in cleaned:
                rep = score_dataset(path, out / "scored" / name, spec.scoring, judge, images=images).to_dict()
                (out / "scored" / name / "report.json").write_text(
                    json.dumps(rep, indent=2) + "\n", encoding="utf-8"
                )
                summary["scoring"][name] = rep
                mix_inputs.append((name, out / "scored" / name / "dataset"))
            stats = judge.stats()
            summary["judge"] = {
                "id": judge.judge_id,
                "backend_calls": stats.calls,
                "prompt_tokens": stats.prompt_tokens,
                "completion_tokens": stats.completion_tokens,
                "seconds": round(sum(r["judge"]["seconds"] for r in summary["scoring"].values()), 3),
                "cache": {"hits": stats.cache_hits, "misses": stats.cache_misses},
            }
        finally:
            judge.close()
        summary["bucket_table"] = bucket_table(summary["scoring"])
        log(summary["bucket_table"])
    # each source's final dataset (scored, else cleaned), relative to `out`: offline RL jobs pick theirs
    summary["final_datasets"] = {name: str(path.relative_to(out)) for name, path in mix_inputs}
    weights = {s.name: s.weight for s in spec.data.sources if s.name in names}
    manifest = build_mixture(
        [p for _, p in mix_inputs],
        out / "mixture",
        spec.data.mixture,
        names=[n for n, _ in mix_inputs],
        weights=weights,
        validation_fraction=spec.data.validation_fraction,
        seed=spec.data.seed,
    )
    summary["mixture"] = {
        k: manifest[k] for k in ("selected_by_domain", "effective_ratios", "near_duplicates_removed")
    } | {
        "train": manifest["splits"]["train"]["records"],
        "validation": manifest["splits"]["validation"]["records"],
    }
    log(
        f"mixture: {summary['mixture']['train']} train / {summary['mixture']['validation']} validation records"
    )
    return summary
