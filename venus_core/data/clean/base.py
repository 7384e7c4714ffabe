"""Cleaning steps: a small registry of record-list transforms, each switchable and counted.

Why a registry of its own: UI-Venus-1.0 lists its cleaning rules (unify scroll semantics, filter
inconsistent trajectories, resample by action category, reconstruct information-retrieval
trajectories); each is a separate decision a data team may switch off for one source, and each
must report what it did (records before / after, dropped by reason, changed, added). The registry
is the project's `Registry` class, local to this package (`CLEAN_STEPS`), so a new rule is one
registered function plus one test, like every other extension point.

A step takes the whole record list (resampling needs global counts) and returns a `StepOutput`;
the runner checks `after == before - dropped + added` for every step.

Metadata the rules read when a source provides it (importers set these; absent means unknown):
`provenance.extra["scroll_semantics"]` ("finger" | "content"), `TrajectoryStep.meta["focused_editable"]`
(bool, before a Type), `Trajectory.meta["answer"]` or `provenance.extra["answer"]` (the answer to
an information-seeking goal).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from venus_core.config.registry import Registry
from venus_core.data.schema import GroundingSample, NavigationStep, QASample, Trajectory

AnyRecord = GroundingSample | NavigationStep | Trajectory | QASample

DEFAULT_ORDER = ("unify_scroll", "filter_inconsistent", "reconstruct_info_retrieval", "resample_actions")
"""Order the runner applies the built-in steps in: fix semantics first, filter, repair, then resample
(so copies are made of clean records only)."""


class CleanOptions(BaseModel):
    """Settings of the cleaning steps (defaults are ours; the paper publishes none)."""

    model_config = ConfigDict(extra="forbid")

    steps: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ORDER), description="steps to run, in order"
    )
    scroll_semantics: dict[str, Literal["finger", "content", "auto"]] = Field(
        default_factory=dict,
        description="per source: Scroll direction is the finger's motion (canonical), the content's, or auto "
        "(decide per action from its start/end)",
    )
    default_scroll_semantics: Literal["finger", "content", "auto"] = Field(
        "auto", description="for sources not listed in scroll_semantics and without provenance.extra"
    )
    edge_is_off_screen: bool = Field(
        True, description="a point at coordinate 0 or 1000 is a clamped off-screen point (filtered)"
    )
    noop_repeats: int = Field(
        3, ge=2, description="this many identical actions on an unchanged screen = a no-op loop"
    )
    resample_target_share: float = Field(
        0.05, ge=0, le=1, description="raise each action category to at least this share of steps (by copies)"
    )
    resample_max_copies: int = Field(4, ge=0, description="at most this many extra copies of one record")


@dataclass
class StepOutput:
    records: list[AnyRecord]
    dropped: list[tuple[AnyRecord, str]] = field(default_factory=list)
    changed: int = 0
    added: int = 0
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepReport:
    name: str
    before: int
    after: int
    dropped: Counter[str]
    changed: int
    added: int
    info: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {
            "step": self.name,
            "before": self.before,
            "after": self.after,
            "dropped": sum(self.dropped.values()),
            "dropped_by_reason": dict(self.dropped.most_common()),
            "changed": self.changed,
            "added": self.added,
            "info": self.info,
        }


CLEAN_STEPS: Registry[Callable[[list[AnyRecord], CleanOptions], StepOutput]] = Registry(
    "clean_steps", "data cleaning rules (UI-Venus-1.0)"
)


def actions_of(record: AnyRecord) -> list[str]:
    """The action strings a record trains on (a trajectory's steps, a step's action); [] otherwise."""
    if isinstance(record, Trajectory):
        return [s.action for s in record.steps]
    if isinstance(record, NavigationStep):
        return [record.action]
    return []


def source_of(record: AnyRecord) -> str:
    return record.provenance.source
