"""A FAKE AndroidWorld server on loopback, for testing `AndroidWorldEnv` (no emulator runs here).

It serves the endpoints of AndroidWorld's `server/android_server.py` with the same methods,
query parameters and reply shapes (FastAPI conventions: scalars as query parameters, 422 with
`{"detail": [...]}` for a missing one, 404/405 `{"detail": ...}`, and a plain-text 500 "Internal
Server Error" when the handler raises — as `JSONAction(**body)` does for an unknown action type).
Behind it is a toy phone, not Android: a home screen, apps with a colour each, one text field
in "Markor", a scroll offset, and AndroidWorld's `interaction_cache` for answers; screenshots are
H x W x 3 pixel lists drawn from that state. Three task types are scored from the state the way
AndroidWorld scores from app databases. `mode` injects faults: "bad_json", "bad_pixels", "hang".
"""

from __future__ import annotations

import json
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

W, H = 54, 96
APPS = {"Settings": (40, 40, 200), "Markor": (30, 160, 60), "Contacts": (200, 120, 20)}
FIELD = (5, 20, 49, 32)  # Markor's note field, pixels (x0, y0, x1, y1)
ACTION_TYPES = {"answer", "click", "double_tap", "input_text", "keyboard_enter", "long_press",
                "navigate_back", "navigate_home", "open_app", "scroll", "status", "swipe",
                "unknown", "wait"}
SUITE: dict[str, list[dict[str, str]]] = {
    "SystemSettingsOpen": [{}],
    "MarkorWriteNote": [{"text": "hello"}, {"text": "shopping list"}],
    "InfoAnswer": [{"answer": "42"}],
}
GOALS = {"SystemSettingsOpen": "Open the Settings app.",
         "MarkorWriteNote": "In Markor, write the note '{text}'.",
         "InfoAnswer": "What is the answer? Reply with the number."}


@dataclass
class Phone:
    foreground: str = "home"
    note: str = ""
    scroll: int = 0
    interaction_cache: str = ""
    back_stack: list[str] = field(default_factory=list)

    def pixels(self) -> list[list[list[int]]]:
        bg = APPS.get(self.foreground, (230, 230, 230))
        rows = []
        for y in range(H):
            row = []
            for x in range(W):
                px = list(bg)
                if self.foreground == "Markor" and FIELD[0] <= x < FIELD[2] \
                        and FIELD[1] <= y < FIELD[3]:
                    px = [255, 255, 255] if not self.note else [0, 0, len(self.note) * 7 % 256]
                if y == (40 + self.scroll * 8) % H:
                    px = [0, 0, 0]
                row.append(px)
            rows.append(row)
        return rows


