"""Online evaluation on MiniWoB++ in a REAL headless Chromium: target strings, and lock-step
episodes whose answers replay the DOM oracle's actions (success from the pages' own rewards)."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from venus_core.actions import render_action
from venus_core.envs import MiniWobEnv
from venus_core.envs.miniwob_collect import run_oracle
from venus_core.eval.online import evaluate_online
from venus_core.eval.online_sim import make_envs, parse_target, target_tasks, with_limit
from venus_core.eval.online_web import MiniWobTarget
from venus_core.eval.predictors import Query


def _nav(action: str) -> str:
    return f"<think>t</think><action>{action}</action><conclusion>c</conclusion>"


class Replay:
    """Answers `scripts[i][step]` for the query id `task-i:step`."""

    name = "replay"

    def __init__(self, scripts: Sequence[Sequence[str]]) -> None:
        self.scripts = [list(s) for s in scripts]

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        out = []
        for q in queries:
            i, s = (int(v) for v in q.id.removeprefix("task-").split(":"))
            out.append(self.scripts[i][s] if s < len(self.scripts[i]) else _nav("Wait()"))
        return out


def test_miniwob_targets_parse() -> None:
    t = parse_target("miniwob:tasks=click-button+enter-text,episodes=5,seed=7,envs=3,max_steps=4,scale=1")
    assert isinstance(t, MiniWobTarget) and t.tasks == ("click-button", "enter-text")
    assert (t.episodes, t.seed, t.envs, t.max_steps, t.scale) == (5, 7, 3, 4, 1.0)
    assert parse_target(str(t)) == t and with_limit(t, 2).episodes == 2
    default = parse_target("miniwob")
    assert "use-autocomplete" in default.tasks and default.seed == 100_000
    for bad, msg in (("miniwob:tasks=nope", "unknown MiniWoB task"), ("miniwob:colour=red", "unknown key"),
                     ("miniwob:episodes=0", "episodes"), ("miniwob:tasks=", "no tasks")):
        with pytest.raises(ValueError, match=msg):
            parse_target(bad)


@pytest.mark.slow
def test_miniwob_online_episodes_are_scored_by_the_pages() -> None:
    target = parse_target("miniwob:tasks=click-button+enter-text+focus-text,episodes=4,envs=2,max_steps=5")
    envs = make_envs(target)
    try:
        tasks = target_tasks(target)
        assert [t.app for t in tasks] == ["click-button", "enter-text", "focus-text", "click-button"]
        scripts = [[_nav(render_action(s.step.action)) for s in run_oracle(envs[0], t.app or "", 100_000 + i).steps]  # type: ignore[arg-type]
                   for i, t in enumerate(tasks[:3])]
        scripts.append([_nav("Finished(content='')")])  # gives up at once
        res = evaluate_online(envs, tasks, Replay(scripts), target=str(target))
    finally:
        for env in envs:
            env.close()
    assert [s["success"] for s in res.samples] == [True, True, True, False]
    assert res.summary["success"]["k"] == 3 and res.summary["invalid_steps"]["count"] == 0
    assert res.summary["by_app"]["enter-text"]["value"] == 1.0
    assert res.settings["simulated"] is False and res.samples[1]["steps"] == 3
    assert isinstance(envs[0], MiniWobEnv)


def test_the_next_model_on_the_same_target_reuses_the_browser_contexts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The evaluate stage scores many models on one live-web target: the envs of the first go back
    idle and the next takes them (no new contexts), with the same results as fresh ones; an
    evaluation that raised closes its envs instead."""
    from venus_core.eval import online_sim
    from venus_core.eval.suites import online_sim as online_suite

    made: list[list[object]] = []
    real = online_sim.make_envs
    monkeypatch.setattr(online_sim, "make_envs", lambda t: made.append(real(t)) or made[-1])
    text = "miniwob:tasks=click-test+click-test-2,episodes=4,envs=2,max_steps=2"
    target = parse_target(text)
    with MiniWobEnv() as page:
        scripts = [[_nav(render_action(s.step.action)) for s in run_oracle(page, t.app or "", target.seed + i).steps]
                   for i, t in enumerate(target_tasks(target))]
    scripts[1] = [_nav("Finished(content='')")]  # one failure, so the results say something

    class Broken(Replay):
        def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
            raise RuntimeError("model crashed")

    try:
        first = online_suite(Replay(scripts), text, suite="live-web", limit=None)
        second = online_suite(Replay(scripts), text, suite="live-web", limit=None)
        assert len(made) == 1 and not any(e.closed for e in made[0])  # type: ignore[attr-defined]
        assert [s["success"] for s in first.samples] == [s["success"] for s in second.samples] == [True, False, True, True]
        with pytest.raises(RuntimeError, match="model crashed"):
            online_suite(Broken(scripts), text, suite="live-web", limit=None)
        assert all(e.closed for e in made[0])  # type: ignore[attr-defined]
        third = online_suite(Replay(scripts), text, suite="live-web", limit=None)
        assert len(made) == 2 and third.samples == second.samples
    finally:
        online_sim.close_idle_envs()
    assert all(e.closed for e in made[-1])  # type: ignore[attr-defined]
