"""Labelled board screens for the reading stage: each screen with the box and word of its buttons.

Why: the tiny model's visual tokens carry a button's colour and place but not its word, so level 2
("click the "Send" button") stays at the random-button level (docs/learning.md). The bootstrap's
reading stage (`venus_core.train.reading`) trains the vision tower to read the words first, on a
stream of fresh screens from the same generator the grounding data comes from (`sample_screen`,
`render`), each drawn from its own generator seeded by (seed, index) so a screen never depends on
how many others were drawn.

A word is its meaning: the English and Chinese label of one `WORDS` entry are one class.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from PIL import Image

from venus_core.data.synth.apps.board import LAYOUTS, WORDS
from venus_core.data.synth.generate import _Ctx, sample_screen
from venus_core.data.synth.phone import norm_box
from venus_core.data.synth.render import render

WORD_CLASSES: tuple[str, ...] = tuple(en for en, _ in WORDS)
"""The classes a reading head predicts: each `WORDS` entry, by its English label."""
_CLASS_OF = {w: j for j, pair in enumerate(WORDS) for w in pair}


@dataclass(frozen=True)
class LabelledScreen:
    image: Image.Image
    platform: str  # mobile | web
    buttons: tuple[tuple[tuple[int, int, int, int], int], ...]  # (box in the 0-1000 frame, word class)


READING_LAYOUTS = (*LAYOUTS, "mixed")
"""Where a reading screen's buttons sit: a board layout, or `mixed` (odd screens off the grid)."""


def labelled_screens(seed: int, n: int, *, level: int = 2, start: int = 0, platform: str = "both",
                     layout: str = "grid") -> list[LabelledScreen]:
    """Screens `start .. start + n - 1` of `seed`: boards of `level` (0-2) at the level's size, with
    every labelled button's box and word class. Level 2 labels every button; levels 0-1 label some
    or none, so their screens may have no buttons to read. `layout` (`READING_LAYOUTS`) places a
    level-1/2 board's buttons: on the 3 x 3 grid, off it (`synthesize(layout="free")`'s boards: words
    at other sizes and places), or `mixed`, screen `i` off the grid when `i` is odd; a grid screen is
    the same whatever the layout asked."""
    if not 0 <= level <= 2:
        raise ValueError(f"reading screens are boards (levels 0-2), got level {level}")
    if n < 0 or start < 0:
        raise ValueError(f"need n >= 0 and start >= 0, got n={n}, start={start}")
    if layout not in READING_LAYOUTS:
        raise ValueError(f"reading layout must be one of {', '.join(READING_LAYOUTS)}, got {layout!r}")
    if layout != "grid" and level == 0:
        raise ValueError("reading layout off the grid is for level-1/2 boards (level 0's one button is free already)")
    out = []
    for i in range(start, start + n):
        free = layout == "free" or (layout == "mixed" and i % 2 == 1)
        rng = random.Random(f"{seed}:reading:{level}:free:{i}" if free else f"{seed}:reading:{level}:{i}")
        c = _Ctx(rng, level, platform, None)
        _, _, screen = sample_screen(rng, level, c.view, "free" if free else "grid")
        buttons = tuple((norm_box(w.box, c.view), _CLASS_OF[w.label]) for w in screen.widgets
                        if w.key.startswith("btn:") and w.label in _CLASS_OF)
        out.append(LabelledScreen(render(screen, c.size, c.theme), c.platform, buttons))
    return out


__all__ = ["READING_LAYOUTS", "WORD_CLASSES", "LabelledScreen", "labelled_screens"]
