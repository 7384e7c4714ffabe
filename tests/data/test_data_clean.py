"""Cleaning rules: scroll semantics, inconsistency filter, information-retrieval repair, resampling."""

from __future__ import annotations

import doctest
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

import venus_core.data.clean.info_retrieval as ir_mod
import venus_core.data.clean.scroll as scroll_mod
from venus_core.data import DatasetReader, DatasetWriter, Provenance, Trajectory, TrajectoryStep
from venus_core.data.clean import CLEAN_STEPS, CleanOptions, clean_dataset, clean_records
from venus_core.data.clean.resample import action_mix
from venus_core.data.schema import GroundingSample, HistoryItem, NavigationStep
from venus_core.data.validate import validate_dataset

A, B = "sha256:" + "a" * 64, "sha256:" + "b" * 64


def step(action: str, image: str = A, **meta: object) -> TrajectoryStep:
    return TrajectoryStep(
        image=image, image_size=(8, 6), think="t", action=action, conclusion="c", meta=dict(meta)
    )


def traj(
    rid: str,
    actions: list[str] | list[TrajectoryStep],
    goal: str = "open settings",
    source: str = "src",
    platform: str = "mobile",
    meta: dict | None = None,
    extra: dict | None = None,
) -> Trajectory:
    steps = [
        a if isinstance(a, TrajectoryStep) else step(a, A if i % 2 == 0 else B) for i, a in enumerate(actions)
    ]
    return Trajectory(
        id=rid,
        episode_id=f"ep-{rid}",
        platform=platform,
        goal=goal,
        steps=steps,
        success=True,
        provenance=Provenance(source=source, source_id=rid, extra=extra or {}),
        meta=meta or {},
    )


def run(name: str, records: list, **opts: object):
    return CLEAN_STEPS.get(name)(records, CleanOptions(**opts))


def test_doctests() -> None:
    assert doctest.testmod(scroll_mod).failed == 0 and doctest.testmod(ir_mod).failed == 0


def test_unify_scroll_per_source_flag() -> None:
    up_swipe_down_word = "Scroll(start=(500,800),end=(500,200),direction='down')"
    consistent = "Scroll(start=(500,800),end=(500,200),direction='up')"
    recs = [
        traj("c", [up_swipe_down_word, "Finished(content='')"], source="content-src"),
        traj("f", [up_swipe_down_word], source="finger-src"),
        traj("a", [up_swipe_down_word, consistent], source="other"),
        traj("w", ["Scroll(direction='down')"], source="web-src", platform="web"),
        traj("x", [up_swipe_down_word], source="flagged", extra={"scroll_semantics": "content"}),
    ]
    out = run(
        "unify_scroll",
        recs,
        scroll_semantics={"content-src": "content", "finger-src": "finger", "web-src": "content"},
    )
    by = {r.id: r for r in out.records}
    assert by["c"].steps[0].action == consistent  # content semantics: flipped
    assert by["f"].steps[0].action == up_swipe_down_word  # finger: trusted as is
    assert [s.action for s in by["a"].steps] == [consistent, consistent]  # auto: only the contradicted one
    assert by["w"].steps[0].action == "Scroll(direction='up')"
    assert by["x"].steps[0].action == consistent  # provenance flag
    assert out.changed == 4 and out.info == {"scroll_actions_flipped": 4}
    nav = NavigationStep(
        id="n",
        image=A,
        image_size=(8, 6),
        platform="web",
        goal="g",
        history=[HistoryItem(think="", action="Scroll(direction='left')")],
        think="t",
        action="Scroll(direction='up')",
        conclusion="c",
        step_index=1,
        episode_id="e",
        provenance=Provenance(source="s", source_id="n"),
    )
    [n2] = run("unify_scroll", [nav], default_scroll_semantics="content").records
    assert (n2.action, n2.history[0].action) == ("Scroll(direction='down')", "Scroll(direction='right')")


def test_filter_inconsistent_reasons() -> None:
    recs = [
        traj("ok", ["Click(box=(10,10))", "Finished(content='')"]),
        traj("edge", ["Click(box=(1000,400))"]),
        traj("type", [step("Type(content='x')", focused_editable=False)]),
        traj("typeok", [step("Type(content='x')", focused_editable=True), step("Type(content='y')")]),
        traj("loop", [step("Click(box=(5,5))")] * 3),
        traj("after", ["Finished(content='')", "Click(box=(10,10))"]),
    ]
    out = run("filter_inconsistent", recs)
    assert [r.id for r in out.records] == ["ok", "typeok"]
    assert {r.id: why.split(":")[0] for r, why in out.dropped} == {
        "edge": "point_off_screen",
        "type": "type_without_focus",
        "loop": "noop_loop",
        "after": "action_after_finished",
    }
    assert [
        r.id for r in run("filter_inconsistent", recs, edge_is_off_screen=False, noop_repeats=4).records
    ] == ["ok", "edge", "typeok", "loop"]


