from __future__ import annotations

from pathlib import Path

import pytest

from venus_core.eval.navigation import UNPARSED, evaluate_nav_offline

from eval_fixtures import Scripted, nav, write_trajectories

# e0: Click ok (within 14 % of the diagonal), Type type-only (F1 < 0.5), Finished wrong type (Wait);
# e1: Scroll ok (direction), Click wrong format.
ANSWERS = {
    "e0:0": nav("Click(box=(560,540))"),
    "e0:1": nav("Type(content='goodbye')"),
    "e0:2": nav("Wait()"),
    "e1:0": "Scroll(start=(100,900),end=(100,100),direction='down')",  # bare action is accepted
    "e1:1": "<think>x</think><action>Tap(1,2)</action><conclusion>y</conclusion>",
}


def _rate(d: dict) -> tuple[int, int]:
    return d["k"], d["n"]


def test_aggregation_exact(nav_data: Path) -> None:
    res = evaluate_nav_offline(nav_data, Scripted(ANSWERS), chunk=2)
    s = res.summary
    assert _rate(s["type_accuracy"]) == (3, 5)
    assert _rate(s["step_success"]) == (2, 5)
    assert s["wrong_format"]["count"] == 1
    assert _rate(s["episode_success"]) == (0, 2)
    assert {t: (_rate(d["type_accuracy"]), _rate(d["step_success"])) for t, d in s["by_type"].items()} == {
        "Click": ((1, 2), (1, 2)), "Finished": ((0, 1), (0, 1)), "Scroll": ((1, 1), (1, 1)), "Type": ((1, 1), (0, 1))}
    assert s["confusion"] == {"Click": {"Click": 1, UNPARSED: 1}, "Finished": {"Wait": 1},
                              "Scroll": {"Scroll": 1}, "Type": {"Type": 1}}
    by_id = {x["id"]: x for x in res.samples}
    assert by_id["e0:0"]["predicted"] == "Click(box=(560,540))" and by_id["e0:0"]["think"] == "model think"
    assert by_id["e1:1"]["predicted"] is None and by_id["e1:1"]["target_box"] == [50, 50, 150, 150]
    assert res.settings["level"] == "high" and res.benchmark is None


def test_target_box_rule_beats_distance(nav_data: Path) -> None:
    # e1:1 has target box (50,50,150,150): (160,100) is 60 from the reference point but outside the box.
    res = evaluate_nav_offline(nav_data, Scripted({**ANSWERS, "e1:1": nav("Click(box=(160,100))")}))
    assert not {x["id"]: x for x in res.samples}["e1:1"]["step_success"]
    res = evaluate_nav_offline(nav_data, Scripted({**ANSWERS, "e1:1": nav("Click(box=(140,140))")}))
    assert {x["id"]: x for x in res.samples}["e1:1"]["step_success"]


def test_all_correct_gives_episode_success(nav_data: Path) -> None:
    answers = {"e0:0": nav("Click(box=(500,500))"), "e0:1": nav("Type(content='hello world')"),
               "e0:2": nav("Finished(content='')"), "e1:0": nav("Scroll(start=(500,800),end=(500,200),direction='down')"),
               "e1:1": nav("Click(box=(100,100))")}
    s = evaluate_nav_offline(nav_data, Scripted(answers)).summary
    assert _rate(s["step_success"]) == (5, 5) and _rate(s["episode_success"]) == (2, 2)


def test_levels_and_reference_history(nav_data: Path) -> None:
    high, low = Scripted(ANSWERS), Scripted(ANSWERS)
    evaluate_nav_offline(nav_data, high, level="high")
    evaluate_nav_offline(nav_data, low, level="low")
    assert all("Step instruction" not in q.prompt for q in high.seen)
    assert "Step instruction: type hello" in low.seen[1].prompt
    # the second step's history is the reference first step, not the model's answer
    assert "Step 1: <think>ref think Click(box=(500,500))</think><action>Click(box=(500,500))</action>" in high.seen[1].prompt


def test_low_level_without_instructions_names_the_record(tmp_path: Path) -> None:
    data = write_trajectories(tmp_path / "noinstr", with_instructions=False)
    pred = Scripted(ANSWERS)
    with pytest.raises(ValueError, match=r"record 'e0:0'.*step instruction"):
        evaluate_nav_offline(data, pred, level="low")
    assert pred.seen == []  # failed before any inference
    with pytest.raises(ValueError, match="level"):
        evaluate_nav_offline(data, pred, level="mid")  # type: ignore[arg-type]


def test_limit_counts_episodes(nav_data: Path) -> None:
    res = evaluate_nav_offline(nav_data, Scripted(ANSWERS), limit=1)
    assert [x["id"] for x in res.samples] == ["e0:0", "e0:1", "e0:2"]
    assert _rate(res.summary["episode_success"]) == (0, 1)


def test_progress_counts_steps_planned_only_for_a_dataset_of_steps(nav_data: Path, tmp_path: Path) -> None:
    from venus_core.data.store import DatasetReader, DatasetWriter
    from venus_core.models.prompts import HISTORY_STEPS

    calls: list[tuple[int, int | None]] = []
    res = evaluate_nav_offline(nav_data, Scripted(ANSWERS), chunk=2, progress=lambda d, t: calls.append((d, t)))
    assert calls == [(2, None), (4, None), (5, None)] and len(res.samples) == 5  # trajectories: steps unknown ahead
    reader = DatasetReader(nav_data)
    with DatasetWriter(tmp_path / "steps") as w:
        for trajectory in reader:
            for step in trajectory.to_steps(HISTORY_STEPS):  # type: ignore[union-attr]
                w.copy_record(step, reader)
    calls.clear()
    res = evaluate_nav_offline(tmp_path / "steps", Scripted(ANSWERS), chunk=2, limit=4,
                               progress=lambda d, t: calls.append((d, t)))
    assert calls == [(2, 4), (4, 4)] and len(res.samples) == 4
