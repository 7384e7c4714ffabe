"""Record schema of Venus datasets: grounding, navigation, trajectories and perception / GUI-VQA.

Why: every stage (import, synthesis, scoring, mid-training, offline RL, evaluation) exchanges the
same four record kinds, so a malformed record must be rejected where it is made, with an error that
names the record and the field, not three stages later inside a data loader. All models are
pydantic v2 with `extra="forbid"`; scalar fields are *strict* (no "3" -> 3 or True -> 1 coercion),
while JSON arrays are accepted for tuples so that records parsed with `json.loads` validate.

Conventions (UI-Venus-1.5): boxes and points are integers in the 0–1000 normalized frame;
`image_size` is (width, height) in pixels of the stored image; a grounding *refusal* sample has no
box (the model must answer `[-1,-1]`). Navigation `action` strings must be the canonical
`venus_core.actions.render_action` form of an action that `parse_action(action, platform)`
accepts, so that SFT targets use one spelling per action. `venus_core.actions` is imported lazily
inside the validators, which keeps this module importable on its own.

Departure from the paper: the paper feeds the last 5 history steps to the model; a
`NavigationStep` keeps exactly the (at most `history_len`) items the prompt will show, plus the true
`step_index`, so history item j is the episode's step `step_index - len(history) + j` (0-based).
The full history is always recoverable from the `Trajectory` record.
"""

from __future__ import annotations

import functools
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

SCHEMA_VERSION = 1

Domain = Literal["perception", "vqa", "grounding", "navigation"]
DOMAINS: tuple[str, ...] = ("perception", "vqa", "grounding", "navigation")
KINDS: tuple[str, ...] = ("grounding", "navigation_step", "trajectory", "qa")

COORD_MAX = 1000
_IMAGE_REF_RE = re.compile(r"^sha256:[0-9a-f]{64}$")


