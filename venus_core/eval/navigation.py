"""Offline navigation evaluation (AndroidControl high / low level, GUI-Odyssey).

Protocol: every step of a recorded episode is one query — the step's screenshot and the
UI-Venus-1.5 navigation prompt with the goal and the *reference* history (the last 5 recorded
(think, action) steps: offline evaluation never feeds the model its own earlier mistakes).
`level="high"` shows the goal only; `level="low"` also shows the step instruction (AndroidControl's
low-level setting; every step must then have one, else the record is named in an error). The
answer is scored by `metrics.score_navigation`, whose rules are, exactly:

- *type match*: the predicted action type equals the reference's. An answer is parsed as the
  tagged `<think>…</think><action>…</action><conclusion>…</conclusion>` form, else as a bare
  action; if neither parses (or the action is invalid on the platform) it is wrong format and
  counts as wrong for both metrics.
- *step success*: type match and the arguments agree — Click / LongPress / Hover / DoubleClick:
  the point is inside the step's `target_box` when the dataset has one, else within 14 % of the
  screen diagonal of the reference point (≈ 198 in the 0–1000 frame); Scroll: same direction;
  Drag: both end points within that distance; Type / CallUser / Finished: token F1 ≥ 0.5;
  Launch and Hotkey: equal, case-insensitive; argument-free actions (Wait, Press*): type alone.

Reported: type accuracy, step success rate, wrong-format count, both rates per reference action
type (so a step success that comes only from `Finished` steps shows beside the `Click` steps) and
per platform, the confusion of reference vs predicted type, and — when the dataset holds whole
trajectories — episode success (every step of the episode a step success), which is stricter than
the per-step numbers AndroidControl papers quote. With trajectories, `limit` counts episodes.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, Literal

from venus_core.actions import render_action
from venus_core.data.schema import NavigationStep, Trajectory
from venus_core.data.store import DatasetReader
from venus_core.eval.metrics import Rate, predicted_action, score_navigation
from venus_core.eval.predictors import Predictor, Query, chunk_size
from venus_core.eval.results import EvalResult, benchmark_of, rate, rates_by
from venus_core.models.prompts import HISTORY_STEPS, navigation_prompt

NAV_MAX_NEW_TOKENS = 256
"""Room for a short think, the action and the conclusion."""

UNPARSED = "(wrong format)"
Level = Literal["high", "low"]
CHUNK = 32


def _steps(reader: DatasetReader, limit: int | None, skipped: Counter[str]) -> Iterator[NavigationStep]:
    taken = 0
    for record in reader:
        if limit is not None and taken >= limit:
            return
        if isinstance(record, Trajectory):
            yield from record.to_steps(HISTORY_STEPS)
        elif isinstance(record, NavigationStep):
            yield record
        else:
            skipped[record.kind] += 1
            continue
        taken += 1


def step_prompt(step: NavigationStep, level: Level) -> str:
    """The navigation prompt of a step at `level` (see the module docstring)."""
    instruction = None
    if level == "low":
        if not step.instruction or not step.instruction.strip():
            raise ValueError(f"record {step.id!r}: level 'low' needs a step instruction, and this step has none")
        instruction = step.instruction
    return navigation_prompt(step.goal, [(h.think, h.action) for h in step.history], step.platform,
                             instruction=instruction, first_step=step.step_index - len(step.history))


def _parts(answer: str) -> tuple[str, str]:
    """(think, conclusion) text of a tagged answer, for the viewer; empty when absent."""
    think = re.search(r"<think>(.*?)</think>", answer, re.S)
    concl = re.search(r"<conclusion>(.*?)</conclusion>", answer, re.S)
    return (think.group(1).strip() if think else "", concl.group(1).strip() if concl else "")


def score_step(step: NavigationStep, answer: str, level: Level) -> dict[str, Any]:
    """One scored step: reference, answer, parsed prediction and the two outcomes."""
    outcome = score_navigation(answer, step.action, step.platform, step.target_box)
    pred = predicted_action(answer, step.platform)
    think, conclusion = _parts(answer)
    return {
        "id": step.id, "episode_id": step.episode_id, "step_index": step.step_index,
        "num_steps": step.meta.get("num_steps"), "platform": step.platform,
        "image": step.image, "image_size": list(step.image_size), "source": step.provenance.source,
        "goal": step.goal, "instruction": step.instruction if level == "low" else None,
        "reference": step.action, "reference_type": step.action.split("(", 1)[0],
        "target_box": list(step.target_box) if step.target_box is not None else None,
        "answer": answer, "think": think, "conclusion": conclusion,
        "parsed": outcome.parsed, "predicted": render_action(pred) if pred is not None else None,
        "predicted_type": outcome.predicted_type, "type_match": outcome.type_match,
        "step_success": outcome.step_success,
    }


def _both_rates_by(samples: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """{category of `key`: {type_accuracy, step_success}}, categories sorted."""
    out: dict[str, Any] = {}
    for name, r in rates_by(samples, key, "type_match").items():
        rows = [s for s in samples if str(s[key]) == name]
        out[name] = {"type_accuracy": r, "step_success": rate(rows, "step_success").to_dict()}
    return out


def summarize(samples: list[dict[str, Any]], whole_episodes: bool) -> dict[str, Any]:
    """Summary of scored steps (module docstring); every rate has n and a 95 % CI."""
    unparsed = sum(1 for s in samples if not s["parsed"])
    by_type = _both_rates_by(samples, "reference_type")
    confusion: dict[str, dict[str, int]] = {}
    for s in samples:
        row = confusion.setdefault(s["reference_type"], {})
        pred = s["predicted_type"] or UNPARSED
        row[pred] = row.get(pred, 0) + 1
    summary: dict[str, Any] = {
        "type_accuracy": rate(samples, "type_match").to_dict(),
        "step_success": rate(samples, "step_success").to_dict(),
        "wrong_format": {"count": unparsed, **Rate(unparsed, len(samples)).to_dict()},
        "by_type": by_type,
        "by_platform": _both_rates_by(samples, "platform"),
        "confusion": {ref: dict(sorted(row.items())) for ref, row in sorted(confusion.items())},
    }
    if whole_episodes:
        episodes: dict[str, list[bool]] = {}
        for s in samples:
            episodes.setdefault(s["episode_id"], []).append(s["step_success"])
        summary["episode_success"] = Rate(sum(all(v) for v in episodes.values()), len(episodes)).to_dict()
    return summary


def evaluate_nav_offline(
    data: str | Path,
    predictor: Predictor,
    *,
    level: Level = "high",
    limit: int | None = None,
    suite: str = "nav_offline",
    max_new_tokens: int = NAV_MAX_NEW_TOKENS,
    chunk: int = CHUNK,
    progress: Callable[[int, int | None], None] | None = None,
) -> EvalResult:
    """Run `predictor` on every step of the navigation records of `data` and score them.

    `progress(steps scored, planned)` is called after each predictor batch; planned is known only
    for a dataset of single steps (trajectories are unrolled as they are read), else None.
    """
    if level not in ("high", "low"):
        raise ValueError(f"level must be 'high' or 'low', got {level!r}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"limit must be an integer >= 1, got {limit!r}")
    reader = DatasetReader(data)
    skipped: Counter[str] = Counter()
    sources: Counter[str] = Counter()
    samples: list[dict[str, Any]] = []
    only_trajectories = True
    pending: list[NavigationStep] = []
    kinds = reader.manifest.counts_by_kind
    planned = None if kinds.get("trajectory") else kinds.get("navigation_step", 0)
    if planned is not None and limit is not None:
        planned = min(planned, limit)

    def flush() -> None:
        queries = [Query(s.id, reader.open_image(s.image), step_prompt(s, level)) for s in pending]
        answers = predictor.predict(queries, max_new_tokens)
        if len(answers) != len(pending):
            raise RuntimeError(f"predictor {predictor.name!r} returned {len(answers)} answers for {len(pending)} queries")
        for step, answer in zip(pending, answers, strict=True):
            sources[step.provenance.source] += 1
            samples.append(score_step(step, answer, level))
        pending.clear()
        if progress is not None:
            progress(len(samples), planned)

    for step in _steps(reader, limit, skipped):
        only_trajectories = only_trajectories and "trajectory_id" in step.meta
        step_prompt(step, level)  # fail on a missing low-level instruction before any inference
        pending.append(step)
        if len(pending) >= chunk_size(predictor, chunk):
            flush()
    if pending:
        flush()
    if not samples:
        raise ValueError(f"{data}: no navigation records to evaluate (found: {dict(skipped) or 'none'})")
    settings: dict[str, Any] = {"level": level, "limit": limit, "max_new_tokens": max_new_tokens,
                                "history_steps": HISTORY_STEPS, "skipped_records": dict(skipped),
                                "backend": type(predictor).__name__}
    for name in ("temperature", "repetition_penalty", "batch_size"):
        if hasattr(predictor, name):
            settings[name] = getattr(predictor, name)
    return EvalResult(
        evaluator="nav_offline", suite=suite, model=predictor.name, data=str(data),
        summary=summarize(samples, whole_episodes=only_trajectories), samples=samples,
        benchmark=benchmark_of(sources), sources=dict(sources), settings=settings,
    )
