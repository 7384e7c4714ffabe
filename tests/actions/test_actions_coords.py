"""Coordinate frames: 0–1000 <-> pixels, boxes, and Qwen2.5-VL smart_resize."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from venus_core.actions import (
    box_from_pixels,
    box_to_pixels,
    from_pixels,
    from_resized_pixels,
    smart_resize,
    to_pixels,
)


def test_to_pixels_is_x_times_width_over_1000() -> None:
    assert to_pixels((500, 300), 1080, 2400) == (540, 720)
    assert to_pixels((0, 0), 1080, 2400) == (0, 0)
    assert to_pixels((1000, 1000), 1080, 2400) == (1079, 2399)  # last pixel, not off-screen
    assert to_pixels((333, 1), 1000, 1000) == (333, 1)


def test_from_pixels() -> None:
    assert from_pixels(540, 720, 1080, 2400) == (500, 300)
    assert from_pixels(1080, 2400, 1080, 2400) == (1000, 1000)
    assert from_pixels(0.5, 1.0, 1, 1) == (500, 1000)
    assert from_pixels(1.0005, 0, 2000, 10) == (1, 0)  # 0.50025 -> 1 (half up)


def test_boxes() -> None:
    assert box_from_pixels(108, 240, 540, 480, 1080, 2400) == (100, 100, 500, 200)
    assert box_to_pixels((100, 100, 500, 200), 1080, 2400) == (108, 240, 540, 480)
    assert box_to_pixels((0, 0, 1000, 1000), 1920, 1080) == (0, 0, 1920, 1080)
    with pytest.raises(ValueError, match="x1 > x2"):
        box_from_pixels(10, 0, 5, 5, 100, 100)
    with pytest.raises(ValueError, match="x1 > x2"):
        box_to_pixels((10, 0, 5, 5), 100, 100)
    with pytest.raises(ValueError, match="4 coordinates"):
        box_to_pixels((1, 2, 3), 100, 100)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "call",
    [
        lambda: to_pixels((1001, 0), 100, 100),
        lambda: to_pixels((-1, 0), 100, 100),
        lambda: to_pixels((1.5, 0), 100, 100),
        lambda: to_pixels((1, 1), 0, 100),
        lambda: to_pixels((1, 1), 100, 10.0),
        lambda: from_pixels(101, 0, 100, 100),
        lambda: from_pixels(-0.1, 0, 100, 100),
        lambda: from_pixels(math.nan, 0, 100, 100),
        lambda: from_pixels(1, 1, -5, 100),
        lambda: box_from_pixels(0, 0, 101, 5, 100, 100),
        lambda: box_to_pixels((0, 0, 1001, 5), 100, 100),
    ],
)
def test_bad_frames_are_errors(call) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError):
        call()


@settings(max_examples=200, deadline=None)
@given(
    x=st.integers(0, 1000),
    y=st.integers(0, 1000),
    w=st.integers(1, 5000),
    h=st.integers(1, 5000),
)
def test_pixel_round_trip_is_within_one_pixel(x: int, y: int, w: int, h: int) -> None:
    px, py = to_pixels((x, y), w, h)
    assert 0 <= px < w and 0 <= py < h
    nx, ny = from_pixels(px, py, w, h)
    # one pixel is 1000/w normalized units; rounding adds at most half a unit each way
    assert abs(nx - x) <= 1000 / w + 1 and abs(ny - y) <= 1000 / h + 1
    if w >= 1000 and x < 1000:
        assert nx == x  # a screen at least 1000 px wide resolves every normalized coordinate


# (height, width) -> smart_resize output of the published Qwen2.5-VL algorithm
# (transformers Qwen2-VL image processor / qwen-vl-utils, factor 28, min 56*56, max 14*14*4*1280).
PUBLISHED = [
    ((2400, 1080), (1484, 672)),
    ((1080, 2400), (672, 1484)),
    ((1920, 1080), (1316, 728)),
    ((2340, 1080), (1456, 672)),
    ((800, 1280), (784, 1260)),
    ((720, 1280), (728, 1288)),
    ((2560, 1440), (1316, 728)),
    ((100, 100), (112, 112)),
    ((30, 40), (56, 84)),
    ((56, 56), (56, 56)),
    ((3000, 3000), (980, 980)),
    ((28, 5000), (28, 5012)),
    ((500, 700), (504, 700)),
    ((1000, 30), (1008, 28)),
]


@pytest.mark.parametrize(("hw", "expected"), PUBLISHED)
def test_smart_resize_matches_published_values(
    hw: tuple[int, int], expected: tuple[int, int]
) -> None:
    assert smart_resize(*hw) == expected


def test_smart_resize_other_factor_and_errors() -> None:
    # Qwen3-VL style parameters (patch 16, merge 2 -> factor 32)
    assert smart_resize(
        2400, 1080, factor=32, min_pixels=64 * 64, max_pixels=16 * 16 * 4 * 1280
    ) == (1696, 768)
    with pytest.raises(ValueError, match="aspect ratio"):
        smart_resize(10, 2500)
    with pytest.raises(ValueError, match="positive"):
        smart_resize(0, 100)
    with pytest.raises(ValueError, match="min_pixels"):
        smart_resize(100, 100, min_pixels=10, max_pixels=5)


@settings(max_examples=200, deadline=None)
@given(h=st.integers(28, 8000), w=st.integers(28, 8000))
def test_smart_resize_properties(h: int, w: int) -> None:
    if max(h, w) / min(h, w) > 200:
        return
    rh, rw = smart_resize(h, w)
    assert rh % 28 == 0 and rw % 28 == 0
    assert 56 * 56 <= rh * rw <= 14 * 14 * 4 * 1280
    # aspect ratio kept up to one factor step per side
    assert abs(rh / rw - h / w) <= (h / w) * (28 / rh + 28 / rw) + 1e-9


@settings(max_examples=100, deadline=None)
@given(
    x=st.integers(0, 1000),
    y=st.integers(0, 1000),
    h=st.integers(200, 4000),
    w=st.integers(200, 4000),
)
def test_resized_pixels_map_to_the_same_screen_position(x: int, y: int, h: int, w: int) -> None:
    """An old-style pixel answer on the resized image lands where the normalized point does."""
    rh, rw = smart_resize(h, w)
    rx, ry = x * rw / 1000, y * rh / 1000  # what a Qwen2.5-VL model would output
    assert from_resized_pixels(rx, ry, rw, rh) == (x, y)
    px, py = to_pixels(from_resized_pixels(rx, ry, rw, rh), w, h)
    assert abs(px - x * w / 1000) <= 1 and abs(py - y * h / 1000) <= 1


def test_from_resized_pixels_example() -> None:
    rh, rw = smart_resize(2400, 1080)  # (1484, 672)
    assert from_resized_pixels(336, 742, rw, rh) == (500, 500)
    with pytest.raises(ValueError, match="outside"):
        from_resized_pixels(700, 10, rw, rh)


@pytest.mark.slow
def test_smart_resize_agrees_with_transformers() -> None:
    ref = pytest.importorskip("transformers.models.qwen2_vl.image_processing_pil_qwen2_vl")
    for h in range(28, 4000, 97):
        for w in range(28, 4000, 89):
            if max(h, w) / min(h, w) <= 200:
                assert smart_resize(h, w) == tuple(ref.smart_resize(h, w)), (h, w)
