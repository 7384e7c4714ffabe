"""Curriculum levels of the synthetic world.

Why: a tiny model trained from scratch on CPU learns only with a curriculum (measured on 2 CPU cores
when the project started: free layouts stay at chance after 4 CPU-minutes, a 3x3 grid with colour cues
reaches ~30 %, one target on screen ~80 % in 5 CPU-minutes). Each level fixes what a screen looks
like, how long tasks are, the default image size and the language mix. Levels 0–2 navigate with
single clicks on the board app; the real apps come in at level 3; levels 5-6 chain several goals
across apps (see `longtasks`).
"""

from __future__ import annotations

from dataclasses import dataclass

LEVELS: dict[int, str] = {
    0: "one target on screen (a single coloured button); single-step tasks",
    1: "grid of 3-9 coloured buttons, pick by colour; single-step tasks",
    2: "grid of 3-9 labelled buttons, pick by text; single-step tasks",
    3: "real app screens (settings, messages, shop, form, home), free layout; 1-step navigation",
    4: "real apps, multi-step tasks (2-5 steps), possibly starting from another app",
    5: "multi-app composite tasks (6-19 steps), maybe ending with a question; half in Chinese",
    6: "long composite tasks (20-48 steps) across apps, maybe ending with a question; half in Chinese",
}


@dataclass(frozen=True)
class LevelSpec:
    mobile_size: tuple[int, int]
    web_size: tuple[int, int]
    zh_share: float


SPECS: dict[int, LevelSpec] = {
    0: LevelSpec((128, 128), (128, 128), 0.0),
    1: LevelSpec((128, 128), (128, 128), 0.0),
    2: LevelSpec((128, 128), (128, 128), 0.0),
    3: LevelSpec((256, 256), (320, 200), 0.0),
    4: LevelSpec((256, 256), (320, 200), 0.0),
    5: LevelSpec((256, 448), (448, 256), 0.5),
    6: LevelSpec((288, 512), (512, 288), 0.5),
}


def level_spec(level: int) -> LevelSpec:
    if level not in SPECS:
        raise ValueError(f"unknown curriculum level {level!r}; known: {sorted(LEVELS)}")
    return SPECS[level]
