"""The `rules` judge: deterministic checks that score a record 0–10 like the MLLM judge does.

Why: UI-Venus-1.5 scores every sample with a large MLLM judge on two axes, action–visual
alignment and task reachability (≥ 7 keep, 4–6 rewrite, 0–3 rebuild/discard). A laptop has no
such judge, and even with one, cheap rules catch the defects a judge should never be paid for.
The record schema already rejects structurally invalid records (boxes out of range, illegal
actions); these rules look for records that are *valid but doubtful*. Each rule that fires lowers
one axis to a fixed score and is named in the rationale, so the bucket table says why.

The rules judge never proposes a rewrite (it cannot see what the right instruction would be);
the MLLM backends of the scoring stage do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from venus_core.actions import parse_action
from venus_core.config.registry import JUDGES
from venus_core.data.schema import GroundingSample, NavigationStep, QASample, Trajectory
from venus_core.rewards.grounding import point_in_box

AnyRecord = GroundingSample | NavigationStep | Trajectory | QASample
_POINT_ACTIONS = {"Click": "box", "LongPress": "box", "Hover": "box", "DoubleClick": "box"}


@dataclass(frozen=True)
class Judgement:
    alignment: int  # 0–10: does the action / answer match what the screen shows?
    reachability: int  # 0–10: can the task / instruction be achieved as recorded?
    rationale: tuple[str, ...] = ()
    proposal: dict[str, str] | None = None
    judge: str = "rules"
    step: int | None = None  # whole episodes: the 0-based index of the first wrong step, if the judge names one

    @property
    def score(self) -> int:
        return min(self.alignment, self.reachability)


@dataclass
class _Verdict:
    alignment: int = 10
    reachability: int = 10
    reasons: list[str] = field(default_factory=list)

    def lower(self, axis: str, score: int, rule: str, detail: str) -> None:
        setattr(self, axis, min(getattr(self, axis), score))
        self.reasons.append(f"{rule} ({axis}={score}): {detail}")


def _box_area(box: tuple[int, int, int, int]) -> int:
    return (box[2] - box[0]) * (box[3] - box[1])


def _grounding(r: GroundingSample, v: _Verdict) -> None:
    if len(r.instruction.strip()) < 2:
        v.lower("reachability", 3, "short_instruction", "instruction shorter than 2 characters")
    if r.box is not None:
        area = _box_area(r.box)
        if area < 4:  # < 0.0004 % of the screen: a point, not an element
            v.lower("alignment", 3, "degenerate_box", f"target box area {area} in the 0–1000 frame is degenerate")
        elif area > 500_000:  # over half the screen: the instruction cannot single it out
            v.lower("alignment", 5, "oversized_box", f"target box covers {area / 10_000:.0f}% of the screen")


def _step_checks(action_text: str, platform: str, target_box: object, v: _Verdict, where: str) -> None:
    action = parse_action(action_text, platform)  # type: ignore[arg-type]
    if action.NAME == "Type" and not action.content.strip():  # type: ignore[attr-defined]
        v.lower("alignment", 2, "empty_type", f"{where}: Type with empty content")
    fieldname = _POINT_ACTIONS.get(action.NAME)
    if fieldname and target_box is not None:
        point = getattr(action, fieldname)
        if not point_in_box(point, target_box):  # type: ignore[arg-type]
            v.lower("alignment", 3, "point_outside_target", f"{where}: {action.NAME} point {point} outside its target box")


def _navigation_step(r: NavigationStep, v: _Verdict) -> None:
    _step_checks(r.action, r.platform, r.target_box, v, f"step {r.step_index}")


def _trajectory(r: Trajectory, v: _Verdict) -> None:
    for i, s in enumerate(r.steps):
        _step_checks(s.action, r.platform, s.target_box, v, f"step {i}")
    if not r.success:
        v.lower("reachability", 3, "unsuccessful", "trajectory did not reach its goal")
    run = 1
    for prev, cur in zip(r.steps, r.steps[1:], strict=False):
        run = run + 1 if cur.action == prev.action and cur.image == prev.image else 1
        if run >= 3:
            v.lower("reachability", 5, "stuck", "the same action on the same screen 3 times in a row")
            break


def _qa(r: QASample, v: _Verdict) -> None:
    if r.question.strip().casefold() == r.answer.strip().casefold():
        v.lower("alignment", 3, "answer_repeats_question", "answer repeats the question")


_CHECKS: dict[type, Callable[[object, _Verdict], None]] = {
    GroundingSample: _grounding,  # type: ignore[dict-item]
    NavigationStep: _navigation_step,  # type: ignore[dict-item]
    Trajectory: _trajectory,  # type: ignore[dict-item]
    QASample: _qa,  # type: ignore[dict-item]
}


def rules_judge(record: AnyRecord) -> Judgement:
    """Score one schema-valid record with the deterministic rules.

    >>> from venus_core.data.schema import Provenance
    >>> r = GroundingSample(id="a", image="sha256:" + "0" * 64, image_size=(10, 10), platform="web",
    ...     instruction="ok button", box=(100, 100, 200, 150), provenance=Provenance(source="t", source_id="1"))
    >>> rules_judge(r).score
    10
    """
    verdict = _Verdict()
    _CHECKS[type(record)](record, verdict)
    return Judgement(verdict.alignment, verdict.reachability, tuple(verdict.reasons))


JUDGES.register("rules", rules_judge)
