"""The data stage end to end: validate -> clean -> score -> policy -> mix, over named datasets.

Why here and not in the runtime job: the CLI, the runtime job (container entry point) and tests
run the same sequence; the job adds only arguments, provenance and printing. Layout under `out`:

    out/cleaned/<source>/{dataset/, clean_report.json, dropped.jsonl}
    out/scored/<source>/{dataset/, report.json, decisions.jsonl, histogram.png}
    out/mixture/{train/, validation/, mix_manifest.json}
    out/judge_cache.sqlite                      (kept between runs into the same `out`)

An input that fails validation stops the stage with the validation report (fail closed: a broken
import must be fixed, not silently thinned out by the judge). With `scoring.enabled=false` the
cleaned datasets go to the mixture unjudged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from venus_core.config.spec import AgentSpec
from venus_core.data.clean import CleanOptions, clean_dataset
from venus_core.data.mix import build_mixture
from venus_core.data.store import DatasetReader
from venus_core.data.validate import validate_dataset
from venus_core.scoring.judges import make_judge
from venus_core.scoring.policy import score_dataset
from venus_core.scoring.report import DECISIONS

Log = Callable[[str], None]


class _Images:
    """open_image for the judge that reads from whichever dataset is being scored."""

    reader: DatasetReader | None = None

    def __call__(self, ref: str) -> Image.Image:
        if self.reader is None:
            raise RuntimeError("no dataset is being scored")
        return self.reader.open_image(ref)


def bucket_table(scores: dict[str, dict[str, Any]]) -> str:
    """Decision counts per source and in total, plus the high-fidelity shares, as plain text."""
    cols = ("source", "read", *DECISIONS, "hi-fi before", "hi-fi after")
    rows: list[tuple[str, ...]] = [cols]
    total = dict.fromkeys(("read", *DECISIONS), 0)
    for name, rep in scores.items():
        rows.append(
            (
                name,
                str(rep["read"]),
                *(str(rep["decisions"][d]) for d in DECISIONS),
                f"{rep['high_fidelity_share']['before']:.1%}",
                f"{rep['high_fidelity_share']['after']:.1%}",
            )
        )
        total["read"] += rep["read"]
        for d in DECISIONS:
            total[d] += rep["decisions"][d]
    if total["read"]:
        high = sum(r["high_fidelity_share"]["before"] * r["read"] for r in scores.values())
        rows.append(
            (
                "TOTAL",
                str(total["read"]),
                *(str(total[d]) for d in DECISIONS),
                f"{high / total['read']:.1%}",
                f"{(total['read'] - total['discarded']) / total['read']:.1%}",
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
        images = _Images()
        judge = make_judge(
            spec.scoring, open_image=images, cache_path=out / "judge_cache.sqlite", **(judge_options or {})
        )
        try:
            mix_inputs = []
            for name, path in cleaned:
                images.reader = DatasetReader(path)
                rep = score_dataset(path, out / "scored" / name, spec.scoring, judge).to_dict()
                (out / "scored" / name / "report.json").write_text(
                    json.dumps(rep, indent=2) + "\n", encoding="utf-8"
                )
                summary["scoring"][name] = rep
                mix_inputs.append((name, out / "scored" / name / "dataset"))
            summary["judge"] = {"id": judge.judge_id, "backend_calls": judge.calls}
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
