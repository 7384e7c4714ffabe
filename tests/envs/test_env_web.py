"""WebEnv against a REAL headless Chromium (Playwright): each unified action reaches the page as
the input events a user would make, at the right CSS pixels; contexts are isolated; the browser is
shared and released. The test page logs its events (`window.log`); a loopback HTTP server gives
it a real origin for the storage-isolation test."""

from __future__ import annotations

import http.server
import threading
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from venus_core.actions import (
    Click,
    DoubleClick,
    Drag,
    Hotkey,
    Hover,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    Scroll,
    Type,
)
from venus_core.envs import EnvError, Task, UnsupportedAction, WebEnv
from venus_core.envs.browser import BrowserHost
from venus_core.envs.web import playwright_key

PAGE = """<html><body style="margin:0">
<div id="t" style="position:absolute;left:0;top:0;width:200px;height:100px;background:rgb(255,0,0)"></div>
<div id="s" style="position:absolute;left:0;top:150px;width:200px;height:100px;overflow:auto">
  <div style="height:3000px;width:3000px"></div></div>
<input id="i" style="position:absolute;left:220px;top:10px;width:150px">
<script>
window.log = [];
const t = document.getElementById('t');
for (const k of ['click', 'dblclick', 'mousedown', 'mouseup', 'mouseover'])
  t.addEventListener(k, (e) => log.push([k, e.clientX, e.clientY, performance.now()]));
document.addEventListener('mousemove', (e) => { if (e.buttons) log.push(['drag', e.clientX, e.clientY]); });
document.addEventListener('keydown', (e) => log.push(['key', e.key, e.ctrlKey]));
</script></body></html>"""
URL = "data:text/html," + urllib.parse.quote(PAGE)
SIZE = (400, 300)


@pytest.fixture(scope="module")
def host() -> Iterator[BrowserHost]:
    h = BrowserHost.acquire()
    yield h
    h.release()


@pytest.fixture(scope="module")
def env(host: BrowserHost) -> Iterator[WebEnv]:
    e = WebEnv(size=SIZE, long_press_ms=300, wait_s=0.01)
    yield e
    e.close()


@pytest.fixture()
def page(env: WebEnv) -> WebEnv:
    env.reset(Task(goal="test page", max_steps=100))
    _, _, info = env.step(Launch(url=URL))
    assert "error" not in info
    return env


def log(env: WebEnv, kind: str | None = None) -> list[list[Any]]:
    return [e for e in env.evaluate("() => window.log") if kind is None or e[0] == kind]


def test_observation_is_the_rendered_page(page: WebEnv) -> None:
    obs = page.observe()
    assert obs.size == SIZE == obs.screenshot.size and obs.platform == "web"
    assert obs.screenshot.getpixel((10, 10)) == (255, 0, 0)  # the red box at the top left
    assert obs.screenshot.getpixel((300, 120)) == (255, 255, 255)
    assert obs.extras["url"].startswith("data:text/html") and obs.extras["simulated"] is False


def test_click_lands_on_the_css_pixel(page: WebEnv) -> None:
    page.step(Click(box=(250, 170)))  # x 250/1000*400 = 100, y 170/1000*300 = 51
    [(_, x, y, _)] = log(page, "click")
    assert (x, y) == (100, 51)
    assert [e[0] for e in log(page) if e[0] != "mouseover"] == ["mousedown", "mouseup", "click"]


def test_double_click_hover_and_long_press(page: WebEnv) -> None:
    page.step(Hover(box=(100, 100)))
    assert [e[0] for e in log(page)] == ["mouseover"]
    page.step(DoubleClick(box=(100, 100)))
    assert len(log(page, "click")) == 2 and len(log(page, "dblclick")) == 1
    page.evaluate("() => { window.log = []; }")
    page.step(LongPress(box=(100, 100)))
    [down] = log(page, "mousedown")
    [up] = log(page, "mouseup")
    assert up[3] - down[3] >= 290  # held ~long_press_ms


def test_drag_moves_with_the_button_down(page: WebEnv) -> None:
    page.step(Drag(start=(100, 100), end=(400, 300)))
    path = log(page, "drag")
    assert len(path) >= 4 and (path[-1][1], path[-1][2]) == (160, 90)
    xs = [p[1] for p in path]
    assert xs == sorted(xs)


def test_scroll_direction_is_the_finger_motion(page: WebEnv) -> None:
    at = (250, 666)  # inside the scrollable box (top 150..250 px)
    top = "() => document.getElementById('s').scrollTop"
    left = "() => document.getElementById('s').scrollLeft"
    page.step(Scroll(direction="up", start=at))  # finger up: content up, reveals below
    assert page.evaluate(top) == 150  # half the 300 px screen
    page.step(Scroll(direction="down", start=at, end=(250, 766)))  # by |end - start| = 30 px
    assert page.evaluate(top) == 120
    page.step(Scroll(direction="left", start=at))
    assert page.evaluate(left) == 200
    page.step(Scroll(direction="right", start=at))
    assert page.evaluate(left) == 0


