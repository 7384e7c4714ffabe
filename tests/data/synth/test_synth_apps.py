"""Transitions of every synthetic app, driven through Phone.step with unified actions."""

from __future__ import annotations

import random

import pytest

from venus_core.actions.space import Click, Launch, LongPress, PressBack, PressHome, Scroll, Type
from venus_core.config.registry import SYNTH_APPS
from venus_core.data.synth import Phone, ViewContext
from venus_core.data.synth.phone import HOME, to_norm

CTX = ViewContext.for_output("mobile", "en", 256, 256)


def tap(phone: Phone, state, key: str, ctx: ViewContext = CTX):
    w = phone.view(state, ctx).get(key)
    res = phone.step(state, Click(box=to_norm(*w.center, ctx)), ctx)
    assert res.changed, res.info
    return res.state


@pytest.fixture()
def phone() -> Phone:
    return Phone()


def test_registry_lists_apps() -> None:
    for name in ("launcher", "settings", "messages", "shop", "form", "board"):
        assert name in SYNTH_APPS


def test_launch_back_home(phone: Phone) -> None:
    s = phone.initial(random.Random(0))
    assert s.foreground == HOME
    s2 = tap(phone, s, "app:settings")
    assert s2.foreground == "settings"
    assert phone.step(s2, PressHome(), CTX).state.foreground == HOME
    s3 = phone.step(s, Launch(app="Shop"), CTX).state
    assert s3.foreground == "shop"
    assert phone.step(s3, PressBack(), CTX).state.foreground == HOME
    bad = phone.step(s, Launch(app="nope"), CTX)
    assert not bad.changed and "unknown app" in bad.info
    assert not phone.step(s, PressBack(), CTX).changed


def test_settings_toggle_subpage_dialog(phone: Phone) -> None:
    s = phone.step(phone.initial(random.Random(1)), Launch(app="settings"), CTX).state
    before = s.app("settings").on("wifi")
    s = tap(phone, s, "toggle:wifi")
    assert s.app("settings").on("wifi") is (not before)
    s = tap(phone, s, "toggle:airplane")
    assert s.app("settings").dialog == "airplane" and not s.app("settings").on("airplane")
    screen = phone.view(s, CTX)
    assert screen.modal
    # the toggle under the scrim no longer receives clicks
    w = screen.get("toggle:bluetooth")
    assert screen.hit(*w.center) is not None and screen.hit(*w.center).key == "scrim"
    s = tap(phone, s, "btn:ok")
    assert s.app("settings").on("airplane") and s.app("settings").dialog is None
    # scroll to reveal the sub-pages, open one, go back
    lst = phone.view(s, CTX).get("list")
    x1, y1, x2, y2 = lst.box
    swipe = Scroll(direction="up", start=to_norm((x1 + x2) / 2, y2 - 10, CTX),
                   end=to_norm((x1 + x2) / 2, y1 + 10, CTX))
    for _ in range(3):
        if phone.view(s, CTX).has("row:about"):
            break
        s = phone.step(s, swipe, CTX).state
    assert s.app("settings").scroll > 0
    s = tap(phone, s, "row:about")
    assert s.app("settings").page == "about"
    assert not phone.step(s, Click(box=(500, 990)), CTX).changed
    s = phone.step(s, PressBack(), CTX).state
    assert s.app("settings").page == "root" and s.foreground == "settings"


def test_messages_type_send_longpress(phone: Phone) -> None:
    s = phone.step(phone.initial(random.Random(2)), Launch(app="messages"), CTX).state
    st = s.app("messages")
    idx = st.threads[0][0]
    menu_state = phone.step(s, LongPress(box=to_norm(*phone.view(s, CTX).get(
        f"chat:{idx}").center, CTX)), CTX).state
    assert menu_state.app("messages").menu == idx
    s = tap(phone, s, f"chat:{idx}")
    assert not phone.step(s, Type(content="hi"), CTX).changed  # nothing focused yet
    assert not phone.view(s, CTX).get("btn:send").enabled
    s = tap(phone, s, "field:draft")
    s = phone.step(s, Type(content="On my way"), CTX).state
    s = tap(phone, s, "btn:send")
    assert s.app("messages").thread(idx)[-1][:2] == (True, "On my way")
    assert s.app("messages").draft == ""


def test_shop_search_cart_checkout(phone: Phone) -> None:
    s = phone.step(phone.initial(random.Random(3)), Launch(app="shop"), CTX).state
    s = tap(phone, s, "field:search")
    pid = s.app("shop").products[0][0]
    from venus_core.data.synth.apps.shop import pname

    s = phone.step(s, Type(content=pname(pid, "en")), CTX).state
    s = tap(phone, s, "btn:search")
    rows = [w for w in phone.view(s, CTX).widgets if w.key.startswith("product:")]
    assert [w.key for w in rows][:1] == [f"product:{pid}"]
    had = s.app("shop").in_cart(pid)
    s = tap(phone, s, f"add:{pid}")
    assert s.app("shop").in_cart(pid) == had + 1
    s = tap(phone, s, "bar:cart")
    s = tap(phone, s, "btn:checkout")
    s = tap(phone, s, "btn:ok")
    assert s.app("shop").cart == () and s.app("shop").orders == 1


def test_form_fill_and_submit(phone: Phone) -> None:
    s = phone.step(phone.initial(random.Random(4)), Launch(app="form"), CTX).state
    assert not phone.view(s, CTX).has("btn:submit") or not phone.view(s, CTX).get(
        "btn:submit").enabled
    s = tap(phone, s, "field:name")
    s = phone.step(s, Type(content="Ann"), CTX).state
    s = tap(phone, s, "field:email")
    s = phone.step(s, Type(content="a@b.c"), CTX).state
    while not phone.view(s, CTX).has("btn:submit"):
        s = phone.step(s, Scroll(direction="up", start=(500, 800), end=(500, 300)), CTX).state
    s = tap(phone, s, "check:agree")
    s = tap(phone, s, "btn:submit")
    f = s.app("form")
    assert f.submitted and f.name == "Ann" and f.email == "a@b.c"
