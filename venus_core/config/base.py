"""Building blocks of the agent spec: the strict section base and registry-checked names.

A field typed `RewardName` (etc.) must name an entry of that registry when the spec is loaded;
the error lists the known names.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

from venus_core.config.registry import registry

STAGES = ("generate_data", "score_data", "mid_train", "offline_rl", "online_rl", "merge", "evaluate")
RL_DOMAINS = ("grounding", "mobile", "web")
DATA_DOMAINS = ("perception", "vqa", "grounding", "navigation")


TRAINED_MERGE_METHODS = ("distill",)
"""`merge.method` values that train a model instead of combining tensors (no `merge_methods` entry):
`distill` is multi-teacher on-policy distillation (`venus_core.merge.distill`)."""


def _registered(kind: str, also: tuple[str, ...] = ()) -> AfterValidator:
    def check(value: str) -> str:
        reg = registry(kind)
        if value not in reg and value not in also:
            known = ", ".join([*reg.names(), *also]) or "(none registered)"
            raise ValueError(f"unknown {kind} name {value!r}; known: {known}")
        return value

    return AfterValidator(check)


RewardName = Annotated[str, _registered("rewards")]
EnvName = Annotated[str, _registered("envs")]
JudgeName = Annotated[str, _registered("judges")]
MergeMethodName = Annotated[str, _registered("merge_methods", also=TRAINED_MERGE_METHODS)]
ImporterName = Annotated[str, _registered("importers")]
EvaluatorName = Annotated[str, _registered("eval_suites")]


class Section(BaseModel):
    """Base of every spec section: unknown keys are errors, assignments are validated, and a float
    field refuses NaN and ±inf (a NaN learning rate would train nothing without failing)."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True, populate_by_name=True,
                              allow_inf_nan=False)