class FakeAndroidWorld(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self) -> None:
        self.phone = Phone()
        self.calls: list[tuple[str, str, dict[str, str], Any]] = []
        self.actions: list[dict[str, Any]] = []
        self.initialized: list[tuple[str, int]] = []
        self.torn_down: list[tuple[str, int]] = []
        self.mode = "ok"
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, args=(0.05,), daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def stop(self) -> None:
        self.shutdown()
        self.server_close()

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that timed out and left ("hang" mode) is expected, not an error."""
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)

    # -- the toy phone's actuation and AndroidWorld's task hooks -------------------------------
    def execute(self, a: dict[str, Any]) -> None:
        t = a.get("action_type")
        if t not in ACTION_TYPES:
            raise ValueError(f"Invalid action type: {t}")  # JSONAction.__post_init__
        p = self.phone
        if t == "answer":
            p.interaction_cache = a.get("text") or ""
        elif t == "input_text":
            if a.get("x") is None or a.get("y") is None:
                raise ValueError(f"Invalid click action: {a}")  # actuation: the focus click
            if p.foreground == "Markor" and FIELD[0] <= a["x"] < FIELD[2] \
                    and FIELD[1] <= a["y"] < FIELD[3]:
                p.note = str(a.get("text"))
        elif t == "open_app":
            if not a.get("app_name"):
                raise ValueError("No app name provided")
            if a["app_name"] in APPS:
                p.back_stack.append(p.foreground)
                p.foreground = a["app_name"]
        elif t == "navigate_home":
            p.foreground, p.back_stack = "home", []
        elif t == "navigate_back":
            p.foreground = p.back_stack.pop() if p.back_stack else "home"
        elif t == "scroll":
            if a.get("direction") not in ("up", "down", "left", "right"):
                raise ValueError(f"Invalid scroll direction: {a.get('direction')}")
            p.scroll += {"down": 1, "up": -1}.get(a["direction"], 0)
        elif t == "wait":
            time.sleep(0.01)

    def score(self, task_type: str, idx: int) -> float:
        params = SUITE[task_type][idx]
        p = self.phone
        if task_type == "SystemSettingsOpen":
            return float(p.foreground == "Settings")
        if task_type == "MarkorWriteNote":
            return float(p.note == params["text"])
        return float(p.interaction_cache.strip() == params["answer"])


class _Handler(BaseHTTPRequestHandler):
    server: FakeAndroidWorld
    protocol_version = "HTTP/1.1"

    def log_message(self, *args: Any) -> None:
        pass

    def _send(self, status: int, obj: Any, raw: bytes | None = None) -> None:
        data = raw if raw is not None else json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _route(self, method: str) -> None:
        url = urllib.parse.urlsplit(self.path)
        q = dict(urllib.parse.parse_qsl(url.query))
        n = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(n)) if n else None
        srv = self.server
        srv.calls.append((method, url.path, q, body))
        routes: dict[str, tuple[str, tuple[str, ...]]] = {
            "/health": ("GET", ()), "/reset": ("POST", ("go_home",)),
            "/screenshot": ("GET", ("wait_to_stabilize",)), "/execute_action": ("POST", ()),
            "/suite/task_list": ("GET", ("max_index",)),
            "/suite/task_length": ("GET", ("task_type",)),
            "/task/initialize": ("POST", ("task_type", "task_idx")),
            "/task/tear_down": ("POST", ("task_type", "task_idx")),
            "/task/score": ("GET", ("task_type", "task_idx")),
            "/task/goal": ("GET", ("task_type", "task_idx")), "/close": ("POST", ()),
        }
        if url.path not in routes:
            return self._send(404, {"detail": "Not Found"})
        want, required = routes[url.path]
        if method != want:
            return self._send(405, {"detail": "Method Not Allowed"})
        missing = [k for k in required if k not in q]
        if missing:
            return self._send(422, {"detail": [{"type": "missing", "loc": ["query", k],
                                                "msg": "Field required"} for k in missing]})
        if srv.mode == "hang":
            time.sleep(3)
        try:
            with srv.lock:
                reply = self._handle(url.path, q, body)
        except (ValueError, KeyError, IndexError):
            return self._send(500, None, b"Internal Server Error")
        if srv.mode == "bad_json" and url.path == "/screenshot":
            return self._send(200, None, b"<html>proxy error</html>")
        self._send(200, reply)

    def _handle(self, path: str, q: dict[str, str], body: Any) -> dict[str, Any]:
        srv, p = self.server, self.server.phone
        ref = (q.get("task_type", ""), int(q.get("task_idx", "0")))
        if path == "/health":
            return {"status": "success"}
        if path == "/reset":
            p.foreground, p.back_stack = "home", []
            return {"status": "success",
                    "message": f"Environment reset with go_home={q['go_home']}."}
        if path == "/screenshot":
            if srv.mode == "bad_pixels":
                return {"pixels": [[1, 2], [3]]}
            return {"pixels": p.pixels()}
        if path == "/execute_action":
            srv.execute(body)
            srv.actions.append(body)
            return {"status": "success", "message": f"Action {body} executed."}
        if path == "/suite/task_list":
            names = list(SUITE)
            k = int(q["max_index"])
            return {"task_list": names if k < 0 or k > len(names) else names[:k]}
        if path == "/suite/task_length":
            return {"length": len(SUITE[q["task_type"]])}
        if path == "/task/initialize":
            SUITE[ref[0]][ref[1]]  # noqa: B018 - KeyError/IndexError -> 500, as the real server
            srv.phone = Phone()
            srv.initialized.append(ref)
            return {"status": "success", "message": f"Task {ref[0]} {ref[1]} initialized."}
        if path == "/task/tear_down":
            srv.torn_down.append(ref)
            return {"status": "success", "message": f"Task {ref[0]} {ref[1]} torn down."}
        if path == "/task/score":
            return {"score": srv.score(*ref)}
        if path == "/task/goal":
            return {"goal": GOALS[ref[0]].format(**SUITE[ref[0]][ref[1]])}
        return {"status": "success"}  # /close

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")
