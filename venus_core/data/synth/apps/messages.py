"""Messages: chats and contacts tabs, a conversation page with text entry, a new-contact form.

Why: text entry (focus a field, Type, Send), tabs, long lists, long-press menus (pin / delete a
chat) and "read the last message" questions. Contact names exist in English and Chinese; what a
user types is stored verbatim.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, AtomicTask, HandlerResult, Op, ops, pick
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.layout import (
    BarAction, Row, chrome, dialog, list_rows, row_height, scroll_by,
)
from venus_core.data.synth.widgets import Screen, Widget

NAMES = (("Alice", "爱丽丝"), ("Bob", "鲍勃"), ("Carol", "卡罗尔"), ("David", "大卫"),
         ("Emma", "艾玛"), ("Frank", "弗兰克"), ("Grace", "格蕾丝"), ("Henry", "亨利"),
         ("Ivy", "艾薇"), ("Jack", "杰克"), ("Kate", "凯特"), ("Leo", "里奥"), ("Mia", "米娅"),
         ("Noah", "诺亚"), ("Olivia", "奥利维亚"), ("Paul", "保罗"))
PHRASES = (("On my way", "我在路上"), ("See you at six", "六点见"), ("Thanks a lot", "非常感谢"),
           ("Call me later", "稍后给我打电话"), ("Happy birthday", "生日快乐"),
           ("Running late", "我要迟到了"), ("Lunch today?", "今天一起吃午饭吗？"),
           ("Got it", "收到"), ("Where are you?", "你在哪里？"), ("Good night", "晚安"))
TAB_H = 40
INPUT_H = 52

Message = tuple[bool, str, str]  # (outgoing, text in English, text in Chinese)


@dataclass(frozen=True)
class MessagesState:
    contacts: tuple[tuple[str, str, str], ...]  # (name en, name zh, phone)
    threads: tuple[tuple[int, tuple[Message, ...]], ...]  # contact index -> messages
    tab: str = "chats"
    page: str = "list"  # list | chat | new_contact
    open: int = -1
    draft: str = ""
    focus: str = ""  # "" | draft | name | phone
    new_name: str = ""
    new_phone: str = ""
    scroll: int = 0
    menu: int = -1  # contact index whose chat menu (long press) is open
    pinned: tuple[int, ...] = ()

    def thread(self, idx: int) -> tuple[Message, ...]:
        return dict(self.threads).get(idx, ())

    def name(self, idx: int, lang: str) -> str:
        en, zh, _ = self.contacts[idx]
        return zh if lang == "zh" else en


def _text(m: Message, lang: str) -> str:
    return m[2] if lang == "zh" else m[1]


class Messages(App):
    """Chats, contacts and conversations."""

    name = "messages"
    title_key = "app.messages"
    icon = "chat"
    color = (46, 160, 67)
    nav_fields = frozenset({"tab", "page", "open", "draft", "focus", "new_name", "new_phone",
                            "scroll", "menu"})

    def initial(self, rng: random.Random) -> MessagesState:
        chosen = sorted(rng.sample(range(len(NAMES)), rng.randint(7, 11)))
        contacts = tuple((NAMES[i][0], NAMES[i][1], f"555-{rng.randint(1000, 9999)}")
                         for i in chosen)
        threads = []
        for idx in sorted(rng.sample(range(len(contacts)), rng.randint(2, 5))):
            msgs = tuple((rng.random() < 0.4, *rng.choice(PHRASES))
                         for _ in range(rng.randint(1, 3)))
            threads.append((idx, msgs))
        return MessagesState(contacts=contacts, threads=tuple(threads))

    def _chat_order(self, s: MessagesState) -> list[int]:
        idxs = [i for i, _ in s.threads]
        return [i for i in idxs if i in s.pinned] + [i for i in idxs if i not in s.pinned]

    def _list_rows(self, s: MessagesState, ctx: ViewContext) -> list[Row]:
        if s.tab == "chats":
            rows = []
            for i in self._chat_order(s):
                last = s.thread(i)[-1]
                rows.append(Row(f"chat:{i}", s.name(i, ctx.lang), secondary=_text(last, ctx.lang),
                                icon="pin" if i in s.pinned else "person", long_clickable=True))
            return rows
        order = sorted(range(len(s.contacts)), key=lambda i: s.name(i, ctx.lang))
        return [Row(f"contact:{i}", s.name(i, ctx.lang), secondary=s.contacts[i][2],
                    icon="person") for i in order]

    def _list_rect(self, ctx: ViewContext, rect: tuple[int, int, int, int]) -> tuple[int, ...]:
        return (rect[0], rect[1] + TAB_H, rect[2], rect[3])

    def view(self, s: MessagesState, ctx: ViewContext) -> Screen:
        if s.page == "chat":
            return self._chat_view(s, ctx)
        if s.page == "new_contact":
            return self._new_contact_view(s, ctx)
        actions = [BarAction("bar:add", "plus", ctx.t("msg.add"))] if s.tab == "contacts" else []
        widgets, rect = chrome(ctx, ctx.t("app.messages"), back=False, actions=actions)
        half = (rect[0] + rect[2]) // 2
        for key, x1, x2 in (("chats", rect[0], half), ("contacts", half, rect[2])):
            widgets.append(Widget(f"tab:{key}", "tab", (x1, rect[1], x2, rect[1] + TAB_H),
                                  label=ctx.t(f"msg.{key}"), selected=s.tab == key,
                                  clickable=True))
        lrect = self._list_rect(ctx, rect)
        rows = self._list_rows(s, ctx)
        items, _ = list_rows("list", lrect, rows, s.scroll, row_height(ctx) + 4)
        widgets += items
        if not rows:
            widgets.append(Widget("empty", "text", (lrect[0] + 12, lrect[1] + 12, lrect[2] - 12,
                                                    lrect[1] + 40), label=ctx.t("msg.no_messages")))
        modal = s.menu >= 0
        if modal:
            widgets += dialog(ctx, "dialog:chat", s.name(s.menu, ctx.lang),
                              [("btn:cancel", ctx.t("cancel")), ("btn:delete", ctx.t("delete")),
                               ("btn:pin", ctx.t("msg.pin"))])
        return Screen(app=self.name, page=s.tab + ("+menu" if modal else ""), width=ctx.width,
                      height=ctx.height, platform=ctx.platform, lang=ctx.lang,
                      widgets=tuple(widgets), title=ctx.t("app.messages"), modal=modal)

    def _chat_view(self, s: MessagesState, ctx: ViewContext) -> Screen:
        title = s.name(s.open, ctx.lang)
        widgets, rect = chrome(ctx, title, back=True)
        x1, y1, x2, y2 = rect
        bottom = y2 - INPUT_H
        msgs = s.thread(s.open)
        bubble_h, y = 36, bottom - 8
        shown: list[Widget] = []
        for k in range(len(msgs) - 1, -1, -1):
            if y - bubble_h < y1 + 4:
                break
            out, text = msgs[k][0], _text(msgs[k], ctx.lang)
            bw = min(x2 - x1 - 60, 40 + 9 * len(text) * (2 if ctx.lang == "zh" else 1))
            bx1 = x2 - 8 - bw if out else x1 + 8
            shown.append(Widget(f"msg:{k}", "bubble", (bx1, y - bubble_h, bx1 + bw, y),
                                label=text, selected=out))
            y -= bubble_h + 8
        widgets += reversed(shown)
        if not msgs:
            widgets.append(Widget("empty", "text", (x1 + 12, y1 + 12, x2 - 12, y1 + 40),
                                  label=ctx.t("msg.no_messages")))
        widgets.append(Widget("field:draft", "text_field", (x1 + 8, bottom + 6, x2 - 56, y2 - 6),
                              value=s.draft, placeholder=ctx.t("msg.type_message"),
                              focused=s.focus == "draft", clickable=True))
        widgets.append(Widget("btn:send", "icon_button", (x2 - 50, bottom + 6, x2 - 6, y2 - 6),
                              icon="send", name=ctx.t("msg.send"), clickable=True,
                              enabled=bool(s.draft)))
        return Screen(app=self.name, page="chat", width=ctx.width, height=ctx.height,
                      platform=ctx.platform, lang=ctx.lang, widgets=tuple(widgets), title=title)

    def _new_contact_view(self, s: MessagesState, ctx: ViewContext) -> Screen:
        title = ctx.t("msg.new_contact")
        widgets, rect = chrome(ctx, title, back=True)
        x1, y, x2, _ = rect
        for key, value in (("name", s.new_name), ("phone", s.new_phone)):
            label = ctx.t(f"msg.{key}")
            widgets.append(Widget(f"label:{key}", "text", (x1 + 12, y + 8, x2 - 12, y + 28),
                                  label=label))
            widgets.append(Widget(f"field:{key}", "text_field", (x1 + 12, y + 30, x2 - 12, y + 70),
                                  value=value, placeholder=label, name=label,
                                  focused=s.focus == key, clickable=True))
            y += 76
        widgets.append(Widget("btn:save", "button", (x2 - 120, y + 8, x2 - 12, y + 48),
                              label=ctx.t("save"), clickable=True,
                              enabled=bool(s.new_name and s.new_phone)))
        return Screen(app=self.name, page="new_contact", width=ctx.width, height=ctx.height,
                      platform=ctx.platform, lang=ctx.lang, widgets=tuple(widgets), title=title)

    # -- transitions ---------------------------------------------------------------------------
    def _send(self, s: MessagesState) -> MessagesState | None:
        if not s.draft:
            return None
        threads = dict(s.threads)
        threads[s.open] = threads.get(s.open, ()) + ((True, s.draft, s.draft),)
        return replace(s, threads=tuple(sorted(threads.items())), draft="")

    def on_click(self, s: MessagesState, w: Widget, ctx: ViewContext) -> HandlerResult:
        kind, _, arg = w.key.partition(":")
        if s.menu >= 0:
            if w.key == "btn:pin":
                pinned = tuple(p for p in s.pinned if p != s.menu) + (s.menu,)
                return replace(s, pinned=pinned, menu=-1)
            if w.key == "btn:delete":
                return replace(s, threads=tuple(t for t in s.threads if t[0] != s.menu),
                               pinned=tuple(p for p in s.pinned if p != s.menu), menu=-1, scroll=0)
            return replace(s, menu=-1) if w.key in ("btn:cancel", "scrim") else None
        if kind == "tab":
            return replace(s, tab=arg, scroll=0)
        if kind in ("chat", "contact"):
            return replace(s, page="chat", open=int(arg), draft="", focus="")
        if w.key == "bar:add":
            return replace(s, page="new_contact", new_name="", new_phone="", focus="")
        if kind == "field":
            return replace(s, focus=arg)
        if w.key == "btn:send":
            return self._send(s)
        if w.key == "btn:save":
            contacts = s.contacts + ((s.new_name, s.new_name, s.new_phone),)
            return replace(s, contacts=contacts, page="list", tab="contacts", focus="", scroll=0)
        return None

    def on_long_press(self, s: MessagesState, w: Widget, ctx: ViewContext) -> HandlerResult:
        if s.menu < 0 and w.key.startswith("chat:"):
            return replace(s, menu=int(w.key[5:]))
        return None

    def on_type(self, s: MessagesState, text: str, ctx: ViewContext) -> HandlerResult:
        if s.focus == "draft" and s.page == "chat":
            return replace(s, draft=s.draft + text)
        if s.focus == "name" and s.page == "new_contact":
            return replace(s, new_name=s.new_name + text)
        if s.focus == "phone" and s.page == "new_contact":
            return replace(s, new_phone=s.new_phone + text)
        return None

    def on_enter(self, s: MessagesState, ctx: ViewContext) -> HandlerResult:
        return self._send(s) if s.page == "chat" and s.focus == "draft" else None

    def on_scroll(self, s: MessagesState, direction: str, target: Widget,
                  ctx: ViewContext) -> HandlerResult:
        if s.page != "list" or s.menu >= 0:
            return None
        _, rect = chrome(ctx, "", back=False)
        lrect = self._list_rect(ctx, rect)
        visible = max(1, (lrect[3] - lrect[1]) // (row_height(ctx) + 4))
        total = len(self._list_rows(s, ctx))
        return replace(s, scroll=scroll_by(s.scroll, direction, total, visible))

    def on_back(self, s: MessagesState, ctx: ViewContext) -> HandlerResult:
        if s.menu >= 0:
            return replace(s, menu=-1)
        if s.page != "list":
            return replace(s, page="list", focus="", draft="")
        return None

    def on_launch(self, s: MessagesState) -> MessagesState:
        return replace(s, page="list", tab="chats", scroll=0, menu=-1, focus="", draft="")

    def focused_empty(self, s: MessagesState) -> bool:
        value = {"draft": s.draft, "name": s.new_name, "phone": s.new_phone}.get(s.focus)
        return value == ""

    # -- tasks ---------------------------------------------------------------------------------
    def _to_chat(self, s: MessagesState, who: int) -> tuple[str, ...]:
        """Widget keys from the root to the chat with contact `who` (chats tab, else contacts)."""
        if s.thread(who):
            return ("tab:chats", f"chat:{who}")
        return ("tab:contacts", f"contact:{who}")

    def tasks(self, s: MessagesState, rng: random.Random, lang: str) -> list[AtomicTask]:
        out: list[AtomicTask] = []
        who = rng.randrange(len(s.contacts))
        name = s.name(who, lang)
        en, zh = rng.choice(PHRASES)
        text = zh if lang == "zh" else en
        send = rng.choice([Op("tap", "btn:send"), Op("enter")])
        out.append(AtomicTask(
            self.name, pick(lang, f'Send "{text}" to {name}', f"给{name}发送“{text}”"),
            lambda st, i=who, t=text: bool(st.thread(i)) and st.thread(i)[-1][:2] == (True, t),
            texts=(text,), touches=("threads",),
            script=ops(self.name, *self._to_chat(s, who), "field:draft", Op("type", text), send)))
        out.append(AtomicTask(self.name, pick(lang, f"Open the chat with {name}",
                                              f"打开与{name}的聊天"),
                              lambda st, i=who: st.page == "chat" and st.open == i,
                              script=ops(self.name, *self._to_chat(s, who))))
        out.append(AtomicTask(self.name, pick(lang, "Show the contacts list", "查看联系人列表"),
                              lambda st: st.page == "list" and st.tab == "contacts",
                              script=ops(self.name, "tab:contacts")))
        taken = {c[0] for c in s.contacts} | {c[1] for c in s.contacts}
        new_en, new_zh = rng.choice([n for n in NAMES if n[0] not in taken and n[1] not in taken]
                                    or [("Zoe", "佐伊")])
        new = new_zh if lang == "zh" else new_en
        phone = f"555-{rng.randint(1000, 9999)}"
        if new not in taken:
            out.append(AtomicTask(
                self.name, pick(lang, f"Add a contact named {new} with phone {phone}",
                                f"添加联系人{new}，电话{phone}"),
                lambda st, n=new, p=phone: any(c[0] == n and c[2] == p for c in st.contacts),
                texts=(new, phone), touches=("contacts",),
                script=ops(self.name, "tab:contacts", "bar:add", "field:name", Op("type", new),
                           "field:phone", Op("type", phone), "btn:save")))
        if s.threads:
            idx, msgs = rng.choice(s.threads)
            cname = s.name(idx, lang)
            out.append(AtomicTask(self.name, pick(lang, f"Delete the chat with {cname}",
                                                  f"删除与{cname}的聊天"),
                                  lambda st, i=idx: not st.thread(i),
                                  touches=("threads", "pinned"),
                                  script=ops(self.name, "tab:chats", Op("long", f"chat:{idx}"),
                                             "btn:delete")))
            if idx not in s.pinned:
                out.append(AtomicTask(self.name, pick(lang, f"Pin the chat with {cname}",
                                                      f"置顶与{cname}的聊天"),
                                      lambda st, i=idx: i in st.pinned, touches=("pinned",),
                                      script=ops(self.name, "tab:chats", Op("long", f"chat:{idx}"),
                                                 "btn:pin")))
            out.append(AtomicTask(
                self.name, pick(lang, f"What is the last message in the chat with {cname}?",
                                f"与{cname}的聊天中最后一条消息是什么？"),
                lambda st, i=idx: st.page == "chat" and st.open == i,
                answer=_text(msgs[-1], lang), kind="info",
                script=ops(self.name, "tab:chats", f"chat:{idx}"),
                answer_of=lambda st, i=idx: _text(st.thread(i)[-1], lang) if st.thread(i) else ""))
        out += self._contact_questions(s, rng, lang)
        return out

    def _contact_questions(self, s: MessagesState, rng: random.Random, lang: str
                           ) -> list[AtomicTask]:
        """"Which contact's number ends in 42?" / "What is Bob's number?" (contacts tab)."""
        j = rng.randrange(len(s.contacts))
        number = s.contacts[j][2]
        suffix = next((number[-k:] for k in (2, 3, 4)
                       if sum(c[2].endswith(number[-k:]) for c in s.contacts) == 1), "")
        listed = lambda st: st.page == "list" and st.tab == "contacts" and st.menu < 0  # noqa: E731
        script = ops(self.name, "tab:contacts", Op("see", f"contact:{j}"))
        out = [AtomicTask(self.name, pick(lang, f"What is {s.name(j, lang)}'s phone number?",
                                          f"{s.name(j, lang)}的电话号码是多少？"),
                          listed, answer=number, kind="info", script=script,
                          answer_of=lambda st, i=j: st.contacts[i][2])]
        if suffix:
            def owner(st: MessagesState, x: str = suffix) -> str:
                hits = [i for i, c in enumerate(st.contacts) if c[2].endswith(x)]
                return st.name(hits[0], lang) if len(hits) == 1 else ""

            out.append(AtomicTask(self.name, pick(lang, f"Which contact's number ends in {suffix}?",
                                                  f"哪位联系人的电话号码尾号是{suffix}？"),
                                  listed, answer=s.name(j, lang), kind="info", script=script,
                                  answer_of=owner))
        return out


SYNTH_APPS.register("messages", Messages())
