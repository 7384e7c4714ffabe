"""Shop: search, category tabs, product list and detail pages, cart, checkout with confirmation.

Why: search (focus, Type, Enter), quantities (+/-), list-row buttons ("Add" inside a row: the
target is the small button, not the row), a badge with the cart count, a confirm dialog, and
"price of X / how many items" questions.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, replace

from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth.apps.base import App, AtomicTask, HandlerResult, Op, ops, pick
from venus_core.data.synth.i18n import COLORS, ViewContext, tr
from venus_core.data.synth.layout import (
    BarAction, Row, chrome, dialog, list_rows, row_height, scroll_by,
)
from venus_core.data.synth.widgets import Screen, Widget

PRODUCTS = (
    ("Apple", "苹果", "fruit"), ("Banana", "香蕉", "fruit"), ("Orange", "橙子", "fruit"),
    ("Grapes", "葡萄", "fruit"), ("Mango", "芒果", "fruit"), ("Headphones", "耳机", "tech"),
    ("Phone case", "手机壳", "tech"), ("Charger", "充电器", "tech"), ("Keyboard", "键盘", "tech"),
    ("Mouse", "鼠标", "tech"), ("Lamp", "台灯", "home"), ("Mug", "马克杯", "home"),
    ("Pillow", "枕头", "home"), ("Towel", "毛巾", "home"), ("Plant", "绿植", "home"),
)
CATEGORIES = ("all", "fruit", "tech", "home")
CAT_ICON = {"fruit": "heart", "tech": "star", "home": "home"}
SEARCH_H = 44
TAB_H = 36


@dataclass(frozen=True)
class ShopState:
    products: tuple[tuple[int, int], ...]  # (product id, price in whole units)
    cart: tuple[tuple[int, int], ...] = ()  # (product id, quantity)
    page: str = "home"  # home | detail | cart | done
    category: str = "all"
    query: str = ""
    draft: str = ""
    focus: bool = False
    detail: int = -1
    qty: int = 1
    scroll: int = 0
    confirm: bool = False
    orders: int = 0

    def price(self, pid: int) -> int:
        return dict(self.products)[pid]

    def in_cart(self, pid: int) -> int:
        return dict(self.cart).get(pid, 0)

    def add(self, pid: int, n: int) -> ShopState:
        cart = dict(self.cart)
        cart[pid] = cart.get(pid, 0) + n
        return replace(self, cart=tuple(sorted(cart.items())))


def pname(pid: int, lang: str) -> str:
    return PRODUCTS[pid][1] if lang == "zh" else PRODUCTS[pid][0]


class Shop(App):
    """An online shop."""

    name = "shop"
    title_key = "app.shop"
    icon = "cart"
    color = (240, 130, 20)
    nav_fields = frozenset({"page", "category", "query", "draft", "focus", "detail", "qty",
                            "scroll", "confirm"})

    def initial(self, rng: random.Random) -> ShopState:
        pids = sorted(rng.sample(range(len(PRODUCTS)), rng.randint(8, len(PRODUCTS))))
        products = tuple((p, rng.randint(2, 99)) for p in pids)
        cart = tuple(sorted((p, rng.randint(1, 3)) for p in rng.sample(pids, rng.randint(0, 2))))
        return ShopState(products=products, cart=cart)

    def visible_products(self, s: ShopState, lang: str) -> list[int]:
        q = s.query.strip().lower()
        return [p for p, _ in s.products
                if (s.category == "all" or PRODUCTS[p][2] == s.category)
                and (not q or q in pname(p, lang).lower())]

    def _rows(self, s: ShopState, ctx: ViewContext) -> list[Row]:
        if s.page == "cart":
            return [Row(f"item:{p}", pname(p, ctx.lang),
                        secondary=f"{ctx.t('shop.qty')} {n} · ${s.price(p) * n}",
                        trailing=Widget(f"remove:{p}", "button", (0, 0, 1, 1),
                                        label=ctx.t("shop.remove"), clickable=True,
                                        name=f"{ctx.t('shop.remove')} {pname(p, ctx.lang)}"))
                    for p, n in s.cart]
        return [Row(f"product:{p}", pname(p, ctx.lang), secondary=f"${s.price(p)}",
                    icon=CAT_ICON[PRODUCTS[p][2]],
                    trailing=Widget(f"add:{p}", "button", (0, 0, 1, 1), label=ctx.t("shop.add"),
                                    clickable=True,
                                    name=f"{ctx.t('shop.add')} {pname(p, ctx.lang)}"))
                for p in self.visible_products(s, ctx.lang)]

    def _list_rect(self, s: ShopState, rect: tuple[int, int, int, int]) -> tuple[int, ...]:
        if s.page == "home":
            return (rect[0], rect[1] + SEARCH_H + TAB_H + 8, rect[2], rect[3])
        return (rect[0], rect[1], rect[2], rect[3] - 56)

    def view(self, s: ShopState, ctx: ViewContext) -> Screen:
        count = sum(n for _, n in s.cart)
        cart_btn = BarAction("bar:cart", "cart", ctx.t("shop.cart"), badge=str(count) if count else "")
        if s.page == "detail":
            return self._detail_view(s, ctx, cart_btn)
        title = {"home": ctx.t("app.shop"), "cart": ctx.t("shop.cart"),
                 "done": ctx.t("shop.order_placed")}[s.page]
        widgets, rect = chrome(ctx, title, back=s.page != "home",
                               actions=[cart_btn] if s.page == "home" else [])
        x1, y1, x2, y2 = rect
        if s.page == "done":
            widgets.append(Widget("done", "text", (x1 + 12, y1 + 20, x2 - 12, y1 + 50),
                                  label=ctx.t("shop.order_placed")))
        if s.page == "home":
            widgets.append(Widget("field:search", "text_field", (x1 + 8, y1 + 6, x2 - 52,
                                                                  y1 + SEARCH_H),
                                  value=s.draft, placeholder=ctx.t("shop.search_hint"),
                                  focused=s.focus, clickable=True))
            widgets.append(Widget("btn:search", "icon_button", (x2 - 48, y1 + 6, x2 - 8,
                                                                 y1 + SEARCH_H),
                                  icon="search", name=ctx.t("search"), clickable=True))
            tw = (x2 - x1) // len(CATEGORIES)
            ty = y1 + SEARCH_H + 6
            for i, c in enumerate(CATEGORIES):
                widgets.append(Widget(f"tab:{c}", "tab", (x1 + i * tw, ty, x1 + (i + 1) * tw,
                                                         ty + TAB_H),
                                      label=ctx.t(f"shop.cat.{c}"), selected=s.category == c,
                                      clickable=True))
        if s.page in ("home", "cart"):
            lrect = self._list_rect(s, rect)
            rows = self._rows(s, ctx)
            items, _ = list_rows("list", lrect, rows, s.scroll, row_height(ctx) + 4)
            widgets += items
            if not rows:
                msg = "shop.empty_cart" if s.page == "cart" else "shop.no_results"
                widgets.append(Widget("empty", "text", (lrect[0] + 12, lrect[1] + 12,
                                                        lrect[2] - 12, lrect[1] + 40),
                                      label=ctx.t(msg)))
        if s.page == "cart":
            total = sum(s.price(p) * n for p, n in s.cart)
            widgets.append(Widget("total", "text", (x1 + 12, y2 - 48, x2 - 140, y2 - 12),
                                  label=f"{ctx.t('shop.total')}: ${total}"))
            widgets.append(Widget("btn:checkout", "button", (x2 - 130, y2 - 50, x2 - 8, y2 - 10),
                                  label=ctx.t("shop.checkout"), clickable=True,
                                  enabled=bool(s.cart)))
        if s.confirm:
            widgets += dialog(ctx, "dialog:order", ctx.t("shop.place_order"),
                              [("btn:cancel", ctx.t("cancel")), ("btn:ok", ctx.t("ok"))])
        return Screen(app=self.name, page=s.page + ("+confirm" if s.confirm else ""),
                      width=ctx.width, height=ctx.height, platform=ctx.platform, lang=ctx.lang,
                      widgets=tuple(widgets), title=title, modal=s.confirm)

    def _detail_view(self, s: ShopState, ctx: ViewContext, cart_btn: BarAction) -> Screen:
        title = pname(s.detail, ctx.lang)
        widgets, rect = chrome(ctx, title, back=True, actions=[cart_btn])
        x1, y1, x2, y2 = rect
        img_h = max(40, min(160, (y2 - y1) - 150))
        palette = list(COLORS.values())
        widgets.append(Widget("image", "image", (x1 + 16, y1 + 8, x2 - 16, y1 + 8 + img_h),
                              icon=CAT_ICON[PRODUCTS[s.detail][2]],
                              color=palette[s.detail % len(palette)], name=title))
        y = y1 + img_h + 16
        widgets.append(Widget("price", "text", (x1 + 16, y, x2 - 16, y + 28),
                              label=f"${s.price(s.detail)}"))
        y += 34
        widgets.append(Widget("qty:dec", "icon_button", (x1 + 16, y, x1 + 56, y + 36),
                              icon="minus", name="-", clickable=True, enabled=s.qty > 1))
        widgets.append(Widget("qty:value", "text", (x1 + 60, y, x1 + 110, y + 36),
                              label=str(s.qty)))
        widgets.append(Widget("qty:inc", "icon_button", (x1 + 114, y, x1 + 154, y + 36),
                              icon="plus", name="+", clickable=True, enabled=s.qty < 9))
        widgets.append(Widget("btn:add_to_cart", "button", (x1 + 164, y, x2 - 16, y + 36),
                              label=ctx.t("shop.add_to_cart"), clickable=True))
        return Screen(app=self.name, page="detail", width=ctx.width, height=ctx.height,
                      platform=ctx.platform, lang=ctx.lang, widgets=tuple(widgets), title=title)

    # -- transitions ---------------------------------------------------------------------------
    def on_click(self, s: ShopState, w: Widget, ctx: ViewContext) -> HandlerResult:
        kind, _, arg = w.key.partition(":")
        if s.confirm:
            if w.key == "btn:ok":
                return replace(s, cart=(), orders=s.orders + 1, confirm=False, page="done")
            return replace(s, confirm=False) if w.key in ("btn:cancel", "scrim") else None
        if w.key == "bar:cart":
            return replace(s, page="cart", scroll=0, focus=False)
        if w.key == "field:search":
            return replace(s, focus=True)
        if w.key == "btn:search":
            return replace(s, query=s.draft, focus=False, scroll=0)
        if kind == "tab":
            return replace(s, category=arg, scroll=0)
        if kind == "product":
            return replace(s, page="detail", detail=int(arg), qty=1, focus=False)
        if kind == "add":
            return s.add(int(arg), 1)
        if kind == "remove":
            return replace(s, cart=tuple(c for c in s.cart if c[0] != int(arg)))
        if w.key == "qty:inc":
            return replace(s, qty=min(9, s.qty + 1))
        if w.key == "qty:dec":
            return replace(s, qty=max(1, s.qty - 1))
        if w.key == "btn:add_to_cart":
            return s.add(s.detail, s.qty)
        if w.key == "btn:checkout" and s.cart:
            return replace(s, confirm=True)
        return None

    def on_type(self, s: ShopState, text: str, ctx: ViewContext) -> HandlerResult:
        return replace(s, draft=s.draft + text) if s.focus and s.page == "home" else None

    def on_enter(self, s: ShopState, ctx: ViewContext) -> HandlerResult:
        if s.focus and s.page == "home":
            return replace(s, query=s.draft, focus=False, scroll=0)
        return None

    def on_scroll(self, s: ShopState, direction: str, target: Widget,
                  ctx: ViewContext) -> HandlerResult:
        if s.page not in ("home", "cart") or s.confirm:
            return None
        _, rect = chrome(ctx, "", back=s.page != "home")
        lrect = self._list_rect(s, rect)
        visible = max(1, (lrect[3] - lrect[1]) // (row_height(ctx) + 4))
        return replace(s, scroll=scroll_by(s.scroll, direction, len(self._rows(s, ctx)), visible))

    def on_back(self, s: ShopState, ctx: ViewContext) -> HandlerResult:
        if s.confirm:
            return replace(s, confirm=False)
        if s.page != "home":
            return replace(s, page="home", scroll=0)
        if s.focus:
            return replace(s, focus=False)
        return None

    def on_launch(self, s: ShopState) -> ShopState:
        return replace(s, page="home", scroll=0, confirm=False, focus=False)

    def focused_empty(self, s: ShopState) -> bool:
        return s.focus and s.page == "home" and s.draft == ""

    # -- tasks ---------------------------------------------------------------------------------
    def tasks(self, s: ShopState, rng: random.Random, lang: str) -> list[AtomicTask]:
        pid, price = rng.choice(s.products)
        name = pname(pid, lang)
        have = s.in_cart(pid)
        tab = f"tab:{PRODUCTS[pid][2]}"
        submit = rng.choice([Op("enter"), Op("tap", "btn:search")])
        out = [
            AtomicTask(self.name, pick(lang, f"Add {name} to the cart", f"把{name}加入购物车"),
                       lambda st, p=pid, h=have: st.in_cart(p) > h, touches=("cart",),
                       script=ops(self.name, tab, f"add:{pid}")),
            AtomicTask(self.name, pick(lang, f'Search for "{name}"', f"搜索“{name}”"),
                       lambda st, q=name: st.query == q and st.page == "home", texts=(name,),
                       script=ops(self.name, "field:search", Op("type", name), submit)),
            AtomicTask(self.name, pick(lang, f"What is the price of {name}?", f"{name}的价格是多少？"),
                       lambda st, p=pid: st.page == "detail" and st.detail == p,
                       answer=f"${price}", kind="info",
                       script=ops(self.name, tab, f"product:{pid}"),
                       answer_of=lambda st, p=pid: f"${st.price(p)}"),
        ]
        if not s.query and not s.draft:
            out.append(AtomicTask(
                self.name, pick(lang, f'Search for "{name}" and add it to the cart',
                                f"搜索“{name}”并加入购物车"),
                lambda st, p=pid, h=have: st.in_cart(p) > h, texts=(name,), touches=("cart",),
                script=ops(self.name, "field:search", Op("type", name), submit, f"add:{pid}")))
        n = rng.randint(2, 4)
        out.append(AtomicTask(self.name, pick(lang, f"Add {n} {name} to the cart",
                                              f"把{n}件{name}加入购物车"),
                              lambda st, p=pid, t=have + n: st.in_cart(p) == t,
                              touches=("cart",),
                              script=ops(self.name, tab, f"product:{pid}",
                                         *["qty:inc"] * (n - 1), "btn:add_to_cart")))
        cat = rng.choice([c for c in CATEGORIES if c != s.category])
        cname = tr(f"shop.cat.{cat}", "zh" if lang == "zh" else "en")
        out.append(AtomicTask(self.name, pick(lang, f"Show the {cname} category",
                                              f"查看{cname}分类"),
                              lambda st, c=cat: st.category == c and st.page == "home",
                              script=ops(self.name, f"tab:{cat}")))
        if s.cart:
            rid = rng.choice(s.cart)[0]
            rname = pname(rid, lang)
            out.append(AtomicTask(self.name, pick(lang, f"Remove {rname} from the cart",
                                                  f"把{rname}从购物车移除"),
                                  lambda st, p=rid: st.in_cart(p) == 0, touches=("cart",),
                                  script=ops(self.name, "bar:cart", f"remove:{rid}")))
            out.append(AtomicTask(self.name, pick(lang, "Place an order for the items in the cart",
                                                  "为购物车中的商品下单"),
                                  lambda st, o=s.orders: st.orders > o,
                                  touches=("cart", "orders"),
                                  script=ops(self.name, "bar:cart", "btn:checkout", "btn:ok")))
            total = sum(n for _, n in s.cart)
            # the count is the badge on the cart button of the shop's home page
            out.append(AtomicTask(self.name, pick(lang, "How many items are in the cart?",
                                                  "购物车里有几件商品？"),
                                  lambda st: st.page == "home" and not st.confirm,
                                  answer=str(total), kind="info", script=ops(self.name),
                                  answer_of=lambda st: str(sum(k for _, k in st.cart))))
        return out


SYNTH_APPS.register("shop", Shop())