def test_type_hotkey_and_enter_reach_the_focused_field(page: WebEnv) -> None:
    value = "() => document.getElementById('i').value"
    page.step(Type(content="lost"))  # nothing focused
    assert page.evaluate(value) == ""
    page.step(Click(box=(737, 66)))
    page.step(Type(content="héllo"))
    page.step(Type(content=" 世界"))  # appends; any Unicode
    assert page.evaluate(value) == "héllo 世界"
    page.step(Hotkey(keys=("ctrl", "a")))
    page.step(Type(content="x"))
    assert page.evaluate(value) == "x"
    page.step(Hotkey(keys=("Backspace",)))
    page.step(PressEnter())
    assert page.evaluate(value) == ""
    keys = [e[1:] for e in log(page, "key")]
    assert ["a", True] in keys and keys[-3:] == [["x", False], ["Backspace", False], ["Enter", False]]


def test_wait_for_is_a_bounded_condition_wait(page: WebEnv) -> None:
    page.evaluate("() => setTimeout(() => { window.late = 1; }, 400)")
    t0 = time.perf_counter()
    assert page.wait_for("() => window.late === 1", timeout_ms=5000)  # held after ~0.4 s
    assert 0.35 <= time.perf_counter() - t0 < 4
    t0 = time.perf_counter()
    assert not page.wait_for("(v) => window.late === v", 2, timeout_ms=300)  # never: False
    assert 0.25 <= time.perf_counter() - t0 < 4
    with pytest.raises(ValueError, match="timeout_ms"):
        page.wait_for("() => true", timeout_ms=0)


def test_unsupported_actions_and_bad_urls(page: WebEnv) -> None:
    steps = page.steps
    for action in (PressBack(), Launch(app="Settings"), Hotkey(keys=("hyper",))):
        with pytest.raises(UnsupportedAction) as err:
            page.step(action)
        assert err.value.backend == "web" and err.value.action == action.NAME
    assert page.steps == steps
    _, done, info = page.step(Launch(url="notascheme:x"))
    assert not done and "cannot open" in info["error"]
    assert page.evaluate("() => typeof window.log") == "object"  # still on the test page
    with pytest.raises(EnvError, match="no success check"):
        page.is_successful()


def test_key_names() -> None:
    assert [playwright_key(k) for k in ("ctrl", "CMD", "page_down", "F5", "a", "Enter", "nope")] == [
        "Control", "Meta", "PageDown", "F5", "a", "Enter", None]


def test_scale_and_screen_region(host: BrowserHost) -> None:
    with WebEnv(size=(200, 100), scale=2, host=host) as hi:
        obs = hi.reset(Task(goal="x"))
        assert obs.size == (400, 200) == hi.size
    with WebEnv(size=(400, 300), screen=(200, 100), host=host) as cut:
        cut.reset(Task(goal="x", max_steps=5))
        cut.step(Launch(url=URL))
        assert cut.observe().size == (200, 100)
        cut.step(Click(box=(500, 500)))  # the centre of the 200x100 screen
        assert [e[1:3] for e in log(cut, "click")] == [[100, 50]]
    for bad in ({"size": (8, 8)}, {"size": (100, 100), "screen": (200, 50)}, {"scale": 9.0}):
        with pytest.raises(ValueError):
            WebEnv(host=host, **bad)  # type: ignore[arg-type]


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args: Any) -> None:
        pass


def test_contexts_are_isolated_and_share_one_browser(tmp_path: Path, host: BrowserHost) -> None:
    (tmp_path / "p.html").write_text("<p>storage</p>", encoding="utf-8")
    handler = lambda *a: _Quiet(*a, directory=str(tmp_path))  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}/p.html"
    users = host.users
    try:
        a, b = WebEnv(size=SIZE), WebEnv(size=SIZE)
        assert a.host is b.host is host and host.users == users + 2
        for e in (a, b):
            e.reset(Task(goal="x"))
            e.step(Launch(url=url))
        a.evaluate("() => { localStorage.setItem('k', 'a'); document.cookie = 'c=1'; }")
        assert a.evaluate("() => [localStorage.getItem('k'), document.cookie]") == ["a", "c=1"]
        assert b.evaluate("() => [localStorage.getItem('k'), document.cookie]") == [None, ""]
        a.close()
        b.close()
        assert host.users == users and host.alive and a.page.is_closed()
    finally:
        server.shutdown()
        server.server_close()


def test_a_private_browser_outlives_its_envs_until_closed() -> None:
    own = BrowserHost()
    assert own is not BrowserHost._shared
    with WebEnv(size=SIZE, host=own) as env:
        env.reset(Task(goal="x"))
    assert own.alive and own.users == 0  # an env does not close a host it was given
    own.close()
    own.close()  # idempotent
    assert not own.alive and not own.thread.is_alive()
    with pytest.raises(EnvError, match="closed"):
        WebEnv(size=SIZE, host=own)
