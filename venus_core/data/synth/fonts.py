"""Font loading for the synthetic renderer (DejaVu for Latin text, WenQuanYi Micro Hei for Chinese).

Why: rendering must be byte-identical for a seed, so fonts come from fixed Debian packages rather
than whatever fontconfig finds. A missing font is an error naming the package to install.
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from PIL import ImageFont

FONT_FILES: dict[str, tuple[Path, str]] = {
    "latin": (Path("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"), "fonts-dejavu-core"),
    "latin-bold": (Path("/usr/share/fonts/truetype/dejavu/DejaVuSans-Bold.ttf"), "fonts-dejavu-core"),
    "cjk": (Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc"), "fonts-wqy-microhei"),
}


class FontMissingError(FileNotFoundError):
    """A font file the renderer needs is not installed."""


def font_path(kind: str) -> Path:
    try:
        path, package = FONT_FILES[kind]
    except KeyError:
        raise ValueError(f"unknown font kind {kind!r}; known: {sorted(FONT_FILES)}") from None
    if not path.is_file():
        raise FontMissingError(
            f"font {path} is missing: install the Debian package {package} "
            f"(apt-get install {package})"
        )
    return path


@lru_cache(maxsize=256)
def get_font(kind: str, size: int) -> ImageFont.FreeTypeFont:
    """A cached FreeType font of `kind` ('latin', 'latin-bold', 'cjk') at pixel `size` (>= 1)."""
    return ImageFont.truetype(str(font_path(kind)), max(1, int(size)))


def needs_cjk(text: str) -> bool:
    return any(ord(ch) > 0x2E7F for ch in text)


def font_for(text: str, size: int, *, bold: bool = False) -> ImageFont.FreeTypeFont:
    """DejaVu for Latin text, WenQuanYi Micro Hei as soon as the text has CJK characters."""
    if needs_cjk(text):
        return get_font("cjk", size)
    return get_font("latin-bold" if bold else "latin", size)
