"""The evaluation report in a real browser (issue 23 §3): a report built from a small evaluation —
two stages scored on the held-out suites (grounding, offline navigation) and online on the
simulated phone — opened in headless Chromium (the project's `BrowserHost`, as the web envs use
it). Its tables and charts render, every screenshot decodes, an online episode can be stepped
through (next, previous, the arrow keys, all steps) and the page logs no error or warning.

`VENUS_REPORT_SCREENSHOT=docs/img/report.png` also writes the screenshot the docs show
(docs/report.md says how it was made).
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from venus_core.actions import Click, render_action
from venus_core.config.spec import HeldOutSuitesSpec
from venus_core.data.store import DatasetReader
from venus_core.envs import synth_plan
from venus_core.envs.browser import BrowserHost
from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.held_out import build_suites
from venus_core.eval.navigation import _steps, evaluate_nav_offline
from venus_core.eval.online import evaluate_online, summarize
from venus_core.eval.online_sim import make_envs, parse_target, target_tasks
from venus_core.eval.predictors import Query
from venus_core.eval.report import write_report
from venus_core.eval.results import EvalResult
from venus_core.eval.viewer import online_html, verdict_reason

from eval_fixtures import Scripted, nav

ONLINE_TARGET = "sim-phone:levels=3-4,episodes=3,seed=100000,size=270x480,max_steps=6,envs=2"
VIEWPORT = {"width": 1100, "height": 900}


class ByTask:
    """Answers `scripts[i][step]` for query id `task-i:step`, "???" (an invalid step) past the end."""

    def __init__(self, scripts: list[list[str]], name: str) -> None:
        self.scripts, self.name = scripts, name

    def predict(self, queries: list[Query], max_new_tokens: int) -> list[str]:
        out = []
        for q in queries:
            i, s = (int(v) for v in q.id.removeprefix("task-").split(":"))
            out.append(self.scripts[i][s] if s < len(self.scripts[i]) else "???")
        return out


def _labelled(res: EvalResult, label: str) -> EvalResult:
    res.label = label
    return res


def _results(tmp: Path) -> list[EvalResult]:
    """Two stages, `mid_train` and `merge`, on each suite; the merged model is better on each."""
    root, _ = build_suites(HeldOutSuitesSpec(grounding_levels=[0, 1], grounding_per_level=6, navigation_steps=8,
                                             refusal_share=0.3), tmp / "suites")
    records = list(DatasetReader(root / "grounding"))
    centre = {r.id: f"[{(r.box[0] + r.box[2]) // 2},{(r.box[1] + r.box[3]) // 2}]"  # type: ignore[index]
              for r in records if r.box}
    half = dict(list(centre.items())[: len(centre) // 2])
    steps = list(_steps(DatasetReader(root / "navigation"), None, {}))  # type: ignore[arg-type]
    finished = {s.id: nav(s.action) for s in steps if s.action.startswith("Finished")}
    oracle = {s.id: nav(s.action) for s in steps}

    target = parse_target(ONLINE_TARGET)
    tasks = target_tasks(target)
    plans = [[nav(render_action(a)) for a in synth_plan(t)] + ([] if t.answer else [nav("Finished(content='')")])
             for t in tasks]
    plans[1] = [nav(render_action(Click(box=(30, 30))))] + plans[1]  # a wrong first tap, then the plan
    envs = make_envs(target)
    try:
        online_mid = evaluate_online(envs, tasks, ByTask([[] for _ in tasks], "ckpt-mid"), suite="online",
                                     target=str(target))
        online_merge = evaluate_online(envs, tasks, ByTask(plans, "ckpt-merge"), suite="online", target=str(target))
    finally:
        for e in envs:
            e.close()
    return [
        _labelled(evaluate_grounding(root / "grounding", Scripted(half, "[-1,-1]", "ckpt-mid"), suite="held-out grounding"),
                  "mid_train"),
        _labelled(evaluate_grounding(root / "grounding", Scripted(centre, "[-1,-1]", "ckpt-merge"),
                                     suite="held-out grounding"), "merge"),
        _labelled(evaluate_nav_offline(root / "navigation", Scripted(finished, name="ckpt-mid"),
                                       suite="held-out navigation"), "mid_train"),
        _labelled(evaluate_nav_offline(root / "navigation", Scripted(oracle, name="ckpt-merge"),
                                       suite="held-out navigation"), "merge"),
        _labelled(online_mid, "mid_train"),
        _labelled(online_merge, "merge"),
    ]


@dataclass
class Report:
    path: Path
    results: list[EvalResult]


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> Report:
    tmp = tmp_path_factory.mktemp("report")
    results = _results(tmp)
    return Report(write_report(results, tmp / "report.html", viewer_limit=12), results)


@pytest.fixture(scope="module")
def host() -> Iterator[BrowserHost]:
    h = BrowserHost.acquire()
    yield h
    h.release()


class Opened:
    """A page of the report in a fresh browser context, with every console error / warning and
    uncaught page error it logged."""

    def __init__(self, host: BrowserHost, report: Report) -> None:
        self.host, self.report = host, report
        self.messages: list[str] = []

        async def open_page() -> tuple[Any, Any]:
            ctx = await host.browser.new_context(viewport=VIEWPORT)
            page = await ctx.new_page()
            page.on("console", lambda m: self.messages.append(f"{m.type}: {m.text}")
                    if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: self.messages.append(f"pageerror: {e}"))
            await page.goto(report.path.as_uri(), wait_until="load")
            return ctx, page

        self.ctx, self.page = host.call(open_page())

    def run(self, coro: Any) -> Any:
        return self.host.call(coro)

    def close(self) -> None:
        self.host.call(self.ctx.close())


@pytest.fixture()
def opened(host: BrowserHost, report: Report) -> Iterator[Opened]:
    o = Opened(host, report)
    yield o
    o.close()
    assert o.messages == [], o.messages


@pytest.mark.slow
def test_tables_and_charts_render(opened: Opened) -> None:
    page = opened.page

    async def check() -> None:
        assert await page.title() == "Venus evaluation"
        ids = await page.eval_on_selector_all("section", "els => els.map(e => e.id)")
        assert ids == ["overview", "comparison"] + [f"result-{i}" for i in range(6)]
        # one stage-by-stage table per suite: grounding, navigation, online, each mid_train vs merge
        heads = await page.locator("#comparison h3").all_inner_texts()
        assert [h.split(":")[0] for h in heads] == ["held-out grounding", "held-out navigation", "online"]
        tables = page.locator("table")
        assert await tables.count() >= 20
        for i in range(await tables.count()):
            t = tables.nth(i)
            assert await t.is_visible(), f"table {i} hidden"
            box = await t.bounding_box()
            assert box and box["width"] > 100 and box["height"] > 20, (i, box)
            rows = await t.locator("tr").count()
            cells = [c.strip() for c in await t.locator("td").all_inner_texts()]
            assert rows >= 2 and any(cells), f"table {i} is empty"
        charts = page.locator("svg.chart")
        assert await charts.count() >= 10
        for i in range(await charts.count()):
            c = charts.nth(i)
            assert await c.is_visible(), f"chart {i} hidden"
            box = await c.bounding_box()
            assert box and box["width"] > 300 and box["height"] > 50, (i, box)
            bars = await c.evaluate("svg => [...svg.querySelectorAll('rect')].map(r => r.getBBox().width)")
            labels = await c.evaluate("svg => [...svg.querySelectorAll('text')].filter(t => t.getBBox().width > 0).length")
            assert bars and labels >= 3, f"chart {i}: bars {bars}, {labels} labels drawn"
        # the comparison chart draws one bar per stage: mid_train's and merge's widths differ
        first = page.locator("#comparison svg.chart").first
        widths = await first.evaluate("svg => [...svg.querySelectorAll('rect[opacity]')].map(r => r.getBBox().width)")
        assert len(set(widths)) > 1, widths
        # the stage table cell: k/n, the rate and its interval
        cell = await page.locator("#comparison table").first.locator("td.num").first.inner_text()
        assert "/" in cell and "[" in cell and "%" in cell, cell
        decoded = await page.eval_on_selector_all("img", "els => els.map(e => e.complete ? e.naturalWidth : 0)")
        assert len(decoded) > 20 and min(decoded) > 0, "a screenshot did not decode"

    opened.run(check())


def _visible_steps(page: Any, key: str) -> Any:
    return page.eval_on_selector_all(
        f'[id^="{key}-s"] + .step', "els => els.map(e => e.offsetParent !== null)")


@pytest.mark.slow
def test_step_through_an_online_episode(opened: Opened) -> None:
    page, merged = opened.page, opened.report.results[5]
    ep = merged.samples[1]  # the wrong first tap, then the plan
    key = "r5-e1"
    n = len(ep["trajectory"])
    assert ep["success"] and n >= 3 and len(ep["frames"]) == n

    async def shown() -> list[bool]:
        return await _visible_steps(page, key)

    async def current_src() -> str:
        imgs = page.locator(f'[id^="{key}-s"]:checked + .step img')
        assert await imgs.count() == 1
        assert await imgs.first.is_visible()
        return await imgs.first.get_attribute("src") or ""

    async def check() -> None:
        block = page.locator(f"#result-5 .episode").nth(1)
        why = await block.locator(".why").inner_text()
        assert why == f"why: {verdict_reason(ep)}" and "passed" in why
        assert "Click(box=(30,30))" in await block.inner_text()
        # one step at a time: the first is shown, with its annotated screen
        assert await shown() == [True] + [False] * (n - 1)
        assert await block.locator(".step .pos").filter(has_text="step 1 of").is_visible()
        srcs = [await current_src()]
        await block.locator(f'label.next[for="{key}-s1"]').click()
        assert await shown() == [False, True] + [False] * (n - 2)
        srcs.append(await current_src())
        await page.keyboard.press("ArrowRight")  # the step radios are one group: arrows step on
        assert await shown() == [False, False, True] + [False] * (n - 3)
        srcs.append(await current_src())
        assert srcs == ep["frames"][:3] and len(set(srcs)) == 3
        await block.locator(f'label.prev[for="{key}-s1"]').click()
        assert await shown() == [False, True] + [False] * (n - 2)
        await block.locator(f'label[for="{key}-all"]').click()
        assert await shown() == [True] * n
        await block.locator(f'.stepbar label[for="{key}-s0"]').click()
        assert await shown() == [True] + [False] * (n - 1)
        # the other episodes are not moved by this one's control
        assert (await _visible_steps(page, "r5-e0"))[0] is True
        # a failed episode says why: the step limit, its invalid steps
        failed = opened.report.results[4].samples[0]
        why = await page.locator("#result-4 .episode .why").first.inner_text()
        assert why == f"why: {verdict_reason(failed)}" and "step limit" in why and "invalid" in why

    opened.run(check())


@pytest.mark.slow
def test_screenshot_of_the_report(opened: Opened, tmp_path: Path) -> None:
    """The overview, the stage-by-stage table and an online episode at its second step: not blank;
    written to $VENUS_REPORT_SCREENSHOT too when set (the docs' picture)."""
    page = opened.page

    async def shoot() -> bytes:
        await page.locator('label.next[for="r5-e1-s1"]').click()
        await page.evaluate("""() => {  // the online section's episode next to the top of the page
            const keep = new Set(['overview', 'comparison', 'result-5']);
            for (const s of document.querySelectorAll('section')) if (!keep.has(s.id)) s.style.display = 'none';
            const c = document.querySelector('#comparison');
            for (const el of [...c.children].slice(4)) el.style.display = 'none';  // first suite, its table
            const r = document.querySelector('#result-5');
            for (const el of r.querySelectorAll('h3, table, svg, p.note')) el.style.display = 'none';
            r.querySelectorAll('.episode')[0].style.display = 'none';
            for (const e of [...r.querySelectorAll('.episode')].slice(2)) e.style.display = 'none';
        }""")
        return await page.screenshot(full_page=True)

    png = opened.run(shoot())
    img = Image.open(io.BytesIO(png)).convert("RGB")
    assert img.width == VIEWPORT["width"] and img.height > 600
    colours = img.getcolors(maxcolors=1 << 16)
    assert colours is None or len(colours) > 50, "the screenshot is (nearly) blank"
    dest = os.environ.get("VENUS_REPORT_SCREENSHOT")
    out = Path(dest) if dest else tmp_path / "report.png"
    out.parent.mkdir(parents=True, exist_ok=True)
    img.quantize(colors=128, method=Image.Quantize.MEDIANCUT).save(out, optimize=True)
    assert out.stat().st_size > 10_000


def _episode(**fields: Any) -> dict[str, Any]:
    steps = [{"step": 0, "answer": "x", "think": "", "conclusion": "", "action": None, "valid": False,
              "error": "no parse"},
             {"step": 1, "answer": "y", "think": "", "conclusion": "", "action": "Finished(content='')", "valid": True}]
    return {"id": 'x" id="evil', "goal": "g", "app": None, "difficulty": 3, "success_check": "synth:level=3",
            "success": False, "steps": 2, "invalid_steps": 1, "truncated": False, "max_steps": 2,
            "trajectory": steps, "frames": [], **fields}


def test_verdict_reason_says_how_the_episode_ended() -> None:
    assert verdict_reason(_episode()) == (
        "the model ended it with Finished(content='') after 2 steps; the environment's check of synth:level=3 "
        "did not pass; 1 of 2 steps invalid (not executed), last error: no parse.")
    cut = _episode(truncated=True, trajectory=_episode()["trajectory"][:1], steps=2, invalid_steps=2)
    assert verdict_reason(cut).startswith("cut by the step limit after 2 steps (limit 2); ")
    won = _episode(success=True, invalid_steps=0, trajectory=_episode()["trajectory"][1:], steps=1)
    assert verdict_reason(won) == ("the model ended it with Finished(content='') after 1 step; "
                                   "the environment's check of synth:level=3 passed.")


def test_stepper_ids_come_from_the_key_only() -> None:
    """Element ids and label targets are the key plus indices, whatever the result's text says;
    a key that is not a plain name is refused."""
    samples = [_episode(), _episode(id="second")]
    res = EvalResult(evaluator="online", suite="s", model="m", data="d", summary=summarize(samples), samples=samples)
    html = online_html(res, 8, key="r2")
    ids = re.findall(r'\b(?:id|for)="([^"]*)"', html)
    assert ids and all(re.fullmatch(r"r2-e[01]-(s[01]|all)", i) for i in ids), ids
    assert html.count('checked="checked"') == 2  # each episode starts at its first step
    for bad in ("", "1x", 'a" onclick="f()', "a b"):
        with pytest.raises(ValueError, match="viewer key"):
            online_html(res, 8, key=bad)


def test_a_cut_episode_says_how_many_steps_it_had() -> None:
    samples = [_episode(), _episode(id="second")]
    res = EvalResult(evaluator="online", suite="s", model="m", data="d", summary=summarize(samples), samples=samples)
    html = online_html(res, 3)  # the second episode: 1 of its 2 steps
    assert html.count("step 1 of 2<") == 1 and html.count("step 2 of 2<") == 1
    assert "step 1 of 1 shown (2 in the episode)" in html and "all 1 step shown" in html
