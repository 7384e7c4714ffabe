"""Environments and the device service failing under online RL rollouts (issue 22 §2, second item),
with real components: simulated phones over the real ADB protocol driven by the Debian `adb` server
through the gateway, leased from a lease registry served over HTTP; MiniWoB++ in real headless
Chromium. Each fault lands mid-episode; the collection continues, every episode is either kept or
counted lost with its reason, and no lease is left held (the registry's count returns to zero).

Covered elsewhere and not repeated here: a phone that dies mid-trajectory, every phone dying, a
gateway restart (tests/rl/test_online_rollout.py), a device that stops answering (there and
tests/daas/test_daas_faults.py)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
from collections.abc import Callable, Sequence
from typing import Any

import psutil
import pytest
from faults_helpers import wait_for

from venus_core.actions import Click
from venus_core.daas import DevicePool, LeaseExpired, LeaseHTTPServer, LeaseRegistry
from venus_core.daas.probes import probe_device
from venus_core.envs import SimPhoneEnv, synth_plan
from venus_core.rl.online import sim_phone_tasks
from venus_core.rl.online.devices import LeasedEnvs, LocalEnvs, SimPhoneFarm
from venus_core.rl.online.policy import ScriptedPolicy
from venus_core.rl.online.rollout import Completion, StepRequest, collect_groups

SIZE = (256, 256)
needs_adb = pytest.mark.skipif(shutil.which("adb") is None, reason="Debian adb not installed")


class FaultAfter:
    """Wraps a policy; on its `n`-th call (episodes in flight) it runs `fault` once."""

    def __init__(self, inner: Any, n: int, fault: Callable[[], None]) -> None:
        self.inner, self.n, self.fault = inner, n, fault
        self.name, self.version, self.calls, self.fired = "fault-after", 0, 0, False
        self.started_after: set[str] = set()  # episodes whose first step came after the fault

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        self.calls += 1
        if self.calls == self.n and not self.fired:
            self.fault()
            self.fired = True
        elif self.fired:
            self.started_after |= {r.episode for r in requests if r.step == 0}
        return self.inner.act(requests)


class RestartableRegistry:
    """The farm's lease registry served over HTTP on a fixed port, restartable as a process would be:
    the new registry starts empty (same devices and signing key), as `venus devices up --serve` does."""

    def __init__(self, farm: SimPhoneFarm) -> None:
        self.farm = farm
        assert farm.registry is not None
        self.http = LeaseHTTPServer(farm.registry).start()
        self.url = self.http.url
        self.port = int(self.url.rsplit(":", 1)[1])

    def restart(self) -> None:
        farm = self.farm
        assert farm.registry is not None and farm.gateway is not None
        self.http.stop()
        farm.registry.stop()
        old = farm.registry
        farm.registry = LeaseRegistry(list(old.devices.values()), old.signer, old.gateways, ttl=old.ttl,
                                      probe=probe_device, recheck_after=old.recheck_after,
                                      reap_interval=old.reap_interval).start()
        farm.registry.on_end.append(farm.gateway.revoke)
        self.http = LeaseHTTPServer(farm.registry, port=self.port).start()

    def stop(self) -> None:
        self.http.stop()


@needs_adb
@pytest.mark.slow
def test_a_lease_registry_restarted_mid_episode_loses_only_the_episodes_in_flight_and_leaks_no_lease() -> None:
    """The restarted registry knows none of the old leases and hands the run's phones to the next
    client: the run must stop driving a phone once its lease is gone (the episode counted lost),
    lease others from the new registry, and leave none held."""
    tasks = sim_phone_tasks([4], range(3), size=SIZE)  # 3-5 step plans: the restart lands mid-episode
    with SimPhoneFarm(4, size=SIZE, ttl=1.5, io_timeout=5) as farm:
        reg = RestartableRegistry(farm)
        other: list[Any] = []
        try:
            pool = DevicePool(reg.url, "online-rl", wait=10, io_timeout=5)
            adb_port = farm.adb.port  # type: ignore[union-attr]
            from venus_core.envs import RemoteSimPhoneEnv

            source = LeasedEnvs(pool, lambda port: RemoteSimPhoneEnv(f"127.0.0.1:{port}", adb_port=adb_port),
                                kind="android", platform="mobile", labels=farm.labels)
            before: list[str] = []

            def restart() -> None:
                before.extend(sorted(farm.registry.holders()))  # type: ignore[union-attr]
                reg.restart()
                # the next client: the new registry believes every phone free and leases it the first two
                other.extend(farm.registry.lease("other", "android", 2, farm.labels))  # type: ignore[union-attr]
                # the run learns it at its next heartbeat (every ttl/3); the episodes in flight go on until then
                wait_for(lambda: all(lz.lost for lz in source.leases()), 10, "the run's heartbeats to find the leases gone")

            policy = FaultAfter(ScriptedPolicy(synth_plan), 2, restart)
            groups, stats = collect_groups(tasks, 2, source, policy, devices=2, call_timeout=5)
            assert policy.fired
            for g in other:
                with contextlib.suppress(LeaseExpired):  # never renewed: its TTL may have ended it already
                    farm.registry.release(g.lease, "other")  # type: ignore[union-attr]
            wait_for(lambda: farm.leased() == 0, 20, "the restarted registry's lease count back to zero")
            after = farm.registry.status()  # type: ignore[union-attr]
        finally:
            reg.stop()
    kept = sum(len(g) for g in groups)
    lost = sum(stats.losses.values())
    assert sorted(g.device for g in other) == before  # the run's phones went to another client ...
    assert lost >= 1 and all("LeaseExpired" in r for _, r in stats.lost), stats.lost  # ... so it stopped on them
    assert source.stats["leased"] >= 4  # and continued on phones leased from the restarted registry
    assert kept + lost == 2 * len(tasks), (kept, stats.losses)  # every episode kept or counted lost
    assert all(t.success for g in groups for t in g)  # no kept episode shared its phone
    assert policy.started_after and kept >= 1
    assert after["leased"] == 0
    print(f"\nregistry restart: {kept} kept, {lost} lost {dict(stats.losses)}; source {dict(source.stats)}; "
          f"leased after {after['leased']}")


def _chromium_browsers() -> list[psutil.Process]:
    """This process's headless Chromium browser processes (not its renderers / helpers)."""
    out = []
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            cmd = p.cmdline()
        except psutil.Error:
            continue
        if cmd and "chrom" in os.path.basename(cmd[0]) and not any(a.startswith("--type=") for a in cmd):
            out.append(p)
    return out


