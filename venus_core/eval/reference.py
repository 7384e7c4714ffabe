"""Published UI-Venus numbers, shown beside ours only when we evaluated on the same benchmark.

Why a table in code: a report that puts a synthetic-set accuracy next to "ScreenSpot-Pro 69.6"
invites a comparison that means nothing, so `published_for` returns numbers only for a result
whose dataset *is* that benchmark (every record's provenance source is `screenspot-pro` or
`screenspot-v2`, see `results.benchmark_of`). Numbers are accuracy in percent as printed in the
UI-Venus technical reports (1.0: arXiv 2508.10833; 1.5: arXiv 2602.09082), overall only: the
reports' per-group tables are not reproduced here. AndroidWorld is an online benchmark; it is
listed for the online evaluator and never matched by the offline suites.
"""

from __future__ import annotations

PUBLISHED: dict[str, dict[str, float]] = {
    "screenspot-pro": {
        "UI-Venus-1.0-7B": 50.8,
        "UI-Venus-1.0-72B": 61.9,
        "UI-Venus-1.5-2B": 57.7,
        "UI-Venus-1.5-8B": 68.4,
        "UI-Venus-1.5-30B-A3B": 69.6,
    },
    "screenspot-v2": {
        "UI-Venus-1.0-7B": 94.1,
        "UI-Venus-1.0-72B": 95.3,
        "UI-Venus-1.5-2B": 92.8,
        "UI-Venus-1.5-8B": 95.9,
        "UI-Venus-1.5-30B-A3B": 96.2,
    },
    "androidworld": {
        "UI-Venus-1.0-7B": 49.1,
        "UI-Venus-1.0-72B": 65.9,
        "UI-Venus-1.5-2B": 55.6,
        "UI-Venus-1.5-8B": 73.7,
        "UI-Venus-1.5-30B-A3B": 77.6,
    },
}

SOURCES = "UI-Venus technical reports: 1.0 (arXiv 2508.10833), 1.5 (arXiv 2602.09082)"


def published_for(benchmark: str | None) -> dict[str, float]:
    """{model: accuracy %} published for `benchmark`; empty for None or a non-benchmark dataset."""
    if benchmark is None:
        return {}
    return dict(PUBLISHED.get(benchmark, {}))
