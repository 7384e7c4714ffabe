"""Grounding evaluation (ScreenSpot-v2 / ScreenSpot-Pro harness, and synthetic held-out sets).

Protocol (UI-Venus-1.5): the model sees the screenshot and the 1.5 grounding prompt
(`venus_core.models.prompts.grounding_prompt`), decodes greedily with repetition penalty 1.05, and
answers `[x,y]` in the 0–1000 frame. Scoring is `metrics.score_grounding`: correct iff the point
lies inside the target box (edges included); a refusal sample (no box) is correct iff the answer
is `[-1,-1]`; an answer that does not parse is *wrong format* and counts as wrong.

Reported: overall accuracy, text / icon (`ui_type`), per platform, per application, group and
data source (ScreenSpot-Pro carries `application` / `group`, ScreenSpot-v2 `data_source`, both in
the record's provenance; synthetic sets carry `meta.app` and their curriculum `meta.level`), refusal accuracy, false refusals on
answerable samples and the wrong-format count — each with n and a 95 % Wilson interval.

Departure from the upstream harness: ScreenSpot-Pro's published score averages over all samples
(micro average), which is what `overall` is; per-group numbers are additional, not re-weighted.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from itertools import islice
from pathlib import Path
from typing import Any

from venus_core.data.schema import GroundingSample
from venus_core.data.store import DatasetReader
from venus_core.eval.metrics import Rate, score_grounding
from venus_core.eval.predictors import Predictor, Query, chunk_size
from venus_core.eval.results import EvalResult, benchmark_of, rate, rates_by
from venus_core.models.prompts import grounding_prompt

GROUNDING_MAX_NEW_TOKENS = 32
"""Enough for `[x,y]`, a box or two points; UI-Venus grounding answers are a few tokens."""

CHUNK = 64
"""Queries handed to the predictor at a time (bounds the decoded screenshots held in memory)."""


def _attr(record: GroundingSample, *names: str) -> str | None:
    """First non-empty value of `names` in meta, then provenance.extra."""
    for source in (record.meta, record.provenance.extra):
        for name in names:
            value = source.get(name)
            if isinstance(value, (str, int, float)) and not isinstance(value, bool) and str(value).strip():
                return str(value)
    return None


def sample_fields(record: GroundingSample) -> dict[str, Any]:
    """The per-sample fields known before prediction (categories, target, image ref)."""
    return {
        "id": record.id,
        "image": record.image,
        "image_size": list(record.image_size),
        "platform": record.platform,
        "ui_type": record.ui_type,
        "application": _attr(record, "application", "app"),
        "group": _attr(record, "group"),
        "data_source": _attr(record, "data_source"),
        "source": record.provenance.source,
        "level": _attr(record, "level"),
        "instruction": record.instruction,
        "refusal": record.box is None,
        "box": list(record.box) if record.box is not None else None,
    }


def score_sample(fields: dict[str, Any], answer: str) -> dict[str, Any]:
    """Add the answer and its outcome (parsed, refused, correct, point) to a sample's fields."""
    from venus_core.actions import ActionParseError, Refusal, parse_point

    outcome = score_grounding(answer, tuple(fields["box"]) if fields["box"] is not None else None)
    point: list[int] | None = None
    try:
        p = parse_point(answer)
        point = None if isinstance(p, Refusal) else [int(p[0]), int(p[1])]
    except ActionParseError:
        point = None
    return {**fields, "answer": answer, "parsed": outcome.parsed, "refused": outcome.refused,
            "correct": outcome.correct, "point": point}


def summarize(samples: list[dict[str, Any]]) -> dict[str, Any]:
    """Summary of scored grounding samples (module docstring); every rate has n and a 95 % CI."""
    answerable = [s for s in samples if not s["refusal"]]
    refusals = [s for s in samples if s["refusal"]]
    unparsed = sum(1 for s in samples if not s["parsed"])
    summary: dict[str, Any] = {
        "overall": rate(samples, "correct").to_dict(),
        "answerable": rate(answerable, "correct").to_dict(),
        "refusal": rate(refusals, "correct").to_dict(),
        "false_refusal": rate(answerable, "refused").to_dict(),
        "wrong_format": {"count": unparsed, **Rate(unparsed, len(samples)).to_dict()},
    }
    for key in ("level", "ui_type", "platform", "application", "group", "data_source"):
        groups = rates_by(samples, key, "correct")
        if groups:
            summary[f"by_{key}"] = groups
    return summary


def _batches(records: Iterator[GroundingSample], size: int) -> Iterator[list[GroundingSample]]:
    while chunk := list(islice(records, size)):
        yield chunk


def evaluate_grounding(
    data: str | Path,
    predictor: Predictor,
    *,
    limit: int | None = None,
    suite: str = "grounding",
    max_new_tokens: int = GROUNDING_MAX_NEW_TOKENS,
    chunk: int = CHUNK,
    progress: Callable[[int, int | None], None] | None = None,
) -> EvalResult:
    """Run `predictor` on the grounding records of the dataset `data` (at most `limit`) and score them.

    Other record kinds in the dataset are counted in `settings['skipped_records']`; a dataset
    without grounding records is an error naming it. `progress(scored, planned)` is called after
    each predictor batch; planned is the manifest's grounding count (capped by `limit`).
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    reader = DatasetReader(data)
    skipped: Counter[str] = Counter()

    def grounding_records() -> Iterator[GroundingSample]:
        for record in reader:
            if isinstance(record, GroundingSample):
                yield record
            else:
                skipped[record.kind] += 1

    records = grounding_records()
    if limit is not None:
        records = islice(records, limit)
    samples: list[dict[str, Any]] = []
    sources: Counter[str] = Counter()
    planned = reader.manifest.counts_by_kind.get("grounding", 0)
    planned = min(planned, limit) if limit is not None else planned
    for batch in _batches(records, chunk_size(predictor, chunk)):
        queries = [Query(r.id, reader.open_image(r.image), grounding_prompt(r.instruction)) for r in batch]
        answers = predictor.predict(queries, max_new_tokens)
        if len(answers) != len(batch):
            raise RuntimeError(f"predictor {predictor.name!r} returned {len(answers)} answers for {len(batch)} queries")
        for record, answer in zip(batch, answers, strict=True):
            sources[record.provenance.source] += 1
            samples.append(score_sample(sample_fields(record), answer))
        if progress is not None:
            progress(len(samples), planned)
    if not samples:
        raise ValueError(f"{data}: no grounding records to evaluate (found: {dict(skipped) or 'none'})")
    return EvalResult(
        evaluator="grounding", suite=suite, model=predictor.name, data=str(data),
        summary=summarize(samples), samples=samples, benchmark=benchmark_of(sources),
        sources=dict(sources),
        settings={"max_new_tokens": max_new_tokens, "limit": limit, "skipped_records": dict(skipped),
                  **_decoding(predictor)},
    )


def _decoding(predictor: Predictor) -> dict[str, Any]:
    """The decoding settings a predictor exposes (temperature, repetition penalty), for the record."""
    out: dict[str, Any] = {"backend": type(predictor).__name__}
    for name in ("temperature", "repetition_penalty", "batch_size"):
        if hasattr(predictor, name):
            out[name] = getattr(predictor, name)
    return out
