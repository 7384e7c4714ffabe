"""The UI-Venus-1.5 decision policy on judge scores: keep (>= 7), rewrite (4–6), low (0–3).

`low` means rebuild when the source allows it, else discard; which of the two happens is the
scoring stage's decision (it knows the source), so here it is one bucket.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Bucket = Literal["keep", "rewrite", "low"]


def bucket(score: int, keep_threshold: int = 7, rewrite_threshold: int = 4) -> Bucket:
    """>>> [bucket(s) for s in (10, 7, 6, 4, 3, 0)]
    ['keep', 'keep', 'rewrite', 'rewrite', 'low', 'low']
    """
    if not 0 <= score <= 10:
        raise ValueError(f"judge score {score} outside 0..10")
    if score >= keep_threshold:
        return "keep"
    if score >= rewrite_threshold:
        return "rewrite"
    return "low"


@dataclass
class BucketReport:
    counts: Counter[str] = field(default_factory=Counter)
    histogram: Counter[int] = field(default_factory=Counter)
    reasons: Counter[str] = field(default_factory=Counter)

    @property
    def total(self) -> int:
        return sum(self.counts.values())

    @property
    def high_fidelity_share(self) -> float:
        return self.counts["keep"] / self.total if self.total else 0.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "buckets": {b: self.counts[b] for b in ("keep", "rewrite", "low")},
            "histogram": {str(s): self.histogram[s] for s in range(11)},
            "high_fidelity_share": round(self.high_fidelity_share, 4),
            "top_reasons": dict(self.reasons.most_common(10)),
        }


def judge_records(
    records: Iterable[Any], judge: Callable[[Any], Any], keep_threshold: int = 7, rewrite_threshold: int = 4
) -> BucketReport:
    """Judge every record and count buckets, scores and the rules that fired."""
    report = BucketReport()
    for record in records:
        verdict = judge(record)
        report.histogram[verdict.score] += 1
        report.counts[bucket(verdict.score, keep_threshold, rewrite_threshold)] += 1
        for reason in verdict.rationale:
            report.reasons[reason.split(" (", 1)[0]] += 1  # rationale lines start with the rule name
    return report
