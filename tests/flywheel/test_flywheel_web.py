"""The flywheel on MiniWoB++ in a REAL headless Chromium: pages of a task as candidates (goal, the
DOM oracle's first point, a layout fingerprint), feasibility with reasons, seeds per task, rounds
whose feedback rises with a scripted policy whose success depends on where the target is, counts
that reconcile, a valid web dataset the task pool reads back, the DOM oracles as the executing
policy and the judge compared with the page's reward."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from flywheel_helpers import run_flywheel

from venus_core.actions.space import Click, Finished
from venus_core.config.spec import ScoringSpec
from venus_core.data import DatasetReader
from venus_core.data.validate import validate_dataset
from venus_core.envs.base import EnvError
from venus_core.envs.browser import chromium_path
from venus_core.envs.miniwob import MiniWobEnv, html_dir
from venus_core.envs.miniwob_oracle import Page, solver_for
from venus_core.flywheel.records import ImageMemo
from venus_core.flywheel.rules_expander import RuleExpander
from venus_core.flywheel.seeds import Seed, pool_seeds
from venus_core.flywheel.web_space import MiniWobSpace
from venus_core.rl.online import dynamic_tasks, sim_phone_tasks
from venus_core.rl.online.devices import LocalEnvs
from venus_core.rl.online.miniwob_policy import MiniWobOraclePolicy
from venus_core.rl.online.policy import answer_text
from venus_core.rl.online.rollout import Completion, StepRequest
from venus_core.scoring.judges import make_judge
from venus_core.scoring.testing_server import Reply, ScriptedChatServer, judgement_reply


def _browser() -> bool:
    try:
        chromium_path()
        html_dir()
    except EnvError:
        return False
    return True


pytestmark = pytest.mark.skipif(not _browser(), reason="no Chromium or no miniwob package")


@pytest.fixture(scope="module")
def page() -> Iterator[MiniWobEnv]:
    env = MiniWobEnv(wait_s=0.0)
    yield env
    env.close()


@pytest.fixture(scope="module")
def space(page: MiniWobEnv) -> MiniWobSpace:
    """click-button and focus-text (1 oracle step each) and login-user (5 steps: over the limit)."""
    return MiniWobSpace(page, ["click-button", "focus-text", "login-user"], per_round=32, first_seed=40000, max_steps=3)


def _source() -> LocalEnvs:
    return LocalEnvs(lambda: MiniWobEnv(wait_s=0.0), "web")


def _lines(out: Path) -> list[dict[str, Any]]:
    return [json.loads(x) for x in (out / "tasks.jsonl").read_text().splitlines()]


def test_pages_carry_their_goal_the_oracles_first_point_and_a_layout_fingerprint(page: MiniWobEnv,
                                                                                   space: MiniWobSpace) -> None:
    assert space.steps == {"click-button": 1, "focus-text": 1, "login-user": 5} and space.assumed == []
    cands = space.candidates("click-button", 0)
    assert [c.key for c in cands] == [f"miniwob:click-button,seed={s}" for s in range(40000, 40032)]
    assert space.candidates("click-button", 1)[0].key == "miniwob:click-button,seed=40032"  # its own window
    first = cands[3]
    page.make_task("click-button", 40003)
    step = next(solver_for("click-button")(Page(page)))
    assert first.point == step.action.box and first.goal == page.utterance()  # type: ignore[attr-defined]
    assert first.task.start == page.page_fingerprint() and first.task.start.startswith("miniwob-page:")
    focus = space.candidates("focus-text", 0)
    assert {c.goal for c in focus} == {"Focus into the textbox."}  # one goal: the position is the parameter
    assert len({c.point for c in focus}) > 12 and len({c.task.start for c in focus}) > 12
    assert space.candidates("login-user", 0) == [] and space.unplannable[0] == 32  # 5 steps > 3: no page loaded
    assert space.generated[0]["pages"] == 64 and space.generated[0]["no_point"] == 0
    with pytest.raises(ValueError, match="unknown MiniWoB task"):
        MiniWobSpace(page, ["no-such-task"], per_round=4, first_seed=40000, max_steps=3)


def test_seeds_are_one_per_task_and_every_page_fits_its_seed(space: MiniWobSpace) -> None:
    seeds = pool_seeds(space.sample(6))
    assert [(s.key, s.prompt) for s in seeds] == [
        ("miniwob:click-button", "Click on the <...> button."), ("miniwob:focus-text", "Focus into the textbox."),
        ("miniwob:login-user", "Enter the username <...> into the text fields and press login.")]
    by_app = {s.app: s for s in seeds}
    for name in ("click-button", "focus-text"):
        assert space.for_seed(by_app[name], 0) == space.candidates(name, 0)
    goal = space.candidates("click-button", 0)[0].goal
    narrow = Seed("miniwob:click-button:0", "miniwob", "click-button", 0, goal.upper())  # one label, any case
    same = [c for c in space.candidates("click-button", 0) if c.goal.casefold() == goal.casefold()]
    assert space.for_seed(narrow, 0) == same and 1 <= len(same) < 32
    for bad, why in [(replace(narrow, env="sim-phone"), "this flywheel runs on 'miniwob'"),
                     (replace(narrow, app="click-link"), "not among the flywheel's tasks"),
                     (replace(narrow, level=1), "no curriculum level")]:
        with pytest.raises(ValueError, match=why):
            space.check_seed(bad)


def test_feasibility_gives_a_reason_for_every_page_it_refuses(space: MiniWobSpace) -> None:
    task = space.candidates("focus-text", 0)[0].task
    assert space.infeasible(task) is None
    held = space.held_out(["click-button"], 2)
    assert [t.key for t in held] == ["miniwob:click-button,seed=900000", "miniwob:click-button,seed=900001"]
    assert held[0].start.startswith("miniwob-page:")
    assert "evaluation / held-out seed" in (space.infeasible(held[0]) or "")
    assert "exceed the step limit 3" in (space.infeasible(replace(task, expected_steps=5)) or "")
    other = replace(task, task=replace(task.task, success_check="miniwob:click-link,seed=40000"))
    assert "not among the flywheel's tasks" in (space.infeasible(other) or "")
    phone = sim_phone_tasks([1], [5], size=(128, 128))[0]
    assert "env 'sim-phone' is not 'miniwob'" in (space.infeasible(phone) or "")
    assert "no page of the MiniWoB tasks" in (space.infeasible(None, "Click the magenta button", 0) or "")


class UpperHalfPolicy:
    """Clicks the oracle's first point when it lies in the upper half of the screen (y < 600 of 1000),
    else a corner where nothing is: success depends on a page parameter the expander can see."""

    name = "upper-half"
    version = 0

    def __init__(self, points: dict[str, tuple[int, int] | None]) -> None:
        self.points = points

    def act(self, requests: Sequence[StepRequest]) -> list[Completion]:
        out = []
        for r in requests:
            point = self.points[r.task.success_check]
            if r.step > 0:
                out.append(Completion(answer_text(Finished(content=""))))
            elif point is not None and point[1] < 600:
                out.append(Completion(answer_text(Click(box=point))))
            else:
                out.append(Completion(answer_text(Click(box=(3, 3)))))
        return out


def test_rounds_on_pages_rise_with_a_positional_policy_reconcile_and_write_a_web_dataset(
        tmp_path: Path, space: MiniWobSpace) -> None:
    seeds = pool_seeds(space.sample(4))[:2]  # click-button, focus-text
    points = {c.task.task.success_check: c.point for r in range(3) for name in ("click-button", "focus-text")
              for c in space.candidates(name, r)}
    source = _source()
    # explore 0: with 64 pages a round every proposal must be chosen by the estimate for the intervals to
    # separate at n = 20 (the phone test keeps the default explore share, from 192 boards a round)
    summary, _ = run_flywheel(tmp_path, UpperHalfPolicy(points), source=source, sp=space, seeds=seeds, rounds=3,
                              tasks=20, expander=RuleExpander(space, explore=0.0))
    rates = [row["success"] for row in summary["rounds"]]
    assert rates[0]["n"] == 20 and 0.25 < rates[0]["value"] < 0.75  # uniform: about half the targets are high
    assert summary["rise"]["beyond_intervals"], rates
    assert rates[-1]["value"] >= 0.9  # measured: 11/20 -> 18/20 -> 20/20
    by_seed = summary["rounds"][-1]["by_seed"]
    assert by_seed["miniwob:focus-text"]["n"] > 10  # one goal, the position decides: the estimate is sharpest there
    assert source.stats["acquired"] == source.stats["released"]
    lines = _lines(tmp_path)
    for row in summary["rounds"]:
        assert row["proposed"] == row["duplicates"] + row["infeasible"] + row["executed"] + row["lost"] == 20
    total = summary["total"]
    assert total["written"] == total["verified"] == sum(x["status"] == "verified" for x in lines)
    assert validate_dataset(tmp_path / "dataset").ok
    records = list(DatasetReader(tmp_path / "dataset"))
    assert len(records) == total["written"] and {r.platform for r in records} == {"web"}
    extra = records[0].provenance.extra
    assert extra["env"] == "miniwob" and extra["success_check"].startswith("miniwob:") and extra["verifier"] == "rules"
    assert records[0].provenance.seed == int(extra["success_check"].split("seed=")[1])
    assert records[0].meta["simulated"] is False and records[0].steps[0].image_size == (320, 420)
    rejected: list[tuple[str, str]] = []
    back = dynamic_tasks([r.model_dump(mode="json") for r in records], rejected=rejected)
    assert {t.key for t in back} == {x["key"] for x in lines if x["status"] == "verified"} and not rejected


def _judge_focus_only(request: dict[str, Any]) -> Reply:
    """Passes focus-text episodes, fails the others (the page's reward passes all of them)."""
    text = json.dumps(request["messages"])
    return judgement_reply(9, 9) if re.search(r"Focus into the textbox", text) else judgement_reply(2, 2)


def test_the_dom_oracles_execute_and_the_judge_is_compared_with_the_page_reward(
        tmp_path: Path, page: MiniWobEnv) -> None:
    sp = MiniWobSpace(page, ["focus-text", "enter-text"], per_round=6, first_seed=41000, max_steps=3)
    seeds = pool_seeds(sp.sample(3))
    memo = ImageMemo()
    policy = MiniWobOraclePolicy()
    try:
        with ScriptedChatServer(default=_judge_focus_only) as server:
            judge = make_judge(ScoringSpec(judge="openai", endpoint=server.base_url, judge_model="judge",
                                           max_retries=0, cache=False), open_image=memo)
            summary, _ = run_flywheel(tmp_path, policy, source=_source(), sp=sp, seeds=seeds, judge=judge, memo=memo,
                                      rounds=1, tasks=8)
        task = sp.candidates("focus-text", 0)[0].task.task
        chase = replace(task, success_check="miniwob:chase-circle,seed=1")
        with pytest.raises(ValueError, match="no oracle"):  # a task without a DOM oracle: refused before it runs
            policy.act([StepRequest("x#0", None, "", chase)])  # type: ignore[arg-type]
    finally:
        policy.close()
    row = summary["rounds"][0]
    assert row["executed"] == row["verified"] == 8  # the oracles solve every page, 3-step enter-text included
    lines = _lines(tmp_path)
    assert {x["steps"] for x in lines if x["seed"] == "miniwob:enter-text"} == {3}
    focus = sum(x["seed"] == "miniwob:focus-text" for x in lines)
    agree = row["agreement"]
    assert row["judge"]["calls"] == 8 and agree["n"] == 8
    assert agree["both_pass"] == focus and agree["rule_only"] == 8 - focus and agree["judge_only"] == 0
    assert all(x["verifier"] == "rules" and x["status"] == "verified" for x in lines)  # auto: the page's reward


def test_venus_data_generate_on_miniwob_with_the_bootstrap_policy(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from venus_core.cli import app

    out = tmp_path / "gen"
    tiny = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
    res = CliRunner().invoke(app, ["data", "generate", "-o", str(out), "--spec", str(tiny), "--rounds", "2", "--tasks",
                                   "4", "--set", "flywheel.env=miniwob", "--set",
                                   "flywheel.web_tasks=[click-button,focus-text]", "--set",
                                   "flywheel.web_candidates_per_round=6", "--set", "flywheel.devices=2", "--set",
                                   "online_rl.task_pool.held_out=2"], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "round 1: proposed 4" in res.output
    report = json.loads((out / "report.json").read_text())
    assert report["env"] == "miniwob" and report["web"]["tasks"] == ["click-button", "focus-text"]
    assert report["web"]["expected_steps"] == {"click-button": 1, "focus-text": 1}
    assert report["web"]["devices"] == "MiniWoB++ browser contexts in process"  # venus-tiny: web_device_service local
    assert [s["key"] for s in report["seeds"]] == ["miniwob:click-button", "miniwob:focus-text"]
    assert report["held_out_tasks"] == 2 and report["policy"]["revision"].startswith("venus-tiny-bootstrap@")
    assert [r["proposed"] for r in report["rounds"]] == [4, 4] and report["rounds"][0]["generated"]["pages"] == 12
    assert report["device_source"]["acquired"] == report["device_source"]["released"] >= 2
    assert validate_dataset(out / "dataset").ok and len(_lines(out)) == 8
