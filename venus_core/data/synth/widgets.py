"""The screen model of the synthetic GUI world: widgets with pixel boxes, and hit-testing.

Why: STATE (an app's dataclass), RENDERING (PIL, `render.py`) and ACTIONS (`phone.step`) must stay
apart so that the same app definitions can be rendered for datasets, stepped by a planner, and later
served live as a simulated device. A `Screen` is the only thing the three share: apps build it from
their state (`App.view`), the renderer draws it, and actions are resolved against it (a Click hits
the topmost clickable widget under the point). Boxes are in *logical* pixels of the screen
(`Screen.width x Screen.height`); the 0–1000 frame of the action space maps onto them with
`venus_core.actions.from_pixels / to_pixels`, so the output image size never changes semantics.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

Rect = tuple[int, int, int, int]  # x1, y1, x2, y2 in logical pixels, x1 < x2, y1 < y2
RGB = tuple[int, int, int]
Lang = Literal["en", "zh"]
SynthPlatform = Literal["mobile", "web"]

ROLES = frozenset(
    {
        "status_bar", "app_bar", "title", "text", "button", "icon_button", "text_field", "list_item",
        "toggle", "checkbox", "radio", "tab", "dialog", "scrim", "app_icon", "card", "badge",
        "bubble", "image", "divider", "list", "nav_bar",
    }
)


@dataclass(frozen=True)
class Widget:
    """One element on a screen.

    `key` is a stable semantic id within the screen ("toggle:wifi"); apps resolve actions through
    it, never through pixels. `label` is the visible (localised) text; `name` the accessible name
    used when an instruction refers to the element (icons have a name but no label).
    """

    key: str
    role: str
    box: Rect
    label: str = ""
    name: str = ""
    icon: str | None = None
    color: RGB | None = None
    color_name: str | None = None
    enabled: bool = True
    selected: bool = False
    focused: bool = False
    clickable: bool = False
    long_clickable: bool = False
    scrollable: bool = False
    value: str = ""
    placeholder: str = ""

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"widget {self.key!r}: unknown role {self.role!r}")
        x1, y1, x2, y2 = self.box
        if not (x1 < x2 and y1 < y2):
            raise ValueError(f"widget {self.key!r}: empty box {self.box}")

    @property
    def center(self) -> tuple[float, float]:
        x1, y1, x2, y2 = self.box
        return ((x1 + x2) / 2.0, (y1 + y2) / 2.0)

    def contains(self, x: float, y: float) -> bool:
        x1, y1, x2, y2 = self.box
        return x1 <= x < x2 and y1 <= y < y2

    @property
    def text(self) -> str:
        """What a reader sees: the label, the field value, or the placeholder."""
        return self.label or self.value or self.placeholder

    @property
    def description(self) -> str:
        """The words an instruction uses for this element."""
        return self.label or self.name or self.placeholder


@dataclass(frozen=True)
class Screen:
    """A rendered-to-be view of one state: widgets in drawing order (later = on top)."""

    app: str
    page: str
    width: int
    height: int
    platform: SynthPlatform
    lang: Lang
    widgets: tuple[Widget, ...]
    title: str = ""
    modal: bool = False  # a dialog is open: only its layer (after the scrim) receives clicks
    meta: dict[str, str] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        keys = [w.key for w in self.widgets]
        if len(keys) != len(set(keys)):
            dup = sorted({k for k in keys if keys.count(k) > 1})
            raise ValueError(f"screen {self.app}/{self.page}: duplicate widget keys {dup}")
        for w in self.widgets:
            x1, y1, x2, y2 = w.box
            if x1 < 0 or y1 < 0 or x2 > self.width or y2 > self.height:
                raise ValueError(
                    f"screen {self.app}/{self.page}: widget {w.key!r} box {w.box} outside "
                    f"{self.width}x{self.height}"
                )

    def get(self, key: str) -> Widget:
        for w in self.widgets:
            if w.key == key:
                return w
        raise KeyError(f"screen {self.app}/{self.page} has no widget {key!r}")

    def has(self, key: str) -> bool:
        return any(w.key == key for w in self.widgets)

    def _receivers(self) -> tuple[Widget, ...]:
        if not self.modal:
            return self.widgets
        for i, w in enumerate(self.widgets):
            if w.role == "scrim":
                return self.widgets[i:]
        return self.widgets

    def hit(self, x: float, y: float, *, long: bool = False) -> Widget | None:
        """The topmost enabled widget under (x, y) that takes a click (or a long press)."""
        for w in reversed(self._receivers()):
            if not w.contains(x, y):
                continue
            if long and w.long_clickable and w.enabled:
                return w
            if w.clickable:
                return w if w.enabled else None
        return None

    def scroll_target(self, x: float | None, y: float | None) -> Widget | None:
        """The scrollable container under the point, or the first one when no point is given."""
        for w in reversed(self._receivers()):
            if w.scrollable and (x is None or y is None or w.contains(x, y)):
                return w
        return None

    def clickables(self) -> list[Widget]:
        """Widgets a click would reach at their centre (what a planner may tap)."""
        out = []
        for w in self._receivers():
            if not (w.clickable and w.enabled):
                continue
            cx, cy = w.center
            if self.hit(cx, cy) is w:
                out.append(w)
        return out

    def texts(self) -> list[str]:
        return [w.text for w in self.widgets if w.text]
