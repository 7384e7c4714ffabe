"""Words for widgets and steps: how instructions name an element, and per-step think/conclusion.

Why: grounding instructions, navigation "think" texts and VQA questions must name elements the
same way ("the Wi-Fi switch", "the search icon", "“Send”按钮"), so one module owns the phrasing
in both languages. The think/conclusion texts are templates, not model-written reasoning: short,
factual, and consistent with the action they accompany.
"""

from __future__ import annotations

from venus_core.actions.space import Action, CallUser, Click, Finished, Launch, LongPress, PressBack, \
    PressEnter, PressHome, Scroll, Type
from venus_core.data.synth.widgets import Screen, Widget

_ROLE_EN = {"icon_button": "the {n} icon", "toggle": "the {n} switch", "text_field": "the {n} field",
            "tab": "the {n} tab", "checkbox": "the “{n}” checkbox", "radio": "the “{n}” option",
            "app_icon": "the {n} app", "list_item": "“{n}”", "button": "the “{n}” button"}
_ROLE_ZH = {"icon_button": "{n}图标", "toggle": "{n}开关", "text_field": "{n}输入框",
            "tab": "{n}标签", "checkbox": "“{n}”复选框", "radio": "“{n}”选项", "app_icon": "{n}应用",
            "list_item": "“{n}”", "button": "“{n}”按钮"}
GROUNDABLE = frozenset(_ROLE_EN)


def describe(w: Widget, lang: str) -> str:
    """How an instruction refers to `w` ("the Wi-Fi switch" / "无线网络开关")."""
    name = w.description
    if w.role == "button" and not w.label and w.color_name:
        from venus_core.data.synth.i18n import tr

        color = tr(f"color.{w.color_name}", "zh" if lang == "zh" else "en")
        return f"{color}的按钮" if lang == "zh" else f"the {color} button"
    table = _ROLE_ZH if lang == "zh" else _ROLE_EN
    return table.get(w.role, "“{n}”").format(n=name)


def unique_description(screen: Screen, w: Widget, lang: str) -> bool:
    """Whether no other groundable widget on `screen` has the same description."""
    d = describe(w, lang)
    return sum(1 for o in screen.widgets if o.role in GROUNDABLE and describe(o, lang) == d) == 1


THINKS = ("goal", "brief")
"""Think styles: "goal" restates the task and the screen ("The task is: <goal>. I am on the <screen> screen
and need to tap <element>."); "brief" names only the step ("I tap <element>."): no copied goal, whose every
word is a chance for a small model to garble its output."""


def step_texts(goal: str, lang: str, action: Action, widget: Widget | None,
               screen: Screen, think: str = "goal") -> tuple[str, str]:
    """(think, conclusion) for one ground-truth step, the think in style `think` (THINKS)."""
    if think not in THINKS:
        raise ValueError(f"step_texts: think style {think!r} is not one of {', '.join(THINKS)}")
    zh = lang == "zh"
    where = screen.title
    d = describe(widget, lang) if widget is not None else ""
    if think == "brief" and isinstance(action, (Click, LongPress, Launch)):
        return _brief(action, d, zh)
    if isinstance(action, Click):
        if zh:
            return (f"任务是：{goal}。当前在“{where}”页面，需要点击{d}。", f"已点击{d}。")
        return (f"The task is: {goal}. I am on the {where} screen and need to tap {d}.",
                f"Tapped {d}.")
    if isinstance(action, LongPress):
        if zh:
            return (f"任务是：{goal}。长按{d}以打开更多选项。", f"已长按{d}，出现了菜单。")
        return (f"The task is: {goal}. I long-press {d} to open its options.",
                f"Long-pressed {d}; a menu opened.")
    if isinstance(action, Type):
        if zh:
            return (f"输入框已获得焦点，输入“{action.content}”。", f"已输入“{action.content}”。")
        return (f"The text field is focused, so I type “{action.content}”.",
                f"Typed “{action.content}”.")
    if isinstance(action, Scroll):
        if zh:
            return ("需要的内容不在当前屏幕上，向上滑动查看更多。" if action.direction == "up"
                    else "需要的内容在上方，向下滑动。", "已滑动列表。")
        return ("What I need is not visible yet, so I swipe up to see more."
                if action.direction == "up" else "What I need is further up, so I swipe down.",
                "Scrolled the list.")
    if isinstance(action, Launch):
        name = action.app or action.url or ""
        if zh:
            return (f"任务是：{goal}。先打开{name}。", f"已打开{name}。")
        return (f"The task is: {goal}. First I open {name}.", f"Opened {name}.")
    if isinstance(action, PressBack):
        return (("返回上一页。", "已返回。") if zh
                else ("I go back to the previous screen.", "Went back."))
    if isinstance(action, PressHome):
        return (("回到主屏幕。", "已回到主屏幕。") if zh
                else ("I go to the home screen.", "Back on the home screen."))
    if isinstance(action, PressEnter):
        return (("按回车键提交。", "已提交。") if zh else ("I press Enter to submit.", "Submitted."))
    if isinstance(action, CallUser):
        return ((f"屏幕上显示了答案，告诉用户：{action.content}。", f"已告诉用户：{action.content}。")
                if zh else (f"The screen shows the answer; I tell the user: {action.content}.",
                            f"Told the user: {action.content}."))
    if isinstance(action, Finished):
        if action.content:
            return ((f"屏幕上显示了答案：{action.content}。", f"答案是{action.content}。") if zh
                    else (f"The screen shows the answer: {action.content}.",
                          f"The answer is {action.content}."))
        return (("任务已经完成。", "任务完成。") if zh
                else ("The goal is reached.", "The task is complete."))
    return (("执行下一步操作。", "已执行。") if zh else ("I take the next step.", "Done."))


def _brief(action: Click | LongPress | Launch, d: str, zh: bool) -> tuple[str, str]:
    """The "brief" think of the steps whose "goal" think restates the task (the conclusion is the same)."""
    if isinstance(action, Click):
        return (f"点击{d}。", f"已点击{d}。") if zh else (f"I tap {d}.", f"Tapped {d}.")
    if isinstance(action, LongPress):
        return ((f"长按{d}。", f"已长按{d}，出现了菜单。") if zh
                else (f"I long-press {d}.", f"Long-pressed {d}; a menu opened."))
    name = action.app or action.url or ""
    return (f"打开{name}。", f"已打开{name}。") if zh else (f"I open {name}.", f"Opened {name}.")
