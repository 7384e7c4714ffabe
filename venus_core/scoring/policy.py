"""The UI-Venus-1.5 scoring policy over a dataset: keep >= 7, rewrite 4–6, rebuild or discard 0–3.

Why a streaming, phased loop: records are judged in chunks (so network judges keep
`spec.concurrency` requests in flight), then the chunk's rewrites are re-scored together, then its
rebuilds. Every record read gets exactly one decision — kept, rewritten, rebuilt or discarded —
written to decisions.jsonl with its scores and reasons, and the report checks that the counts
reconcile before the dataset is published.

Rewrite: the judge's proposal (allowed fields per kind, `protocol.PROPOSAL_KEYS`: a navigation
step's goal / instruction / think / action) is applied, the record is re-validated through the
schema and re-scored once; only a re-score >= keep_threshold keeps it. A sample that cannot be
rewritten (no proposal — the `rules` judge never makes one —, an invalid proposal, or a low
re-score) falls through to the low-score path, so nothing doubtful is kept silently.

Low, with `on_low_score=rebuild`: a synthetic record is regenerated from its family
(`rebuild.rebuildable`); a navigation step — or the wrong step a whole episode's judgement names —
is re-derived by the judge from its screenshot and context when the judge can (`can_rederive`:
the MLLM backends), its answer read by the action parser and re-validated (`rebuild.rederived`);
either replacement is judged once and kept only at >= keep_threshold. Everything else is
discarded, with the reason.

decisions.jsonl, one object per record read: id, kind, domain, source, bucket (keep | rewrite |
low | failed), score / alignment / reachability / rationale of the first judgement (and `step`
when the judge named one), decision (kept | rewritten | rebuilt | discarded), final_score (of
what was written, else null), and where they apply: proposal, rescore, low_reason, rebuild
(synthetic | rederive), rederived (the judge's step), written_id (when the written record has
another id), rebuild_score, reason (why discarded).
"""
from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from PIL import Image

from venus_core.actions import ActionParseError, parse_action, render_action
from venus_core.config.spec import ScoringSpec
from venus_core.data.images import decode_image, image_relpath
from venus_core.data.schema import NavigationStep, RecordError, Trajectory, parse_record, record_images
from venus_core.data.store import DatasetReader, DatasetWriter
from venus_core.scoring.buckets import bucket
from venus_core.scoring.judges import JudgeBackend, JudgeFailure, Verdict
from venus_core.scoring.protocol import step_of
from venus_core.scoring.rebuild import rebuild, rebuildable, rederived
from venus_core.scoring.report import ScoreReport, draw_histograms
from venus_core.scoring.rules import AnyRecord, Judgement

T = TypeVar("T")


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


def copy_images(record: AnyRecord, path_of: Callable[[str], Path], writer: DatasetWriter) -> None:
    """Put the record's images that `writer` lacks into it, read from `path_of(ref)`."""
    for ref, _size, _field in record_images(record):
        try:
            writer.image_size(ref)
        except KeyError:
            writer.put_image(path_of(ref).read_bytes())


class DatasetImages:
    """`open_image` for a judge: the images of the dataset being scored, then those of rebuilt
    replacements, which wait in the scratch writer until they are judged (`score_dataset` points
    it at both; build the judge with it)."""

    def __init__(self) -> None:
        self.reader: DatasetReader | None = None
        self.scratch: DatasetWriter | None = None

    def __call__(self, ref: str) -> Image.Image:
        if self.reader is None:
            raise RuntimeError("no dataset is being scored")
        try:
            return self.reader.open_image(ref)
        except FileNotFoundError:
            rebuilt = None if self.scratch is None else self.scratch.tmp / image_relpath(ref)
            if rebuilt is None or not rebuilt.is_file():
                raise
            return decode_image(rebuilt.read_bytes())


