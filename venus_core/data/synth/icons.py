"""Icons drawn with PIL primitives (lines, arcs, ellipses, polygons) inside a square box.

Why: icon buttons without text are a large share of real grounding targets ("the search icon"),
and an icon font would be one more package to pin; a few strokes per glyph are enough for a
recognisable, deterministic shape at any size. Unknown names draw a rounded square.
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import ImageDraw

from venus_core.data.synth.widgets import RGB

Box = tuple[float, float, float, float]


def _u(box: Box) -> tuple[float, float, float, float]:
    """Centre and half-size of the largest square in `box`, and a stroke width."""
    x1, y1, x2, y2 = box
    r = min(x2 - x1, y2 - y1) / 2.0
    return (x1 + x2) / 2.0, (y1 + y2) / 2.0, r, max(1.0, r / 6.0)


def _p(cx: float, cy: float, r: float, pts: list[tuple[float, float]]) -> list[tuple[float, float]]:
    return [(cx + x * r, cy + y * r) for x, y in pts]


def _lines(d: ImageDraw.ImageDraw, box: Box, c: RGB, *paths: list[tuple[float, float]]) -> None:
    cx, cy, r, w = _u(box)
    for path in paths:
        d.line(_p(cx, cy, r, path), fill=c, width=round(w), joint="curve")


def _back(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    _lines(d, b, c, [(0.5, 0), (-0.5, 0)], [(-0.1, -0.4), (-0.5, 0), (-0.1, 0.4)])


def _search(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.ellipse([cx - 0.55 * r, cy - 0.55 * r, cx + 0.25 * r, cy + 0.25 * r], outline=c,
              width=round(w))
    _lines(d, b, c, [(0.15, 0.15), (0.6, 0.6)])


def _plus(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    _lines(d, b, c, [(-0.5, 0), (0.5, 0)], [(0, -0.5), (0, 0.5)])


def _minus(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    _lines(d, b, c, [(-0.5, 0), (0.5, 0)])


def _close(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    _lines(d, b, c, [(-0.45, -0.45), (0.45, 0.45)], [(-0.45, 0.45), (0.45, -0.45)])


def _check(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    _lines(d, b, c, [(-0.5, 0), (-0.15, 0.4), (0.5, -0.4)])


def _cart(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    _lines(d, b, c, [(-0.7, -0.5), (-0.45, -0.5), (-0.25, 0.3), (0.5, 0.3), (0.65, -0.3),
                     (-0.35, -0.3)])
    for x in (-0.15, 0.4):
        d.ellipse([cx + x * r - w, cy + 0.55 * r - w, cx + x * r + w, cy + 0.55 * r + w], fill=c)


def _gear(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    _lines(d, b, c, [(-0.7, 0), (0.7, 0)], [(0, -0.7), (0, 0.7)], [(-0.5, -0.5), (0.5, 0.5)],
           [(-0.5, 0.5), (0.5, -0.5)])
    d.ellipse([cx - 0.45 * r, cy - 0.45 * r, cx + 0.45 * r, cy + 0.45 * r], fill=c)


def _chat(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.rounded_rectangle([cx - 0.7 * r, cy - 0.55 * r, cx + 0.7 * r, cy + 0.35 * r],
                        radius=0.25 * r, outline=c, width=round(w))
    d.polygon(_p(cx, cy, r, [(-0.4, 0.3), (-0.5, 0.7), (-0.05, 0.3)]), fill=c)


def _person(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.ellipse([cx - 0.3 * r, cy - 0.7 * r, cx + 0.3 * r, cy - 0.1 * r], fill=c)
    d.pieslice([cx - 0.6 * r, cy, cx + 0.6 * r, cy + 1.2 * r], 180, 360, fill=c)


def _wifi(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    for k in (0.75, 0.5):
        d.arc([cx - k * r, cy - k * r + 0.3 * r, cx + k * r, cy + k * r + 0.3 * r], 225, 315,
              fill=c, width=round(w))
    d.ellipse([cx - w, cy + 0.3 * r - w, cx + w, cy + 0.3 * r + w], fill=c)


def _bluetooth(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    _lines(d, b, c, [(-0.35, -0.3), (0.35, 0.3), (0, 0.6), (0, -0.6), (0.35, -0.3), (-0.35, 0.3)])


def _plane(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.polygon(_p(cx, cy, r, [(0, -0.7), (0.1, -0.1), (0.7, 0.2), (0.1, 0.15), (0.05, 0.5),
                             (0.25, 0.65), (-0.25, 0.65), (-0.05, 0.5), (-0.1, 0.15),
                             (-0.7, 0.2), (-0.1, -0.1)]), fill=c)


def _pin(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.ellipse([cx - 0.45 * r, cy - 0.7 * r, cx + 0.45 * r, cy + 0.2 * r], fill=c)
    d.polygon(_p(cx, cy, r, [(-0.38, 0), (0.38, 0), (0, 0.75)]), fill=c)


def _bell(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.pieslice([cx - 0.5 * r, cy - 0.6 * r, cx + 0.5 * r, cy + 0.6 * r], 180, 360, fill=c)
    d.rectangle([cx - 0.5 * r, cy - 0.05 * r, cx + 0.5 * r, cy + 0.35 * r], fill=c)
    d.ellipse([cx - 0.15 * r, cy + 0.4 * r, cx + 0.15 * r, cy + 0.7 * r], fill=c)


def _sun(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    _lines(d, b, c, [(-0.75, 0), (0.75, 0)], [(0, -0.75), (0, 0.75)], [(-0.55, -0.55), (0.55, 0.55)],
           [(-0.55, 0.55), (0.55, -0.55)])
    d.ellipse([cx - 0.35 * r, cy - 0.35 * r, cx + 0.35 * r, cy + 0.35 * r], fill=c)


def _moon(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.arc([cx - 0.6 * r, cy - 0.6 * r, cx + 0.6 * r, cy + 0.6 * r], 60, 300, fill=c,
          width=round(2 * w))


def _speaker(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.polygon(_p(cx, cy, r, [(-0.6, -0.2), (-0.3, -0.2), (0.05, -0.55), (0.05, 0.55), (-0.3, 0.2),
                             (-0.6, 0.2)]), fill=c)
    d.arc([cx - 0.3 * r, cy - 0.5 * r, cx + 0.6 * r, cy + 0.5 * r], 300, 60, fill=c,
          width=round(w))


def _battery(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.rectangle([cx - 0.35 * r, cy - 0.55 * r, cx + 0.35 * r, cy + 0.7 * r], outline=c,
                width=round(w))
    d.rectangle([cx - 0.15 * r, cy - 0.75 * r, cx + 0.15 * r, cy - 0.55 * r], fill=c)
    d.rectangle([cx - 0.2 * r, cy, cx + 0.2 * r, cy + 0.55 * r], fill=c)


def _globe(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.ellipse([cx - 0.7 * r, cy - 0.7 * r, cx + 0.7 * r, cy + 0.7 * r], outline=c, width=round(w))
    d.ellipse([cx - 0.3 * r, cy - 0.7 * r, cx + 0.3 * r, cy + 0.7 * r], outline=c, width=round(w))
    _lines(d, b, c, [(-0.7, 0), (0.7, 0)])


def _info(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.ellipse([cx - 0.7 * r, cy - 0.7 * r, cx + 0.7 * r, cy + 0.7 * r], outline=c, width=round(w))
    _lines(d, b, c, [(0, -0.1), (0, 0.4)])
    d.ellipse([cx - w, cy - 0.35 * r - w, cx + w, cy - 0.35 * r + w], fill=c)


def _send(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.polygon(_p(cx, cy, r, [(-0.6, -0.6), (0.7, 0), (-0.6, 0.6), (-0.35, 0)]), fill=c)


def _star(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.polygon(_p(cx, cy, r, [(0, -0.7), (0.18, -0.22), (0.67, -0.22), (0.28, 0.1), (0.42, 0.6),
                             (0, 0.3), (-0.42, 0.6), (-0.28, 0.1), (-0.67, -0.22),
                             (-0.18, -0.22)]), fill=c)


def _heart(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.ellipse([cx - 0.6 * r, cy - 0.5 * r, cx, cy + 0.1 * r], fill=c)
    d.ellipse([cx, cy - 0.5 * r, cx + 0.6 * r, cy + 0.1 * r], fill=c)
    d.polygon(_p(cx, cy, r, [(-0.57, -0.05), (0.57, -0.05), (0, 0.65)]), fill=c)


def _home(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    d.polygon(_p(cx, cy, r, [(0, -0.7), (0.7, 0), (-0.7, 0)]), fill=c)
    d.rectangle([cx - 0.45 * r, cy, cx + 0.45 * r, cy + 0.6 * r], fill=c)


def _clipboard(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, w = _u(b)
    d.rectangle([cx - 0.5 * r, cy - 0.6 * r, cx + 0.5 * r, cy + 0.7 * r], outline=c,
                width=round(w))
    _lines(d, b, c, [(-0.3, -0.2), (0.3, -0.2)], [(-0.3, 0.1), (0.3, 0.1)],
           [(-0.3, 0.4), (0.1, 0.4)])


def _grid(d: ImageDraw.ImageDraw, b: Box, c: RGB) -> None:
    cx, cy, r, _ = _u(b)
    for gx in (-0.6, 0.1):
        for gy in (-0.6, 0.1):
            d.rectangle([cx + gx * r, cy + gy * r, cx + (gx + 0.5) * r, cy + (gy + 0.5) * r], fill=c)


ICONS: dict[str, Callable[[ImageDraw.ImageDraw, Box, RGB], None]] = {
    "back": _back, "search": _search, "plus": _plus, "minus": _minus, "close": _close,
    "check": _check, "cart": _cart, "gear": _gear, "chat": _chat, "person": _person,
    "wifi": _wifi, "bluetooth": _bluetooth, "plane": _plane, "pin": _pin, "bell": _bell,
    "sun": _sun, "moon": _moon, "speaker": _speaker, "battery": _battery, "globe": _globe,
    "info": _info, "send": _send, "star": _star, "heart": _heart, "home": _home,
    "clipboard": _clipboard, "grid": _grid,
}


def draw_icon(d: ImageDraw.ImageDraw, name: str, box: Box, color: RGB) -> None:
    """Draw icon `name` centred in `box` (a rounded square for names without a glyph)."""
    fn = ICONS.get(name)
    if fn is None:
        cx, cy, r, w = _u(box)
        d.rounded_rectangle([cx - 0.6 * r, cy - 0.6 * r, cx + 0.6 * r, cy + 0.6 * r],
                            radius=0.2 * r, outline=color, width=round(w))
        return
    fn(d, box, color)
