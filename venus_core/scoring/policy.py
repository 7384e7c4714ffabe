"""The UI-Venus-1.5 scoring policy over a dataset: keep >= 7, rewrite 4–6, rebuild or discard 0–3.

Why a streaming, phased loop: records are judged in chunks (so network judges keep
`spec.concurrency` requests in flight), then the chunk's rewrites are re-scored together, then its
rebuilds. Every record read gets exactly one decision — kept, rewritten, rebuilt or discarded —
written to decisions.jsonl with its scores and reasons, and the report checks that the counts
reconcile before the dataset is published.

Rewrite: the judge's proposal (allowed fields per kind, `protocol.PROPOSAL_KEYS`) is applied, the
record is re-validated through the schema and re-scored once; only a re-score >= keep_threshold
keeps it. A sample that cannot be rewritten (no proposal — the `rules` judge never makes one —,
an invalid proposal, or a low re-score) falls through to the low-score path, so nothing doubtful
is kept silently. Low: rebuild from the synthetic world when `on_low_score=rebuild` and the
source allows it (`rebuild.rebuildable`), judge the replacement once, else discard.

decisions.jsonl, one object per record read: id, kind, domain, source, bucket (keep | rewrite |
low | failed), score / alignment / reachability / rationale of the first judgement, decision
(kept | rewritten | rebuilt | discarded), final_score (of what was written, else null), and where
they apply: proposal, rescore, low_reason, rebuild_score, reason (why discarded).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from venus_core.actions import ActionParseError, parse_action, render_action
from venus_core.config.spec import ScoringSpec
from venus_core.data.images import image_relpath
from venus_core.data.schema import RecordError, parse_record, record_images
from venus_core.data.store import DatasetReader, DatasetWriter
from venus_core.scoring.buckets import bucket
from venus_core.scoring.judges import JudgeBackend, JudgeFailure, Verdict
from venus_core.scoring.rebuild import rebuild, rebuildable
from venus_core.scoring.report import ScoreReport, draw_histograms
from venus_core.scoring.rules import AnyRecord, Judgement


def apply_proposal(record: AnyRecord, proposal: dict[str, str]) -> AnyRecord:
    """The record with the proposed fields replaced, re-validated (RecordError when invalid)."""
    data: dict[str, Any] = record.model_dump(mode="json")
    for key, value in proposal.items():
        if key == "action":
            try:
                value = render_action(parse_action(value, data["platform"]))
            except ActionParseError:
                pass  # the schema names the problem below
        data[key] = value
    data["meta"] = {**data.get("meta", {}), "rewritten_fields": sorted(proposal)}
    return parse_record(data, where=f"rewrite of record {record.id!r}")


def copy_images(record: AnyRecord, reader: DatasetReader, writer: DatasetWriter) -> None:
    for ref, _size, _field in record_images(record):
        try:
            writer.image_size(ref)
        except KeyError:
            writer.put_image(reader.image_path(ref).read_bytes())


@dataclass
class _Pending:
    original: AnyRecord  # as read
    record: AnyRecord  # after a rewrite, else the original
    decision: dict[str, Any]


def _chunks(it: Iterator[AnyRecord], n: int) -> Iterator[list[AnyRecord]]:
    chunk: list[AnyRecord] = []
    for r in it:
        chunk.append(r)
        if len(chunk) >= n:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


class _Scorer:
    def __init__(
        self,
        spec: ScoringSpec,
        judge: JudgeBackend,
        reader: DatasetReader,
        writer: DatasetWriter,
        scratch: DatasetWriter,
        decisions: Any,
    ) -> None:
        self.spec, self.judge, self.reader, self.writer, self.scratch = spec, judge, reader, writer, scratch
        self.decisions_file = decisions
        self.report = ScoreReport(keep_threshold=spec.keep_threshold)

    def _high(self, v: Verdict) -> bool:
        return isinstance(v, Judgement) and v.score >= self.spec.keep_threshold

    def _finish(
        self,
        p: _Pending,
        decision: str,
        record: AnyRecord | None,
        final: int | None,
        reason: str | None = None,
    ) -> None:
        p.decision.update(decision=decision, final_score=final)
        if reason:
            p.decision["reason"] = reason
        self.report.decisions[decision] += 1
        if decision == "discarded":
            self.report.discard_reasons[(reason or "?").split(":", 1)[0]] += 1
        if record is not None and final is not None:
            self.report.final_scores[final] += 1
            self.writer.write(record)
        self.decisions_file.write(json.dumps(p.decision, ensure_ascii=False) + "\n")

    def run_chunk(self, chunk: Sequence[AnyRecord]) -> None:
        low: list[tuple[_Pending, str]] = []
        rewrites: list[_Pending] = []
        for record, v in zip(chunk, self.judge.judge_many(chunk), strict=True):
            self.report.read += 1
            d: dict[str, Any] = {
                "id": record.id,
                "kind": record.kind,
                "domain": record.domain,
                "source": record.provenance.source,
            }
            p = _Pending(record, record, d)
            if isinstance(v, JudgeFailure):
                self.report.judge_failures += 1
                self.report.buckets["failed"] += 1
                d["bucket"] = "failed"
                self._finish(p, "discarded", None, None, f"judge_failed: {v.reason}")
                continue
            b = bucket(v.score, self.spec.keep_threshold, self.spec.rewrite_threshold)
            d.update(
                bucket=b,
                score=v.score,
                alignment=v.alignment,
                reachability=v.reachability,
                rationale=list(v.rationale),
            )
            self.report.buckets[b] += 1
            self.report.first_scores[v.score] += 1
            for reason in v.rationale:
                self.report.reasons[reason.split(" (", 1)[0][:80]] += 1
            if b == "keep":
                copy_images(record, self.reader, self.writer)
                self._finish(p, "kept", record, v.score)
            elif b == "rewrite" and v.proposal:
                try:
                    p.record = apply_proposal(record, v.proposal)
                    d["proposal"] = v.proposal
                    rewrites.append(p)
                except RecordError as exc:
                    low.append((p, f"rewrite_invalid: {exc}"))
            else:
                low.append((p, "no_proposal" if b == "rewrite" else "low_score"))
        if rewrites:
            for p, v in zip(rewrites, self.judge.judge_many([p.record for p in rewrites]), strict=True):
                p.decision["rescore"] = v.score if isinstance(v, Judgement) else None
                if self._high(v):
                    copy_images(p.record, self.reader, self.writer)
                    self._finish(p, "rewritten", p.record, v.score)  # type: ignore[union-attr]
                else:
                    low.append(
                        (
                            p,
                            "rewrite_rescored_low"
                            if isinstance(v, Judgement)
                            else f"judge_failed: {v.reason}",
                        )
                    )
        self._low(low)

    def _low(self, low: list[tuple[_Pending, str]]) -> None:
        todo: list[tuple[_Pending, AnyRecord]] = []
        for p, why in low:
            p.decision["low_reason"] = why
            if self.spec.on_low_score == "rebuild" and rebuildable(p.original):
                todo.append((p, rebuild(p.original, self.scratch)))
            else:
                reason = (
                    why
                    if self.spec.on_low_score == "discard" or why.startswith("judge_failed")
                    else f"{why}: source cannot rebuild"
                )
                self._finish(p, "discarded", None, None, reason)
        if not todo:
            return
        for (p, new), v in zip(todo, self.judge.judge_many([n for _, n in todo]), strict=True):
            p.decision["rebuild_score"] = v.score if isinstance(v, Judgement) else None
            if self._high(v):
                for ref, _s, _f in record_images(new):
                    try:
                        self.writer.image_size(ref)
                    except KeyError:
                        self.writer.put_image((self.scratch.tmp / image_relpath(ref)).read_bytes())
                self._finish(p, "rebuilt", new, v.score)  # type: ignore[union-attr]
            else:
                self._finish(p, "discarded", None, None, "rebuild_scored_low")


def score_dataset(
    src: str | Path,
    out: str | Path,
    spec: ScoringSpec,
    judge: JudgeBackend,
    *,
    chunk_size: int = 64,
    max_failure_share: float = 0.05,
    overwrite: bool = True,
    progress: Callable[[int, int | None], None] | None = None,
) -> ScoreReport:
    """Judge every record of dataset `src`; write out/dataset, out/decisions.jsonl, out/report.json
    and out/histogram.png. Raises when more than `max_failure_share` of the samples failed to judge
    (an unreachable or broken judge must stop the pipeline, not empty the corpus).
    `progress(read, records)` is called after each chunk of `chunk_size` records."""
    src, out = Path(src), Path(out)
    reader = DatasetReader(src)
    out.mkdir(parents=True, exist_ok=True)
    with (
        DatasetWriter(
            out / "dataset",
            overwrite=overwrite,
            sources=reader.manifest.sources,
            created_by=f"venus_core.scoring ({judge.judge_id})",
        ) as writer,
        open(out / "decisions.jsonl", "w", encoding="utf-8") as decisions,
    ):
        scratch = DatasetWriter(out / ".rebuild-scratch", overwrite=True)
        try:
            scorer = _Scorer(spec, judge, reader, writer, scratch, decisions)
            for chunk in _chunks(iter(reader), chunk_size):
                scorer.run_chunk(chunk)
                if progress is not None:
                    progress(scorer.report.read, reader.manifest.records)
        finally:
            scratch.abort()
        report = scorer.report
        report.check()
        if report.read and report.judge_failures / report.read > max_failure_share:
            raise RuntimeError(
                f"{src}: the judge failed on {report.judge_failures} of {report.read} samples "
                f"(> {max_failure_share:.0%}); see {out / 'decisions.jsonl'}"
            )
    draw_histograms(
        [("first judgement", report.first_scores), ("final (written)", report.final_scores)],
        out / "histogram.png",
        spec.keep_threshold,
    )
    return report
