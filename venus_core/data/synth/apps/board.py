"""Board: a bare screen of buttons for the first curriculum levels (one target, colour grid, labels).

Why: a tiny model trained from scratch on CPU does not learn grounding on free app layouts; it
learns "where is the button" first, then "which button does the instruction name" (measured on
2 CPU cores when the project started; not recorded in this repository). The board is a regular
app (state, view, step) so the low levels share the data
path, the planner and the renderer with the real apps; it is not shown on the home screen.
Button boxes are kept in the 0–1000 frame in the state, so the board fits any output size.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, AtomicTask, HandlerResult, pick
from venus_core.data.synth.i18n import COLORS, ViewContext, tr
from venus_core.data.synth.widgets import Screen, Widget

WORDS = (("OK", "确定"), ("Next", "下一步"), ("Save", "保存"), ("Send", "发送"), ("Share", "分享"),
         ("Delete", "删除"), ("Edit", "编辑"), ("Play", "播放"), ("Stop", "停止"), ("Help", "帮助"),
         ("Undo", "撤销"), ("Copy", "复制"), ("Open", "打开"), ("Close", "关闭"), ("Buy", "购买"))
BOARD_COLORS = ("red", "green", "blue", "yellow", "purple", "orange", "pink", "teal", "gray")


@dataclass(frozen=True)
class BoardButton:
    color: str
    box: tuple[int, int, int, int]  # 0–1000 frame
    word: int = -1  # index into WORDS, -1 = no label


@dataclass(frozen=True)
class BoardState:
    buttons: tuple[BoardButton, ...]
    clicked: tuple[int, ...] = ()


def single_board(rng: random.Random) -> BoardState:
    """Level 0: one button of random size, place and colour."""
    w, h = rng.randint(150, 450), rng.randint(100, 300)
    x, y = rng.randint(20, 980 - w), rng.randint(20, 980 - h)
    return BoardState((BoardButton(rng.choice(BOARD_COLORS), (x, y, x + w, y + h),
                                   rng.randrange(len(WORDS)) if rng.random() < 0.5 else -1),))


def grid_board(rng: random.Random, *, labels: bool, n: int | None = None) -> BoardState:
    """Levels 1–2: 3–9 buttons in a 3x3 grid; distinct colours (level 1) or distinct words (2)."""
    n = n if n is not None else rng.randint(3, 9)
    cells = sorted(rng.sample(range(9), n))
    colors = rng.sample(BOARD_COLORS, n) if not labels else [rng.choice(BOARD_COLORS)
                                                             for _ in range(n)]
    words = rng.sample(range(len(WORDS)), n) if labels else [-1] * n
    buttons = []
    for cell, color, word in zip(cells, colors, words, strict=True):
        r, c = divmod(cell, 3)
        jx, jy = rng.randint(-15, 15), rng.randint(-15, 15)
        x1, y1 = 40 + c * 320 + jx, 40 + r * 320 + jy
        buttons.append(BoardButton(color, (x1, y1, x1 + 280, y1 + 240), word))
    return BoardState(tuple(buttons))


LAYOUTS = ("grid", "free")
"""Where a level-1/2 board puts its buttons: the 3x3 grid, or anywhere (`scatter_board`)."""


def scatter_board(rng: random.Random, *, labels: bool, n: int | None = None) -> BoardState:
    """Levels 1–2 off the grid: 2–6 buttons of random size and place (level 0's kind of button, a
    little smaller), not overlapping; distinct colours (level 1) or distinct words (2).

    Why: the grid puts every button at one of nine places of one size, and the colour match the
    model learns there does not carry over to level 0's one button of random size and place
    (docs/learning.md, "Level 0 and boards off the grid": off the grid the shipped model clicks at
    the random-button level); these boards ask for the match at any position."""
    n = n if n is not None else rng.randint(2, 6)
    if not 1 <= n <= 6:
        raise ValueError(f"scatter_board: n must be in [1, 6], got {n}")
    boxes: list[tuple[int, int, int, int]] = []
    while len(boxes) < n:
        w, h = rng.randint(150, 320), rng.randint(100, 240)
        x, y = rng.randint(20, 980 - w), rng.randint(20, 980 - h)
        box = (x, y, x + w, y + h)
        # 30 of 1,000 apart at least; a board that does not fit after many tries starts over
        if all(box[0] > b[2] + 30 or b[0] > box[2] + 30 or box[1] > b[3] + 30 or b[1] > box[3] + 30
               for b in boxes):
            boxes.append(box)
        elif rng.random() < 0.01:
            boxes = []
    colors = rng.sample(BOARD_COLORS, n) if not labels else [rng.choice(BOARD_COLORS) for _ in range(n)]
    words = rng.sample(range(len(WORDS)), n) if labels else [-1] * n
    return BoardState(tuple(BoardButton(c, b, wd) for c, b, wd in zip(colors, boxes, words, strict=True)))


def board_for(rng: random.Random, level: int, layout: str = "grid") -> BoardState:
    """The board of a curriculum level (0: one button; 1: by colour; 2: by word), on `layout`."""
    if layout not in LAYOUTS:
        raise ValueError(f"board layout must be one of {LAYOUTS}, got {layout!r}")
    if level == 0:
        if layout != "grid":
            raise ValueError("board layout 'free' is for levels 1-2 (level 0's one button is free already)")
        return single_board(rng)
    if layout == "free":
        return scatter_board(rng, labels=level >= 2)
    return grid_board(rng, labels=level >= 2)


class Board(App):
    """Curriculum board of coloured / labelled buttons."""

    name = "board"
    title_key = "app.board"
    icon = "grid"
    color = (38, 110, 220)
    on_home_screen = False
    nav_fields = frozenset()

    def initial(self, rng: random.Random) -> BoardState:
        return grid_board(rng, labels=True)

    def view(self, s: BoardState, ctx: ViewContext) -> Screen:
        widgets = []
        for i, b in enumerate(s.buttons):
            x1, y1, x2, y2 = b.box
            box = (x1 * ctx.width // 1000, y1 * ctx.height // 1000,
                   x2 * ctx.width // 1000, y2 * ctx.height // 1000)
            label = WORDS[b.word][1 if ctx.lang == "zh" else 0] if b.word >= 0 else ""
            cname = tr(f"color.{b.color}", ctx.lang)
            widgets.append(Widget(f"btn:{i}", "button", box, label=label,
                                  name=label or f"{cname}", color=COLORS[b.color],
                                  color_name=b.color, clickable=True, selected=i in s.clicked))
        return Screen(app=self.name, page="board", width=ctx.width, height=ctx.height,
                      platform=ctx.platform, lang=ctx.lang, widgets=tuple(widgets),
                      title=ctx.t("board.title"))

    def on_click(self, s: BoardState, w: Widget, ctx: ViewContext) -> HandlerResult:
        i = int(w.key.split(":")[1])
        return replace(s, clicked=s.clicked + (i,)) if i not in s.clicked else None

    def describe(self, s: BoardState, i: int, lang: str) -> str:
        """How an instruction names button i: by its word if it has one, else by its colour."""
        b = s.buttons[i]
        color = tr(f"color.{b.color}", lang)
        if b.word >= 0 and len(s.buttons) > 1:
            word = WORDS[b.word][1 if lang == "zh" else 0]
            return pick(lang, f'the "{word}" button', f"“{word}”按钮")
        if len(s.buttons) == 1:
            return pick(lang, f"the {color} button", f"{color}按钮")
        return pick(lang, f"the {color} button", f"{color}的按钮")

    def tasks(self, s: BoardState, rng: random.Random, lang: str) -> list[AtomicTask]:
        out = []
        for i in range(len(s.buttons)):
            if i in s.clicked:
                continue
            d = self.describe(s, i, lang)
            out.append(AtomicTask(self.name, pick(lang, f"Click {d}", f"点击{d}"),
                                  lambda st, k=i: k in st.clicked, touches=("clicked",)))
        return out


SYNTH_APPS.register("board", Board())
