"""Who verifies (rules, judge, auto) and how their agreement is counted (2 x 2 table, Cohen's kappa)."""

from __future__ import annotations

import pytest

from venus_core.flywheel.verify import Verdict, agreement


def test_each_mode_decides_with_its_verifier_and_says_why_not() -> None:
    both = Verdict(rule=True, judge=False, judge_score=3)
    assert both.decide("auto") == (True, "rules", "")
    assert both.decide("rules") == (True, "rules", "")
    assert both.decide("judge") == (False, "judge", "judge score 3 below the keep threshold")
    no_rule = Verdict(rule=None, judge=True, judge_score=9)
    assert no_rule.decide("auto") == (True, "judge", "")
    assert no_rule.decide("rules") == (False, "rules", "the env exposes no state to check")
    failed = Verdict(rule=None, judge=None, judge_error="gave up after 2 attempts")
    assert failed.decide("auto") == (False, "judge", "no judge verdict: gave up after 2 attempts")
    assert Verdict(rule=False, judge=None).decide("auto") == (False, "rules", "the env's success check failed")
    with pytest.raises(ValueError, match="verifier 'vote'"):
        both.decide("vote")


def test_agreement_counts_only_where_both_gave_a_verdict() -> None:
    verdicts = [Verdict(True, True)] * 6 + [Verdict(False, False)] * 2 + [Verdict(True, False)] * 1 \
        + [Verdict(False, True)] * 1 + [Verdict(True, None), Verdict(None, True)]
    got = agreement(verdicts)
    assert got is not None
    assert (got["n"], got["both_pass"], got["both_fail"], got["rule_only"], got["judge_only"]) == (10, 6, 2, 1, 1)
    # observed 0.8; expected 0.7 * 0.7 + 0.3 * 0.3 = 0.58; kappa = 0.22 / 0.42
    assert got["agreement"] == 0.8 and got["kappa"] == pytest.approx(0.22 / 0.42, abs=1e-4)
    assert agreement([Verdict(True, None)]) is None
    assert agreement([Verdict(True, True)] * 3)["kappa"] is None  # type: ignore[index]  # no variation: undefined