def _check_box(box: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    x1, y1, x2, y2 = box
    if any(v < 0 or v > COORD_MAX for v in box):
        raise PydanticCustomError(
            "box_range", "box {box} has a coordinate outside 0..1000", {"box": list(box)}
        )
    if not (x1 < x2 and y1 < y2):
        raise PydanticCustomError(
            "box_degenerate", "box {box} is degenerate: need x1<x2 and y1<y2", {"box": list(box)}
        )
    return box


def _check_text(value: str) -> str:
    if not value.strip():
        raise PydanticCustomError("blank", "must not be empty or blank")
    return value


Box = Annotated[
    tuple[StrictInt, StrictInt, StrictInt, StrictInt],
    AfterValidator(_check_box),
    Field(description="x1,y1,x2,y2 in the 0–1000 frame, x1<x2, y1<y2"),
]
ImageRef = Annotated[
    StrictStr,
    Field(pattern=_IMAGE_REF_RE.pattern, description="sha256:<64 hex> in the dataset image store"),
]
ImageSize = Annotated[
    tuple[Annotated[StrictInt, Field(gt=0)], Annotated[StrictInt, Field(gt=0)]],
    Field(description="(width, height) of the stored image in pixels"),
]
Text = Annotated[StrictStr, AfterValidator(_check_text)]
RecordId = Annotated[StrictStr, Field(pattern=r"^\S{1,256}$", description="no whitespace")]
Meta = dict[str, JsonValue]


def image_ref(sha256_hex: str) -> str:
    """The ImageRef of an image whose PNG bytes have this sha256 hex digest."""
    ref = f"sha256:{sha256_hex}"
    if not _IMAGE_REF_RE.match(ref):
        raise ValueError(f"not a sha256 hex digest: {sha256_hex!r}")
    return ref


def ref_digest(ref: str) -> str:
    """The sha256 hex digest named by an ImageRef (raises ValueError when malformed)."""
    if not isinstance(ref, str) or not _IMAGE_REF_RE.match(ref):
        raise ValueError(f"malformed image ref {ref!r}: expected 'sha256:<64 lowercase hex>'")
    return ref[len("sha256:") :]


@functools.lru_cache(maxsize=1 << 16)
def _action_verdict(action: str, platform: str) -> tuple[str, str] | None:
    """None when `action` is canonical and valid on `platform`, else (error type, detail).

    Cached: a navigation step re-states up to `history_len` earlier actions, so the same strings
    are checked many times when a dataset is read (parsing dominated read time before the cache).
    """
    from venus_core.actions import ActionParseError, parse_action, render_action

    try:
        parsed = parse_action(action, platform)  # type: ignore[arg-type]
    except ActionParseError as exc:
        return ("action_parse", str(exc))
    canonical = render_action(parsed)
    return None if canonical == action else ("action_canonical", canonical)


def _check_action(action: str, platform: str, field: str) -> None:
    """Raise a PydanticCustomError('action_*') unless `action` is a canonical, valid action."""
    verdict = _action_verdict(action, platform)
    if verdict is None:
        return
    etype, detail = verdict
    if etype == "action_parse":
        raise PydanticCustomError(
            "action_parse", "{field}: {action} is not a valid {platform} action: {reason}",
            {"field": field, "action": repr(action), "platform": platform, "reason": detail},
        )
    raise PydanticCustomError(
        "action_canonical", "{field}: {action} is not canonical; write {canonical}",
        {"field": field, "action": repr(action), "canonical": repr(detail)},
    )


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Provenance(_Model):
    """Where a record came from: enough to find the original sample again."""

    source: Text = Field(description="dataset or generator name, e.g. 'screenspot_pro', 'synth'")
    source_id: Text = Field(description="id of the original sample within the source")
    generator: StrictStr | None = Field(None, description="program that produced the record")
    seed: StrictInt | None = Field(None, description="random seed, for synthetic records")
    extra: Meta = Field(default_factory=dict, description="source-specific details")


class GroundingSample(_Model):
    """Screenshot + instruction -> target element box, or a refusal ('[-1,-1]')."""

    kind: Literal["grounding"] = "grounding"
    id: RecordId
    domain: Literal["grounding"] = "grounding"
    image: ImageRef
    image_size: ImageSize
    platform: Literal["mobile", "web", "desktop"]
    instruction: Text
    box: Box | None
    refusal: StrictBool = Field(False, validate_default=True)
    ui_type: StrictStr | None = Field(None, description="e.g. 'text' or 'icon'")
    provenance: Provenance
    meta: Meta = Field(default_factory=dict)

    @field_validator("refusal")
    @classmethod
    def _refusal_iff_no_box(cls, v: bool, info: ValidationInfo) -> bool:
        if "box" not in info.data:  # the box itself failed; that error is reported already
            return v
        box = info.data["box"]
        if v and box is not None:
            raise PydanticCustomError("refusal", "refusal=True but box is set; a refusal has box=None")
        if not v and box is None:
            raise PydanticCustomError("refusal", "box is None but refusal=False; set refusal=True")
        return v


class HistoryItem(_Model):
    """One earlier step as the prompt shows it: its thought and canonical action string.

    The action is checked against the platform by the enclosing NavigationStep.
    """

    think: StrictStr
    action: Text


HISTORY_ONLY = "history_only"
"""TrajectoryStep meta key: the step is history for the later steps, never a training target."""


class TrajectoryStep(_Model):
    """One step of an episode: the screen seen, and what the agent thought, did and concluded."""

    image: ImageRef
    image_size: ImageSize
    think: StrictStr
    action: Text
    conclusion: StrictStr
    instruction: StrictStr | None = Field(None, description="low-level instruction of this step")
    target_box: Box | None = Field(None, description="element the action targets, if known")
    meta: Meta = Field(default_factory=dict)


class NavigationStep(_Model):
    """One training example of navigation: screen + goal + recent history -> think/action/conclusion.

    `history` holds the last (at most `history_len`) steps before this one, oldest first; item j is
    step `step_index - len(history) + j` of the episode (0-based).
    """

    kind: Literal["navigation_step"] = "navigation_step"
    id: RecordId
    domain: Literal["navigation"] = "navigation"
    image: ImageRef
    image_size: ImageSize
    platform: Literal["mobile", "web"]
    goal: Text
    instruction: StrictStr | None = None
    history: list[HistoryItem] = Field(default_factory=list)
    think: StrictStr
    action: Text
    conclusion: StrictStr
    target_box: Box | None = None
    step_index: Annotated[StrictInt, Field(ge=0)]
    episode_id: RecordId
    provenance: Provenance
    meta: Meta = Field(default_factory=dict)

    @field_validator("history")
    @classmethod
    def _history_actions(cls, v: list[HistoryItem], info: ValidationInfo) -> list[HistoryItem]:
        platform = info.data.get("platform")
        if platform is not None:
            for j, item in enumerate(v):
                _check_action(item.action, platform, f"history[{j}].action")
        return v

    @field_validator("action")
    @classmethod
    def _action(cls, v: str, info: ValidationInfo) -> str:
        platform = info.data.get("platform")
        if platform is not None:
            _check_action(v, platform, "action")
        return v

    @field_validator("step_index")
    @classmethod
    def _history_fits(cls, v: int, info: ValidationInfo) -> int:
        history = info.data.get("history")
        if history is not None and len(history) > v:
            raise PydanticCustomError(
                "history_length", "step_index {i} cannot have {n} history items (at most {i})",
                {"i": v, "n": len(history)},
            )
        return v


class Trajectory(_Model):
    """A whole episode: the ordered steps toward `goal` and whether it succeeded."""

    kind: Literal["trajectory"] = "trajectory"
    id: RecordId
    domain: Literal["navigation"] = "navigation"
    episode_id: RecordId
    platform: Literal["mobile", "web"]
    goal: Text
    steps: list[TrajectoryStep] = Field(min_length=1)
    success: StrictBool
    provenance: Provenance
    meta: Meta = Field(default_factory=dict)

    @field_validator("steps")
    @classmethod
    def _step_actions(cls, v: list[TrajectoryStep], info: ValidationInfo) -> list[TrajectoryStep]:
        platform = info.data.get("platform")
        if platform is not None:
            for i, step in enumerate(v):
                _check_action(step.action, platform, f"steps[{i}].action")
        return v

    def to_steps(self, history_len: int = 5, *, history_only: bool = False) -> list[NavigationStep]:
        """One NavigationStep per step, each with the last `history_len` earlier steps as history.

        Ids are `<trajectory id>:<step index>`; `meta` merges the trajectory's and the step's meta
        and adds `trajectory_id`, `trajectory_success` and `num_steps`. A step whose meta sets
        `history_only` (HISTORY_ONLY: e.g. a deliberate miss that a recovery episode starts with)
        is part of the later steps' history but no NavigationStep of its own, unless `history_only`
        is set (callers that address steps by index).
        """
        if isinstance(history_len, bool) or not isinstance(history_len, int) or history_len < 0:
            raise ValueError(f"history_len must be an integer >= 0, got {history_len!r}")
        out: list[NavigationStep] = []
        for i, step in enumerate(self.steps):
            if step.meta.get(HISTORY_ONLY) is True and not history_only:
                continue
            earlier = self.steps[max(0, i - history_len) : i] if history_len else []
            meta: dict[str, Any] = {
                **self.meta,
                **step.meta,
                "trajectory_id": self.id,
                "trajectory_success": self.success,
                "num_steps": len(self.steps),
            }
            out.append(
                NavigationStep(
                    id=f"{self.id}:{i}",
                    image=step.image,
                    image_size=step.image_size,
                    platform=self.platform,
                    goal=self.goal,
                    instruction=step.instruction,
                    history=[HistoryItem(think=s.think, action=s.action) for s in earlier],
                    think=step.think,
                    action=step.action,
                    conclusion=step.conclusion,
                    target_box=step.target_box,
                    step_index=i,
                    episode_id=self.episode_id,
                    provenance=self.provenance,
                    meta=meta,
                )
            )
        return out


class QASample(_Model):
    """Perception (describe / read the screen) or GUI-VQA (question about the screen) sample."""

    kind: Literal["qa"] = "qa"
    id: RecordId
    domain: Literal["perception", "vqa"]
    image: ImageRef
    image_size: ImageSize
    platform: Literal["mobile", "web", "desktop"]
    question: Text
    answer: Text
    provenance: Provenance
    meta: Meta = Field(default_factory=dict)


Record = Annotated[
    GroundingSample | NavigationStep | Trajectory | QASample, Field(discriminator="kind")
]
_RECORD_ADAPTER: TypeAdapter[Any] = TypeAdapter(Record)


def record_images(record: BaseModel) -> list[tuple[str, tuple[int, int], str]]:
    """(image ref, claimed image_size, field path) of every image a record refers to."""
    if isinstance(record, Trajectory):
        return [(s.image, s.image_size, f"steps[{i}].image") for i, s in enumerate(record.steps)]
    if isinstance(record, (GroundingSample, NavigationStep, QASample)):
        return [(record.image, record.image_size, "image")]
    raise TypeError(f"not a record: {type(record).__name__}")


def _loc_str(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out


class RecordError(ValueError):
    """A record failed validation. `errors` lists (field, error type, message) triples."""

    def __init__(self, where: str, record_id: str | None, errors: list[tuple[str, str, str]]):
        self.where = where
        self.record_id = record_id
        self.errors = errors
        head = ", ".join(p for p in (where, f"record {record_id!r}" if record_id else "") if p)
        lines = [f"{field or '<record>'}: {msg}" for field, _, msg in errors]
        super().__init__(f"{head or 'record'}: invalid record: " + "; ".join(lines))


def parse_record(obj: Any, *, where: str = "") -> GroundingSample | NavigationStep | Trajectory | QASample:
    """Validate one record (a dict as loaded from JSON); errors name `where` and each field."""
    record_id = obj.get("id") if isinstance(obj, dict) else None
    if not isinstance(obj, dict):
        raise RecordError(where, None, [("", "type", f"expected a JSON object, got {type(obj).__name__}")])
    try:
        return _RECORD_ADAPTER.validate_python(obj)
    except ValidationError as exc:
        kind = obj.get("kind")
        errors = []
        for err in exc.errors(include_url=False):
            loc = tuple(err["loc"])
            if loc and loc[0] == kind:  # tagged unions prefix the location with the tag
                loc = loc[1:]
            field = _loc_str(loc)
            ctx = err.get("ctx") or {}
            if str(err["type"]).startswith("action") and isinstance(ctx.get("field"), str):
                field = ctx["field"]  # e.g. steps[2].action rather than the whole `steps` list
            errors.append((field, str(err["type"]), str(err["msg"])))
        raise RecordError(where, record_id if isinstance(record_id, str) else None, errors) from None
