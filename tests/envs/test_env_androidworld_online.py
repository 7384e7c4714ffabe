"""AndroidWorld as an online evaluation target (`androidworld:urls=...`): target parsing, suite tasks, and
whole episodes through `evaluate_online` against two servers speaking AndroidWorld's API (FAKE servers:
no emulator runs here; see aw_fake_server.py)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest
from aw_fake_server import FakeAndroidWorld

from venus_core.eval.online import evaluate_online
from venus_core.eval.online_sim import make_envs, parse_target, target_tasks, with_limit
from venus_core.eval.predictors import Query


@pytest.fixture()
def servers() -> Iterator[list[FakeAndroidWorld]]:
    made = [FakeAndroidWorld(), FakeAndroidWorld()]
    yield made
    for s in made:
        s.stop()


class _OpensSettings:
    """Answers every step with Launch(Settings), then Finished (two steps per episode)."""

    name = "opens-settings"

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        return ["<think></think><action>" + ("Finished(content='')" if q.id.endswith(":1") else
                                               "Launch(app='Settings')") + "</action><conclusion></conclusion>"
                for q in queries]


def test_the_target_parses_and_names_its_errors() -> None:
    t = parse_target("androidworld:urls=http://a:5000+http://b:5000,tasks=SystemSettingsOpen,per_type=2")
    assert t.urls == ("http://a:5000", "http://b:5000") and t.tasks == ("SystemSettingsOpen",) and t.per_type == 2
    assert str(t).startswith("androidworld:urls=http://a:5000+http://b:5000")
    assert with_limit(t, 3).episodes == 3
    with pytest.raises(ValueError, match="'urls=ftp://x': urls must be http"):
        parse_target("androidworld:urls=ftp://x")
    with pytest.raises(ValueError, match="unknown key"):
        parse_target("androidworld:colour=red")


def test_episodes_on_two_servers_are_scored_by_androidworld(servers: list[FakeAndroidWorld]) -> None:
    target = parse_target(f"androidworld:urls={servers[0].url}+{servers[1].url},tasks=SystemSettingsOpen+MarkorWriteNote,"
                          "per_type=2,max_steps=4")
    tasks = target_tasks(target)
    assert [t.success_check for t in tasks] == ["androidworld:SystemSettingsOpen:0", "androidworld:MarkorWriteNote:0",
                                                "androidworld:MarkorWriteNote:1"]
    envs = make_envs(target)
    try:
        assert len(envs) == 2
        result = evaluate_online(envs, tasks, _OpensSettings(), target=str(target))
    finally:
        for e in envs:
            e.close()
    assert [s["success"] for s in result.samples] == [True, False, False]  # only the Settings task is done
    assert all(s["steps"] == 2 and s["invalid_steps"] == 0 for s in result.samples)
    with pytest.raises(ValueError, match="not in the server's suite"):
        target_tasks(parse_target(f"androidworld:urls={servers[0].url},tasks=NoSuchTask"))
