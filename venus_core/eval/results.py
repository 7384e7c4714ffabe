"""Evaluation results: one JSON document per (model, suite) with every sample and the summary.

Why a fixed document: the HTML report, the stage-by-stage comparison (mid-training → offline RL →
merge, TIES vs linear) and MLflow all read the same file, possibly long after the run, so it
carries what is needed to interpret it: the dataset path, the benchmark it is (if any), the
decoding settings and the per-sample answers. Reading checks the fields it relies on and names the
file when one is missing (fail closed), rather than rendering a half-empty report.

Breakdowns are `Rate.to_dict()` values (k, n, value and the 95 % Wilson interval) keyed by
category; samples without a value for a category key (e.g. no `application` in a synthetic set)
are left out of that breakdown, never filed under a made-up "unknown".
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from venus_core.eval.metrics import Rate

RESULT_VERSION = 1
BENCHMARKS = ("screenspot-pro", "screenspot-v2")
"""Provenance sources that are real public benchmarks (published numbers may be shown beside them)."""

_REQUIRED = ("version", "evaluator", "suite", "model", "data", "summary", "samples")


@dataclass
class EvalResult:
    """The outcome of one evaluator run of one model on one dataset."""

    evaluator: str
    suite: str
    model: str
    data: str
    summary: dict[str, Any]
    samples: list[dict[str, Any]]
    benchmark: str | None = None
    sources: dict[str, int] = field(default_factory=dict)
    settings: dict[str, Any] = field(default_factory=dict)
    label: str = ""
    version: int = RESULT_VERSION

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def display(self) -> str:
        """Name used in reports: the explicit label, else the model."""
        return self.label or self.model


def result_from_dict(obj: Any, where: str = "result") -> EvalResult:
    """Validate a loaded result document (errors name `where` and the field)."""
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected a JSON object, got {type(obj).__name__}")
    missing = [k for k in _REQUIRED if k not in obj]
    if missing:
        raise ValueError(f"{where}: not an evaluation result: missing field(s) {', '.join(missing)}")
    if obj["version"] != RESULT_VERSION:
        raise ValueError(f"{where}: result version {obj['version']!r} is not {RESULT_VERSION}")
    if not isinstance(obj["summary"], dict):
        raise ValueError(f"{where}: field summary must be an object")
    if not isinstance(obj["samples"], list):
        raise ValueError(f"{where}: field samples must be a list")
    known = set(EvalResult.__dataclass_fields__)
    extra = sorted(set(obj) - known)
    if extra:
        raise ValueError(f"{where}: unknown field(s) {', '.join(extra)}")
    return EvalResult(**obj)


def load_result(path: str | Path) -> EvalResult:
    p = Path(path)
    try:
        obj = json.loads(p.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise FileNotFoundError(f"{p}: result file not found") from None
    except json.JSONDecodeError as exc:
        raise ValueError(f"{p}: not valid JSON: {exc}") from None
    return result_from_dict(obj, where=str(p))


def rate(samples: Iterable[Mapping[str, Any]], ok: str) -> Rate:
    """Rate of samples whose boolean field `ok` is true."""
    rows = list(samples)
    return Rate(sum(1 for s in rows if s[ok]), len(rows))


def rates_by(samples: Iterable[Mapping[str, Any]], key: str | Callable[[Mapping[str, Any]], Any],
             ok: str) -> dict[str, dict[str, float | int]]:
    """{category: Rate dict} of `ok` grouped by `key` (a field name or a function); None values skipped."""
    get = (lambda s: s.get(key)) if isinstance(key, str) else key
    groups: dict[str, list[Mapping[str, Any]]] = {}
    for s in samples:
        value = get(s)
        if value is None or value == "":
            continue
        groups.setdefault(str(value), []).append(s)
    return {name: rate(rows, ok).to_dict() for name, rows in sorted(groups.items())}


def benchmark_of(sources: Counter[str] | Mapping[str, int]) -> str | None:
    """The benchmark a dataset is, when every record comes from one known benchmark source."""
    names = [s for s, n in sources.items() if n]
    if len(names) == 1 and names[0] in BENCHMARKS:
        return names[0]
    return None
