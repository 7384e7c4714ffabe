"""Rendering: a `Screen` to a PIL image of any requested size, in any theme.

Why: one renderer for every app and both platforms, so a widget's look depends only on its role
and flags (a toggle looks like a toggle everywhere) and data from different apps stays consistent.
The screen is drawn directly at the output scale (no render-then-resize): the tiny default trains
on 128x128 / 256x256 screenshots and rendering speed bounds how fast data is made. Fonts are
sized from the scale with a floor of 5 px, so small renders stay legible-ish; text that does not
fit its box is cut with an ellipsis.
"""

from __future__ import annotations

from functools import lru_cache

from PIL import Image, ImageDraw

from venus_core.data.synth.fonts import font_for
from venus_core.data.synth.icons import draw_icon
from venus_core.data.synth.theme import Theme, get_theme
from venus_core.data.synth.widgets import RGB, Screen, Widget

MIN_FONT = 5


def _lum(c: RGB) -> float:
    return 0.299 * c[0] + 0.587 * c[1] + 0.114 * c[2]


def contrast(bg: RGB) -> RGB:
    return (20, 20, 25) if _lum(bg) > 150 else (250, 250, 252)


def _mix(a: RGB, b: RGB, t: float) -> RGB:
    return (round(a[0] + (b[0] - a[0]) * t), round(a[1] + (b[1] - a[1]) * t),
            round(a[2] + (b[2] - a[2]) * t))


@lru_cache(maxsize=8192)
def _fit(text: str, px: int, bold: bool, avail: float) -> tuple[str, float]:
    """`text` cut with an ellipsis to `avail` pixels, and its width (memoised: the same labels
    are measured on every screenshot of a trajectory, and measuring was ~30 % of render time)."""
    font = font_for(text, px, bold=bold)
    if font.getlength(text) > avail:
        while len(text) > 1 and font.getlength(text + "…") > avail:
            text = text[:-1]
        text += "…"
    return text, font.getlength(text)


class _Canvas:
    def __init__(self, screen: Screen, size: tuple[int, int], theme: Theme) -> None:
        self.sx = size[0] / screen.width
        self.sy = size[1] / screen.height
        self.s = min(self.sx, self.sy)
        self.theme = theme
        self.image = Image.new("RGB", size, theme.background)
        self.d = ImageDraw.Draw(self.image)
        self.bars: list[tuple[float, float, float, float]] = []

    def box(self, w: Widget) -> tuple[float, float, float, float]:
        x1, y1, x2, y2 = w.box
        return (x1 * self.sx, y1 * self.sy, x2 * self.sx - 1, y2 * self.sy - 1)

    def text(self, text: str, box: tuple[float, float, float, float], color: RGB, *,
             size: float = 14, bold: bool = False, align: str = "left") -> None:
        if not text:
            return
        x1, y1, x2, y2 = box
        px = max(MIN_FONT, round(min(size * self.s, (y2 - y1) * 0.8)))
        font = font_for(text, px, bold=bold)
        avail = max(1.0, x2 - x1)
        text, tw = _fit(text, px, bold, avail)
        x = x1 + (avail - tw) / 2 if align == "center" else x1
        self.d.text((x, (y1 + y2) / 2), text, fill=color, font=font, anchor="lm")

    def in_bar(self, b: tuple[float, float, float, float]) -> bool:
        return any(b[1] >= y1 - 1 and b[3] <= y2 + 1 for _, y1, _, y2 in self.bars)


def render(screen: Screen, size: tuple[int, int] = (360, 640), theme: str = "light-blue"
           ) -> Image.Image:
    """Draw `screen` into an RGB image of `size` (width, height) with the named theme."""
    if size[0] < 16 or size[1] < 16:
        raise ValueError(f"render: output size {size} is below 16x16")
    t = get_theme(theme)
    cv = _Canvas(screen, size, t)
    for w in screen.widgets:
        _DRAW.get(w.role, _draw_nothing)(cv, w, t)
    return cv.image


def _draw_nothing(cv: _Canvas, w: Widget, t: Theme) -> None:
    return None


