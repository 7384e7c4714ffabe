"""The tracking interface trainers log through.

Why an interface: the algorithm packages must not import mlflow (docs/architecture.md, rule 1); the runtime
job passes in an MLflow-backed tracker on a cluster, and tests or laptops use the JSONL tracker,
which is also the local record of a run (one JSON object per line, readable with any tool).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Protocol, runtime_checkable


@runtime_checkable
class Tracker(Protocol):
    def log_params(self, params: Mapping[str, Any]) -> None: ...

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None: ...

    def log_artifact(self, path: str | Path, name: str | None = None) -> None: ...


class NullTracker:
    """Discards everything (unit tests that do not look at metrics)."""

    def log_params(self, params: Mapping[str, Any]) -> None:
        return None

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        return None

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        return None


class MemoryTracker:
    """Keeps everything in lists (tests and in-process callers that read metrics back)."""

    def __init__(self) -> None:
        self.params: dict[str, Any] = {}
        self.metrics: list[tuple[int, dict[str, float]]] = []
        self.artifacts: list[tuple[str, str | None]] = []

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.params.update(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.metrics.append((step, {k: float(v) for k, v in metrics.items()}))

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.artifacts.append((str(path), name))

    def series(self, key: str) -> list[tuple[int, float]]:
        return [(s, m[key]) for s, m in self.metrics if key in m]


class JsonlTracker:
    """Appends every call to `path` as a JSON line: {"t": ..., "kind": ..., ...}.

    Non-finite metric values are written as strings ("nan", "inf") so the file stays valid JSON.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)

    def _write(self, obj: dict[str, Any]) -> None:
        obj = {"t": round(time.time(), 3), **obj}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(obj, ensure_ascii=False, default=str) + "\n")

    def log_params(self, params: Mapping[str, Any]) -> None:
        self._write({"kind": "params", "params": dict(params)})

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        clean = {k: (float(v) if math.isfinite(float(v)) else str(float(v))) for k, v in metrics.items()}
        self._write({"kind": "metrics", "step": step, "metrics": clean})

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self._write({"kind": "artifact", "path": str(path), "name": name})


class ProgressTracker:
    """Forwards every call to `inner` and reports optimizer steps as `progress(step, total)`.

    Why a tracker: the trainers already log the step they are at (every `LOG_EVERY` steps and at
    the last one), so a command can follow a training run — `venus bootstrap` over its stages,
    whose step numbers run on across stages — without the trainer knowing about progress bars.
    `progress` sees the highest step logged so far, never a smaller one (an eval logged at the
    same step as the loss reports nothing new).
    """

    def __init__(self, inner: Tracker, progress: Callable[[int, int | None], None], total: int | None) -> None:
        if total is not None and total < 0:
            raise ValueError(f"ProgressTracker: total must be >= 0 steps, got {total}")
        self.inner, self.progress, self.total = inner, progress, total
        self.step = 0

    def log_params(self, params: Mapping[str, Any]) -> None:
        self.inner.log_params(params)

    def log_metrics(self, metrics: Mapping[str, float], step: int) -> None:
        self.inner.log_metrics(metrics, step)
        if step > self.step:
            self.step = step
            self.progress(step, self.total)

    def log_artifact(self, path: str | Path, name: str | None = None) -> None:
        self.inner.log_artifact(path, name)
