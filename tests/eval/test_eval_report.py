from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest

from venus_core.eval.grounding import evaluate_grounding
from venus_core.eval.navigation import evaluate_nav_offline
from venus_core.eval.report import render_report, write_report
from venus_core.eval.results import EvalResult, load_result, result_from_dict

from eval_fixtures import Scripted, nav, write_grounding, write_trajectories

GOOD = {"g0": "[200,200]", "g1": "[200,200]", "g2": "[600,600]", "r0": "[-1,-1]"}
BAD = {"g0": "[200,200]"}


def _results(tmp_path: Path) -> list[EvalResult]:
    pro = write_grounding(tmp_path / "pro")
    syn = write_grounding(tmp_path / "syn", source="synth")
    ac = write_trajectories(tmp_path / "ac")
    mid = evaluate_grounding(pro, Scripted(BAD, name="ckpt-a"))
    mid.label = "mid_train"
    merged = evaluate_grounding(pro, Scripted(GOOD, name="ckpt-b"))
    merged.label = "merge"
    synthetic = evaluate_grounding(syn, Scripted(GOOD, name="ckpt-b"))
    navr = evaluate_nav_offline(ac, Scripted({"e0:0": nav("Click(box=(500,500))"), "e1:0": nav("Wait()")}))
    return [mid, merged, synthetic, navr]


def _section(html: str, sid: str) -> str:
    m = re.search(rf'<section id="{sid}">(.*?)</section>', html, re.S)
    assert m, f"section {sid} missing"
    return m.group(1)


def test_sections_published_numbers_and_comparison(tmp_path: Path) -> None:
    html = render_report(_results(tmp_path), viewer_limit=4)
    for sid in ("overview", "published", "comparison", "result-0", "result-1", "result-2", "result-3"):
        _section(html, sid)
    overview = _section(html, "overview")
    assert "Public benchmarks" in overview and "not comparable to published numbers" in overview
    published = _section(html, "published")
    assert "UI-Venus-1.5-8B (published)" in published and "68.4" in published and "95.9" not in published
    assert "merge (this run)" in published and "synth" not in published
    comparison = _section(html, "comparison")
    # mid 1/7 -> merge 4/7: +42.9 points; the synthetic set (other data) is not in this comparison
    assert "mid_train" in comparison and "merge" in comparison and "(Δ +42.9)" in comparison
    assert comparison.count("<h3>") == 1
    nav_section = _section(html, "result-3")
    assert "Confusion" in nav_section and "episode synth" not in nav_section and "episode e0" in nav_section
    assert html.count("data:image/jpeg;base64,") == 4 * 3 + 3  # 4 per grounding viewer, 3 steps of e0
    assert "<script" not in html and not re.search(r'(src|href)="(https?:)?//', html)


def test_published_numbers_never_beside_synthetic_results(tmp_path: Path) -> None:
    res = _results(tmp_path)
    html = render_report([res[2], res[3]], viewer_limit=0)
    assert 'id="published"' not in html and "UI-Venus-1.5" not in html and 'id="comparison"' not in html


def test_missing_dataset_keeps_the_report(tmp_path: Path) -> None:
    res = _results(tmp_path)[0]
    shutil.rmtree(tmp_path / "pro")
    html = render_report([res], viewer_limit=2)
    assert "screenshots unavailable" in html and "data:image/jpeg" not in html


def test_result_round_trip_and_errors(tmp_path: Path) -> None:
    res = _results(tmp_path)[1]
    path = tmp_path / "r.json"
    path.write_text(json.dumps(res.to_dict()))
    back = load_result(path)
    assert back.summary == res.summary and back.label == "merge" and back.display == "merge"
    bad = res.to_dict()
    del bad["samples"]
    with pytest.raises(ValueError, match="x.json: not an evaluation result: missing field"):
        result_from_dict(bad, where="x.json")
    with pytest.raises(ValueError, match="unknown field"):
        result_from_dict({**res.to_dict(), "extra": 1}, where="x.json")
    with pytest.raises(ValueError, match="version"):
        result_from_dict({**res.to_dict(), "version": 9}, where="x.json")
    with pytest.raises(ValueError, match="no results"):
        render_report([])


@pytest.mark.slow
def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    chromium = Path("/usr/bin/chromium")
    if not chromium.exists():
        pytest.skip("no /usr/bin/chromium")
    page_file = write_report(_results(tmp_path), tmp_path / "report.html", viewer_limit=3)
    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(chromium),
                                    args=["--headless", "--no-sandbox", "--disable-gpu"])
        try:
            page = browser.new_page()
            messages: list[str] = []
            page.on("console", lambda m: messages.append(f"{m.type}: {m.text}") if m.type in ("error", "warning") else None)
            page.on("pageerror", lambda e: messages.append(f"pageerror: {e}"))
            page.goto(page_file.as_uri())
            assert page.title() == "Venus evaluation"
            ids = page.eval_on_selector_all("section", "els => els.map(e => e.id)")
            assert ids == ["overview", "published", "comparison", "result-0", "result-1", "result-2", "result-3"]
            assert page.locator("svg.chart").count() >= 8
            widths = page.eval_on_selector_all("img", "els => els.map(e => e.complete ? e.naturalWidth : 0)")
            assert len(widths) == 3 * 3 + 3 and min(widths) > 0  # every embedded screenshot decoded
            box = page.locator("#comparison svg.chart").first.bounding_box()
            assert box is not None and box["width"] > 300 and box["height"] > 50
            assert messages == []
        finally:
            browser.close()