def _status(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    bg = _mix(t.bar, (0, 0, 0), 0.15)
    cv.d.rectangle(b, fill=bg)
    fg = contrast(bg)
    cv.text(w.label, (b[0] + 8 * cv.sx, b[1], b[2], b[3]), fg, size=12)
    h = b[3] - b[1]
    draw_icon(cv.d, "battery", (b[2] - h, b[1], b[2], b[3]), fg)
    draw_icon(cv.d, "wifi", (b[2] - 2.2 * h, b[1], b[2] - 1.2 * h, b[3]), fg)


def _app_bar(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.rectangle(b, fill=t.bar)
    cv.bars.append(b)


def _title(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    color = contrast(t.bar) if cv.in_bar(b) else t.text
    cv.text(w.label, b, color, size=18, bold=True)


def _text(cv: _Canvas, w: Widget, t: Theme) -> None:
    cv.text(w.label, cv.box(w), w.color or (t.subtext if w.key.endswith(":sub") else t.text),
            size=12 if w.key.endswith(":sub") else 14)


def _button(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    base = w.color or t.accent
    fill = base if w.enabled else t.toggle_off
    radius = min(b[2] - b[0], b[3] - b[1]) * 0.25
    cv.d.rounded_rectangle(b, radius=radius, fill=fill)
    if w.selected:
        cv.d.rounded_rectangle(b, radius=radius, outline=contrast(t.background),
                               width=max(1, round(2 * cv.s)))
    cv.text(w.label, (b[0] + 4 * cv.sx, b[1], b[2] - 4 * cv.sx, b[3]), contrast(fill), size=15,
            bold=True, align="center")


def _icon_button(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    color = contrast(t.bar) if cv.in_bar(b) else t.accent
    if not w.enabled:
        color = t.toggle_off
    pad = (b[3] - b[1]) * 0.18
    draw_icon(cv.d, w.icon or "", (b[0] + pad, b[1] + pad, b[2] - pad, b[3] - pad), color)


def _field(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.rounded_rectangle(b, radius=4 * cv.s, fill=t.field,
                           outline=t.accent if w.focused else t.divider,
                           width=max(1, round((2 if w.focused else 1) * cv.s)))
    inner = (b[0] + 8 * cv.sx, b[1], b[2] - 4 * cv.sx, b[3])
    if w.value:
        cv.text(w.value, inner, t.text, size=14)
    else:
        cv.text(w.placeholder, inner, t.subtext, size=14)
    if w.focused:
        font_h = (b[3] - b[1]) * 0.3
        x = inner[0] + (len(w.value) and min(inner[2] - inner[0], 8 * cv.s * len(w.value)))
        cy = (b[1] + b[3]) / 2
        cv.d.line([(x, cy - font_h), (x, cy + font_h)], fill=t.accent, width=max(1, round(cv.s)))


def _list_item(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.rectangle(b, fill=_mix(t.surface, t.accent, 0.12) if w.selected else t.surface)
    cv.d.line([(b[0], b[3]), (b[2], b[3])], fill=t.divider, width=1)
    x = b[0] + 12 * cv.sx
    h = b[3] - b[1]
    has_sub = bool(w.value)  # a row's secondary line (drawn by its ":sub" text widget)
    if w.icon:
        r = min(h * 0.32, 14 * cv.s)
        cy = (b[1] + b[3]) / 2
        draw_icon(cv.d, w.icon, (x, cy - r, x + 2 * r, cy + r), t.accent)
        x += 2 * r + 8 * cv.sx
    bottom = b[1] + h * 0.62 if has_sub else b[3]
    cv.text(w.label, (x, b[1], b[2] - 70 * cv.sx, bottom), t.text, size=15)


def _toggle(cv: _Canvas, w: Widget, t: Theme) -> None:
    x1, y1, x2, y2 = cv.box(w)
    h = min(y2 - y1, (x2 - x1) / 1.8)
    cy = (y1 + y2) / 2
    track = (x2 - 1.8 * h, cy - h / 2, x2, cy + h / 2)
    cv.d.rounded_rectangle(track, radius=h / 2, fill=t.accent if w.selected else t.toggle_off)
    kx = track[2] - h if w.selected else track[0]
    m = max(1.0, h * 0.12)
    cv.d.ellipse([kx + m, track[1] + m, kx + h - m, track[3] - m], fill=(255, 255, 255))


def _checkbox(cv: _Canvas, w: Widget, t: Theme, radio: bool = False) -> None:
    x1, y1, x2, y2 = cv.box(w)
    s = min(y2 - y1, 20 * cv.s)
    cy = (y1 + y2) / 2
    sq = (x1, cy - s / 2, x1 + s, cy + s / 2)
    width = max(1, round(2 * cv.s))
    if radio:
        cv.d.ellipse(sq, outline=t.accent if w.selected else t.subtext, width=width)
        if w.selected:
            m = s * 0.28
            cv.d.ellipse([sq[0] + m, sq[1] + m, sq[2] - m, sq[3] - m], fill=t.accent)
    elif w.selected:
        cv.d.rectangle(sq, fill=t.accent)
        draw_icon(cv.d, "check", sq, t.on_accent)
    else:
        cv.d.rectangle(sq, outline=t.subtext, width=width)
    cv.text(w.label, (sq[2] + 8 * cv.sx, y1, x2, y2), t.text, size=14)


def _radio(cv: _Canvas, w: Widget, t: Theme) -> None:
    if w.label:
        _checkbox(cv, w, t, radio=True)
        return
    x1, y1, x2, y2 = cv.box(w)
    s = min(y2 - y1, x2 - x1, 20 * cv.s)
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    box = (cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2)
    cv.d.ellipse(box, outline=t.accent if w.selected else t.subtext, width=max(1, round(2 * cv.s)))
    if w.selected:
        m = s * 0.28
        cv.d.ellipse([box[0] + m, box[1] + m, box[2] - m, box[3] - m], fill=t.accent)


def _tab(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.rectangle(b, fill=t.surface)
    cv.text(w.label, b, t.accent if w.selected else t.subtext, size=14, bold=w.selected,
            align="center")
    line = max(1, round(3 * cv.s))
    if w.selected:
        cv.d.rectangle([b[0], b[3] - line, b[2], b[3]], fill=t.accent)


def _scrim(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = [round(v) for v in cv.box(w)]
    region = cv.image.crop((b[0], b[1], b[2] + 1, b[3] + 1))
    shade = Image.new("RGB", region.size, t.scrim)
    cv.image.paste(Image.blend(region, shade, 0.55), (b[0], b[1]))


def _dialog(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.rounded_rectangle(b, radius=10 * cv.s, fill=t.surface, outline=t.divider)
    cv.text(w.label, (b[0] + 16 * cv.sx, b[1] + 8 * cv.sy, b[2] - 8 * cv.sx, b[1] + 44 * cv.sy),
            t.text, size=17, bold=True)


def _app_icon(cv: _Canvas, w: Widget, t: Theme) -> None:
    x1, y1, x2, y2 = cv.box(w)
    label_h = (y2 - y1) * 0.28
    s = min(x2 - x1, y2 - y1 - label_h) * 0.9
    cx = (x1 + x2) / 2
    sq = (cx - s / 2, y1, cx + s / 2, y1 + s)
    fill = w.color or t.accent
    cv.d.rounded_rectangle(sq, radius=s * 0.22, fill=fill)
    m = s * 0.22
    draw_icon(cv.d, w.icon or "", (sq[0] + m, sq[1] + m, sq[2] - m, sq[3] - m), contrast(fill))
    cv.text(w.label, (x1, y2 - label_h, x2, y2), t.text, size=12, align="center")


def _card(cv: _Canvas, w: Widget, t: Theme) -> None:
    cv.d.rounded_rectangle(cv.box(w), radius=8 * cv.s, fill=t.surface, outline=t.divider)


def _badge(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.ellipse(b, fill=(220, 40, 40))
    cv.text(w.label, b, (255, 255, 255), size=10, bold=True, align="center")


def _bubble(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    fill = t.accent if w.selected else t.bubble_in
    cv.d.rounded_rectangle(b, radius=12 * cv.s, fill=fill)
    cv.text(w.label, (b[0] + 10 * cv.sx, b[1], b[2] - 6 * cv.sx, b[3]), contrast(fill), size=14)


def _image(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    fill = w.color or t.field
    cv.d.rounded_rectangle(b, radius=8 * cv.s, fill=_mix(fill, (255, 255, 255), 0.55))
    s = min(b[2] - b[0], b[3] - b[1]) * 0.6
    cx, cy = (b[0] + b[2]) / 2, (b[1] + b[3]) / 2
    draw_icon(cv.d, w.icon or "", (cx - s / 2, cy - s / 2, cx + s / 2, cy + s / 2), fill)


def _divider(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.line([(b[0], b[1]), (b[2], b[1])], fill=t.divider, width=1)


def _list(cv: _Canvas, w: Widget, t: Theme) -> None:
    """A scrollable container: a thin scrollbar showing the visible fraction."""
    b = cv.box(w)
    first, _, total = w.value.partition("/")
    if not total or int(total) == 0:
        return
    frac = int(first) / int(total)
    bar_w = max(1.0, 3 * cv.sx)
    y = b[1] + frac * (b[3] - b[1])
    cv.d.rectangle([b[2] - bar_w, y, b[2], min(b[3], y + (b[3] - b[1]) * 0.3)], fill=t.subtext)


def _nav_bar(cv: _Canvas, w: Widget, t: Theme) -> None:
    b = cv.box(w)
    cv.d.rectangle(b, fill=t.surface)
    cv.d.line([(b[0], b[1]), (b[2], b[1])], fill=t.divider)


_DRAW = {
    "status_bar": _status, "app_bar": _app_bar, "title": _title, "text": _text,
    "button": _button, "icon_button": _icon_button, "text_field": _field,
    "list_item": _list_item, "toggle": _toggle, "checkbox": _checkbox, "radio": _radio,
    "tab": _tab, "scrim": _scrim, "dialog": _dialog, "app_icon": _app_icon, "card": _card,
    "badge": _badge, "bubble": _bubble, "image": _image, "divider": _divider, "list": _list,
    "nav_bar": _nav_bar,
}
