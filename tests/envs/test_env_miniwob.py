"""MiniWoB++ in a REAL headless Chromium: task references, seeded episodes, the page's own reward
as success, the DOM-aware oracles, and `venus data collect` (dataset and raw traces, the latter
imported back with the miniwob-traces importer to the same records)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from venus_core.actions import Click, Finished, Launch, Type, Wait
from venus_core.cli import app
from venus_core.config.registry import ENVS
from venus_core.data import DatasetReader
from venus_core.data.importers import run_import
from venus_core.data.validate import validate_dataset
from venus_core.envs import EnvError, MiniWobEnv, Task
from venus_core.envs.miniwob import parse_ref, task_names, task_ref
from venus_core.envs.miniwob_collect import collect, run_oracle
from venus_core.envs.miniwob_oracle import SOLVERS, OracleTimeout, Page, solver_for


@pytest.fixture(scope="module")
def env() -> Iterator[MiniWobEnv]:
    e = MiniWobEnv(wait_s=0.05)
    yield e
    e.close()


def test_registered_and_task_refs() -> None:
    assert ENVS.get("miniwob") is MiniWobEnv and ENVS.get("web").__name__ == "WebEnv"
    assert len(task_names()) > 100 and set(SOLVERS) <= set(task_names())
    assert parse_ref(task_ref("click-button", 12)) == ("click-button", 12)
    for bad in ("synth:level=1", "miniwob:click-button", "miniwob:Click,seed=1", "miniwob:x,seed=a"):
        with pytest.raises(EnvError, match="not a MiniWoB reference"):
            parse_ref(bad)
    with pytest.raises(ValueError, match="no oracle"):
        solver_for("chase-circle")


def test_seeded_episodes_are_deterministic(env: MiniWobEnv) -> None:
    a, b = env.make_task("enter-text", 3), env.make_task("enter-text", 3)
    others = {env.make_task("enter-text", s).goal for s in range(4, 9)}
    assert a == b and a.goal.startswith("Enter \"") and a.app == "enter-text"
    assert len(others | {a.goal}) > 2
    obs = env.reset(a)
    assert obs.size == (320, 420) and obs.extras["task"] == "enter-text"
    assert Page(env).query() == a.goal  # the instruction is the page's own #query
    with pytest.raises(EnvError, match="unknown MiniWoB task"):
        env.make_task("no-such-task", 1)
    with pytest.raises(EnvError, match="does not match"):
        env.reset(Task(goal="Something else.", app="enter-text", success_check=a.success_check))


def test_success_is_the_page_reward(env: MiniWobEnv) -> None:
    task = env.make_task("enter-text", 4)
    name = task.goal.split('"')[1]
    env.reset(task)
    assert not env.is_successful()
    page = Page(env)
    env.step(Click(box=page.click(page.one("#tt"), "", "").action.box))  # type: ignore[attr-defined]
    env.step(Type(content=name))
    assert not env.is_successful()  # right text, not submitted: the page has not rewarded yet
    _, done, info = env.step(Click(box=page.click(page.one("#subbtn"), "", "").action.box))  # type: ignore[attr-defined]
    assert done and info["task_done"] and info["reward"] == 1.0 and not info["truncated"]
    assert env.is_successful()
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Wait())


def test_finished_early_and_leaving_the_page_are_failures(env: MiniWobEnv) -> None:
    env.reset(env.make_task("click-button", 1))
    _, done, info = env.step(Finished())
    assert done and info["terminated"] and not env.is_successful()
    env.reset(env.make_task("click-button", 1))
    _, done, _ = env.step(Launch(url="data:text/html,<p>away</p>"))
    assert not done and env.read_state()["on_task"] is False and not env.is_successful()


def test_original_episode_timer_ends_the_episode() -> None:
    with MiniWobEnv(episode_ms=1000, wait_s=1.3) as short:
        short.reset(short.make_task("click-button", 2))
        _, done, info = short.step(Wait())
    assert done and info["reward"] == -1 and info["reason"] == "timed out"
    with pytest.raises(ValueError, match="episode_ms"):
        MiniWobEnv(episode_ms=10)


def _autocomplete(env: MiniWobEnv, option: str) -> Task:
    """use-autocomplete seed 1 (\"Ce\"...\"lic\") with a jQuery UI autocomplete option changed."""
    task = env.make_task("use-autocomplete", 1)
    env.reset(task)
    env.evaluate(f"() => {{ $('#tags').autocomplete('option', {option}); }}")
    return task


def test_autocomplete_oracle_waits_on_the_list_not_a_sleep(env: MiniWobEnv) -> None:
    # the list opens 1.5 s after the last key, far beyond what the env's Wait (0.05 s here)
    # covers: only a wait on the DOM finds it; the trajectory has the one Wait step regardless
    _autocomplete(env, "'delay', 1500")
    actions, shown = [], []
    for step in solver_for("use-autocomplete")(Page(env)):
        shown.append(env.evaluate("() => $('ul.ui-autocomplete li:visible').length"))
        env.step(step.action)
        actions.append(type(step.action).__name__)
    assert actions == ["Click", "Type", "Wait", "Click", "Click"] and env.is_successful()
    assert shown[:2] == [0, 0] and shown[2] >= 1  # the Wait is yielded once the list is there


def test_autocomplete_oracle_waits_for_the_search_of_the_whole_prefix(env: MiniWobEnv) -> None:
    # the keys of one Type reach the page further apart than the search delay (a loaded machine):
    # the list of "C" opens, already offering "Central African Republic", then "e" arrives and
    # the list is re-rendered for "Ce" a delay later. The oracle must pick from the "Ce" list.
    _autocomplete(env, "'delay', 1500")
    solver = solver_for("use-autocomplete")(Page(env))
    env.step(next(solver).action)  # focus the field
    typed = next(solver).action
    assert isinstance(typed, Type) and typed.content == "Ce"
    term = "() => { const w = $('#tags').autocomplete('instance'); return [w.term, $('#tags').val()]; }"
    env.step(Type(content="C"))
    assert env.wait_for("() => $('#tags').autocomplete('instance').term === 'C'"
                        " && $('ul.ui-autocomplete li:visible').length > 1", timeout_ms=10_000)
    env.step(Type(content="e"))
    assert env.evaluate(term) == ["C", "Ce"]  # the "C" list is on screen, the "Ce" search pending
    wait = next(solver)
    assert isinstance(wait.action, Wait) and env.evaluate(term) == ["Ce", "Ce"]
    items = env.evaluate("() => $('ul.ui-autocomplete li:visible').map((i, e) => e.textContent).get()")
    assert items and all(t.startswith("Ce") for t in items)
    for step in [wait, *solver]:
        env.step(step.action)
    assert env.is_successful()


def test_autocomplete_oracle_times_out_with_a_typed_error(env: MiniWobEnv) -> None:
    _autocomplete(env, "'source', []")  # the list never offers anything
    solver = solver_for("use-autocomplete")(Page(env, timeout_ms=400))
    env.step(next(solver).action)
    env.step(next(solver).action)
    t0 = time.perf_counter()
    with pytest.raises(OracleTimeout, match=r"400 ms waiting for a suggestion that starts with "
                                            r"\"Ce\" and ends with \"lic\""):
        next(solver)
    assert time.perf_counter() - t0 < 5


@pytest.mark.slow
def test_every_oracle_solves_its_task(env: MiniWobEnv) -> None:
    for name in sorted(SOLVERS):
        ep = run_oracle(env, name, 11)
        assert ep.success and ep.reward == 1.0, (name, ep.error)
        assert ep.steps and all(s.screenshot.size == (320, 420) for s in ep.steps)
        clicks = [s.step for s in ep.steps if isinstance(s.step.action, Click)]
        for step in clicks:  # the point lies in the element's box
            x, y = step.action.box  # type: ignore[attr-defined]
            x1, y1, x2, y2 = step.target_box  # type: ignore[misc]
            assert x1 <= x <= x2 and y1 <= y <= y2, (name, step)


@pytest.mark.slow
def test_collect_dataset_and_raw_traces_agree(tmp_path: Path) -> None:
    tasks = ["click-checkboxes", "login-user"]  # no waited-for menus (autocomplete has one)
    report = collect(tasks, 1, tmp_path / "ds", seed=20)
    assert report.attempted == {t: 1 for t in tasks} and report.written == sum(report.succeeded.values())
    assert report.written == 2 and validate_dataset(tmp_path / "ds").ok
    raw = collect(tasks, 1, tmp_path / "raw", seed=20, raw=True)
    assert raw.succeeded == report.succeeded
    imported = run_import("miniwob-traces", tmp_path / "raw", tmp_path / "imp", options={"min_reward": "1"})
    assert imported.imported == report.written
    ds, imp = DatasetReader(tmp_path / "ds"), DatasetReader(tmp_path / "imp")
    direct = {t.episode_id: t for t in ds}
    for t in imp:
        d = direct[t.episode_id]
        assert t.platform == d.platform == "web" and t.success and t.goal == d.goal
        assert [s.action for s in t.steps] == [s.action for s in d.steps]
        for a, b in zip(t.steps, d.steps, strict=True):  # the same screenshots (PNG bytes may differ)
            assert imp.open_image(a.image).tobytes() == ds.open_image(b.image).tobytes()
        assert [s.target_box for s in t.steps] == [s.target_box for s in d.steps]
        assert d.provenance.generator == "miniwob-oracle" and d.provenance.seed == t.provenance.seed


@pytest.mark.slow
def test_collect_cli(tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(app, ["data", "collect", "--env", "miniwob", "--tasks", "click-button,focus-text",
                              "-n", "2", "-o", str(tmp_path / "d"), "--seed", "3", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert out["tasks"]["click-button"] == {"attempted": 2, "succeeded": 2, "success_rate": 1.0}
    assert out["written"] == 4 and out["failures"] == []
    res = runner.invoke(app, ["data", "validate", str(tmp_path / "d")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["data", "collect", "--tasks", "chase-circle", "-o", str(tmp_path / "e")])
    assert res.exit_code == 2 and "no oracle" in res.output


def test_an_overlapped_button_is_clicked_where_it_shows() -> None:
    from venus_core.envs.miniwob_oracle import Element, OracleError, _uncovered

    def el(x: float, y: float, w: float, h: float, text: str) -> Element:
        return Element(x, y, w, h, text, None, None, None, "button")

    one = el(10, 10, 40, 40, "ONE")
    assert _uncovered(one, el(100, 100, 40, 40, "TWO")) == one  # apart: the whole button
    part = _uncovered(one, el(30, 0, 40, 80, "TWO"))  # TWO covers ONE's right half
    assert (part.x, part.w, part.y, part.h) == (10, 20, 10, 40)
    with pytest.raises(OracleError, match="'ONE' is covered by 'TWO'"):
        _uncovered(one, el(5, 5, 50, 50, "TWO"))


def test_a_recovery_episode_misses_first_then_clicks(env: MiniWobEnv, tmp_path: Path) -> None:
    """misses=1: the oracle's first click aimed at a blank point of the task area, recorded as history
    only; the page is unchanged by it and the oracle's own click then solves the task."""
    from venus_core.data.schema import HISTORY_ONLY

    for name in ("click-test", "click-test-2", "click-color", "click-button"):
        ep = run_oracle(env, name, 12, misses=1)
        assert ep.success and len(ep.steps) == 2, (name, ep.error)
        miss, hit = ep.steps
        assert miss.history_only and not hit.history_only
        assert miss.step.think == hit.step.think and miss.step.target_box is None
        x1, y1, x2, y2 = hit.step.target_box  # type: ignore[misc]
        mx, my = miss.step.action.box  # type: ignore[attr-defined]
        assert not (x1 <= mx <= x2 and y1 <= my <= y2), (name, miss.step.action)
        assert miss.screenshot.tobytes() == hit.screenshot.tobytes(), name  # the miss changed nothing
    report = collect(["click-test"], 2, tmp_path / "ds", seed=30, misses=1)
    assert report.written == 2 and validate_dataset(tmp_path / "ds").ok
    (t, _) = list(DatasetReader(tmp_path / "ds"))
    assert t.episode_id == "click-test:seed=30:miss" and t.meta["recovery"] == "miss_first"
    assert [s.meta.get(HISTORY_ONLY, False) for s in t.steps] == [True, False]
    steps = t.to_steps(5)  # the miss is the click's history, never a step to learn
    assert [s.step_index for s in steps] == [1] and steps[0].history[0].action == t.steps[0].action
    assert [s.step_index for s in t.to_steps(5, history_only=True)] == [0, 1]
    with pytest.raises(ValueError, match="raw trace format"):
        collect(["click-test"], 1, tmp_path / "raw", raw=True, misses=1)


def test_a_recovery_episode_with_two_misses(env: MiniWobEnv, tmp_path: Path) -> None:
    """misses=2: two deliberate misses at two blank points, both history only, the page unchanged by
    either; the first miss is the one-miss episode's (its data stays as it was); the click then
    learns with both in its history. Out of range fails before a browser starts."""
    from venus_core.data.schema import HISTORY_ONLY

    one = run_oracle(env, "click-test-2", 12, misses=1)
    ep = run_oracle(env, "click-test-2", 12, misses=2)
    assert ep.success and len(ep.steps) == 3, ep.error
    first, second, hit = ep.steps
    assert first.history_only and second.history_only and not hit.history_only
    assert first.step.action == one.steps[0].step.action and second.step.action != first.step.action
    x1, y1, x2, y2 = hit.step.target_box  # type: ignore[misc]
    for m in (first, second):
        mx, my = m.step.action.box  # type: ignore[attr-defined]
        assert not (x1 <= mx <= x2 and y1 <= my <= y2), m.step.action
        assert m.screenshot.tobytes() == hit.screenshot.tobytes()
    four = run_oracle(env, "click-test", 12, misses=4)  # a live episode's five steps: four misses, then the click
    assert four.success and [s.history_only for s in four.steps] == [True] * 4 + [False], four.error
    assert len({s.step.action for s in four.steps[:4]}) == 4
    collect(["click-test"], 1, tmp_path / "ds", seed=30, misses=2)
    (t,) = list(DatasetReader(tmp_path / "ds"))
    assert t.episode_id == "click-test:seed=30:miss2" and t.meta["misses"] == 2
    assert [s.meta.get(HISTORY_ONLY, False) for s in t.steps] == [True, True, False]
    (step,) = t.to_steps(5)
    assert step.step_index == 2 and [h.action for h in step.history] == [s.action for s in t.steps[:2]]
    for bad in (-1, 5):
        with pytest.raises(ValueError, match="misses must be in"):
            collect(["click-test"], 1, tmp_path / f"bad{bad}", misses=bad)