@pytest.mark.slow
def test_chromium_sigkilled_mid_episode_is_replaced_and_the_lost_episodes_are_counted() -> None:
    from venus_core.envs import MiniWobEnv
    from venus_core.rl.online import miniwob_tasks

    with MiniWobEnv(wait_s=0.0) as page:
        tasks = miniwob_tasks(["click-button", "click-link"], range(2), lambda n, s: page.make_task(n, s, max_steps=3),
                              expected_steps=lambda t: 1)
        source = LocalEnvs(lambda: MiniWobEnv(wait_s=0.0), "web")
        killed: list[int] = []

        def kill_chromium() -> None:
            (browser,) = _chromium_browsers()
            killed.append(browser.pid)
            browser.send_signal(signal.SIGKILL)
            browser.wait(10)

        # clicks that never hit: every episode runs its 3 steps, so the kill lands mid-episode
        policy = FaultAfter(ScriptedPolicy(lambda t: [Click(box=(2, 2))] * 3), 3, kill_chromium)
        try:
            groups, stats = collect_groups(tasks, 2, source, policy, devices=2, call_timeout=10)
            now = [p.pid for p in _chromium_browsers()]
        finally:
            source.close()
    kept = sum(len(g) for g in groups)
    lost = sum(stats.losses.values())
    assert policy.fired and len(killed) == 1
    assert kept + lost == 2 * len(tasks) and lost >= 1, (kept, stats.losses)
    assert source.stats["failed"] >= 1 and source.outstanding == 0
    assert now and killed[0] not in now  # a fresh Chromium serves the envs made after the kill
    assert policy.started_after and kept >= 1
    assert all(t.length == 3 for g in groups for t in g)  # the kept episodes ran whole
    print(f"\nchromium kill: {kept} kept, {lost} lost {dict(stats.losses)} {stats.lost}; source {dict(source.stats)}")
