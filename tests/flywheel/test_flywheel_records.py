"""Executed trajectories as dataset records: only the valid steps (invalid ones ran nothing), the
screenshots through the memo, provenance, and a reason when no record can be made."""

from __future__ import annotations

from PIL import Image

from venus_core.actions.space import Click, Finished
from venus_core.flywheel.records import ImageMemo, synth_seed, to_record, with_verdict
from venus_core.rl.online import sim_phone_tasks
from venus_core.rl.online.policy import answer_text
from venus_core.rl.online.rollout import Completion, StepRecord, Trajectory


def _traj(valid: list[bool]) -> Trajectory:
    task = sim_phone_tasks([1], [7], size=(128, 128))[0]
    t = Trajectory(task, 0, 0)
    for i, ok in enumerate(valid):
        img = Image.new("RGB", (128, 128), (10 * i, 0, 0))
        action = Click(box=(100, 200)) if i == 0 else Finished(content="")
        text = answer_text(action, think=f"step {i}") if ok else "<action>Click(box=("
        t.steps.append(StepRecord(img, "prompt", Completion(text), text.split("<action>")[1].split("</action>")[0]
                                  if ok else None, ok))
    return t


def test_a_record_keeps_the_valid_steps_and_names_its_provenance() -> None:
    memo = ImageMemo()
    rec = to_record(_traj([True, False, True]), memo, platform="mobile", round_=2, seed="s", expander="rules",
                    policy="p", policy_revision="rev")
    assert not isinstance(rec, str)
    assert [s.action for s in rec.steps] == ["Click(box=(100,200))", "Finished(content='')"]
    assert [s.think for s in rec.steps] == ["step 0", "step 2"] and rec.meta["invalid_steps"] == 1
    assert rec.id == "flywheel:r2:sim-phone:level=1,seed=7,lang=en,size=128x128" and rec.success
    assert rec.provenance.seed == 7 and rec.provenance.extra["round"] == 2 and rec.meta["success_check"]
    assert memo(rec.steps[1].image).getpixel((0, 0)) == (20, 0, 0)
    marked = with_verdict(rec, {"verifier": "rules"})
    assert marked.provenance.extra["verifier"] == "rules" and marked.provenance.extra["policy"] == "p"
    assert "no valid step among 2" in to_record(_traj([False, False]), memo, platform="mobile", round_=0, seed="s",
                                                expander="rules", policy="p", policy_revision="r")  # type: ignore[operator]
    assert synth_seed("synth:level=1,seed=42,lang=en,size=1x1") == 42 and synth_seed("miniwob:x") is None
