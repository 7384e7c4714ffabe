"""Verification of executed trajectories: rules on env state, the MLLM judge, and how they agree.

UI-Venus-1.5 verifies generated trajectories before they join the data; online RL already judges
success by rules where the env exposes its state (`Env.is_successful`: the sim phone's `synth:`
predicates, MiniWoB++ rewards), read by `collect_groups` when an episode ends. The MLLM judge is
the data stage's backend (`scoring.judges`: openai, local, cached): it gets the trajectory as a
record that claims success (`records.to_record`) and its score (the lower of its two axes)
must reach `scoring.keep_threshold` to confirm it. A judge that fails on a record after its
retries gives no verdict (counted, never read as a pass or a fail).

Who decides (`flywheel.verifier`): `auto` takes the rule where there is one, else the judge;
`rules` only rules (no rule: not verified); `judge` the judge (rules still compared). Where both
gave a verdict, `agreement` reports the 2 x 2 table, the agreement share and Cohen's kappa.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from venus_core.data.schema import Trajectory
from venus_core.scoring.judges import JudgeBackend, JudgeFailure


@dataclass(frozen=True)
class Verdict:
    rule: bool | None  # env-state rule (None: the env has none)
    judge: bool | None  # None: not judged, or the judge failed
    judge_score: int | None = None
    judge_error: str | None = None

    def decide(self, mode: str) -> tuple[bool, str, str]:
        """(verified, verifier, reason when not verified)."""
        if mode not in ("auto", "rules", "judge"):
            raise ValueError(f"verifier {mode!r}: expected auto, rules or judge")
        use_rule = mode == "rules" or (mode == "auto" and self.rule is not None)
        if use_rule:
            if self.rule is None:
                return False, "rules", "the env exposes no state to check"
            return self.rule, "rules", "" if self.rule else "the env's success check failed"
        if self.judge is None:
            return False, "judge", f"no judge verdict: {self.judge_error or 'no judge configured'}"
        return self.judge, "judge", "" if self.judge else f"judge score {self.judge_score} below the keep threshold"

    def to_dict(self) -> dict[str, Any]:
        return {"rule_success": self.rule, "judge_success": self.judge, "judge_score": self.judge_score}


def judge_records(judge: JudgeBackend, records: Sequence[Trajectory], keep_threshold: int
                  ) -> list[tuple[bool | None, int | None, str | None]]:
    """(verified?, score, error) per record from the judge; a failure gives (None, None, reason)."""
    out: list[tuple[bool | None, int | None, str | None]] = []
    for v in judge.judge_many(list(records)) if records else []:
        if isinstance(v, JudgeFailure):
            out.append((None, None, v.reason[:300]))
        else:
            out.append((v.score >= keep_threshold, v.score, None))
    return out


def agreement(verdicts: Sequence[Verdict]) -> dict[str, Any] | None:
    """Rules vs judge where both gave a verdict: the table, agreement share and Cohen's kappa."""
    both = [(v.rule, v.judge) for v in verdicts if v.rule is not None and v.judge is not None]
    if not both:
        return None
    n = len(both)
    tt = sum(r and j for r, j in both)
    ff = sum(not r and not j for r, j in both)
    tf = sum(r and not j for r, j in both)  # the rule passes, the judge does not
    ft = n - tt - ff - tf
    observed = (tt + ff) / n
    p_rule, p_judge = (tt + tf) / n, (tt + ft) / n
    expected = p_rule * p_judge + (1 - p_rule) * (1 - p_judge)
    kappa = None if expected >= 1 else (observed - expected) / (1 - expected)
    return {"n": n, "both_pass": tt, "both_fail": ff, "rule_only": tf, "judge_only": ft,
            "agreement": round(observed, 4), "kappa": None if kappa is None else round(kappa, 4)}


__all__ = ["Verdict", "agreement", "judge_records"]
