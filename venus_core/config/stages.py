"""What a pipeline stage is called, in one place for every place that shows it.

    stage_display_name("offline_rl", "grounding")   # "offline_rl: grounding"
    stage_key("offline_rl", "grounding")            # "offline_rl.grounding"

The display name is the Kubeflow task's display name (pipelines/gui_agent.py), the MLflow stage
run's name (venus_core/runtime/tracking.py), the row name of the local run's stage table and of
the parent run's `stages.html`, and the stage name `venus runs compare` matches across two runs.
The key is the same thing as a metric prefix (the parent run logs `offline_rl.grounding/<metric>`;
MLflow keys may not contain a colon on every platform) and is also the spec section of a
per-domain stage. A stage without a domain (score_data, mid_train, merge, evaluate) is just its name.
"""

from __future__ import annotations

from typing import Any

DISPLAY_SEPARATOR = ": "


def stage_display_name(stage: str, domain: str | None = None) -> str:
    """'offline_rl: grounding' for a per-domain stage, else the stage name itself."""
    return f"{stage}{DISPLAY_SEPARATOR}{domain}" if domain else stage


def stage_key(stage: str, domain: str | None = None) -> str:
    """'offline_rl.grounding' for a per-domain stage, else the stage name itself (a metric prefix)."""
    return f"{stage}.{domain}" if domain else stage


def parse_display_name(name: str) -> tuple[str, str | None]:
    """The inverse of `stage_display_name`: 'online_rl: web' -> ('online_rl', 'web')."""
    stage, sep, domain = name.partition(DISPLAY_SEPARATOR)
    return (stage, domain or None) if sep else (name, None)


def metric_number(value: Any) -> float | None:
    """`value` as a float when it is a metric number (int or float, not a bool), else None: how the
    stage tables read metric records."""
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None
