"""Layout helpers shared by the synthetic apps: window chrome, scrolling lists, grids.

Why: every app needs the same skeleton (status bar + app bar on a phone, a header with links on a
web page) and the same list behaviour (rows that scroll by a page). Keeping the geometry here makes
"mobile vs web" a layout decision of one module instead of an if-statement in every app. The two
platforms differ on purpose: mobile pages have a status bar, an app bar with a back arrow and icon
actions; web pages have a header with a site link, a text "Back" link and wider rows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.widgets import Rect, Widget

STATUS_H = 24
APPBAR_H = 52
WEB_HEADER_H = 48
ROW_H = 52
WEB_ROW_H = 40


@dataclass(frozen=True)
class BarAction:
    """An icon button in the app bar / header (e.g. search, cart, add)."""

    key: str
    icon: str
    name: str
    badge: str = ""


def chrome(
    ctx: ViewContext, title: str, *, back: bool, actions: Sequence[BarAction] = ()
) -> tuple[list[Widget], Rect]:
    """The window frame of a page: widgets plus the content rectangle left for the page."""
    w, out = ctx.width, []
    if ctx.platform == "mobile":
        out.append(Widget("status", "status_bar", (0, 0, w, STATUS_H), label="12:30"))
        top, bottom = STATUS_H, STATUS_H + APPBAR_H
        out.append(Widget("appbar", "app_bar", (0, top, w, bottom)))
        x = 8
        if back:
            out.append(Widget("nav:back", "icon_button", (4, top + 6, 44, bottom - 6),
                              name=ctx.t("back"), icon="back", clickable=True))
            x = 52
        out.append(Widget("title", "title", (x, top + 8, w - 8 - 44 * len(actions), bottom - 8),
                          label=title))
        ax = w - 4
        for a in reversed(actions):
            out.extend(_bar_action(a, (ax - 40, top + 6, ax, bottom - 6)))
            ax -= 44
        return out, (0, bottom, w, ctx.height)
    bottom = WEB_HEADER_H
    out.append(Widget("appbar", "app_bar", (0, 0, w, bottom)))
    out.append(Widget("nav:home", "button", (8, 8, 96, bottom - 8), label=ctx.t("home"),
                      name=ctx.t("home"), clickable=True))
    x = 104
    if back:
        out.append(Widget("nav:back", "button", (x, 8, x + 88, bottom - 8), label=ctx.t("back"),
                          name=ctx.t("back"), clickable=True))
        x += 96
    out.append(Widget("title", "title", (x, 10, w - 8 - 44 * len(actions), bottom - 10),
                      label=title))
    ax = w - 8
    for a in reversed(actions):
        out.extend(_bar_action(a, (ax - 36, 6, ax, bottom - 6)))
        ax -= 44
    return out, (16, bottom + 8, w - 16, ctx.height)


def _bar_action(a: BarAction, box: Rect) -> list[Widget]:
    out = [Widget(a.key, "icon_button", box, name=a.name, icon=a.icon, clickable=True)]
    if a.badge:
        x1, y1, x2, _ = box
        out.append(Widget(a.key + ":badge", "badge", (x2 - 16, y1, x2, y1 + 16), label=a.badge))
    return out


def row_height(ctx: ViewContext) -> int:
    return ROW_H if ctx.platform == "mobile" else WEB_ROW_H


def capacity(rect: Rect, row_h: int) -> int:
    """How many rows of height `row_h` fit in `rect` (at least one)."""
    return max(1, (rect[3] - rect[1]) // row_h)


def clamp_scroll(first: int, total: int, visible: int) -> int:
    return max(0, min(first, max(0, total - visible)))


def scroll_by(first: int, direction: str, total: int, visible: int) -> int:
    """New first-visible index after a swipe.

    `direction` is the finger's motion (the action space's convention): a swipe "up" moves the
    content up and reveals rows further down; "down" goes back towards the top.
    """
    step = max(1, visible - 1)
    if direction == "up":
        return clamp_scroll(first + step, total, visible)
    if direction == "down":
        return clamp_scroll(first - step, total, visible)
    return first


@dataclass(frozen=True)
class Row:
    key: str
    label: str
    secondary: str = ""
    icon: str | None = None
    trailing: Widget | None = None  # built by `toggle_for` etc.; its box is replaced
    long_clickable: bool = False
    selected: bool = False
    clickable: bool = True


def list_rows(
    key: str, rect: Rect, rows: Sequence[Row], first: int, row_h: int
) -> tuple[list[Widget], int]:
    """Widgets of the visible rows of a scrolling list; returns (widgets, visible row count)."""
    visible = capacity(rect, row_h)
    first = clamp_scroll(first, len(rows), visible)
    x1, y1, x2, _ = rect
    out: list[Widget] = []
    if len(rows) > visible:
        out.append(Widget(key, "list", (x1, y1, x2, y1 + visible * row_h), scrollable=True,
                          value=f"{first}/{len(rows)}"))
    for i, r in enumerate(rows[first:first + visible]):
        top = y1 + i * row_h
        box = (x1, top, x2, top + row_h)
        out.append(Widget(r.key, "list_item", box, label=r.label, icon=r.icon, value=r.secondary,
                          clickable=r.clickable, long_clickable=r.long_clickable,
                          selected=r.selected))
        if r.secondary:
            tx = x1 + (44 if r.icon else 12)
            sec_right = x2 - (64 if r.trailing else 8)
            out.append(Widget(r.key + ":sub", "text",
                              (tx, top + row_h * 3 // 5, max(tx + 1, sec_right), top + row_h - 2),
                              label=r.secondary))
        if r.trailing is not None:
            t = r.trailing
            tw = 44 if t.role == "toggle" else 56
            tb = (x2 - tw - 8, top + row_h // 2 - 12, x2 - 8, top + row_h // 2 + 12)
            out.append(Widget(t.key, t.role, tb, label=t.label, name=t.name or r.label,
                              selected=t.selected, clickable=t.clickable, enabled=t.enabled,
                              color=t.color, icon=t.icon))
    return out, visible


def grid_boxes(rect: Rect, n: int, cols: int, cell_h: int, pad: int = 8) -> list[Rect]:
    """Boxes of `n` cells laid out left-to-right, top-to-bottom in `cols` columns."""
    x1, y1, x2, _ = rect
    cw = (x2 - x1) // cols
    out = []
    for i in range(n):
        r, c = divmod(i, cols)
        out.append((x1 + c * cw + pad, y1 + r * cell_h + pad,
                    x1 + (c + 1) * cw - pad, y1 + (r + 1) * cell_h - pad))
    return out


def dialog(
    ctx: ViewContext, key: str, title: str, buttons: Sequence[tuple[str, str]],
    options: Sequence[tuple[str, str, bool]] = (),
) -> list[Widget]:
    """A modal dialog: scrim, panel with a title, optional option rows, and buttons.

    `buttons` are (key, label); `options` are (key, label, selected) rows shown as radio items.
    """
    w, h = ctx.width, ctx.height
    opt_h = 40
    panel_h = 64 + len(options) * opt_h + 56
    pw = min(w - 40, 400)
    px1 = (w - pw) // 2
    py1 = max(4, (h - panel_h) // 2)
    py2 = min(h - 4, py1 + panel_h)
    out = [Widget("scrim", "scrim", (0, 0, w, h), clickable=True),
           Widget(key, "dialog", (px1, py1, px1 + pw, py2), label=title)]
    y = py1 + 56
    for okey, label, sel in options:
        out.append(Widget(okey, "radio", (px1 + 12, y, px1 + pw - 12, y + opt_h - 4), label=label,
                          selected=sel, clickable=True))
        y += opt_h
    bw = 96
    bx = px1 + pw - 12
    for bkey, label in reversed(list(buttons)):
        out.append(Widget(bkey, "button", (bx - bw, py2 - 48, bx, py2 - 12), label=label,
                          clickable=True))
        bx -= bw + 8
    return out
