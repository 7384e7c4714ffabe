"""WiSE-FT: publish a weight-space interpolation of a fine-tune and the base it started from.


    published = base + alpha * (trained - base)

(Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022.) Mid-training the shipped
bootstrap on the domain mixture gains level-3 navigation but costs the bootstrap's live validity
(docs/learning.md, "Mid-training against the bootstrap it starts from"); half-way between the two
keeps both. The interpolation is a task-arithmetic merge with one model, done on disk by the
streaming merge engine (`venus_core.merge.api`), so it needs no second copy of the weights in
memory and works alike for a ZeRO-3 run (whose full weights exist only in the saved checkpoint).
"""

from __future__ import annotations

from pathlib import Path

from venus_core.merge.api import MergeConfig, merge_checkpoints


def interpolate(base: str | Path, trained: str | Path, out: str | Path, alpha: float) -> dict[str, object]:
    """Write base + alpha * (trained - base) to `out` (empty or absent; sealed with SHA256SUMS like
    every merge output) and return the merge report. 0 < alpha <= 1; alpha = 1 copies `trained`."""
    if not 0.0 < alpha <= 1.0:
        raise ValueError(f"wise_ft: alpha must be in (0, 1], got {alpha}")
    cfg = MergeConfig(method="task_arithmetic", weights=[1.0], lambda_=alpha)
    return merge_checkpoints(Path(base), [Path(trained)], Path(out), cfg)


__all__ = ["interpolate"]
