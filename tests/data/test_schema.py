"""Record schema: JSON round trips, field-naming errors, refusal rule, to_steps history."""

from __future__ import annotations

import json
from typing import Any

import pytest
from data_helpers import Build, canon

from venus_core.data import (
    GroundingSample,
    HistoryItem,
    NavigationStep,
    Provenance,
    QASample,
    RecordError,
    Trajectory,
    parse_record,
)


def _roundtrip(record: Any) -> None:
    line = record.model_dump_json()
    back = parse_record(json.loads(line), where="mem:1")
    assert type(back) is type(record)
    assert back == record
    assert back.model_dump_json() == line


def test_every_kind_round_trips_through_json(build: Build) -> None:
    traj = build.trajectory(3)
    records = [build.grounding(0), build.grounding(1, box=None, refusal=True),
               build.qa(0), build.qa(1, domain="perception"), traj, *traj.to_steps()]
    kinds = {r.kind for r in records}
    assert kinds == {"grounding", "qa", "trajectory", "navigation_step"}
    for record in records:
        _roundtrip(record)


def _error_fields(obj: dict[str, Any]) -> list[str]:
    with pytest.raises(RecordError) as info:
        parse_record(obj, where="shard.jsonl:7")
    assert "shard.jsonl:7" in str(info.value)
    return [field for field, _, _ in info.value.errors]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"box": [0, 0, 0, 10]}, "box"),             # degenerate
        ({"box": [10, 10, 5, 20]}, "box"),           # x1 > x2
        ({"box": [0, 0, 1001, 10]}, "box"),          # outside 0..1000
        ({"box": [-1, 0, 10, 10]}, "box"),
        ({"box": [1, 2, 3]}, "box[3]"),             # too short: the missing item is named
        ({"box": [1, 2, 3, "4"]}, "box[3]"),         # strict ints
        ({"box": [1.5, 2, 3, 4]}, "box[0]"),
        ({"box": None}, "refusal"),                  # no box but not a refusal
        ({"refusal": True}, "refusal"),              # refusal with a box
        ({"image": "sha256:abc"}, "image"),
        ({"image": "md5:" + "a" * 64}, "image"),
        ({"image": "sha256:" + "A" * 64}, "image"),
        ({"image_size": [0, 10]}, "image_size[0]"),
        ({"image_size": [10, -3]}, "image_size[1]"),
        ({"image_size": [10]}, "image_size[1]"),
        ({"instruction": "   "}, "instruction"),
        ({"instruction": 5}, "instruction"),
        ({"platform": "tv"}, "platform"),
        ({"domain": "vqa"}, "domain"),
        ({"id": "has space"}, "id"),
        ({"id": ""}, "id"),
        ({"unknown": 1}, "unknown"),
        ({"provenance": {"source": "x"}}, "provenance.source_id"),
        ({"provenance": {"source": "x", "source_id": "1", "seed": "3"}}, "provenance.seed"),
        ({"meta": {"f": {1, 2}}}, "meta.f"),
    ],
)
def test_invalid_grounding_field_is_named(build: Build, change: dict[str, Any], field: str) -> None:
    obj = build.grounding(0).model_dump()
    obj.update(change)
    assert field in _error_fields(obj)


def test_missing_or_unknown_kind_is_an_error(build: Build) -> None:
    obj = build.grounding(0).model_dump()
    obj["kind"] = "screenshot"
    assert _error_fields(obj)
    del obj["kind"]
    assert _error_fields(obj)
    with pytest.raises(RecordError, match="JSON object"):
        parse_record([1, 2], where="x:1")


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"domain": "grounding"}, "domain"),
        ({"question": ""}, "question"),
        ({"answer": " \n"}, "answer"),
    ],
)
def test_invalid_qa_field_is_named(build: Build, change: dict[str, Any], field: str) -> None:
    obj = build.qa(0).model_dump()
    obj.update(change)
    assert field in _error_fields(obj)


