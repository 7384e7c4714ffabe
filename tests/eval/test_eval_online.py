"""Online evaluation: lock-step episodes on a scripted env (exact bookkeeping) and on the sim phone."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from venus_core.actions import Action, Click, render_action
from venus_core.config.registry import EVAL_SUITES
from venus_core.envs import Env, Observation, Task, UnsupportedAction, synth_plan
from venus_core.eval.online import evaluate_online
from venus_core.eval import suites  # noqa: F401  (registers the evaluators; a plugin once listed)
from venus_core.eval.online_sim import make_envs, parse_target, target_tasks
from venus_core.eval.predictors import Query
from venus_core.eval.report import render_report

from eval_fixtures import nav


class CountingEnv(Env):
    """Success iff Click(500,500) was done; LongPress is unsupported; Finished ends the episode."""

    name = "counting"
    platform = "mobile"

    def __init__(self) -> None:
        self.task: Task | None = None
        self.steps = 0
        self.clicked = False
        self.resets: list[str] = []

    @property
    def supported_actions(self) -> frozenset[str]:
        return frozenset({"Click", "Finished", "Wait"})

    def _obs(self) -> Observation:
        return Observation(Image.new("RGB", (50, 100), (self.steps * 20 % 256, 0, 0)), (50, 100), "mobile")

    def reset(self, task: Task) -> Observation:
        self.task, self.steps, self.clicked = task, 0, False
        self.resets.append(task.goal)
        return self._obs()

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        assert self.task is not None
        if action.NAME == "LongPress":
            raise UnsupportedAction(self.name, "LongPress", "no long press here")
        self.steps += 1
        self.clicked |= isinstance(action, Click) and tuple(action.box) == (500, 500)
        terminated = action.NAME == "Finished"
        truncated = not terminated and self.steps >= self.task.max_steps
        return self._obs(), terminated or truncated, {"truncated": truncated}

    def is_successful(self) -> bool:
        return self.clicked

    def close(self) -> None:
        pass


class ByStep:
    """Answers `scripts[i][step]` for the query id `task-i:step` (goals may repeat, ids do not)."""

    def __init__(self, scripts: Sequence[Sequence[str]], name: str = "by-step") -> None:
        self.scripts, self.name = [list(x) for x in scripts], name
        self.rounds: list[list[str]] = []

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        self.rounds.append([q.id for q in queries])
        out = []
        for q in queries:
            i, s = (int(v) for v in q.id.removeprefix("task-").split(":"))
            answers = self.scripts[i]
            out.append(answers[s] if s < len(answers) else "???")
        return out


def test_lock_step_bookkeeping_exact() -> None:
    tasks = [Task(goal=g, max_steps=m, difficulty=d, app="a") for g, m, d in
             (("win", 5, 1), ("invalid then win", 5, 1), ("never", 3, 2), ("unsupported", 4, 2))]
    script = {
        "win": [nav("Click(box=(500,500))"), nav("Finished(content='')")],
        "invalid then win": ["garbage", nav("Click(box=(500,500))"), nav("Finished(content='')")],
        "never": [nav("Wait()")] * 3,
        "unsupported": [nav("LongPress(box=(1,1))"), nav("Click(box=(500,500))"), nav("Finished(content='')")],
    }
    envs = [CountingEnv(), CountingEnv()]
    pred = ByStep([script[t.goal] for t in tasks])
    calls: list[tuple[int, int | None]] = []
    res = evaluate_online(envs, tasks, pred, frames_episodes=1, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(1, 4), (2, 4), (3, 4), (4, 4)]  # one call per finished episode
    s = res.summary
    assert (s["success"]["k"], s["success"]["n"]) == (3, 4)
    assert [x["success"] for x in res.samples] == [True, True, False, True]
    assert [x["steps"] for x in res.samples] == [2, 3, 3, 3]
    assert [x["invalid_steps"] for x in res.samples] == [0, 1, 0, 1]
    assert (s["invalid_steps"]["k"], s["invalid_steps"]["n"]) == (2, 11)
    assert [x["truncated"] for x in res.samples] == [False, False, True, False]
    assert s["mean_steps_success"] == round((2 + 3 + 3) / 3, 2)
    assert {k: (v["k"], v["n"]) for k, v in s["by_difficulty"].items()} == {"1": (2, 2), "2": (1, 2)}
    assert "no long press here" in res.samples[3]["trajectory"][0]["error"]
    # the first round asks both envs at once; the second env's first task is task 1
    assert pred.rounds[0] == ["task-0:0", "task-1:0"] and envs[1].resets[0] == "invalid then win"
    assert len(res.samples[0]["frames"]) == 2 and res.samples[1]["frames"] == []
    assert res.samples[1]["trajectory"][0]["valid"] is False and res.samples[1]["trajectory"][1]["action"] == "Click(box=(500,500))"


class SlowConcurrentEnv(CountingEnv):
    """A CountingEnv whose reset and step take 50 ms outside the interpreter (as a browser's would)."""

    concurrent = True
    active = 0
    overlap = 0
    lock = threading.Lock()

    def _slow(self) -> None:
        with SlowConcurrentEnv.lock:
            SlowConcurrentEnv.active += 1
            SlowConcurrentEnv.overlap = max(SlowConcurrentEnv.overlap, SlowConcurrentEnv.active)
        time.sleep(0.05)
        with SlowConcurrentEnv.lock:
            SlowConcurrentEnv.active -= 1

    def reset(self, task: Task) -> Observation:
        self._slow()
        return super().reset(task)

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        self._slow()
        return super().step(action)


def test_concurrent_envs_step_together_with_the_same_results() -> None:
    goals = ["win", "never", "invalid then win", "win", "never", "win", "invalid then win", "never"]
    tasks = [Task(goal=g, max_steps=3, difficulty=1, app="a") for g in goals]
    script = {"win": [nav("Click(box=(500,500))"), nav("Finished(content='')")],
              "invalid then win": ["garbage", nav("Click(box=(500,500))"), nav("Finished(content='')")],
              "never": [nav("Wait()")] * 3}
    sequential_envs = [CountingEnv() for _ in range(4)]
    seq = evaluate_online(sequential_envs, tasks, ByStep([script[g] for g in goals]))
    SlowConcurrentEnv.overlap = 0
    envs = [SlowConcurrentEnv() for _ in range(4)]
    conc = evaluate_online(envs, tasks, ByStep([script[g] for g in goals]))
    assert SlowConcurrentEnv.overlap == 4  # the four envs reset and step at the same time
    assert [e.resets for e in envs] == [e.resets for e in sequential_envs]  # same task per env
    assert conc.samples == seq.samples and conc.summary == seq.summary


def test_invalid_steps_count_toward_the_limit() -> None:
    task = Task(goal="g", max_steps=4)
    res = evaluate_online([CountingEnv()], [task], ByStep([["x"] * 10]))
    assert res.samples[0]["steps"] == 4 and res.samples[0]["truncated"] and res.samples[0]["invalid_steps"] == 4


def test_target_parsing() -> None:
    t = parse_target("sim-phone:levels=1-2+5,episodes=7,seed=3,size=270x480,envs=3,transport=adb")
    assert t.levels == (1, 2, 5) and t.episodes == 7 and (t.width, t.height) == (270, 480) and t.envs == 3
    assert parse_target(str(t)) == t and parse_target(None) == parse_target("sim-phone")
    for bad, msg in (("emulator", "unknown environment"), ("sim-phone:colour=red", "unknown key"),
                     ("sim-phone:episodes=x", "episodes=x"), ("sim-phone:transport=ssh", "transport")):
        with pytest.raises(ValueError, match=msg):
            parse_target(bad)


def test_tasks_default_to_their_levels_screen_size_and_an_explicit_size_wins() -> None:
    from venus_core.data.synth.levels import level_spec
    from venus_core.eval.online_sim import task_size

    t = parse_target("sim-phone:levels=1+3+5,episodes=6")
    assert (t.width, t.height) == (0, 0) and "size=level" in str(t) and parse_target(str(t)) == t
    assert [task_size(x) for x in target_tasks(t)] == [level_spec(lv).mobile_size for lv in (1, 3, 5, 1, 3, 5)]
    assert task_size(target_tasks(t)[0]) == (128, 128)  # the level-1 curriculum screen, not a 540 x 960 phone
    fixed = parse_target("sim-phone:levels=1+3,episodes=2,size=270x480")
    assert {task_size(x) for x in target_tasks(fixed)} == {(270, 480)}
    for bad in ("sim-phone:size=0x10", "sim-phone:size=big"):
        with pytest.raises(ValueError):
            parse_target(bad)


def test_mixed_sizes_get_their_own_phones_and_every_task_runs_on_one_of_its_size() -> None:
    from venus_core.eval.online_sim import fits, task_size

    target = parse_target("sim-phone:levels=1+3,episodes=5,seed=100000,max_steps=4,envs=2")
    tasks = target_tasks(target)
    envs = make_envs(target)
    try:
        assert sorted(tuple(e.device.size) for e in envs) == [(128, 128), (128, 128), (256, 256), (256, 256)]
        scripts = [[nav(render_action(a)) for a in synth_plan(t)] + ([] if t.answer else [nav("Finished(content='')")])
                   for t in tasks]
        res = evaluate_online(envs, tasks, ByStep(scripts, "planner"), fits=fits)
        assert (res.summary["success"]["k"], res.summary["success"]["n"]) == (5, 5)
        with pytest.raises(ValueError, match="fits none of the 2 environments"):
            evaluate_online([e for e in envs if tuple(e.device.size) == (256, 256)], tasks[:1], ByStep([[]]),
                            fits=fits)
        assert task_size(tasks[0]) == (128, 128)
    finally:
        for e in envs:
            e.close()


def test_sim_phone_planner_succeeds_and_report_renders() -> None:
    target = parse_target("sim-phone:levels=3-4,episodes=3,seed=100000,size=270x480,max_steps=6,envs=2")
    tasks = target_tasks(target)
    scripts = [[nav(render_action(a)) for a in synth_plan(t)] + ([] if t.answer else [nav("Finished(content='')")])
               for t in tasks]
    envs = make_envs(target)
    try:
        good = evaluate_online(envs, tasks, ByStep(scripts, "planner"), target=str(target))
        bad = evaluate_online(envs, tasks, ByStep([[] for _ in tasks], "noise"))
    finally:
        for e in envs:
            e.close()
    assert (good.summary["success"]["k"], good.summary["success"]["n"]) == (3, 3)
    assert good.summary["invalid_steps"]["k"] == 0 and good.settings["simulated"] is True
    assert (bad.summary["success"]["k"], bad.summary["truncated"]["k"]) == (0, 3)
    assert good.benchmark is None and "online_sim" in EVAL_SUITES.names()
    html = render_report([good, bad], viewer_limit=4)
    assert 'id="comparison"' not in html  # different target strings: not the same task set
    assert "simulated environment" in html and "AndroidWorld" not in html and "data:image/jpeg" in html


@pytest.mark.slow
def test_cli_online_with_tiny_model(tmp_path: Path, tiny_ckpt: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from venus_core.cli.eval_cmd import register
    from venus_core.eval.results import load_result

    app = typer.Typer()
    register(app)

    @app.command()
    def version() -> None:
        pass

    r = CliRunner().invoke(app, ["eval", "online", "--model", str(tiny_ckpt), "--target",
                                 "sim-phone:levels=3,size=270x480,max_steps=2,envs=1", "--episodes", "1",
                                 "--max-new-tokens", "8", "--out", str(tmp_path)])
    assert r.exit_code == 0, r.output
    res = load_result(tmp_path / "online.json")
    assert res.evaluator == "online" and res.samples[0]["steps"] == 2 and "task success" in (tmp_path / "report.html").read_text()
