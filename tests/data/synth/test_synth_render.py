"""Renderer output sizes, layouts, languages; widget boxes inside the screen; hit-testing."""

from __future__ import annotations

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
