"""Shared builders for the data tests: tiny PIL screenshots and one record of each kind."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from venus_core.data.images import encode_png

from venus_core.data import (
    DatasetWriter,
    GroundingSample,
    Provenance,
    QASample,
    Trajectory,
    TrajectoryStep,
)


def canon(text: str, platform: str = "mobile") -> str:
    """The canonical spelling of an action (needs venus_core.actions)."""
    from venus_core.actions import parse_action, render_action

    return render_action(parse_action(text, platform))


class Build:
    """Factories for images and records; `ref_*` are fake but well-formed refs."""

    ref_a = "sha256:" + "a" * 64
    ref_b = "sha256:" + "b" * 64

    @staticmethod
    def image(w: int = 8, h: int = 6, color: tuple[int, int, int] = (10, 20, 30)) -> Image.Image:
        return Image.new("RGB", (w, h), color)

    @staticmethod
    def png(w: int = 8, h: int = 6, color: tuple[int, int, int] = (10, 20, 30)) -> bytes:
        return encode_png(Image.new("RGB", (w, h), color))  # the store's own PNG encoding

    @staticmethod
    def prov(i: int = 0) -> Provenance:
        return Provenance(source="unit", source_id=str(i), generator="tests", seed=i)

    def grounding(self, i: int = 0, image: str | None = None, size: tuple[int, int] = (8, 6),
                  **kw: Any) -> GroundingSample:
        fields: dict[str, Any] = dict(
            id=f"g{i}", image=image or self.ref_a, image_size=size, platform="mobile",
            instruction=f"tap button {i}", box=(100, 200, 300, 400), ui_type="icon",
            provenance=self.prov(i),
        )
        fields.update(kw)
        return GroundingSample(**fields)

    def qa(self, i: int = 0, image: str | None = None, size: tuple[int, int] = (8, 6),
           domain: str = "vqa") -> QASample:
        return QASample(id=f"q{i}", domain=domain, image=image or self.ref_a, image_size=size,
                        platform="web", question="What is the title?", answer="Settings",
                        provenance=self.prov(i))

    def trajectory(self, n: int = 7, image: str | None = None, size: tuple[int, int] = (8, 6),
                   i: int = 0) -> Trajectory:
        steps = [
            TrajectoryStep(image=image or self.ref_a, image_size=size, think=f"think {k}",
                           action=canon(f"Click(box=({100 + k},{200 + k}))"),
                           conclusion=f"clicked {k}", target_box=(90 + k, 190, 120 + k, 220))
            for k in range(n - 1)
        ]
        steps.append(TrajectoryStep(image=image or self.ref_a, image_size=size, think="done",
                                    action=canon("Finished(content='ok')"), conclusion="finished"))
        return Trajectory(id=f"t{i}", episode_id=f"ep{i}", platform="mobile", goal="open settings",
                          steps=steps, success=True, provenance=self.prov(i), meta={"app": "demo"})


@pytest.fixture
def build() -> Build:
    return Build()


@pytest.fixture
def good_dataset(tmp_path: Path, build: Build) -> Path:
    """A small valid dataset: 2 shards' worth of every kind, 3 distinct images."""
    out = tmp_path / "ds"
    with DatasetWriter(out, shard_records=4, sources=["unit-test"]) as w:
        r1 = w.put_image(build.png(8, 6, (1, 2, 3)))
        r2 = w.put_image(build.image(10, 12, (200, 100, 0)))
        r3 = w.put_image(build.png(8, 6, (9, 9, 9)))
        w.write(build.grounding(0, r1, (8, 6)))
        w.write(build.grounding(1, r2, (10, 12), box=None, refusal=True))
        w.write(build.qa(0, r3, (8, 6), domain="perception"))
        w.write(build.qa(1, r1, (8, 6)))
        traj = build.trajectory(4, r2, (10, 12))
        w.write(traj)
        for step in traj.to_steps():
            w.write(step)
    return out
