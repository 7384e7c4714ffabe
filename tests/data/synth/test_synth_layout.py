"""Level-1/2 boards off the grid (`layout="free"`): buttons of random size and place, not overlapping,
distinct colours or words; the grid stays the default and its records do not change."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from venus_core.data.store import DatasetReader
from venus_core.data.synth import synthesize
from venus_core.data.synth.apps.board import WORDS, board_for, grid_board, scatter_board
from venus_core.data.synth.describe import describe
from venus_core.data.synth.generate import _Ctx, sample_screen
from venus_core.data.synth.phone import norm_box


def _digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(p.relative_to(root).as_posix().encode() + p.read_bytes())
    return h.hexdigest()


@pytest.mark.parametrize("labels", [False, True])
def test_scatter_boards_place_distinct_buttons_anywhere_without_overlap(labels: bool) -> None:
    sizes, places = set(), set()
    for seed in range(200):
        board = scatter_board(random.Random(seed), labels=labels)
        assert 2 <= len(board.buttons) <= 6
        boxes = [b.box for b in board.buttons]
        for i, (x1, y1, x2, y2) in enumerate(boxes):
            assert 20 <= x1 < x2 <= 980 and 20 <= y1 < y2 <= 980
            sizes.add((x2 - x1, y2 - y1))
            places.add((x1, y1))
            for ox1, oy1, ox2, oy2 in boxes[i + 1:]:  # 30 apart at least on one axis
                assert x1 > ox2 + 30 or ox1 > x2 + 30 or y1 > oy2 + 30 or oy1 > y2 + 30
        if labels:
            assert len({b.word for b in board.buttons}) == len(boxes) and all(0 <= b.word < len(WORDS) for b in board.buttons)
        else:
            assert len({b.color for b in board.buttons}) == len(boxes) and all(b.word == -1 for b in board.buttons)
    # the grid has one button size and nine places; these boards have many of each
    assert len(sizes) > 300 and len(places) > 300
    assert scatter_board(random.Random(5), labels=labels) == scatter_board(random.Random(5), labels=labels)
    assert len(scatter_board(random.Random(1), labels=labels, n=6).buttons) == 6
    with pytest.raises(ValueError, match="n must be"):
        scatter_board(random.Random(1), labels=labels, n=7)


def test_board_for_keeps_the_grid_the_default_and_refuses_free_level_0() -> None:
    assert board_for(random.Random(3), 1) == grid_board(random.Random(3), labels=False)
    assert board_for(random.Random(3), 2, "free") == scatter_board(random.Random(3), labels=True)
    with pytest.raises(ValueError, match="levels 1-2"):
        board_for(random.Random(3), 0, "free")
    with pytest.raises(ValueError, match="layout must be one of"):
        board_for(random.Random(3), 1, "spiral")


@pytest.mark.parametrize("level", [1, 2])
def test_free_layout_grounding_records_name_their_button_or_none(tmp_path: Path, level: int) -> None:
    m = synthesize("grounding", 60, level, 11, tmp_path / "g", refusal_share=0.3, layout="free")
    assert m.records == 60 and "layout=free" in m.created_by
    recs = list(DatasetReader(tmp_path / "g"))
    assert sum(r.refusal for r in recs) >= 5 and sum(not r.refusal for r in recs) >= 30
    off_grid = 0
    for i, r in enumerate(recs):
        assert r.provenance.extra == {"level": level, "layout": "free"}
        rng = random.Random(f"11:grounding:{level}:{i}")
        c = _Ctx(rng, level, "both", None)
        _, _, screen = sample_screen(rng, level, c.view, "free")
        named = [w for w in screen.widgets if r.instruction.endswith(describe(w, c.lang))]
        if r.refusal:
            assert not named, r.instruction
        else:
            assert any(norm_box(w.box, c.view) == r.box for w in named)
            off_grid += r.box[2] - r.box[0] not in range(270, 290)  # the grid's buttons are 280 wide
    assert off_grid >= 20


def test_the_grid_records_do_not_change_and_free_is_for_level_1_2_grounding(tmp_path: Path) -> None:
    synthesize("grounding", 12, 1, 4, tmp_path / "a")
    synthesize("grounding", 12, 1, 4, tmp_path / "b", layout="grid")
    assert _digest(tmp_path / "a") == _digest(tmp_path / "b")
    recs = list(DatasetReader(tmp_path / "a"))
    assert all(r.provenance.extra == {"level": 1} for r in recs)
    synthesize("grounding", 12, 1, 4, tmp_path / "c", layout="free")
    assert _digest(tmp_path / "a") != _digest(tmp_path / "c")
    for kind, level in [("grounding", 0), ("grounding", 3), ("navigation", 1), ("mixture", 2)]:
        with pytest.raises(ValueError, match="level-1/2 grounding"):
            synthesize(kind, 2, level, 0, tmp_path / f"x{kind}{level}", layout="free")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="is not one of"):
        synthesize("grounding", 2, 1, 0, tmp_path / "y", layout="spiral")