def test_invalid_trajectory_fields_are_named(build: Build) -> None:
    obj = build.trajectory(2).model_dump()
    assert "steps" in _error_fields({**obj, "steps": []})
    assert "success" in _error_fields({**obj, "success": "yes"})
    bad_step = {**obj["steps"][0], "target_box": [5, 5, 5, 6]}
    assert "steps[0].target_box" in _error_fields({**obj, "steps": [bad_step, obj["steps"][1]]})


def test_navigation_actions_must_parse_for_the_platform(build: Build) -> None:
    step = build.trajectory(3).to_steps()[2].model_dump()
    with pytest.raises(RecordError) as info:
        parse_record({**step, "action": "Teleport(to=(1,2))"}, where="s:3")
    assert [(f, t.startswith("action")) for f, t, _ in info.value.errors] == [("action", True)]
    # a web-style Scroll without start/end is not a valid mobile action
    web_scroll = canon("Scroll(direction='down')", "web")
    assert "action" in _error_fields({**step, "action": web_scroll})
    assert parse_record({**step, "platform": "web", "action": web_scroll}).action == web_scroll
    bad_hist = [{"think": "t", "action": "Click(box=(5000,1))"}, *step["history"][1:]]
    assert "history[0].action" in _error_fields({**step, "history": bad_hist})
    traj = build.trajectory(2).model_dump()
    traj["steps"][1]["action"] = "Fly()"
    assert _error_fields(traj) == ["steps[1].action"]


def test_navigation_actions_must_be_canonical(build: Build) -> None:
    step = build.trajectory(1).to_steps()[0].model_dump()
    canonical = canon("Click(box=(500,300))")
    spelled = "Click( box = ( 500 , 300 ) )"
    assert canon(spelled) == canonical
    with pytest.raises(RecordError, match="canonical") as info:
        parse_record({**step, "action": spelled})
    assert info.value.errors[0][0] == "action"


def test_history_cannot_be_longer_than_step_index(build: Build) -> None:
    step = build.trajectory(4).to_steps()[3].model_dump()
    assert len(step["history"]) == 3
    assert "step_index" in _error_fields({**step, "step_index": 2})
    assert "step_index" in _error_fields({**step, "step_index": -1})


def test_to_steps_keeps_last_history_len_items_and_true_index(build: Build) -> None:
    traj = build.trajectory(8)
    steps = traj.to_steps(history_len=5)
    assert [s.step_index for s in steps] == list(range(8))
    assert [len(s.history) for s in steps] == [0, 1, 2, 3, 4, 5, 5, 5]
    last = steps[7]
    assert last.history == [HistoryItem(think=s.think, action=s.action) for s in traj.steps[2:7]]
    assert last.action == traj.steps[7].action and last.think == "done"
    assert steps[3].target_box == traj.steps[3].target_box
    assert {s.id for s in steps} == {f"t0:{i}" for i in range(8)}
    assert all(s.episode_id == "ep0" and s.goal == traj.goal and s.provenance == traj.provenance
               for s in steps)
    assert last.meta == {"app": "demo", "trajectory_id": "t0", "trajectory_success": True,
                         "num_steps": 8}
    assert [len(s.history) for s in traj.to_steps(history_len=0)] == [0] * 8
    assert len(traj.to_steps(history_len=100)[7].history) == 7
    with pytest.raises(ValueError, match="history_len"):
        traj.to_steps(history_len=-1)


def test_models_forbid_extra_and_construct_directly() -> None:
    prov = Provenance(source="s", source_id="1")
    with pytest.raises(ValueError, match="extra"):
        Provenance(source="s", source_id="1", whatever=2)  # type: ignore[call-arg]
    g = GroundingSample(id="x", image="sha256:" + "0" * 64, image_size=(3, 4), platform="web",
                        instruction="a", box=None, refusal=True, provenance=prov)
    assert g.kind == "grounding" and g.domain == "grounding"
    with pytest.raises(ValueError, match="domain"):
        QASample(id="q", domain="navigation", image=g.image, image_size=(3, 4),  # type: ignore[arg-type]
                 platform="web", question="q", answer="a", provenance=prov)
    assert isinstance(Trajectory.model_fields["steps"].annotation, object)
    assert NavigationStep.model_fields["kind"].default == "navigation_step"