@dataclass
class _Pending:
    original: AnyRecord  # as read
    record: AnyRecord  # after a rewrite, else the original
    decision: dict[str, Any]
    step: int | None = None  # the wrong step of a whole episode, as the latest judgement named it


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

    def _scratch_path(self, ref: str) -> Path:
        return self.scratch.tmp / image_relpath(ref)

    def _high(self, v: Verdict) -> bool:
        return isinstance(v, Judgement) and v.score >= self.spec.keep_threshold

    def _ask(self, purpose: str, fn: Callable[[list[Any]], list[T]], items: list[Any]) -> list[T]:
        """`fn(items)` (a judge call), its records counted under `purpose` and its time measured."""
        t0 = time.perf_counter()
        try:
            return fn(items)
        finally:
            self.report.judge_seconds += time.perf_counter() - t0
            self.report.requests[purpose] += len(items)

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
        if record is not None and record.id != p.original.id:
            p.decision["written_id"] = record.id
        self.report.decisions[decision] += 1
        self.report.by_bucket[p.decision["bucket"]][decision] += 1
        if decision == "rebuilt":
            self.report.rebuilt_by[p.decision["rebuild"]] += 1
        if decision == "discarded":
            self.report.discard_reasons[(reason or "?").split(":", 1)[0]] += 1
        if record is not None and final is not None:
            self.report.final_scores[final] += 1
            self.writer.write(record)
        self.decisions_file.write(json.dumps(p.decision, ensure_ascii=False) + "\n")

    def run_chunk(self, chunk: Sequence[AnyRecord]) -> None:
        low: list[tuple[_Pending, str]] = []
        rewrites: list[_Pending] = []
        for record, v in zip(chunk, self._ask("judge", self.judge.judge_many, list(chunk)), strict=True):
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
                self.report.first_failure = self.report.first_failure or v.reason
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
            if v.step is not None:
                d["step"] = p.step = v.step
            self.report.buckets[b] += 1
            self.report.first_scores[v.score] += 1
            for reason in v.rationale:
                self.report.reasons[reason.split(" (", 1)[0][:80]] += 1
            if b == "keep":
                copy_images(record, self.reader.image_path, self.writer)
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
            rescores = self._ask("rescore_rewrite", self.judge.judge_many, [p.record for p in rewrites])
            for p, v in zip(rewrites, rescores, strict=True):
                p.decision["rescore"] = v.score if isinstance(v, Judgement) else None
                if isinstance(v, Judgement) and v.step is not None:
                    p.step = v.step
                if self._high(v):
                    copy_images(p.record, self.reader.image_path, self.writer)
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

    def _cannot_rederive(self, p: _Pending) -> str | None:
        """Why the judge cannot re-derive this record's wrong step (None when it can)."""
        r = p.original
        if not isinstance(r, NavigationStep | Trajectory):
            return "source cannot rebuild"
        if not self.judge.can_rederive:
            return f"source cannot rebuild and judge {self.judge.judge_id} cannot re-derive steps"
        if isinstance(r, Trajectory) and p.step is None:
            return "the judge named no wrong step of the episode"
        if isinstance(r, Trajectory) and p.step is not None and p.step >= len(r.steps):
            return f"the judge named step {p.step} of a {len(r.steps)}-step episode"
        return None

    def _low(self, low: list[tuple[_Pending, str]]) -> None:
        # (pending, replacement, where its images are: the scratch writer or the input dataset)
        candidates: list[tuple[_Pending, AnyRecord, bool]] = []
        rederive: list[_Pending] = []
        for p, why in low:
            p.decision["low_reason"] = why
            if self.spec.on_low_score == "discard":
                self._finish(p, "discarded", None, None, why)
            elif rebuildable(p.original):
                p.decision["rebuild"] = "synthetic"
                candidates.append((p, rebuild(p.original, self.scratch), True))
            elif (cannot := self._cannot_rederive(p)) is None:
                p.decision["rebuild"] = "rederive"
                rederive.append(p)
            else:
                self._finish(p, "discarded", None, None, why if why.startswith("judge_failed") else f"{why}: {cannot}")
        if rederive:
            steps = [step_of(p.original, p.step) for p in rederive]  # type: ignore[arg-type]
            for p, step, got in zip(rederive, steps, self._ask("rederive", self.judge.rederive_many, steps), strict=True):
                if isinstance(got, JudgeFailure):
                    self.report.rederive_failures += 1
                    self._finish(p, "discarded", None, None, f"rederive_failed: {got.reason}")
                    continue
                p.decision["rederived"] = {
                    "step": step.step_index,
                    "think": got.think,
                    "action": render_action(got.action),
                    "conclusion": got.conclusion,
                }
                try:
                    new = rederived(p.original, got, self.judge.judge_id, p.step)  # type: ignore[arg-type]
                except RecordError as exc:
                    self._finish(p, "discarded", None, None, f"rederive_invalid: {exc}")
                    continue
                candidates.append((p, new, False))
        if not candidates:
            return
        verdicts = self._ask("rescore_rebuild", self.judge.judge_many, [new for _, new, _ in candidates])
        for (p, new, scratch), v in zip(candidates, verdicts, strict=True):
            p.decision["rebuild_score"] = v.score if isinstance(v, Judgement) else None
            if self._high(v):
                copy_images(new, self._scratch_path if scratch else self.reader.image_path, self.writer)
                self._finish(p, "rebuilt", new, v.score)  # type: ignore[union-attr]
            elif isinstance(v, JudgeFailure):
                self._finish(p, "discarded", None, None, f"rebuild_judge_failed: {v.reason}")
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
    images: DatasetImages | None = None,
) -> ScoreReport:
    """Judge every record of dataset `src`; write out/dataset, out/decisions.jsonl and
    out/histogram.png and return the report (its cost: what `judge` spent on this dataset). Raises when more than `max_failure_share` of the samples failed to judge
    (an unreachable or broken judge must stop the pipeline, not empty the corpus).
    `progress(read, records)` is called after each chunk of `chunk_size` records. `images`: the
    judge's `open_image`, pointed at this dataset and at the rebuilt replacements while it runs."""
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
        if images is not None:
            images.reader, images.scratch = reader, scratch
        before = judge.stats()
        try:
            scorer = _Scorer(spec, judge, reader, writer, scratch, decisions)
            for chunk in _chunks(iter(reader), chunk_size):
                scorer.run_chunk(chunk)
                if progress is not None:
                    progress(scorer.report.read, reader.manifest.records)
        finally:
            scratch.abort()
            if images is not None:
                images.scratch = None
        report = scorer.report
        report.judge_id = judge.judge_id
        report.cost = judge.stats() - before
        report.check()
        if report.read and report.judge_failures / report.read > max_failure_share:
            raise RuntimeError(
                f"{src}: the judge failed on {report.judge_failures} of {report.read} samples "
                f"(> {max_failure_share:.0%}), the first: {report.first_failure}; see {out / 'decisions.jsonl'}"
            )
    draw_histograms(
        [("first judgement", report.first_scores), ("final (written)", report.final_scores)],
        out / "histogram.png",
        spec.keep_threshold,
    )
    return report
