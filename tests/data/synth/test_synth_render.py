"""Renderer output sizes, layouts, languages; widget boxes inside the screen; hit-testing."""

from __future__ import annotations

import importlib
import random

import pytest

from venus_core.data.synth import Phone, ViewContext, render
from venus_core.data.synth.fonts import FontMissingError, font_path
from venus_core.data.synth.phone import to_logical, to_norm


@pytest.mark.parametrize("platform,lang,size", [("mobile", "en", (128, 128)),
                                                ("mobile", "zh", (180, 320)),
                                                ("web", "en", (320, 200)),
                                                ("web", "zh", (256, 256))])
def test_every_app_renders_at_requested_size(platform: str, lang: str, size: tuple) -> None:
    phone = Phone(["launcher", "settings", "messages", "shop", "form", "board"])
    state = phone.initial(random.Random(5))
    ctx = ViewContext.for_output(platform, lang, *size)
    for name, app in phone.apps.items():
        screen = app.view(state.app(name), ctx)
        img = render(screen, size, "dark-teal" if lang == "zh" else "light-blue")
        assert img.size == size and img.mode == "RGB"
        assert len(img.getcolors(maxcolors=1 << 16) or range(4)) > 3, f"{name} rendered (almost) blank"
        for w in screen.widgets:
            x1, y1, x2, y2 = w.box
            assert 0 <= x1 < x2 <= ctx.width and 0 <= y1 < y2 <= ctx.height
        for w in screen.clickables():
            pt = to_norm(*w.center, ctx)
            assert screen.hit(*to_logical(pt, ctx)) is w


def test_themes_change_pixels_not_layout() -> None:
    phone = Phone(["settings"])
    state = phone.initial(random.Random(0), foreground="settings")
    ctx = ViewContext.for_output("mobile", "en", 256, 256)
    screen = phone.view(state, ctx)
    a, b = render(screen, (256, 256), "light-blue"), render(screen, (256, 256), "dark-orange")
    assert a.tobytes() != b.tobytes()
    with pytest.raises(ValueError, match="unknown theme"):
        render(screen, (256, 256), "neon")


def test_missing_font_names_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from venus_core.data.synth import fonts

    monkeypatch.setitem(fonts.FONT_FILES, "cjk", (Path("/nonexistent/x.ttc"), "fonts-wqy-microhei"))
    with pytest.raises(FontMissingError, match="fonts-wqy-microhei"):
        font_path("cjk")


@pytest.mark.parametrize("platform", ["mobile", "web"])
def test_board_labels_are_legible_on_the_curriculum_screens(platform: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every board word fits its grid button whole, in ink at least 6 px tall on a 128 x 128 screen
    (at the default label size they were ~4 px, and label choice was not learned)."""
    render_mod = importlib.import_module("venus_core.data.synth.render")  # the package exports a function of that name
    from venus_core.data.synth.apps.board import WORDS, Board, BoardButton, BoardState

    drawn: list[str] = []
    fit = render_mod._fit

    def recording_fit(text: str, px: int, bold: bool, avail: float) -> tuple[str, float]:
        out = fit(text, px, bold, avail)
        drawn.append(out[0])
        return out

    monkeypatch.setattr(render_mod, "_fit", recording_fit)
    ctx = ViewContext.for_output(platform, "en", 128, 128)
    board = Board()
    for k, (word, _) in enumerate(WORDS):
        state = BoardState((BoardButton("blue", (360, 360, 640, 600), k),))  # a grid button's size
        img = render(board.view(state, ctx), (128, 128), "light-blue")
        x1, y1, x2, y2 = (round(v * 128 / 1000) for v in (360, 360, 640, 600))
        ink = [(x, y) for x in range(x1 + 3, x2 - 3) for y in range(y1 + 3, y2 - 3)
               if min(img.getpixel((x, y))) > 200]  # white label on a blue button
        assert ink, f"{word}: no label drawn"
        height = max(y for _, y in ink) - min(y for _, y in ink) + 1
        assert height >= 6, f"{word}: label {height} px tall on {platform}"
        assert drawn[-1] == word, f"{word} drawn as {drawn[-1]!r} on {platform}"  # whole, no ellipsis
