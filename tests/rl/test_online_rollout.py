"""Online rollouts on live envs: the simulated phones leased through the real gateway and driven over
the real ADB protocol (Debian adb), scripted policies, and the fault cases (a device that dies
mid-trajectory, a device that stops answering). No mocks: the faults are real (a stopped device
server, a step that blocks)."""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Sequence
from typing import Any

import pytest

from venus_core.config.training import OnlineRLSpec
from venus_core.envs import SimPhoneEnv, synth_plan
from venus_core.envs.base import Env
from venus_core.rl.online import sim_phone_tasks
from venus_core.rl.online.devices import LocalEnvs, SimPhoneFarm
from venus_core.rl.online.learner import score_group
from venus_core.rl.online.policy import ScriptedPolicy
from venus_core.rl.online.rollout import Completion, StepRequest, collect_groups

SIZE = (256, 256)
needs_adb = pytest.mark.skipif(shutil.which("adb") is None, reason="Debian adb not installed")


@pytest.fixture(scope="module")
def tasks() -> list[Any]:
    return sim_phone_tasks([3, 4], range(2), size=SIZE)


@needs_adb
def test_oracle_groups_through_the_gateway_all_succeed_and_leases_return(tasks: list[Any]) -> None:
    with SimPhoneFarm(3, size=SIZE) as farm:
        source = farm.env_source()
        groups, stats = collect_groups(tasks, 2, source, ScriptedPolicy(synth_plan), devices=3, call_timeout=20)
        assert farm.leased() == 0  # every lease went back
    assert [len(g) for g in groups] == [2] * len(tasks)
    assert all(t.success and t.invalid == 0 and not t.truncated for g in groups for t in g)
    for task, g in zip(tasks, groups, strict=True):
        plan = synth_plan(task.task)
        assert all(t.length == len(plan) + (0 if plan and plan[-1].NAME == "Finished" else 1) for t in g)
        assert [s.action for s in g[0].steps][: len(plan)] == [s.action for s in g[1].steps][: len(plan)]
    assert stats.env_steps == sum(t.length for g in groups for t in g)
    assert stats.episodes == 2 * len(tasks) and not stats.losses
    assert source.stats["leased"] == source.stats["released"] == 3


def test_invalid_answers_are_counted_not_executed_and_penalised(tasks: list[Any]) -> None:
    source = LocalEnvs(lambda: SimPhoneEnv(transport="inprocess", size=SIZE), "mobile")
    try:
        policy = ScriptedPolicy(synth_plan, noise=0.5, seed=3)
        groups, stats = collect_groups(tasks, 4, source, policy, devices=2, call_timeout=20)
    finally:
        source.close()
    trajs = [t for g in groups for t in g]
    invalid = sum(t.invalid for t in trajs)
    assert invalid > 0
    assert stats.policy_steps == sum(t.length for t in trajs)
    assert stats.env_steps == stats.policy_steps - invalid  # malformed answers never reach the env
    for t in trajs:
        assert all(s.valid == (s.action is not None) or s.error for s in t.steps)
    spec = OnlineRLSpec()
    assert any(t.success for t in trajs) and not all(t.success for t in trajs)
    for g in groups:
        sc = score_group(g, spec)
        won = [t.length for t in g if t.success]
        for t, r in zip(g, sc.rewards, strict=True):  # the reports' formula, computed independently
            t_min = min(won) if won else 1
            completion = spec.reward.completion * spec.reward.eta ** ((t.length - t_min) / t_min) if t.success else 0.0
            assert r == pytest.approx(completion - spec.reward.invalid_penalty * t.invalid)


class _KillAfter:
    """Wraps a policy; after `n` calls it stops the ADB server of the device its first episode runs on."""

    def __init__(self, inner: Any, farm: SimPhoneFarm, n: int) -> None:
        self.inner, self.farm, self.n = inner, farm, n
        self.name, self.version, self.calls = "kill-after", 0, 0
        self.killed: str | None = None

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        self.calls += 1
        if self.calls == self.n and self.killed is None:
            self.killed = self.fault()
        return self.inner.act(requests)

    def fault(self) -> str:
        """Inject the fault; what was hit."""
        device = sorted(self.farm.registry.holders())[0]  # type: ignore[union-attr]
        self.farm.kill(int(device.split("-")[1]))
        return device


@needs_adb
def test_a_device_killed_mid_trajectory_is_replaced_and_its_trajectory_dropped() -> None:
    tasks = sim_phone_tasks([4], range(3), size=SIZE)  # 3-5 step plans: the kill lands mid-episode
    with SimPhoneFarm(4, size=SIZE, io_timeout=5) as farm:
        source = farm.env_source()
        policy = _KillAfter(ScriptedPolicy(synth_plan), farm, n=2)
        groups, stats = collect_groups(tasks, 2, source, policy, devices=2, call_timeout=5)
        quarantined = farm.registry.quarantined_for()  # type: ignore[union-attr]
        assert farm.leased() == 0
    assert policy.killed is not None and policy.killed in quarantined
    assert sum(stats.losses.values()) >= 1 and source.stats["failed"] >= 1
    assert all("Error" in r or "timeout" in r for _, r in stats.lost), stats.lost
    kept = sum(len(g) for g in groups)
    assert kept == 2 * len(tasks) - sum(stats.losses.values())  # every episode kept or counted lost
    assert all(t.success for g in groups for t in g)  # the others finish on healthy devices


