"""Perception and GUI-VQA questions about a synthetic screen, answered from its widgets.

Why: the mid-training mixture (UI-Venus-1.5) has a semantic-perception share (read / identify
what is on the screen: text of a region, switch states, colours, element types) and a GUI-VQA
share (questions about the screen as a whole: which tab is selected, how many items, which app,
the title). Answers come from the `Screen` (what is drawn), never from hidden state.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from venus_core.data.synth.describe import describe
from venus_core.data.synth.i18n import tr
from venus_core.data.synth.widgets import Screen, Widget

QA = tuple[str, str]  # (question, answer)

_ROLE_WORDS = {"button": ("button", "按钮"), "icon_button": ("icon", "图标"),
               "toggle": ("switch", "开关"), "text_field": ("text field", "输入框"),
               "list_item": ("list item", "列表项"), "tab": ("tab", "标签"),
               "checkbox": ("checkbox", "复选框"), "app_icon": ("app icon", "应用图标"),
               "radio": ("option", "选项")}


def _box(w: Widget, norm: Callable[[tuple[int, int, int, int]], tuple[int, ...]]) -> str:
    return "[" + ",".join(str(v) for v in norm(w.box)) + "]"


def perception_questions(screen: Screen, lang: str, norm: Callable) -> list[QA]:
    """Element-level questions: read a region, switch on/off, colour, element type."""
    zh = lang == "zh"
    out: list[QA] = []
    for w in screen.widgets:
        if w.label and w.role in ("text", "title", "button", "list_item", "tab", "bubble"):
            out.append((f"区域{_box(w, norm)}中的文字是什么？" if zh
                        else f"What text is shown in the region {_box(w, norm)}?", w.label))
        if w.role == "toggle":
            d = describe(w, lang)
            out.append((f"{d}是开着还是关着？" if zh else f"Is {d} on or off?",
                        ("开" if w.selected else "关") if zh else ("on" if w.selected else "off")))
        if w.role == "checkbox":
            d = describe(w, lang)
            out.append((f"{d}勾选了吗？" if zh else f"Is {d} checked?",
                        ("是" if w.selected else "否") if zh else ("yes" if w.selected else "no")))
        if w.color_name and w.role == "button":
            color = tr(f"color.{w.color_name}", "zh" if zh else "en")
            out.append((f"区域{_box(w, norm)}中的按钮是什么颜色？" if zh
                        else f"What colour is the button in the region {_box(w, norm)}?", color))
        if w.role in _ROLE_WORDS and w.clickable:
            en, cn = _ROLE_WORDS[w.role]
            out.append((f"区域{_box(w, norm)}中是什么类型的元素？" if zh
                        else f"What kind of element is in the region {_box(w, norm)}?",
                        cn if zh else en))
    return out


def vqa_questions(screen: Screen, lang: str, app_title: str) -> list[QA]:
    """Screen-level questions: selected tab, counts, app, title, enabled buttons."""
    zh = lang == "zh"
    out: list[QA] = []
    tabs = [w for w in screen.widgets if w.role == "tab"]
    sel = [w for w in tabs if w.selected]
    if sel:
        out.append(("当前选中的是哪个标签？" if zh else "Which tab is selected?", sel[0].label))
    rows = [w for w in screen.widgets if w.role == "list_item"]
    if rows:
        out.append(("屏幕上显示了多少个列表项？" if zh else "How many list items are visible?",
                    str(len(rows))))
    buttons = [w for w in screen.widgets if w.role == "button"]
    if buttons:
        out.append(("屏幕上有几个按钮？" if zh else "How many buttons are on the screen?",
                    str(len(buttons))))
    toggles = [w for w in screen.widgets if w.role == "toggle"]
    if toggles:
        on = sum(1 for w in toggles if w.selected)
        out.append(("有几个开关是打开的？" if zh else "How many switches are turned on?", str(on)))
    if screen.title and screen.app != "board":
        out.append(("这个页面的标题是什么？" if zh else "What is the title of this screen?",
                    screen.title))
        out.append(("当前打开的是哪个应用？" if zh else "Which app is open?", app_title))
    for w in buttons:
        if w.label:
            d = describe(w, lang)
            out.append((f"{d}可以点击吗？" if zh else f"Can {d} be tapped right now?",
                        ("可以" if w.enabled else "不可以") if zh
                        else ("yes" if w.enabled else "no")))
    return out


def pick_qa(rng: random.Random, items: list[QA]) -> QA | None:
    return rng.choice(items) if items else None
