"""Browsers leased through the device service (`rl.online.browsers`): headless Chromium processes
behind the real gateway and lease registry on loopback, MiniWoB++ pages driven over CDP through the
gateway's tunnel, a browser killed mid-episode quarantined and replaced."""

from __future__ import annotations

import pytest

from venus_core.actions import Click
from venus_core.envs.miniwob import SERVED_ORIGIN
from venus_core.envs.miniwob_collect import run_oracle
from venus_core.rl.online.browsers import BrowserFarm, leased_miniwob


@pytest.fixture(scope="module")
def farm() -> BrowserFarm:
    with BrowserFarm(2, recheck_after=60.0) as f:
        yield f


def test_a_leased_browser_plays_a_page_over_cdp_through_the_gateway(farm: BrowserFarm) -> None:
    source = leased_miniwob(farm.pool("test"))  # as against a browser pod: the pages served from here
    env = source.acquire()
    try:
        assert farm.leased() == 1
        episode = run_oracle(env, "click-test", 7, max_steps=3)  # the oracle's clicks through the tunnel
        assert episode.success and len(episode.steps) == 1
        assert env.page.url.startswith(SERVED_ORIGIN)  # the page came from this process, not the browser's disk
        peer = env.lease.grant.device
        assert peer in {"browser-0", "browser-1"}
    finally:
        source.release(env)
    # a healthy browser stays leased for the job's next episode, the same env handed out again
    assert farm.leased() == 1 and source.stats["kept"] == 1 and source.outstanding == 0
    again = source.acquire()
    assert again is env and source.stats["reused"] == 1 and source.stats["leased"] == 1
    again.reset(again.make_task("click-test", 11, max_steps=3))
    source.release(again)
    source.close()
    assert farm.leased() == 0 and source.stats["leased"] == source.stats["released"] == 1


def test_a_browser_killed_mid_episode_is_quarantined_and_another_leased(farm: BrowserFarm) -> None:
    source = farm.env_source("test-kill")
    env = source.acquire()
    task = env.make_task("click-test", 8, max_steps=3)
    env.reset(task)
    assert env.page.url.startswith("file://")  # the farm's browsers read the package's files themselves
    dead = env.lease.grant.device
    farm.kill(int(dead.rsplit("-", 1)[1]))
    with pytest.raises(Exception):  # noqa: B017 - whatever Playwright raises for a browser that is gone
        env.step(Click(box=(500, 500)))
    source.release(env, failed="step failed: browser gone")
    assert source.stats["failed"] == 1 and source.stats["reported"] == 1
    status = farm.registry.status()
    assert dead in status["quarantined"] and status["leased"] == 0
    again = source.acquire()
    try:
        assert again.lease.grant.device != dead
        again.reset(again.make_task("click-test", 9, max_steps=3))
    finally:
        source.release(again)
        source.close()
    assert farm.leased() == 0 and source.stats["leased"] == source.stats["released"] == 2