class _Hanging(Env):
    """An env whose `step` blocks until released (a device that stops answering)."""

    name, platform = "hanging", "mobile"

    def __init__(self, inner: Env, release: threading.Event) -> None:
        self.inner, self.release_evt = inner, release
        self.task, self.done, self.closed = None, False, False

    @property
    def supported_actions(self) -> frozenset[str]:
        return self.inner.supported_actions

    def reset(self, task: Any) -> Any:
        self.task = task
        return self.inner.reset(task)

    def step(self, action: Any) -> Any:
        self.release_evt.wait(30)
        raise RuntimeError("device gone")

    def is_successful(self) -> bool:
        return self.inner.is_successful()

    def close(self) -> None:
        self.closed = True
        self.inner.close()


def test_a_device_that_stops_answering_times_out_and_the_run_continues(tasks: list[Any]) -> None:
    release = threading.Event()
    made: list[Env] = []

    def make() -> Env:
        inner = SimPhoneEnv(transport="inprocess", size=SIZE)
        env: Env = _Hanging(inner, release) if not made else inner  # the first env hangs
        made.append(env)
        return env

    source = LocalEnvs(make, "mobile")
    try:
        t0 = time.perf_counter()
        groups, stats = collect_groups(tasks[:2], 2, source, ScriptedPolicy(synth_plan), devices=1, call_timeout=0.5)
        wall = time.perf_counter() - t0
    finally:
        release.set()
        source.close()
    assert stats.losses["step"] == 1 and made[0].closed
    assert [r for _, r in stats.lost] == ["step: timeout"]
    assert source.stats["failed"] == 1 and source.stats["made"] == 2
    assert sum(len(g) for g in groups) == 3 and all(t.success for g in groups for t in g)
    assert wall < 20  # bounded by the timeout, not by the hung call


class _RestartGatewayAfter(_KillAfter):
    def fault(self) -> str:
        self.farm.restart_gateway()
        return "gateway"


@needs_adb
def test_a_gateway_restart_mid_run_loses_only_the_episodes_in_flight() -> None:
    tasks = sim_phone_tasks([4], range(3), size=SIZE)
    with SimPhoneFarm(3, size=SIZE, io_timeout=5) as farm:
        source = farm.env_source()
        policy = _RestartGatewayAfter(ScriptedPolicy(synth_plan), farm, n=2)
        groups, stats = collect_groups(tasks, 2, source, policy, devices=2, call_timeout=5)
        assert farm.leased() == 0  # nothing leaked across the restart
        # the restarted gateway serves new leases
        again, stats2 = collect_groups(tasks[:1], 1, farm.env_source("after"), ScriptedPolicy(synth_plan), devices=1)
    assert policy.killed == "gateway"
    kept = sum(len(g) for g in groups)
    assert kept + sum(stats.losses.values()) == 2 * len(tasks)
    assert all(t.success for g in groups for t in g)
    assert again[0][0].success and not stats2.losses


class _KillAdbServerAfter(_KillAfter):
    def fault(self) -> str:
        self.farm.kill_adb_server()
        return "adb server"


@needs_adb
def test_a_lost_adb_server_is_started_again_and_costs_only_the_episodes_in_flight() -> None:
    tasks = sim_phone_tasks([4], range(3), size=SIZE)
    with SimPhoneFarm(3, size=SIZE, io_timeout=5, recheck_after=0.2) as farm:
        source = farm.env_source()
        policy = _KillAdbServerAfter(ScriptedPolicy(synth_plan), farm, n=2)
        groups, stats = collect_groups(tasks, 2, source, policy, devices=2, call_timeout=5)
        assert farm.leased() == 0
        assert farm.adb is not None and farm.adb.alive()  # running again after the run
        again, stats2 = collect_groups(tasks[:1], 2, source, ScriptedPolicy(synth_plan), devices=2)
    assert policy.killed == "adb server"
    assert source.stats["adb_restarts"] == 1 and farm.adb.restarts == 1
    lost = sum(stats.losses.values())
    assert 1 <= lost <= 2  # the episodes in flight when the server went away
    assert sum(len(g) for g in groups) + lost == 2 * len(tasks)  # every episode kept or counted lost
    assert all(t.success for g in groups for t in g) and not stats.retired
    assert [t.success for t in again[0]] == [True, True] and not stats2.losses


class _KillAll(_KillAfter):
    def fault(self) -> str:
        for i in range(len(self.farm.servers)):
            self.farm.kill(i)
        return "all"


@needs_adb
def test_when_every_device_dies_the_rest_is_counted_lost_not_hung() -> None:
    tasks = sim_phone_tasks([4], range(2), size=SIZE)
    with SimPhoneFarm(2, size=SIZE, io_timeout=1) as farm:
        source = farm.env_source()
        groups, stats = collect_groups(tasks, 2, source, _KillAll(ScriptedPolicy(synth_plan), farm, n=2),
                                       devices=2, call_timeout=3)
        assert farm.leased() == 0
    assert sum(len(g) for g in groups) + sum(stats.losses.values()) == 4
    assert stats.losses["no_device"] >= 1 and len(stats.retired) == 2