def test_stage_table_shows_n_and_intervals_per_suite(tmp_path: Path) -> None:
    """The stage-by-stage table of two models on the held-out suites: every cell is k/n with its
    Wilson interval; grounding by level with refusal accuracy and false refusals; navigation per
    platform and per action type, so a model right only on Finished steps shows 0/n on Click."""
    from venus_core.config.spec import HeldOutSuitesSpec
    from venus_core.data.store import DatasetReader
    from venus_core.eval.held_out import build_suites
    from venus_core.eval.metrics import Rate
    from venus_core.eval.navigation import _steps
    from venus_core.eval.report import comparison_rows, pct

    root, _ = build_suites(HeldOutSuitesSpec(grounding_levels=[0, 1], grounding_per_level=10, navigation_steps=8,
                                             refusal_share=0.3), tmp_path)
    records = list(DatasetReader(root / "grounding"))
    centre = {r.id: f"[{(r.box[0] + r.box[2]) // 2},{(r.box[1] + r.box[3]) // 2}]" for r in records if r.box}  # type: ignore[union-attr]
    refusers = evaluate_grounding(root / "grounding", Scripted({}, default="[-1,-1]", name="refuser"), suite="g")
    pointer = evaluate_grounding(root / "grounding", Scripted(centre, default="[-1,-1]", name="pointer"), suite="g")
    steps = list(_steps(DatasetReader(root / "navigation"), None, {}))  # type: ignore[arg-type]
    finished = {s.id: nav(s.action) for s in steps if s.action.startswith("Finished")}
    stopper = evaluate_nav_offline(root / "navigation", Scripted(finished, name="stopper"), suite="nav")
    oracle = evaluate_nav_offline(root / "navigation", Scripted({s.id: nav(s.action) for s in steps}, name="oracle"),
                                  suite="nav")
    results = [refusers, pointer, stopper, oracle]
    html = _section(render_report(results, viewer_limit=0), "comparison")

    n_refusal = sum(1 for r in records if r.box is None)
    n_answerable = len(records) - n_refusal
    assert 0 < n_refusal < len(records)
    rows = {(r["model"], r["metric"]): r for r in comparison_rows(results)}
    expect = {("refuser", "refusal accuracy"): (n_refusal, n_refusal),
              ("refuser", "false refusals (answerable)"): (n_answerable, n_answerable),
              ("pointer", "accuracy"): (len(records), len(records)),
              ("pointer", "false refusals (answerable)"): (0, n_answerable),
              ("pointer", "level: 0"): (10, 10), ("refuser", "level: 1"): (sum(1 for r in records if r.box is None
                                                                               and r.meta["level"] == 1), 10)}
    n_click = sum(1 for s in steps if s.action.startswith("Click"))
    n_finished = sum(1 for s in steps if s.action.startswith("Finished"))
    assert n_click and n_finished
    expect.update({("stopper", "step success: Click steps"): (0, n_click),
                   ("oracle", "step success: Click steps"): (n_click, n_click),
                   ("stopper", "step success: Finished steps"): (n_finished, n_finished),
                   ("stopper", "step success"): (n_finished, len(steps))})
    for platform in ("mobile", "web"):
        assert rows[("oracle", f"step success: {platform}")]["n"] > 0
    for key, (k, n) in expect.items():
        r = rows[key]
        assert (r["k"], r["n"]) == (k, n), key
        lo, hi = Rate(k, n).interval
        assert (r["ci95_low"], r["ci95_high"]) == (round(lo, 4), round(hi, 4)), key
        assert f"{k}/{n} {pct(r)}" in html, key  # the HTML cell: k/n, rate and interval
    assert rows[("pointer", "accuracy")]["delta"] == round(1.0 - rows[("refuser", "accuracy")]["value"], 4)
    assert rows[("refuser", "accuracy")]["delta"] is None
    assert html.count("<h3>") == 2 and "<h3>g: grounding on" in html and "<h3>nav: nav_offline on" in html


def test_report_appears_whole_at_its_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 22 §2: the new page is written beside the report and renamed over it, so at the moment the
    name changes hands the old report is still whole and the new one already is."""
    res = _results(tmp_path)[1:2]
    out = write_report(res, tmp_path / "eval" / "report.html", title="first")
    old, new = out.read_bytes(), render_report(res, title="second").encode()
    renames: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        renames.append((Path(src), Path(dst)))
        assert Path(dst).read_bytes() == old and Path(src).read_bytes() == new
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", replace)
    write_report(res, out, title="second")
    assert [(src.parent, dst) for src, dst in renames] == [(out.parent, out)]
    assert out.read_bytes() == new and sorted(out.parent.iterdir()) == [out]  # no temporary left beside it


def test_a_report_write_that_fails_leaves_the_earlier_report_whole(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """issue 22 §2: a write that breaks off (here 1 MiB of page, then an unpaired surrogate escape from a
    model's text, which UTF-8 cannot encode) must leave the earlier report as it was, not an empty or
    half-written page at its path, and no temporary beside it."""
    import venus_core.eval.report as report

    res = _results(tmp_path)[1:2]
    out = write_report(res, tmp_path / "eval" / "report.html", title="first")
    old = out.read_bytes()
    monkeypatch.setattr(report, "render_report", lambda *a, **k: "<!DOCTYPE html>" + "x" * (1 << 20) + "\ud800")
    with pytest.raises(UnicodeEncodeError):
        write_report(res, out, title="second")
    assert out.read_bytes() == old and sorted(out.parent.iterdir()) == [out]
