"""Screenshots with the reference and the predicted point / action drawn on them (PIL), as data URLs.

Why: an accuracy number does not say *how* a model fails — clicking the neighbour, answering the
refusal point, scrolling the wrong way. The report's sample viewer shows each screenshot with the
target (green: box and reference point or arrow) and the prediction (red for wrong, blue for
right). Coordinates are in the 0–1000 frame and scaled to the image here. Screenshots are shrunk
to `max_side` pixels and embedded as JPEG so that a report with dozens of 4K ScreenSpot-Pro
screens stays a few MB and opens offline. Points and arrows are drawn over a white halo, so that a
blue mark stays visible on a blue app bar.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Sequence
from typing import Any

from PIL import Image, ImageDraw

REF = (22, 163, 74)
GOOD = (37, 99, 235)
BAD = (220, 38, 38)
HALO = (255, 255, 255)


def _xy(p: Sequence[int], size: tuple[int, int]) -> tuple[float, float]:
    return p[0] * size[0] / 1000.0, p[1] * size[1] / 1000.0


def _marker(d: ImageDraw.ImageDraw, p: Sequence[int], size: tuple[int, int], color: tuple[int, int, int], r: float) -> None:
    x, y = _xy(p, size)
    ring, stroke = max(2, int(r / 3)), max(1, int(r / 4))
    for c, extra in ((HALO, 2), (color, 0)):  # halo first, the mark over it
        d.ellipse([x - r - extra / 2, y - r - extra / 2, x + r + extra / 2, y + r + extra / 2], outline=c,
                  width=ring + extra)
        d.line([x - 1.6 * r, y, x + 1.6 * r, y], fill=c, width=stroke + extra)
        d.line([x, y - 1.6 * r, x, y + 1.6 * r], fill=c, width=stroke + extra)


def _arrow(d: ImageDraw.ImageDraw, a: Sequence[int], b: Sequence[int], size: tuple[int, int],
           color: tuple[int, int, int], width: int) -> None:
    (x1, y1), (x2, y2) = _xy(a, size), _xy(b, size)
    for c, extra in ((HALO, 2), (color, 0)):
        d.line([x1, y1, x2, y2], fill=c, width=width + extra)
        h = 2 * width + extra / 2
        d.ellipse([x2 - h, y2 - h, x2 + h, y2 + h], fill=c)


def _box(d: ImageDraw.ImageDraw, box: Sequence[int], size: tuple[int, int], color: tuple[int, int, int], width: int) -> None:
    (x1, y1), (x2, y2) = _xy(box[:2], size), _xy(box[2:], size)
    d.rectangle([x1, y1, x2, y2], outline=color, width=width)


def _action_points(action: Any) -> tuple[list[int] | None, tuple[list[int], list[int]] | None]:
    """(point, (start, end)) of a parsed action, for drawing; None where it has none."""
    point = getattr(action, "box", None)
    start, end = getattr(action, "start", None), getattr(action, "end", None)
    return (list(point) if point is not None else None,
            (list(start), list(end)) if start is not None and end is not None else None)


def annotate(image: Image.Image, *, box: Sequence[int] | None = None, ref_action: Any = None,
             pred_point: Sequence[int] | None = None, pred_action: Any = None, correct: bool = False,
             max_side: int = 480) -> Image.Image:
    """A shrunk RGB copy of `image` with the reference (green) and the prediction drawn on it."""
    img = image.convert("RGB")
    scale = min(1.0, max_side / max(img.size))
    if scale < 1.0:
        img = img.resize((max(1, round(img.width * scale)), max(1, round(img.height * scale))), Image.Resampling.LANCZOS)
    elif max(img.size) < 256:  # tiny synthetic screens: enlarge so marks stay readable
        f = max(1, 256 // max(img.size))
        img = img.resize((img.width * f, img.height * f), Image.Resampling.NEAREST)
    d = ImageDraw.Draw(img)
    size = img.size
    width = max(2, round(max(size) / 160))
    r = max(5.0, max(size) / 40)
    if box is not None:
        _box(d, box, size, REF, width)
    if ref_action is not None:
        point, drag = _action_points(ref_action)
        if point is not None:
            _marker(d, point, size, REF, r * 0.7)
        if drag is not None:
            _arrow(d, drag[0], drag[1], size, REF, width)
    color = GOOD if correct else BAD
    if pred_point is not None:
        _marker(d, pred_point, size, color, r)
    if pred_action is not None:
        point, drag = _action_points(pred_action)
        if point is not None:
            _marker(d, point, size, color, r)
        if drag is not None:
            _arrow(d, drag[0], drag[1], size, color, width)
    return img


def data_url(image: Image.Image, quality: int = 80) -> str:
    """`data:image/jpeg;base64,…` of an RGB image."""
    buf = io.BytesIO()
    image.convert("RGB").save(buf, format="JPEG", quality=quality)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")
