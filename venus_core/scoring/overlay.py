"""The picture an MLLM judge sees: the screenshot with the recorded action drawn on a copy.

Why: a judge asked "does Click(box=(512,240)) match 'open Wi-Fi settings'?" must otherwise locate
(512, 240) in a 0–1000 frame by itself, which large MLLMs do unreliably; drawing the point, swipe
or target box turns the alignment question into a visual one. Red marks what the action does
(point, swipe arrow), green the target element the dataset records. A trajectory becomes a
filmstrip of at most four of its screens (first, last and evenly spaced ones between), each with
its step's action, scaled to a common height.
"""

from __future__ import annotations

from collections.abc import Callable

from PIL import Image, ImageDraw

from venus_core.actions import parse_action, to_pixels
from venus_core.data.schema import GroundingSample, NavigationStep, QASample, Trajectory
from venus_core.scoring.rules import AnyRecord

OpenImage = Callable[[str], Image.Image]
RED = (230, 30, 30)
GREEN = (20, 170, 60)
FILMSTRIP_SCREENS = 4
FILMSTRIP_HEIGHT = 640


def _px(point: tuple[int, int], size: tuple[int, int]) -> tuple[int, int]:
    return to_pixels(point, size[0], size[1])


def _box(
    draw: ImageDraw.ImageDraw,
    box: tuple[int, int, int, int],
    size: tuple[int, int],
    color: tuple[int, int, int],
    width: int,
) -> None:
    x1, y1 = _px((box[0], box[1]), size)
    x2, y2 = _px((box[2], box[3]), size)
    draw.rectangle((x1, y1, x2, y2), outline=color, width=width)


def _arrow(draw: ImageDraw.ImageDraw, a: tuple[int, int], b: tuple[int, int], width: int) -> None:
    draw.line((a, b), fill=RED, width=width)
    r = width * 3
    draw.ellipse((b[0] - r, b[1] - r, b[0] + r, b[1] + r), outline=RED, width=width)


def draw_action(
    image: Image.Image, action: str, platform: str, target_box: tuple[int, int, int, int] | None = None
) -> Image.Image:
    """A copy of `image` with the action (red) and the recorded target box (green) drawn on it."""
    out = image.convert("RGB")  # convert() always returns a copy
    draw = ImageDraw.Draw(out)
    size = out.size
    width = max(2, min(size) // 150)
    if target_box is not None:
        _box(draw, target_box, size, GREEN, width)
    act = parse_action(action, platform)  # type: ignore[arg-type]
    point = getattr(act, "box", None)
    if point is not None:
        x, y = _px(point, size)
        r = width * 4
        draw.ellipse((x - r, y - r, x + r, y + r), outline=RED, width=width)
        draw.line((x - 2 * r, y, x + 2 * r, y), fill=RED, width=max(1, width // 2))
        draw.line((x, y - 2 * r, x, y + 2 * r), fill=RED, width=max(1, width // 2))
    start, end = getattr(act, "start", None), getattr(act, "end", None)
    if start is not None and end is not None:
        _arrow(draw, _px(start, size), _px(end, size), width)
    return out


def _filmstrip(frames: list[Image.Image]) -> Image.Image:
    height = min(FILMSTRIP_HEIGHT, max(f.height for f in frames))
    scaled = [f.resize((max(1, round(f.width * height / f.height)), height)) for f in frames]
    gap = 8
    strip = Image.new(
        "RGB", (sum(f.width for f in scaled) + gap * (len(scaled) - 1), height), (255, 255, 255)
    )
    x = 0
    for f in scaled:
        strip.paste(f, (x, 0))
        x += f.width + gap
    return strip


def pick_steps(n: int, k: int = FILMSTRIP_SCREENS) -> list[int]:
    """Indices of at most k of n steps: first, last and evenly spaced ones between.

    >>> pick_steps(10), pick_steps(2), pick_steps(1)
    ([0, 3, 6, 9], [0, 1], [0])
    """
    if n <= k:
        return list(range(n))
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def judge_image(record: AnyRecord, open_image: OpenImage) -> Image.Image:
    """The annotated image the judge sees for one record."""
    if isinstance(record, GroundingSample):
        img = open_image(record.image).convert("RGB")
        if record.box is not None:
            _box(ImageDraw.Draw(img), record.box, img.size, GREEN, max(2, min(img.size) // 150))
        return img
    if isinstance(record, NavigationStep):
        return draw_action(open_image(record.image), record.action, record.platform, record.target_box)
    if isinstance(record, Trajectory):
        final = record.meta.get("final_image")  # the screen after the last step, when the record has it
        frames = [
            draw_action(
                open_image(record.steps[i].image),
                record.steps[i].action,
                record.platform,
                record.steps[i].target_box,
            )
            for i in pick_steps(len(record.steps), FILMSTRIP_SCREENS - (final is not None))
        ]
        if final is not None:
            frames.append(open_image(str(final)).convert("RGB"))
        return _filmstrip(frames)
    if isinstance(record, QASample):
        return open_image(record.image).convert("RGB")
    raise TypeError(f"not a record: {type(record).__name__}")
