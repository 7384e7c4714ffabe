from __future__ import annotations

import doctest

import venus_core.scoring.rules as rules_mod
from venus_core.config.registry import JUDGES
from venus_core.data.schema import GroundingSample, Provenance, QASample, Trajectory, TrajectoryStep

IMG = "sha256:" + "a" * 64
IMG2 = "sha256:" + "b" * 64
PROV = Provenance(source="test", source_id="1")
judge = JUDGES.get("rules")


def g(box, instruction: str = "the OK button") -> GroundingSample:
    return GroundingSample(id="g", image=IMG, image_size=(100, 100), platform="mobile",
                           instruction=instruction, box=box, refusal=box is None, provenance=PROV)


def step(action: str, image: str = IMG, target_box=None) -> TrajectoryStep:
    return TrajectoryStep(image=image, image_size=(100, 100), think="t", action=action,
                          conclusion="c", target_box=target_box)


def traj(steps, success: bool = True) -> Trajectory:
    return Trajectory(id="t", episode_id="e", platform="mobile", goal="open settings",
                      steps=steps, success=success, provenance=PROV)


def test_doctest() -> None:
    assert doctest.testmod(rules_mod).failed == 0


def test_grounding_rules() -> None:
    assert judge(g((100, 100, 200, 200))).score == 10
    assert judge(g(None)).score == 10  # refusal samples are fine
    assert judge(g((100, 100, 101, 101))).alignment == 3
    huge = judge(g((0, 0, 1000, 900)))
    assert huge.alignment == 5 and huge.rationale[0].startswith("oversized_box (alignment=5): target box covers 90%")
    assert judge(g((100, 100, 200, 200), instruction="x")).reachability == 3


def test_trajectory_rules() -> None:
    assert judge(traj([step("Click(box=(50,50))", target_box=(0, 0, 100, 100))])).score == 10
    off = judge(traj([step("Click(box=(500,500))", target_box=(0, 0, 100, 100))]))
    assert off.alignment == 3 and "outside its target box" in off.rationale[0]
    assert judge(traj([step("Type(content=' ')")])).alignment == 2
    assert judge(traj([step("Wait()")], success=False)).reachability == 3
    stuck = judge(traj([step("Wait()"), step("Wait()"), step("Wait()")]))
    assert stuck.reachability == 5
    moving = judge(traj([step("Wait()"), step("Wait()", IMG2), step("Wait()")]))
    assert moving.score == 10


def test_qa_rule() -> None:
    qa = QASample(id="q", domain="vqa", image=IMG, image_size=(10, 10), platform="web",
                  question="Wi-Fi", answer="wi-fi", provenance=PROV)
    assert judge(qa).alignment == 3