def test_reconstruct_info_retrieval() -> None:
    recs = [
        traj(
            "q1",
            ["Click(box=(10,10))", "Finished(content='')"],
            goal="How many unread messages?",
            meta={"answer": "3"},
        ),
        traj("q2", ["Click(box=(10,10))"], goal="What is the battery level", extra={"answer": "80%"}),
        traj("q3", ["Click(box=(10,10))"], goal="Which app uses most storage?"),
        traj("q4", ["Finished(content='5 GB')"], goal="how much storage is free"),
        traj("t", ["Click(box=(10,10))"], goal="Turn on Wi-Fi"),
    ]
    out = run("reconstruct_info_retrieval", recs)
    by = {r.id: r for r in out.records}
    assert by["q1"].steps[-1].action == "Finished(content='3')" and len(by["q1"].steps) == 2
    assert len(by["q2"].steps) == 2 and by["q2"].steps[-1].action == "Finished(content='80%')"
    assert by["q2"].steps[-1].image == by["q2"].steps[0].image and by["q2"].meta["ir_answer_inserted"]
    assert by["q3"].meta["ir_unanswered"] is True and len(by["q3"].steps) == 1
    assert by["q4"] == recs[3] and by["t"] == recs[4]
    assert out.info == {"info_goals": 4, "already_answered": 1, "fixed": 2, "unfixable": 1}


def test_resample_raises_rare_actions() -> None:
    recs = [traj(f"c{i}", ["Click(box=(10,10))", "Click(box=(20,20))"]) for i in range(20)]
    recs.append(traj("lp", ["LongPress(box=(10,10))", "Click(box=(20,20))"]))
    recs.append(
        GroundingSample(
            id="g",
            image=A,
            image_size=(8, 6),
            platform="mobile",
            instruction="x",
            box=(1, 1, 5, 5),
            provenance=Provenance(source="s", source_id="g"),
        )
    )
    out = run("resample_actions", recs, resample_target_share=0.1, resample_max_copies=3)
    copies = [r for r in out.records if r.meta.get("resample_of") == "lp"]
    assert [r.id for r in copies] == ["lp~r1", "lp~r2", "lp~r3"] and all(
        c.episode_id == "ep-lp" for c in copies
    )
    assert out.added == 3 and len(out.records) == len(recs) + 3
    assert out.info["share_before"]["LongPress"] < 0.03 < out.info["share_after"]["LongPress"]
    assert action_mix(out.records)["LongPress"] == 4
    assert run("resample_actions", recs, resample_target_share=0.0).added == 0


def test_unknown_step_and_switches() -> None:
    recs = [traj("edge", ["Click(box=(1000,400))"])]
    with pytest.raises(ValueError, match="unknown cleaning step.*known: filter_inconsistent"):
        clean_records(recs, CleanOptions(steps=["nope"]))
    kept, reports, dropped = clean_records(recs, CleanOptions(steps=["unify_scroll"]))
    assert kept == recs and [r.name for r in reports] == ["unify_scroll"] and dropped == []


def test_clean_dataset_end_to_end(tmp_path: Path) -> None:
    with DatasetWriter(tmp_path / "src") as w:
        a = w.put_image(Image.new("RGB", (8, 6), (1, 2, 3)))
        b = w.put_image(Image.new("RGB", (8, 6), (9, 9, 9)))
        good = [
            step("Click(box=(10,10))", a),
            step("Scroll(start=(500,800),end=(500,200),direction='down')", b),
            step("Finished(content='')", b),
        ]
        w.write(traj("good", good, source="content-src"))
        w.write(traj("bad", [step("Click(box=(0,10))", a)]))
        w.write(
            traj("ask", [step("Click(box=(10,10))", a)], goal="What is the time?", meta={"answer": "9:00"})
        )
    report = clean_dataset(
        tmp_path / "src",
        tmp_path / "out",
        CleanOptions(scroll_semantics={"content-src": "content"}, resample_target_share=0.0),
    )
    assert (report["read"], report["written"], report["dropped"], report["added"]) == (3, 2, 1, 0)
    assert [s["step"] for s in report["steps"]] == [
        "unify_scroll",
        "filter_inconsistent",
        "reconstruct_info_retrieval",
        "resample_actions",
    ]
    for s in report["steps"]:
        assert s["after"] == s["before"] - s["dropped"] + s["added"]
    assert json.loads((tmp_path / "out" / "dropped.jsonl").read_text())["reason"].startswith(
        "point_off_screen"
    )
    assert json.loads((tmp_path / "out" / "clean_report.json").read_text())["written"] == 2
    out = {r.id: r for r in DatasetReader(tmp_path / "out" / "dataset")}
    assert out["good"].steps[1].action.endswith("direction='up')")
    assert out["ask"].steps[-1].action == "Finished(content='9:00')"
    assert validate_dataset(tmp_path / "out" / "dataset").ok


_pt = st.tuples(st.integers(0, 1000), st.integers(0, 1000))


@given(start=_pt, end=_pt, direction=st.sampled_from(["up", "down", "left", "right"]),
       semantics=st.sampled_from(["finger", "content", "auto"]))
def test_unify_action_properties(start, end, direction, semantics) -> None:
    from venus_core.actions import Scroll, render_action

    action = render_action(Scroll(start=start, end=end, direction=direction))
    once = scroll_mod.unify_action(action, "mobile", semantics)
    if semantics == "auto":
        assert scroll_mod.unify_action(once, "mobile", "auto") == once  # idempotent
        swipe = scroll_mod.swipe_direction(start, end)
        if swipe is not None and swipe in (direction, scroll_mod.FLIP[direction]):
            assert once.endswith(f"direction='{swipe}')")
    elif semantics == "content":
        assert scroll_mod.unify_action(once, "mobile", "content") == action  # an involution
    else:
        assert once == action
