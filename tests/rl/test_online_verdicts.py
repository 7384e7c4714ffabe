"""Who verifies (rules, judge, auto) and how their agreement is counted (2 x 2 table, Cohen's kappa); the
episode judge of online RL on rollout groups (verdicts, lost episodes, the final screen in the judge's record)."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from PIL import Image

from venus_core.config.spec import ScoringSpec
from venus_core.data.schema import Provenance
from venus_core.envs import SimPhoneEnv, synth_plan
from venus_core.rl.online import sim_phone_tasks
from venus_core.rl.online.devices import LocalEnvs
from venus_core.rl.online.policy import ScriptedPolicy
from venus_core.rl.online.rollout import collect_groups
from venus_core.rl.online.verdicts import EpisodeJudge, ImageMemo, Verdict, agreement, claim_record
from venus_core.scoring.judges import make_judge
from venus_core.scoring.overlay import judge_image
from venus_core.scoring.testing_server import Reply, ScriptedChatServer, judge_by_goal_word


def test_each_mode_decides_with_its_verifier_and_says_why_not() -> None:
    both = Verdict(rule=True, judge=False, judge_score=3)
    assert both.decide("auto") == (True, "rules", "")
    assert both.decide("rules") == (True, "rules", "")
    assert both.decide("judge") == (False, "judge", "judge score 3 below the keep threshold")
    no_rule = Verdict(rule=None, judge=True, judge_score=9)
    assert no_rule.decide("auto") == (True, "judge", "")
    assert no_rule.decide("rules") == (None, "rules", "the env exposes no state to check")
    failed = Verdict(rule=None, judge=None, judge_error="gave up after 2 attempts")
    assert failed.decide("auto") == (None, "judge", "no judge verdict: gave up after 2 attempts")
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


# --------------------------------------------------------------------------- online RL's episode judge

BOARD = (128, 128)  # level-1 boards: "Click the <colour> button"


class _NoRulePhone(SimPhoneEnv):
    """A phone whose episodes no rule can check (a real device without a configured check)."""

    @property
    def has_success_rule(self) -> bool:
        return False

    def is_successful(self) -> bool:
        raise AssertionError("a rule-less env must not be asked for its rule")


_judge_by_colour = judge_by_goal_word({"green", "blue", "red"}, garbled={"yellow"})


def _rollouts(env: type[SimPhoneEnv] = SimPhoneEnv, n: int = 12) -> tuple[list[list[Any]], Any]:
    tasks = sim_phone_tasks([1], range(n), size=BOARD, max_steps=3)
    source = LocalEnvs(lambda: env(transport="inprocess", size=BOARD), "mobile")
    try:
        return collect_groups(tasks, 2, source, ScriptedPolicy(synth_plan, noise=0.4, seed=7), devices=2,
                              call_timeout=20)
    finally:
        source.close()


def _episode_judge(mode: str, endpoint: str) -> EpisodeJudge:
    memo = ImageMemo()
    backend = make_judge(ScoringSpec(judge="openai", endpoint=endpoint, judge_model="judge", max_retries=0,
                                     timeout_s=5, cache=False), open_image=memo)
    return EpisodeJudge(mode, backend, memo, keep_threshold=7, platform="mobile")


def test_the_judge_decides_online_episodes_and_its_agreement_with_the_rules_is_counted() -> None:
    groups, stats = _rollouts()
    trajs = [t for g in groups for t in g]
    rules = {id(t): t.success for t in trajs}
    assert any(rules.values()) and not all(rules.values())  # both outcomes, so the comparison means something
    assert all(t.final_image is not None and t.has_rule for t in trajs)
    with ScriptedChatServer(default=_judge_by_colour) as server:
        ej = _episode_judge("judge", server.base_url)
        kept = ej.decide(groups, stats)
        calls = len(server.requests)
    report = ej.report()
    survivors = [t for g in kept for t in g]
    lost = [t for t in trajs if t.lost]
    assert len(survivors) + len(lost) == len(trajs) and stats.losses["judge"] == len(lost)
    for t in survivors:
        colour = re.search(r"Click the (\w+) button", t.task.task.goal).group(1)  # type: ignore[union-attr]
        assert t.rule_success == rules[id(t)]
        if t.invalid == t.length:  # nothing ran: a failure without a judge call
            assert t.success is False and t.judge_success is False
        else:
            assert t.success == t.judge_success == (colour in ("green", "blue", "red"))
    assert all("yellow" in t.task.task.goal and t.lost.startswith("judge: no judge verdict") for t in lost)
    assert report["judged"] == calls and report["judge_failures"] == report["no_verdict"] == len(lost) > 0
    assert report["decided_by/judge"] + report["no_verdict"] == len(trajs)
    agree = report["agreement"]
    assert agree["n"] == report["decided_by/judge"]  # every decided episode also has its rule here
    assert agree["agreement"] == pytest.approx(sum(t.success == t.rule_success for t in survivors) / len(survivors),
                                               abs=1e-4)
    assert ej.metrics()["judge/agreement"] == agree["agreement"]
    state = ej.state_dict()
    fresh = _episode_judge("judge", server.base_url)
    fresh.load_state_dict(json.loads(json.dumps(state)))
    assert fresh.report()["agreement"] == agree
    with pytest.raises(ValueError, match="online_rl.success is 'judge', this run's is 'auto'"):
        _episode_judge("auto", server.base_url).load_state_dict(state)


def test_auto_asks_the_judge_only_where_the_env_has_no_rule() -> None:
    with ScriptedChatServer(default=_judge_by_colour) as server:
        ruled = _episode_judge("auto", server.base_url)
        groups, stats = _rollouts(n=4)
        ruled.decide(groups, stats)
        assert len(server.requests) == 0 and ruled.report()["decided_by/rules"] == 8
        groups, stats = _rollouts(_NoRulePhone, n=4)
        assert all(not t.has_rule and t.rule_success is None for g in groups for t in g)
        judged = _episode_judge("auto", server.base_url)
        kept = judged.decide(groups, stats)
        assert len(server.requests) == judged.report()["judged"] > 0
    assert judged.report()["agreement"] is None  # no rule to compare with
    assert all(t.success == t.judge_success for g in kept for t in g if t.invalid < t.length)


def test_a_judge_that_is_down_loses_the_episodes_it_should_decide_and_says_why() -> None:
    groups, stats = _rollouts(n=4)
    with ScriptedChatServer(default=lambda r: Reply(status=503, content="down")) as server:
        ej = _episode_judge("judge", server.base_url)
        kept = ej.decide(groups, stats)
    recorded = [t for g in groups for t in g if t.invalid < t.length]
    assert sum(len(g) for g in kept) == 8 - len(recorded)  # only episodes that ran nothing are decided
    assert stats.losses["judge"] == len(recorded) > 0
    assert all(t.lost and "503" in t.lost for t in recorded)
    assert ej.report()["judge_failures"] == len(recorded)


def test_the_judges_record_ends_on_the_screen_after_the_last_step() -> None:
    groups, _ = _rollouts(n=1)
    t = groups[0][0]
    t.final_image = Image.new("RGB", BOARD, (255, 0, 255))
    memo = ImageMemo()
    rec = claim_record(t, memo, platform="mobile", source="online-rl", record_id="x",
                       provenance=Provenance(source="online-rl", source_id="x"))
    assert not isinstance(rec, str) and "final_image" in rec.meta
    strip = judge_image(rec, memo)
    assert strip.getpixel((strip.width - 2, strip.height // 2)) == (255, 0, 255)
    t.final_image = None
    plain = claim_record(t, memo, platform="mobile", source="online-rl", record_id="x",
                         provenance=Provenance(source="online-rl", source_id="x"))
    assert not isinstance(plain, str) and "final_image" not in plain.meta
    assert judge_image(plain, memo).getpixel((judge_image(plain, memo).width - 2, 0)) != (255, 0, 255)
