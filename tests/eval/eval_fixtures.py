"""Helpers of the evaluation tests: tiny hand-built datasets whose every expected number is known,
and a scripted predictor that answers by sample id (so aggregation is tested exactly)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from PIL import Image

from venus_core.data import DatasetWriter, GroundingSample, Provenance, Trajectory, TrajectoryStep
from venus_core.eval.predictors import Query


class Scripted:
    """Predictor answering `answers[query.id]` (or `default`); records every query it saw."""

    def __init__(self, answers: dict[str, str], default: str = "garbage", name: str = "scripted") -> None:
        self.answers = answers
        self.default = default
        self.name = name
        self.seen: list[Query] = []
        self.calls: list[int] = []

    def predict(self, queries: Sequence[Query], max_new_tokens: int) -> list[str]:
        self.seen += list(queries)
        self.calls.append(len(queries))
        return [self.answers.get(q.id, self.default) for q in queries]


def _image(color: tuple[int, int, int], size: tuple[int, int] = (200, 100)) -> Image.Image:
    return Image.new("RGB", size, color)


# (id, box or None, ui_type, application, group, platform)
GROUNDING_ROWS: list[tuple[str, tuple[int, int, int, int] | None, str, str, str, str]] = [
    ("g0", (100, 100, 300, 300), "text", "vscode", "Dev", "desktop"),
    ("g1", (100, 100, 300, 300), "icon", "vscode", "Dev", "desktop"),
    ("g2", (500, 500, 700, 700), "text", "word", "Office", "desktop"),
    ("g3", (500, 500, 700, 700), "icon", "word", "Office", "web"),
    ("g4", (0, 0, 1000, 1000), "text", "word", "Office", "web"),
    ("r0", None, "text", "vscode", "Dev", "desktop"),
    ("r1", None, "icon", "word", "Office", "desktop"),
]


def write_grounding(path: Path, source: str = "screenspot-pro", rows: Sequence[Any] = GROUNDING_ROWS) -> Path:
    with DatasetWriter(path) as w:
        ref = w.put_image(_image((10, 20, 30)))
        for rid, box, ui, app, group, platform in rows:
            w.write(GroundingSample(
                id=rid, image=ref, image_size=(200, 100), platform=platform, instruction=f"find {rid}",
                box=box, refusal=box is None, ui_type=ui,
                provenance=Provenance(source=source, source_id=rid, extra={"application": app, "group": group})))
    return path


def write_trajectories(path: Path, with_instructions: bool = True) -> Path:
    """Two mobile episodes: e0 = Click, Type, Finished; e1 = Scroll, Click (target box given)."""
    with DatasetWriter(path) as w:
        a, b = w.put_image(_image((200, 0, 0), (100, 200))), w.put_image(_image((0, 200, 0), (100, 200)))

        def step(img: str, action: str, instr: str, box: tuple[int, int, int, int] | None = None) -> TrajectoryStep:
            return TrajectoryStep(image=img, image_size=(100, 200), think=f"ref think {action}", action=action,
                                  conclusion="", instruction=instr if with_instructions else None, target_box=box)

        w.write(Trajectory(id="e0", episode_id="e0", platform="mobile", goal="send hello", success=True,
                           provenance=Provenance(source="androidcontrol", source_id="e0"), steps=[
                               step(a, "Click(box=(500,500))", "tap the box"),
                               step(b, "Type(content='hello world')", "type hello"),
                               step(a, "Finished(content='')", "done")]))
        w.write(Trajectory(id="e1", episode_id="e1", platform="mobile", goal="open item", success=True,
                           provenance=Provenance(source="androidcontrol", source_id="e1"), steps=[
                               step(b, "Scroll(start=(500,800),end=(500,200),direction='down')", "scroll down"),
                               step(a, "Click(box=(100,100))", "tap item", (50, 50, 150, 150))]))
    return path


def nav(action: str) -> str:
    return f"<think>model think</think><action>{action}</action><conclusion>model concl</conclusion>"
