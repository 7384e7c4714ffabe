"""Sign-up form: text fields, a country picker dialog, a switch, a checkbox, Submit / Reset.

Why: form filling is the longest single-app task family (focus a field, type, next field, scroll,
pick from a dialog, tick the terms box, submit); Submit stays disabled until the required fields
are filled and the terms accepted, so "enabled" flags matter.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, AtomicTask, HandlerResult, Op, ops, pick
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.layout import chrome, dialog, scroll_by
from venus_core.data.synth.widgets import Screen, Widget

COUNTRIES = (("China", "中国"), ("France", "法国"), ("Japan", "日本"), ("Brazil", "巴西"),
             ("Canada", "加拿大"))
PEOPLE = (("Lin Wei", "林伟"), ("Anna Berg", "安娜"), ("Omar Diaz", "奥马尔"),
          ("Sara Kim", "金莎拉"), ("Tom Lee", "李汤姆"), ("Yuki Sato", "佐藤雪"))
CITIES = (("Paris", "巴黎"), ("Tokyo", "东京"), ("Shanghai", "上海"), ("Toronto", "多伦多"),
          ("Lima", "利马"))
FIELDS = ("name", "email", "city")
BLOCKS = (("name", 72), ("email", 72), ("city", 72), ("country", 52), ("newsletter", 52),
          ("agree", 44), ("buttons", 56))


@dataclass(frozen=True)
class FormState:
    name: str = ""
    email: str = ""
    city: str = ""
    country: int = -1
    newsletter: bool = False
    agree: bool = False
    focus: str = ""
    scroll: int = 0  # index of the first visible block
    picker: bool = False
    submitted: bool = False

    @property
    def complete(self) -> bool:
        return bool(self.name and self.email and self.agree)


def _country(i: int, lang: str) -> str:
    return COUNTRIES[i][1] if lang == "zh" else COUNTRIES[i][0]


def _visible(rect: tuple[int, int, int, int], first: int) -> int:
    room, n = rect[3] - rect[1], 0
    for _, h in BLOCKS[first:]:
        if room < h:
            break
        room -= h
        n += 1
    return max(1, n)


class Form(App):
    """An account sign-up form."""

    name = "form"
    title_key = "app.form"
    icon = "clipboard"
    color = (140, 70, 200)
    nav_fields = frozenset({"focus", "scroll", "picker"})

    def initial(self, rng: random.Random) -> FormState:
        return FormState(newsletter=rng.random() < 0.5)

    def view(self, s: FormState, ctx: ViewContext) -> Screen:
        title = ctx.t("form.done") if s.submitted else ctx.t("form.title")
        widgets, rect = chrome(ctx, title, back=False)
        x1, y, x2, _ = rect
        if s.submitted:
            lines = [ctx.t("form.done"), f"{ctx.t('form.name')}: {s.name}",
                     f"{ctx.t('form.email')}: {s.email}"]
            if s.country >= 0:
                lines.append(f"{ctx.t('form.country')}: {_country(s.country, ctx.lang)}")
            for i, line in enumerate(lines):
                widgets.append(Widget(f"summary:{i}", "text", (x1 + 12, y + 12, x2 - 12, y + 40),
                                      label=line))
                y += 32
            return Screen(app=self.name, page="done", width=ctx.width, height=ctx.height,
                          platform=ctx.platform, lang=ctx.lang, widgets=tuple(widgets), title=title)
        n = _visible(rect, s.scroll)
        if s.scroll > 0 or s.scroll + n < len(BLOCKS):
            widgets.append(Widget("form", "list", (x1, y, x2, rect[3]), scrollable=True,
                                  value=f"{s.scroll}/{len(BLOCKS)}"))
        for block, h in BLOCKS[s.scroll:s.scroll + n]:
            widgets += self._block(s, ctx, block, (x1 + 12, y, x2 - 12, y + h))
            y += h
        if s.picker:
            widgets += dialog(ctx, "dialog:country", ctx.t("form.choose_country"),
                              [("btn:cancel", ctx.t("cancel"))],
                              [(f"country:{i}", _country(i, ctx.lang), i == s.country)
                               for i in range(len(COUNTRIES))])
        return Screen(app=self.name, page="form" + ("+picker" if s.picker else ""),
                      width=ctx.width, height=ctx.height, platform=ctx.platform, lang=ctx.lang,
                      widgets=tuple(widgets), title=title, modal=s.picker)

    def _block(self, s: FormState, ctx: ViewContext, block: str,
               box: tuple[int, int, int, int]) -> list[Widget]:
        x1, y1, x2, y2 = box
        if block in FIELDS:
            label = ctx.t(f"form.{block}")
            return [Widget(f"label:{block}", "text", (x1, y1 + 4, x2, y1 + 24), label=label),
                    Widget(f"field:{block}", "text_field", (x1, y1 + 26, x2, y2 - 6),
                           value=getattr(s, block), placeholder=label, name=label,
                           focused=s.focus == block, clickable=True)]
        if block == "country":
            value = _country(s.country, ctx.lang) if s.country >= 0 else "—"
            return [Widget("row:country", "list_item", (x1, y1 + 2, x2, y2 - 2),
                           label=f"{ctx.t('form.country')}: {value}", icon="globe",
                           clickable=True)]
        if block == "newsletter":
            label = ctx.t("form.newsletter")
            return [Widget("label:newsletter", "text", (x1, y1 + 12, x2 - 60, y2 - 12), label=label),
                    Widget("toggle:newsletter", "toggle", (x2 - 52, y1 + 14, x2 - 4, y2 - 14),
                           name=label, selected=s.newsletter, clickable=True)]
        if block == "agree":
            return [Widget("check:agree", "checkbox", (x1, y1 + 6, x2, y2 - 6),
                           label=ctx.t("form.agree"), selected=s.agree, clickable=True)]
        return [Widget("btn:reset", "button", (x1, y1 + 8, x1 + 110, y2 - 8),
                       label=ctx.t("form.reset"), clickable=True),
                Widget("btn:submit", "button", (x2 - 130, y1 + 8, x2, y2 - 8),
                       label=ctx.t("form.submit"), clickable=True, enabled=s.complete)]

    # -- transitions ---------------------------------------------------------------------------
    def on_click(self, s: FormState, w: Widget, ctx: ViewContext) -> HandlerResult:
        kind, _, arg = w.key.partition(":")
        if s.picker:
            if kind == "country":
                return replace(s, country=int(arg), picker=False)
            return replace(s, picker=False) if w.key in ("btn:cancel", "scrim") else None
        if kind == "field":
            return replace(s, focus=arg)
        if w.key == "row:country":
            return replace(s, picker=True, focus="")
        if w.key == "toggle:newsletter":
            return replace(s, newsletter=not s.newsletter)
        if w.key == "check:agree":
            return replace(s, agree=not s.agree)
        if w.key == "btn:submit" and s.complete:
            return replace(s, submitted=True, focus="")
        if w.key == "btn:reset":
            return FormState(newsletter=s.newsletter, scroll=s.scroll)
        return None

    def on_type(self, s: FormState, text: str, ctx: ViewContext) -> HandlerResult:
        if s.focus in FIELDS and not s.submitted and not s.picker:
            return replace(s, **{s.focus: getattr(s, s.focus) + text})
        return None

    def on_scroll(self, s: FormState, direction: str, target: Widget,
                  ctx: ViewContext) -> HandlerResult:
        if s.picker or s.submitted:
            return None
        _, rect = chrome(ctx, "", back=False)
        return replace(s, scroll=scroll_by(s.scroll, direction, len(BLOCKS), _visible(rect, 0)))

    def on_back(self, s: FormState, ctx: ViewContext) -> HandlerResult:
        if s.picker:
            return replace(s, picker=False)
        if s.focus:
            return replace(s, focus="")
        return None

    def on_launch(self, s: FormState) -> FormState:
        return replace(s, picker=False, focus="")

    def focused_empty(self, s: FormState) -> bool:
        return s.focus in FIELDS and getattr(s, s.focus) == "" and not s.picker

    # -- tasks ---------------------------------------------------------------------------------
    def tasks(self, s: FormState, rng: random.Random, lang: str) -> list[AtomicTask]:
        if s.submitted:
            return []
        zh = lang == "zh"
        person = rng.choice(PEOPLE)
        name = person[1] if zh else person[0]
        email = f"{person[0].split()[0].lower()}{rng.randint(1, 99)}@mail.com"
        city = rng.choice(CITIES)[1 if zh else 0]
        ci = rng.randrange(len(COUNTRIES))
        cname = _country(ci, lang)

        def fill(field: str, value: str) -> tuple[Op, ...]:
            """Focus an empty field and type; () when the field is filled (Type would append)."""
            return ops(self.name, f"field:{field}", Op("type", value)) if not getattr(s, field) \
                else ()

        agree = () if s.agree else ("check:agree",)
        out = [
            AtomicTask(self.name, pick(lang, f'Enter "{name}" as the full name',
                                       f"在姓名栏填写“{name}”"),
                       lambda st, v=name: st.name == v, texts=(name,), touches=("name",),
                       script=fill("name", name)),
            AtomicTask(self.name, pick(lang, f"Choose {cname} as the country",
                                       f"国家选择{cname}"),
                       lambda st, c=ci: st.country == c and not st.picker,
                       touches=("country",), script=ops(self.name, "row:country", f"country:{ci}")),
            AtomicTask(self.name, pick(lang, "Accept the terms", "勾选同意条款"),
                       lambda st: st.agree, touches=("agree",), script=ops(self.name, *agree)),
            AtomicTask(self.name, pick(lang, f"Turn {'off' if s.newsletter else 'on'} the newsletter",
                                       f"{'关闭' if s.newsletter else '开启'}订阅通讯"),
                       lambda st, v=not s.newsletter: st.newsletter == v,
                       touches=("newsletter",), script=ops(self.name, "toggle:newsletter")),
            AtomicTask(self.name, pick(lang, f"Enter the city {city}", f"城市填写{city}"),
                       lambda st, v=city: st.city == v, texts=(city,), touches=("city",),
                       script=fill("city", city)),
        ]
        milestones = (lambda st, v=name: st.name == v, lambda st, v=email: st.email == v,
                      lambda st, c=ci: st.country == c and not st.picker,
                      lambda st: st.agree, lambda st: st.submitted)
        blank = not (s.name or s.email or s.city)
        out.append(AtomicTask(
            self.name,
            pick(lang, f"Sign up as {name} with email {email}, country {cname}",
                 f"以{name}的身份注册，邮箱{email}，国家{cname}"),
            lambda st, v=name, e=email, c=ci: (st.submitted and st.name == v and st.email == e
                                                and st.country == c),
            texts=(name, email), milestones=milestones,
            touches=("name", "email", "country", "agree", "submitted"),
            script=ops(self.name, *fill("name", name)[1:], *fill("email", email)[1:],
                       "row:country", f"country:{ci}", *agree, "btn:submit") if blank else ()))
        if blank:
            news = rng.random() < 0.5
            out.append(AtomicTask(
                self.name,
                pick(lang, f"Fill in the whole sign-up form (name {name}, email {email}, city "
                           f"{city}, country {cname}, newsletter {'on' if news else 'off'}), "
                           "accept the terms and submit it",
                     f"填写整张注册表（姓名{name}，邮箱{email}，城市{city}，国家{cname}，"
                     f"订阅通讯{'开启' if news else '关闭'}），勾选同意条款并提交"),
                lambda st, v=name, e=email, t=city, c=ci, w=news: (
                    st.submitted and (st.name, st.email, st.city, st.country, st.newsletter)
                    == (v, e, t, c, w)),
                texts=(name, email, city), touches=("name", "email", "city", "country",
                                                    "newsletter", "agree", "submitted"),
                script=ops(self.name, *fill("name", name)[1:], *fill("email", email)[1:],
                           *fill("city", city)[1:], "row:country", f"country:{ci}",
                           *(("toggle:newsletter",) if news != s.newsletter else ()), *agree,
                           "btn:submit")))
        return out


SYNTH_APPS.register("form", Form())
