"""Settings: switches, sub-pages (display, sound, battery, language, about), a confirm dialog.

Why: the classic "turn X on/off", "set Y to N" tasks and on/off perception questions. The root list
is longer than a small screen, so some switches need a scroll first; turning on airplane mode asks
for confirmation (a dialog step); the font size is chosen in a radio dialog.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, AtomicTask, HandlerResult, Op, ops, pick
from venus_core.data.synth.i18n import ViewContext, tr
from venus_core.data.synth.layout import Row, chrome, dialog, list_rows, row_height, scroll_by
from venus_core.data.synth.widgets import Screen, Widget

SWITCHES = ("wifi", "bluetooth", "airplane", "location", "notifications", "dark_mode", "vibrate",
            "battery_saver")
ROOT_SWITCHES = ("wifi", "bluetooth", "airplane", "location", "notifications")
SUBPAGES = ("display", "sound", "battery", "language", "about")
SUBPAGE_ICONS = {"display": "sun", "sound": "speaker", "battery": "battery", "language": "globe",
                 "about": "info"}
SWITCH_ICONS = {"wifi": "wifi", "bluetooth": "bluetooth", "airplane": "plane", "location": "pin",
                "notifications": "bell"}
FONT_SIZES = ("small", "default", "large")
LANGS = ("en", "zh", "fr")
MODELS = ("Venus X1", "Pixel Lite", "Nova 7", "Aster 5G", "Orion S")
LEVEL_MAX = 5
SWITCH_PAGE = {"dark_mode": "display", "vibrate": "sound", "battery_saver": "battery"}


@dataclass(frozen=True)
class SettingsState:
    switches: tuple[tuple[str, bool], ...]
    page: str = "root"
    scroll: int = 0
    dialog: str | None = None
    brightness: int = 3
    volume: int = 2
    font_size: str = "default"
    language: str = "en"
    model: str = "Venus X1"
    version: str = "14.0"
    battery: int = 80

    def on(self, key: str) -> bool:
        return dict(self.switches)[key]

    def set(self, key: str, value: bool) -> SettingsState:
        return replace(self, switches=tuple((k, value if k == key else v) for k, v in self.switches))


def _switch_row(ctx: ViewContext, s: SettingsState, key: str, icon: str | None) -> Row:
    label = ctx.t(f"set.{key}")
    return Row(f"row:{key}", label, icon=icon,
               trailing=Widget(f"toggle:{key}", "toggle", (0, 0, 1, 1), name=label,
                               selected=s.on(key), clickable=True))


class Settings(App):
    """Phone settings with switches and sub-pages."""

    name = "settings"
    title_key = "app.settings"
    icon = "gear"
    color = (100, 110, 125)
    nav_fields = frozenset({"page", "scroll", "dialog"})

    def initial(self, rng: random.Random) -> SettingsState:
        sw = tuple((k, rng.random() < 0.5) for k in SWITCHES)
        sw = tuple((k, False if k == "airplane" else v) for k, v in sw)
        return SettingsState(
            switches=sw, brightness=rng.randint(0, LEVEL_MAX), volume=rng.randint(0, LEVEL_MAX),
            font_size=rng.choice(FONT_SIZES), language=rng.choice(LANGS),
            model=rng.choice(MODELS), version=f"{rng.randint(10, 15)}.{rng.randint(0, 3)}",
            battery=rng.randint(5, 100),
        )

    # -- view ----------------------------------------------------------------------------------
    def _rows(self, s: SettingsState, ctx: ViewContext) -> list[Row]:
        if s.page == "root":
            rows = [_switch_row(ctx, s, k, SWITCH_ICONS[k]) for k in ROOT_SWITCHES]
            for p in SUBPAGES:
                sec = f"{s.battery}%" if p == "battery" else (
                    ctx.t(f"set.lang.{s.language}") if p == "language" else "")
                rows.append(Row(f"row:{p}", ctx.t(f"set.{p}"), secondary=sec,
                                icon=SUBPAGE_ICONS[p]))
            return rows
        if s.page == "display":
            return [_switch_row(ctx, s, "dark_mode", "moon"),
                    Row("row:font_size", ctx.t("set.font_size"),
                        secondary=ctx.t(f"set.font.{s.font_size}"))]
        if s.page == "sound":
            return [_switch_row(ctx, s, "vibrate", None)]
        if s.page == "battery":
            return [Row("row:battery_level", f"{ctx.t('set.battery')}: {s.battery}%",
                        clickable=False),
                    _switch_row(ctx, s, "battery_saver", None)]
        if s.page == "language":
            return [Row(f"lang:{code}", ctx.t(f"set.lang.{code}"), selected=code == s.language,
                        trailing=Widget(f"radio:{code}", "radio", (0, 0, 1, 1),
                                        selected=code == s.language, clickable=True,
                                        name=ctx.t(f"set.lang.{code}")))
                    for code in LANGS]
        return [Row("row:model", f"{ctx.t('set.model')}: {s.model}", clickable=False),
                Row("row:version", f"{ctx.t('set.version')}: {s.version}", clickable=False)]

    def view(self, s: SettingsState, ctx: ViewContext) -> Screen:
        title = ctx.t("app.settings") if s.page == "root" else ctx.t(f"set.{s.page}")
        widgets, rect = chrome(ctx, title, back=s.page != "root")
        rh = row_height(ctx)
        rows = self._rows(s, ctx)
        items, _ = list_rows("list", rect, rows, s.scroll, rh)
        widgets += items
        if s.page in ("display", "sound"):
            which = "brightness" if s.page == "display" else "volume"
            value = s.brightness if which == "brightness" else s.volume
            y = rect[1] + len(rows) * rh + 8
            label = f"{ctx.t('set.' + which)}: {value}"
            x1, x2 = rect[0] + 12, rect[2] - 8
            widgets += [
                Widget(f"value:{which}", "text", (x1, y, x2 - 100, y + 36), label=label),
                Widget(f"dec:{which}", "icon_button", (x2 - 92, y, x2 - 52, y + 36), icon="minus",
                       name=f"{ctx.t('set.decrease')} {ctx.t('set.' + which)}", clickable=True,
                       enabled=value > 0),
                Widget(f"inc:{which}", "icon_button", (x2 - 44, y, x2 - 4, y + 36), icon="plus",
                       name=f"{ctx.t('set.increase')} {ctx.t('set.' + which)}", clickable=True,
                       enabled=value < LEVEL_MAX),
            ]
        if s.dialog == "airplane":
            widgets += dialog(ctx, "dialog:airplane", ctx.t("set.airplane_confirm"),
                              [("btn:cancel", ctx.t("cancel")), ("btn:ok", ctx.t("ok"))])
        elif s.dialog == "font_size":
            widgets += dialog(ctx, "dialog:font_size", ctx.t("set.font_size"),
                              [("btn:cancel", ctx.t("cancel"))],
                              [(f"font:{f}", ctx.t(f"set.font.{f}"), f == s.font_size)
                               for f in FONT_SIZES])
        return Screen(app=self.name, page=s.page + (f"+{s.dialog}" if s.dialog else ""),
                      width=ctx.width, height=ctx.height, platform=ctx.platform, lang=ctx.lang,
                      widgets=tuple(widgets), title=title, modal=s.dialog is not None)

    # -- transitions ---------------------------------------------------------------------------
    def _flip(self, s: SettingsState, key: str) -> SettingsState:
        if key == "airplane" and not s.on("airplane"):
            return replace(s, dialog="airplane")
        return s.set(key, not s.on(key))

    def on_click(self, s: SettingsState, w: Widget, ctx: ViewContext) -> HandlerResult:
        kind, _, arg = w.key.partition(":")
        if s.dialog is not None:
            if w.key == "btn:ok" and s.dialog == "airplane":
                return replace(s.set("airplane", True), dialog=None)
            if kind == "font":
                return replace(s, font_size=arg, dialog=None)
            if w.key in ("btn:cancel", "scrim"):
                return replace(s, dialog=None)
            return None
        if kind in ("toggle", "row") and arg in SWITCHES:
            return self._flip(s, arg)
        if kind == "row" and arg in SUBPAGES:
            return replace(s, page=arg, scroll=0)
        if w.key == "row:font_size":
            return replace(s, dialog="font_size")
        if kind in ("lang", "radio"):
            return replace(s, language=arg)
        if kind in ("inc", "dec"):
            delta = 1 if kind == "inc" else -1
            field = "brightness" if arg == "brightness" else "volume"
            value = max(0, min(LEVEL_MAX, getattr(s, field) + delta))
            return replace(s, **{field: value})
        return None

    def on_scroll(self, s: SettingsState, direction: str, target: Widget,
                  ctx: ViewContext) -> HandlerResult:
        if s.dialog is not None:
            return None
        _, rect = chrome(ctx, "", back=s.page != "root")
        total = len(self._rows(s, ctx))
        visible = max(1, (rect[3] - rect[1]) // row_height(ctx))
        return replace(s, scroll=scroll_by(s.scroll, direction, total, visible))

    def on_back(self, s: SettingsState, ctx: ViewContext) -> HandlerResult:
        if s.dialog is not None:
            return replace(s, dialog=None)
        if s.page != "root":
            return replace(s, page="root", scroll=0)
        return None

    def on_launch(self, s: SettingsState) -> SettingsState:
        return replace(s, page="root", scroll=0, dialog=None)

    # -- tasks ---------------------------------------------------------------------------------
    def tasks(self, s: SettingsState, rng: random.Random, lang: str) -> list[AtomicTask]:
        def name(key: str) -> str:
            return tr(key, "zh" if lang == "zh" else "en")

        out: list[AtomicTask] = []
        for key in SWITCHES:
            want = not s.on(key)
            n = name(f"set.{key}")
            path = (f"row:{SWITCH_PAGE[key]}",) if key in SWITCH_PAGE else ()
            confirm = ("btn:ok",) if key == "airplane" and want else ()
            out.append(AtomicTask(
                self.name, pick(lang, f"Turn {'on' if want else 'off'} {n}",
                                f"{'打开' if want else '关闭'}{n}"),
                lambda st, k=key, v=want: st.on(k) == v, touches=("switches",),
                script=ops(self.name, *path, f"toggle:{key}", *confirm)))
        for field in ("brightness", "volume"):
            now = getattr(s, field)
            target = rng.choice([v for v in range(LEVEL_MAX + 1) if v != now])
            n = name(f"set.{field}")
            page = "display" if field == "brightness" else "sound"
            press = [Op("tap", f"{'inc' if target > now else 'dec'}:{field}")] * abs(target - now)
            out.append(AtomicTask(self.name, pick(lang, f"Set the {n.lower()} to {target}",
                                                  f"把{n}调到{target}"),
                                  lambda st, f=field, t=target: getattr(st, f) == t, touches=(field,),
                                  script=ops(self.name, f"row:{page}", *press)))
        size = rng.choice([f for f in FONT_SIZES if f != s.font_size])
        n = name(f"set.font.{size}")
        out.append(AtomicTask(self.name, pick(lang, f"Change the font size to {n}",
                                              f"把字体大小改为{n}"),
                              lambda st, z=size: st.font_size == z, touches=("font_size",),
                              script=ops(self.name, "row:display", "row:font_size",
                                         f"font:{size}")))
        code = rng.choice([c for c in LANGS if c != s.language])
        n = name(f"set.lang.{code}")
        out.append(AtomicTask(self.name, pick(lang, f"Set the phone language to {n}",
                                              f"把手机语言设置为{n}"),
                              lambda st, c=code: st.language == c, touches=("language",),
                              script=ops(self.name, "row:language", f"radio:{code}")))
        out.append(AtomicTask(self.name, pick(lang, "What is the model of this phone?",
                                              "这台手机的型号是什么？"),
                              lambda st: st.page == "about" and st.dialog is None,
                              answer=s.model, kind="info", script=ops(self.name, "row:about"),
                              answer_of=lambda st: st.model))
        out.append(AtomicTask(self.name, pick(lang, "Which system version is installed?",
                                              "手机的系统版本是多少？"),
                              lambda st: st.page == "about" and st.dialog is None,
                              answer=s.version, kind="info", script=ops(self.name, "row:about"),
                              answer_of=lambda st: st.version))
        out.append(AtomicTask(self.name, pick(lang, "What is the battery level?", "电池电量是多少？"),
                              lambda st: st.page == "battery" and st.dialog is None,
                              answer=f"{s.battery}%", kind="info",
                              script=ops(self.name, "row:battery"),
                              answer_of=lambda st: f"{st.battery}%"))
        return out


SYNTH_APPS.register("settings", Settings())
