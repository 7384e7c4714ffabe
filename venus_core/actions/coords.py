"""Coordinate frames: the 0–1000 normalized frame, screen pixels, and Qwen `smart_resize` pixels.

Why: UI-Venus-1.5 (Qwen3-VL) outputs integer coordinates normalized to 0–1000 and an executor maps
them to the device as x·width/1000. UI-Venus-1.0 and other Qwen2.5-VL models output absolute pixels
of the image *after* `smart_resize` (each side rounded to a multiple of 28, total pixels clamped to
a budget), so their datasets and outputs need converting before they can share our action space.

Conventions (the paper gives none beyond x·width/1000):
- Rounding is half up (not Python's banker's rounding) so that conversions are monotone and
  reproducible.
- A *point* maps to a pixel index on the screen: 0..width-1 (1000 maps to the last pixel).
- A *box* maps to pixel edges: 0..width (a box edge at 1000 is the screen's right edge).
- Pixel inputs outside the image (beyond its edges) are errors: they indicate a wrong frame.

`smart_resize` follows the published Qwen2.5-VL algorithm (qwen-vl-utils / transformers' Qwen2-VL
image processor): round each side to the nearest multiple of `factor`, then, if the area exceeds
`max_pixels` (or is below `min_pixels`), scale both sides by the same factor and floor (ceil) to a
multiple of `factor`; aspect ratios above 200 are rejected. Sides are never below `factor`.
"""

from __future__ import annotations

import math

from venus_core.actions.space import COORD_MAX, Point

MAX_ASPECT_RATIO = 200


def _round_half_up(v: float) -> int:
    return int(math.floor(v + 0.5))


def _check_size(width: int, height: int) -> None:
    for name, v in (("width", width), ("height", height)):
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise ValueError(f"{name} must be a positive integer, got {v!r}")


def _check_pixel(v: float, limit: int, what: str) -> None:
    if not math.isfinite(v) or v < 0 or v > limit:
        raise ValueError(f"{what}={v!r} is outside the image (0..{limit})")


def _check_norm(v: int, what: str) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= COORD_MAX:
        raise ValueError(f"{what}={v!r} is not an integer in 0..{COORD_MAX}")


def to_pixels(p: Point, width: int, height: int) -> tuple[int, int]:
    """Normalized point -> pixel indices on a width x height screen (x·width/1000, clamped)."""
    _check_size(width, height)
    x, y = p
    _check_norm(x, "x")
    _check_norm(y, "y")
    px = min(_round_half_up(x * width / COORD_MAX), width - 1)
    py = min(_round_half_up(y * height / COORD_MAX), height - 1)
    return px, py


def from_pixels(x: float, y: float, width: int, height: int) -> Point:
    """Pixel position on a width x height image -> normalized point (x·1000/width, rounded)."""
    _check_size(width, height)
    _check_pixel(x, width, "x")
    _check_pixel(y, height, "y")
    return _round_half_up(x * COORD_MAX / width), _round_half_up(y * COORD_MAX / height)


def box_from_pixels(
    x1: float, y1: float, x2: float, y2: float, width: int, height: int
) -> tuple[int, int, int, int]:
    """Pixel box edges -> normalized box (x1, y1, x2, y2); requires x1 <= x2 and y1 <= y2."""
    _check_size(width, height)
    for v, limit, what in (
        (x1, width, "x1"),
        (y1, height, "y1"),
        (x2, width, "x2"),
        (y2, height, "y2"),
    ):
        _check_pixel(v, limit, what)
    if x1 > x2 or y1 > y2:
        raise ValueError(f"box ({x1}, {y1}, {x2}, {y2}) has x1 > x2 or y1 > y2")
    nx1, nx2 = (_round_half_up(v * COORD_MAX / width) for v in (x1, x2))
    ny1, ny2 = (_round_half_up(v * COORD_MAX / height) for v in (y1, y2))
    return nx1, ny1, nx2, ny2


def box_to_pixels(
    box: tuple[int, int, int, int], width: int, height: int
) -> tuple[int, int, int, int]:
    """Normalized box -> pixel box edges (0..width, 0..height)."""
    _check_size(width, height)
    if len(box) != 4:
        raise ValueError(f"box must have 4 coordinates, got {len(box)}")
    x1, y1, x2, y2 = box
    for v, what in ((x1, "x1"), (y1, "y1"), (x2, "x2"), (y2, "y2")):
        _check_norm(v, what)
    if x1 > x2 or y1 > y2:
        raise ValueError(f"box {tuple(box)} has x1 > x2 or y1 > y2")
    return (
        _round_half_up(x1 * width / COORD_MAX),
        _round_half_up(y1 * height / COORD_MAX),
        _round_half_up(x2 * width / COORD_MAX),
        _round_half_up(y2 * height / COORD_MAX),
    )


def smart_resize(
    height: int,
    width: int,
    factor: int = 28,
    min_pixels: int = 56 * 56,
    max_pixels: int = 14 * 14 * 4 * 1280,
) -> tuple[int, int]:
    """(resized_height, resized_width) a Qwen2-VL / Qwen2.5-VL processor feeds the model."""
    _check_size(width, height)
    if factor <= 0 or min_pixels <= 0 or max_pixels < min_pixels:
        raise ValueError(
            "need factor > 0 and 0 < min_pixels <= max_pixels, "
            f"got {factor}, {min_pixels}, {max_pixels}"
        )
    ratio = max(height, width) / min(height, width)
    if ratio > MAX_ASPECT_RATIO:
        raise ValueError(f"aspect ratio {ratio:.1f} exceeds {MAX_ASPECT_RATIO} ({width}x{height})")
    h_bar = max(factor, round(height / factor) * factor)
    w_bar = max(factor, round(width / factor) * factor)
    if h_bar * w_bar > max_pixels:
        beta = math.sqrt(height * width / max_pixels)
        h_bar = max(factor, math.floor(height / beta / factor) * factor)
        w_bar = max(factor, math.floor(width / beta / factor) * factor)
    elif h_bar * w_bar < min_pixels:
        beta = math.sqrt(min_pixels / (height * width))
        h_bar = math.ceil(height * beta / factor) * factor
        w_bar = math.ceil(width * beta / factor) * factor
    return h_bar, w_bar


def from_resized_pixels(x: float, y: float, resized_width: int, resized_height: int) -> Point:
    """A pixel position in the smart_resized image (older Qwen-VL outputs) -> normalized point.

    The resize keeps the image's content proportional, so the position relative to the resized
    image is the position relative to the original screen.
    """
    return from_pixels(x, y, resized_width, resized_height)
