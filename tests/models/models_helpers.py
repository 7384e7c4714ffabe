"""Helpers shared by the model tests (a unique module name: test folders share sys.path)."""

from __future__ import annotations

from PIL import Image


def screen(color: tuple[int, int, int], size: tuple[int, int] = (128, 128)) -> Image.Image:
    """A flat screenshot with a darker square, so images differ by colour and content."""
    img = Image.new("RGB", size, color)
    img.paste(tuple(c // 2 for c in color), (size[0] // 4, size[1] // 4, size[0] // 2, size[1] // 2))
    return img
