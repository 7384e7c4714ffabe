"""resample_actions: copy records holding rare action categories so Click does not drown them.

Why: in UI-Venus-1.0's mobile data Click is 60 % of steps and actions such as LongPress or
CallUser are under 0.2 %; a model trained on that mix almost never emits them. The paper
resamples by action category (and later adds history variants for rare actions). Here the unit
is the record: each navigation record's category is its rarest action type (by share of all
steps), and a record whose category is below `resample_target_share` gets
min(resample_max_copies, ceil(target / share) - 1) copies — nothing is thrown away (departure:
no down-sampling of Click; the mid-training mixture caps corpus size by domain instead). Copies
have ids `<id>~r<k>`, the same episode id (the split keeps them with their original) and
`meta["resample_of"]`, which near-duplicate removal honours. The step-level mix before and after
is reported.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Any

from venus_core.data.clean.base import CLEAN_STEPS, AnyRecord, CleanOptions, StepOutput, actions_of


def category(action: str) -> str:
    return action.split("(", 1)[0]


def action_mix(records: list[AnyRecord]) -> Counter[str]:
    return Counter(category(a) for r in records for a in actions_of(r))


def _shares(mix: Counter[str]) -> dict[str, float]:
    total = sum(mix.values())
    return {k: round(v / total, 4) for k, v in sorted(mix.items())} if total else {}


@CLEAN_STEPS.register("resample_actions")
def resample_actions(records: list[AnyRecord], options: CleanOptions) -> StepOutput:
    """Add copies of records whose rarest action category is under the target share."""
    before = action_mix(records)
    total = sum(before.values())
    out: list[AnyRecord] = []
    added = 0
    for r in records:
        out.append(r)
        cats = {category(a) for a in actions_of(r)}
        if not cats or not total:
            continue
        share = min(before[c] / total for c in cats)
        if share >= options.resample_target_share:
            continue
        copies = min(options.resample_max_copies, math.ceil(options.resample_target_share / share) - 1)
        for k in range(1, copies + 1):
            meta: dict[str, Any] = {**r.meta, "resample_of": r.id}
            out.append(r.model_copy(update={"id": f"{r.id}~r{k}", "meta": meta}))
            added += 1
    after = action_mix(out)
    return StepOutput(
        out,
        added=added,
        info={
            "steps_before": dict(sorted(before.items())),
            "share_before": _shares(before),
            "steps_after": dict(sorted(after.items())),
            "share_after": _shares(after),
        },
    )
