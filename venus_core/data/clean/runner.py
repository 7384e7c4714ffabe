"""Run the cleaning steps over a dataset directory and write the cleaned dataset with its report.

Why one runner: every step's before/after counts must reconcile (`after = before - dropped +
added`) and every dropped record must be listed with the step and reason that dropped it
(dropped.jsonl), so a data team can audit a rule before switching it on for a source. The
records are held in memory (resampling needs global counts); at the scale of one source's shard
set that is fine, and sources are cleaned one at a time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from venus_core.data.clean.base import CLEAN_STEPS, AnyRecord, CleanOptions, StepReport
from venus_core.data.store import DatasetReader, DatasetWriter


def clean_records(
    records: list[AnyRecord], options: CleanOptions
) -> tuple[list[AnyRecord], list[StepReport], list[tuple[str, AnyRecord, str]]]:
    """Apply `options.steps` in order; returns (records, per-step reports, (step, record, reason) dropped)."""
    unknown = [s for s in options.steps if s not in CLEAN_STEPS]
    if unknown:
        raise ValueError(f"unknown cleaning step(s) {unknown}; known: {', '.join(CLEAN_STEPS.names())}")
    reports: list[StepReport] = []
    dropped: list[tuple[str, AnyRecord, str]] = []
    for name in options.steps:
        before = len(records)
        result = CLEAN_STEPS.get(name)(records, options)
        report = StepReport(
            name,
            before,
            len(result.records),
            _reasons(result.dropped),
            result.changed,
            result.added,
            result.info,
        )
        if report.after != before - len(result.dropped) + result.added:
            raise RuntimeError(
                f"cleaning step {name!r}: {before} in, {len(result.dropped)} dropped, "
                f"{result.added} added, but {report.after} out"
            )
        reports.append(report)
        dropped += [(name, r, why) for r, why in result.dropped]
        records = result.records
    return records, reports, dropped


def _reasons(dropped: list[tuple[AnyRecord, str]]) -> Any:
    from collections import Counter

    return Counter(why.split(":", 1)[0] for _, why in dropped)


def clean_dataset(
    src: str | Path, out: str | Path, options: CleanOptions | None = None, *, overwrite: bool = True
) -> dict[str, Any]:
    """Clean dataset `src` into out/dataset; write out/clean_report.json and out/dropped.jsonl."""
    options = options or CleanOptions()
    src, out = Path(src), Path(out)
    reader = DatasetReader(src)
    records = list(reader)
    cleaned, reports, dropped = clean_records(records, options)
    out.mkdir(parents=True, exist_ok=True)
    with DatasetWriter(
        out / "dataset",
        overwrite=overwrite,
        sources=reader.manifest.sources,
        created_by="venus_core.data.clean",
    ) as writer:
        for r in cleaned:
            writer.copy_record(r, reader)
    with open(out / "dropped.jsonl", "w", encoding="utf-8") as f:
        for step, r, why in dropped:
            f.write(
                json.dumps(
                    {"id": r.id, "source": r.provenance.source, "step": step, "reason": why},
                    ensure_ascii=False,
                )
                + "\n"
            )
    report = {
        "input": str(src),
        "read": len(records),
        "written": len(cleaned),
        "dropped": len(dropped),
        "added": sum(s.added for s in reports),
        "steps": [s.to_dict() for s in reports],
        "options": options.model_dump(),
    }
    (out / "clean_report.json").write_text(
        json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    return report
