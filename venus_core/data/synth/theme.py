"""Colour themes of the synthetic renderer: light / dark bases with different accent colours.

Why: a grounding model must not learn "the blue thing is the button"; the same screen is drawn in
several themes. Themes change only pixels, never layout or semantics, so they are a render-time
argument and not part of the app state or the view context.
"""

from __future__ import annotations

from dataclasses import dataclass

from venus_core.data.synth.widgets import RGB


@dataclass(frozen=True)
class Theme:
    name: str
    background: RGB
    surface: RGB
    text: RGB
    subtext: RGB
    accent: RGB
    on_accent: RGB
    divider: RGB
    field: RGB
    toggle_off: RGB
    bar: RGB
    bubble_in: RGB
    scrim: RGB


def _light(name: str, accent: RGB) -> Theme:
    return Theme(
        name=name, background=(250, 250, 252), surface=(255, 255, 255), text=(25, 25, 30),
        subtext=(110, 110, 120), accent=accent, on_accent=(255, 255, 255),
        divider=(225, 225, 230), field=(240, 241, 245), toggle_off=(190, 190, 198),
        bar=accent, bubble_in=(232, 232, 238), scrim=(90, 90, 95),
    )


def _dark(name: str, accent: RGB) -> Theme:
    return Theme(
        name=name, background=(20, 21, 26), surface=(36, 38, 45), text=(235, 235, 240),
        subtext=(160, 160, 170), accent=accent, on_accent=(15, 15, 20),
        divider=(60, 62, 70), field=(50, 52, 60), toggle_off=(90, 92, 100),
        bar=(30, 32, 38), bubble_in=(55, 57, 66), scrim=(5, 5, 8),
    )


THEMES: dict[str, Theme] = {
    t.name: t
    for t in (
        _light("light-blue", (33, 110, 230)),
        _light("light-green", (20, 140, 90)),
        _light("light-purple", (120, 70, 200)),
        _dark("dark-blue", (110, 170, 255)),
        _dark("dark-orange", (255, 150, 60)),
        _dark("dark-teal", (60, 200, 190)),
    )
}


def get_theme(name: str) -> Theme:
    try:
        return THEMES[name]
    except KeyError:
        raise ValueError(f"unknown theme {name!r}; known: {sorted(THEMES)}") from None
