"""The home screen: a grid of app icons (mobile) or a portal page of app links (web).

Why: multi-app tasks start and pass through the home screen; tapping an icon is the on-screen
alternative to `Launch(app=...)`, so trajectories contain both.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, HandlerResult, OpenApp
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.layout import STATUS_H, chrome, grid_boxes
from venus_core.data.synth.widgets import Screen, Widget


@dataclass(frozen=True)
class LauncherState:
    apps: tuple[str, ...] = ()


class Launcher(App):
    """Home screen with one icon per installed app."""

    name = "launcher"
    title_key = "app.launcher"
    icon = "home"
    color = (90, 90, 100)
    on_home_screen = False
    nav_fields = frozenset({"apps"})

    def initial(self, rng: random.Random) -> LauncherState:
        return LauncherState()

    def view(self, state: LauncherState, ctx: ViewContext) -> Screen:
        if ctx.platform == "mobile":
            widgets = [Widget("status", "status_bar", (0, 0, ctx.width, STATUS_H), label="12:30")]
            rect = (8, STATUS_H + 16, ctx.width - 8, ctx.height)
            cols, cell_h = 4, 96
        else:
            widgets, rect = chrome(ctx, ctx.t("app.launcher"), back=False)
            widgets = [w for w in widgets if w.key != "nav:home"]
            cols, cell_h = 5, 120
        boxes = grid_boxes(rect, len(state.apps), cols, cell_h, pad=6)
        for name, box in zip(state.apps, boxes, strict=True):
            app = SYNTH_APPS.get(name)
            if box[3] > ctx.height:
                raise ValueError(f"launcher: {len(state.apps)} apps do not fit on one screen")
            title = ctx.t(app.title_key)
            widgets.append(Widget(f"app:{name}", "app_icon", box, label=title, name=title,
                                  icon=app.icon, color=app.color, clickable=True))
        return Screen(app=self.name, page="home", width=ctx.width, height=ctx.height,
                      platform=ctx.platform, lang=ctx.lang, widgets=tuple(widgets),
                      title=ctx.t("app.launcher"))

    def on_click(self, state: LauncherState, widget: Widget, ctx: ViewContext) -> HandlerResult:
        if widget.key.startswith("app:"):
            return OpenApp(widget.key[4:])
        return None


SYNTH_APPS.register("launcher", Launcher())
