"""Flywheel rounds on simulated phones leased through the real gateway and driven over the real ADB
protocol (Debian adb): counts reconcile, the dataset validates and carries its provenance, a device
killed mid-round loses only its trajectory, and the MLLM judge (a scripted OpenAI-compatible server
over HTTP) verifies where asked, with its agreement with the rules reported."""

from __future__ import annotations

import json
import shutil
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from flywheel_helpers import SIZE, run_flywheel

from venus_core.config.spec import ScoringSpec
from venus_core.data import DatasetReader
from venus_core.data.validate import validate_dataset
from venus_core.envs import synth_plan
from venus_core.flywheel.loop import STATUSES
from venus_core.flywheel.records import ImageMemo
from venus_core.rl.online import dynamic_tasks
from venus_core.rl.online.devices import SimPhoneFarm
from venus_core.rl.online.policy import ScriptedPolicy
from venus_core.rl.online.rollout import Completion, StepRequest
from venus_core.scoring.judges import make_judge
from venus_core.scoring.testing_server import ScriptedChatServer, judge_by_goal_word

needs_adb = pytest.mark.skipif(shutil.which("adb") is None, reason="Debian adb not installed")


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "tasks.jsonl").read_text().splitlines()]


@needs_adb
def test_rounds_on_leased_phones_reconcile_and_write_a_valid_dataset_with_provenance(tmp_path: Path) -> None:
    with SimPhoneFarm(2, size=SIZE) as farm:
        source = farm.env_source("flywheel")
        summary, _ = run_flywheel(tmp_path, ScriptedPolicy(synth_plan, noise=0.35, seed=2), source=source,
                                  rounds=2, tasks=10)
        source.close()
        assert farm.leased() == 0  # every lease went back
    lines = _lines(tmp_path)
    total = summary["total"]
    assert total["proposed"] == len(lines) == 20
    status = Counter(x["status"] for x in lines)
    assert set(status) <= set(STATUSES)
    assert total["executed"] == status["verified"] + status["unverified"] and total["lost"] == status["lost"]
    assert 0 < total["verified"] < total["executed"]  # the noise makes some fail
    assert total["written"] == total["verified"] == summary["success"]["k"]
    for row in summary["rounds"]:
        assert row["proposed"] == row["duplicates"] + row["infeasible"] + row["executed"] + row["lost"]
        assert row["devices"]["slots"] == 2 and row["devices"]["device_minutes"] > 0
    assert validate_dataset(tmp_path / "dataset").ok
    records = list(DatasetReader(tmp_path / "dataset"))
    assert len(records) == total["written"] and all(r.success for r in records)
    extra = records[0].provenance.extra
    assert {"round", "seed_prompt", "expander", "policy", "policy_revision", "verifier", "rule_success"} <= set(extra)
    assert extra["verifier"] == "rules" and extra["policy_revision"] == "test" and extra["policy"] == "scripted"
    verified_keys = {x["key"] for x in lines if x["status"] == "verified"}
    assert {r.provenance.source_id for r in records} == verified_keys
    # the online task pool can take the verified trajectories back as dynamic tasks
    rejected: list[tuple[str, str]] = []
    back = dynamic_tasks([r.model_dump(mode="json") for r in records], rejected=rejected)
    assert {t.key for t in back} == verified_keys and not rejected


class _KillAfter:
    """Plays `inner`; on call `n` it stops the ADB server of a leased device (a device that dies)."""

    def __init__(self, inner: Any, farm: SimPhoneFarm, n: int) -> None:
        self.inner, self.farm, self.n = inner, farm, n
        self.name, self.version, self.calls, self.killed = "kill-after", 0, 0, None

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        self.calls += 1
        if self.calls == self.n and self.killed is None:
            device = sorted(self.farm.registry.holders())[0]  # type: ignore[union-attr]
            self.farm.kill(int(device.split("-")[1]))
            self.killed = device
        return self.inner.act(requests)


@needs_adb
def test_a_device_killed_mid_round_loses_only_its_trajectory_and_the_round_goes_on(tmp_path: Path) -> None:
    with SimPhoneFarm(3, size=SIZE, io_timeout=5) as farm:
        source = farm.env_source("flywheel")
        policy = _KillAfter(ScriptedPolicy(synth_plan), farm, n=2)
        summary, _ = run_flywheel(tmp_path, policy, source=source, rounds=1, tasks=6, call_timeout_s=5.0)
        source.close()
        assert farm.leased() == 0
    row = summary["rounds"][0]
    assert policy.killed is not None and row["lost"] >= 1 and row["devices"]["replaced"] >= 1
    lost = [x for x in _lines(tmp_path) if x["status"] == "lost"]
    assert len(lost) == row["lost"] and all(x["reason"] for x in lost)
    assert row["verified"] == row["executed"] == 6 - row["lost"]  # the oracle succeeds on healthy devices


_judge_by_colour = judge_by_goal_word({"green", "blue", "red"}, garbled={"yellow"})


@pytest.mark.parametrize("verifier", ["auto", "judge"])
def test_the_judge_verifies_where_asked_and_its_agreement_with_the_rules_is_reported(
        tmp_path: Path, verifier: str) -> None:
    memo = ImageMemo()
    with ScriptedChatServer(default=_judge_by_colour) as server:
        judge = make_judge(ScoringSpec(judge="openai", endpoint=server.base_url, judge_model="judge", max_retries=0,
                                       cache=False), open_image=memo)
        summary, _ = run_flywheel(tmp_path, ScriptedPolicy(synth_plan, noise=0.3, seed=5), judge=judge, memo=memo,
                                  rounds=1, tasks=16, verifier=verifier)
        requests = list(server.requests)
    row = summary["rounds"][0]
    lines = [x for x in _lines(tmp_path) if x["status"] in ("verified", "unverified")]
    judged = [x for x in lines if x["judge_success"] is not None]
    failed = [x for x in lines if x["goal"] == "Click the yellow button" and x["invalid_steps"] < x["steps"]]
    assert row["judge"]["calls"] == len(requests) and row["judge"]["failures"] == len(lines) - len(judged)
    assert failed and all(x["judge_success"] is None for x in failed)
    agree = row["agreement"]
    assert agree["rule_only"] and agree["judge_only"] and agree["both_pass"] and agree["both_fail"]
    assert agree["n"] == len(judged) and agree["both_pass"] + agree["both_fail"] + agree["rule_only"] \
        + agree["judge_only"] == agree["n"]
    assert agree["agreement"] == pytest.approx(sum(x["rule_success"] == x["judge_success"] for x in judged) / len(judged),
                                               abs=1e-4)
    for x in lines:
        decided_by = x["judge_success"] if verifier == "judge" else x["rule_success"]
        assert (x["status"] == "verified") == bool(decided_by), x
        assert x["verifier"] == ("judge" if verifier == "judge" else "rules")
    if verifier == "judge":
        assert all("no judge verdict" in x["reason"] for x in lines if x["judge_success"] is None)
