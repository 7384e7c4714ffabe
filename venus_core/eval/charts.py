"""Inline SVG bar charts for the HTML report: one rate per bar, its 95 % interval as a whisker.

Why hand-written SVG rather than a plotting library: the report must open offline from a single
file, with no JavaScript and no fonts to fetch; a horizontal bar chart of proportions is a few
rectangles and lines, and drawing the Wilson interval on every bar keeps small-n categories from
looking more certain than they are. Values are proportions in 0..1 (`Rate.to_dict()` dicts).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from html import escape
from typing import Any

PALETTE = ("#2563eb", "#16a34a", "#d97706", "#9333ea", "#dc2626", "#0891b2", "#4b5563", "#db2777")
LABEL_W = 170
BAR_H = 18
GAP = 6


def _bar(y: float, x0: float, span: float, r: Mapping[str, Any], color: str, h: float) -> list[str]:
    v, lo, hi = float(r["value"]), float(r["ci95_low"]), float(r["ci95_high"])
    mid = y + h / 2
    if not r["n"]:  # no samples: no bar, no (vacuous 0..1) interval
        return [f'<text x="{x0 + 4:.1f}" y="{mid + 4:.1f}" font-size="11" fill="#666">n/a (n=0)</text>']
    return [
        f'<rect x="{x0:.1f}" y="{y:.1f}" width="{max(0.0, v * span):.1f}" height="{h:.1f}" fill="{color}" opacity="0.85"/>',
        f'<line x1="{x0 + lo * span:.1f}" y1="{mid:.1f}" x2="{x0 + hi * span:.1f}" y2="{mid:.1f}" stroke="#111" stroke-width="1.2"/>',
        f'<line x1="{x0 + lo * span:.1f}" y1="{y + 3:.1f}" x2="{x0 + lo * span:.1f}" y2="{y + h - 3:.1f}" stroke="#111"/>',
        f'<line x1="{x0 + hi * span:.1f}" y1="{y + 3:.1f}" x2="{x0 + hi * span:.1f}" y2="{y + h - 3:.1f}" stroke="#111"/>',
        f'<text x="{x0 + span + 8:.1f}" y="{mid + 4:.1f}" font-size="11">{v:.1%} (n={int(r["n"])})</text>',
    ]


def _axis(x0: float, span: float, top: float, bottom: float) -> list[str]:
    out = []
    for t in (0.0, 0.25, 0.5, 0.75, 1.0):
        x = x0 + t * span
        out.append(f'<line x1="{x:.1f}" y1="{top:.1f}" x2="{x:.1f}" y2="{bottom:.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{x:.1f}" y="{bottom + 12:.1f}" font-size="10" text-anchor="middle">{t:.0%}</text>')
    return out


def bar_chart(title: str, items: Sequence[tuple[str, Mapping[str, Any]]], width: int = 620) -> str:
    """Horizontal bars, one per (label, rate dict), with 95 % CI whiskers."""
    return grouped_bar_chart(title, [label for label, _ in items], [("", [r for _, r in items])], width)


def grouped_bar_chart(title: str, categories: Sequence[str],
                      series: Sequence[tuple[str, Sequence[Mapping[str, Any] | None]]], width: int = 620) -> str:
    """One group of bars per category, one bar per series (e.g. per stage); None = no value."""
    if any(len(values) != len(categories) for _, values in series):
        raise ValueError("grouped_bar_chart: every series needs one value (or None) per category")
    x0, span = LABEL_W, width - LABEL_W - 110
    group_h = len(series) * BAR_H + GAP
    legend_h = 26 if len(series) > 1 else 0
    top = 24 + legend_h
    height = top + len(categories) * (group_h + GAP) + 20
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" class="chart" role="img" width="{width}" height="{height}" '
           f'viewBox="0 0 {width} {height}" font-family="sans-serif">',
           f'<title>{escape(title)}</title>',
           f'<text x="4" y="15" font-size="13" font-weight="bold">{escape(title)}</text>']
    if legend_h:
        lx = 4.0
        for i, (name, _) in enumerate(series):
            color = PALETTE[i % len(PALETTE)]
            out.append(f'<rect x="{lx:.1f}" y="22" width="10" height="10" fill="{color}"/>')
            out.append(f'<text x="{lx + 14:.1f}" y="31" font-size="11">{escape(name)}</text>')
            lx += 24 + 7 * len(name)
    bottom = top + len(categories) * (group_h + GAP)
    out += _axis(x0, span, top - 4, bottom)
    for c, cat in enumerate(categories):
        gy = top + c * (group_h + GAP)
        out.append(f'<text x="{x0 - 6}" y="{gy + group_h / 2 + 2:.1f}" font-size="11" text-anchor="end">'
                   f'{escape(cat[:28])}</text>')
        for s, (_, values) in enumerate(series):
            r = values[c]
            if r is not None:
                out += _bar(gy + s * BAR_H, x0, span, r, PALETTE[s % len(PALETTE)], BAR_H - 2)
    out.append("</svg>")
    return "\n".join(out)
