"""AndroidWorldEnv: the unified action space on AndroidWorld's containerized server (HTTP).

Why: AndroidWorld (Rawles et al., 2024) ships its emulator, apps and 116 task families in a
Docker image whose FastAPI server (`server/android_server.py`, port 5000) exposes the episode
loop over HTTP. Talking to that API lets real AndroidWorld emulator pods (e.g. from the
Kubernetes device pool, reached through the gateway's forwarder) serve online RL and evaluation,
with AndroidWorld's own success checks (`is_successful` reads app databases, never pixels).

The server's API, as used here (scalars are query parameters, as FastAPI reads them):
  POST /reset?go_home=true                      -> {"status": "success", "message": ...}
  GET  /screenshot?wait_to_stabilize=false      -> {"pixels": [[[r, g, b], ...], ...]}  (H x W x 3)
  POST /execute_action  body: JSONAction dict   -> {"status": "success", "message": ...}
  GET  /suite/task_list?max_index=-1            -> {"task_list": ["ContactsAddContact", ...]}
  GET  /suite/task_length?task_type=T           -> {"length": n}
  GET  /suite/reinitialize?n_task_combinations=&seed=&task_family=
  POST /task/initialize|tear_down?task_type=T&task_idx=i
  GET  /task/score?task_type=T&task_idx=i       -> {"score": 0.0 .. 1.0}
  GET  /task/goal?task_type=T&task_idx=i        -> {"goal": "..."}
  GET  /health, POST /close
Errors come back as HTTP 4xx/5xx (FastAPI: `{"detail": ...}` or a plain "Internal Server
Error"); they, unreachable servers, timeouts and malformed replies raise `AndroidWorldError`
subclasses (`ServerUnavailable`, `ServerError`, `ProtocolError`), all `EnvError`s.

Tasks are referenced by `success_check = "androidworld:<task_type>:<task_idx>"` (see
`aw_task`, `suite_tasks`); `reset` tears the previous task down, resets the phone (home screen)
and initialises the new task; success = score >= `success_threshold` (1.0: AndroidWorld's
scores are 0/1 except a few partial-credit tasks). A Task without that reference is free play.

Action mapping (0–1000 points -> pixels of the last screenshot) and where it departs:
Click -> click, LongPress -> long_press, DoubleClick -> double_tap, PressBack/PressHome/
PressEnter -> navigate_back/navigate_home/keyboard_enter, Launch(app) -> open_app (AndroidWorld
maps app names itself), Wait -> wait (the server sleeps 1 s), Finished(content) -> answer (stored
for information tasks) then status "complete", CallUser -> ends the episode, nothing sent.
Type -> input_text at the point of the last Click/LongPress (AndroidWorld's input_text needs the
field's position; it taps it, types, then presses Enter — an Enter our Type does not imply).
Scroll -> scroll with AndroidWorld's direction, which names where the content goes (the opposite
of the finger: a swipe up is "down"), from the screen centre: the swipe's exact start/end are lost.
Unsupported (typed `UnsupportedAction`): Drag (no point-to-point swipe in the JSON actions),
PressRecent, Hover, Hotkey, Launch(url=), Type before any click.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import numpy as np
from PIL import Image

from venus_core.actions.space import (
    Action,
    CallUser,
    Click,
    DoubleClick,
    Finished,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    PressHome,
    Scroll,
    Type,
    Wait,
)
from venus_core.config.registry import ENVS
from venus_core.envs.base import Env, EnvError, Observation, Task, UnsupportedAction

PREFIX = "androidworld:"
SUPPORTED = frozenset({"Click", "LongPress", "DoubleClick", "Type", "Scroll", "PressBack",
                       "PressHome", "PressEnter", "Launch", "Wait", "Finished", "CallUser"})
_KEYS = {PressBack: "navigate_back", PressHome: "navigate_home", PressEnter: "keyboard_enter"}
_OPPOSITE = {"up": "down", "down": "up", "left": "right", "right": "left"}


class AndroidWorldError(EnvError):
    """The AndroidWorld server failed a request (base class)."""


class ServerUnavailable(AndroidWorldError):
    """The server could not be reached or did not answer within the timeout."""


class ServerError(AndroidWorldError):
    """The server answered with an HTTP error status."""

    def __init__(self, message: str, status: int) -> None:
        self.status = status
        super().__init__(message)


class ProtocolError(AndroidWorldError):
    """The server's reply is not what its API documents (not JSON, wrong fields or shapes)."""


def aw_task(task_type: str, task_idx: int = 0, *, goal: str | None = None,
            max_steps: int = 30) -> Task:
    """A Task naming AndroidWorld task `task_type` instance `task_idx` (goal: from the server
    via `suite_tasks`, or given)."""
    if not task_type or ":" in task_type or task_idx < 0:
        raise ValueError(f"bad AndroidWorld task reference {task_type!r}, {task_idx}")
    return Task(goal=goal or f"AndroidWorld task {task_type}", app=None,
                success_check=f"{PREFIX}{task_type}:{task_idx}", max_steps=max_steps)


def parse_ref(ref: str) -> tuple[str, int]:
    """`androidworld:<task_type>:<task_idx>` -> (task_type, task_idx)."""
    body = ref.removeprefix(PREFIX)
    task_type, sep, idx = body.rpartition(":")
    if not ref.startswith(PREFIX) or not sep or not task_type or not idx.isdigit():
        raise EnvError(f"success_check {ref!r} is not '{PREFIX}<task_type>:<task_idx>'")
    return task_type, int(idx)


class AndroidWorldEnv(Env):
    """One AndroidWorld server (one emulator) at `url`; see the module docstring."""

    name = "androidworld"
    platform = "mobile"

    def __init__(self, url: str = "http://127.0.0.1:5000", *, timeout: float = 60.0,
                 wait_to_stabilize: bool = False, success_threshold: float = 1.0,
                 check_health: bool = True) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.wait_to_stabilize = wait_to_stabilize
        self.success_threshold = success_threshold
        self.task: Task | None = None
        self.current: tuple[str, int] | None = None  # initialised AndroidWorld task
        self.size: tuple[int, int] | None = None
        self.steps = 0
        self.done = False
        self.focus: tuple[int, int] | None = None  # pixels of the last Click / LongPress
        self.closed = False
        if check_health:
            self.request("GET", "/health")

    # -- HTTP ----------------------------------------------------------------------------------
    def request(self, method: str, path: str, params: dict[str, Any] | None = None,
                body: dict[str, Any] | None = None) -> dict[str, Any]:
        """One API call; the JSON object it returns, or a typed `AndroidWorldError`."""
        query = {k: (str(v).lower() if isinstance(v, bool) else v)
                 for k, v in (params or {}).items()}
        url = self.url + path + (f"?{urllib.parse.urlencode(query)}" if query else "")
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(url, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        what = f"{self.name} {method} {url}"
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                raw = resp.read()
        except urllib.error.HTTPError as exc:
            detail = exc.read()[:300].decode(errors="replace")
            raise ServerError(f"{what}: HTTP {exc.code}: {detail}", exc.code) from exc
        except (urllib.error.URLError, TimeoutError, socket.timeout, ConnectionError) as exc:
            reason = getattr(exc, "reason", exc)
            raise ServerUnavailable(f"{what}: no answer within {self.timeout:g}s ({reason})") \
                from exc
        try:
            obj = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"{what}: reply is not JSON: {raw[:120]!r}") from exc
        if not isinstance(obj, dict):
            raise ProtocolError(f"{what}: expected a JSON object, got {type(obj).__name__}")
        return obj

    @staticmethod
    def _field(obj: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
        """obj[key] if it has type `kind` (JSON true/false is not a number), else ProtocolError."""
        val = obj.get(key)
        if not isinstance(val, kind) or isinstance(val, bool):
            raise ProtocolError(f"{what}: field {key!r} missing or not {kind}: {str(obj)[:120]}")
        return val

    # -- suite ---------------------------------------------------------------------------------
    def task_types(self, max_index: int = -1) -> list[str]:
        got = self._field(self.request("GET", "/suite/task_list", {"max_index": max_index}),
                          "task_list", list, "/suite/task_list")
        return [str(t) for t in got]

    def goal(self, task_type: str, task_idx: int) -> str:
        obj = self.request("GET", "/task/goal", {"task_type": task_type, "task_idx": task_idx})
        return str(self._field(obj, "goal", str, "/task/goal"))

    def suite_tasks(self, max_index: int = -1, per_type: int = 1,
                    max_steps: int = 30) -> list[Task]:
        """Tasks of the server's suite: `per_type` instances of each of the first task types."""
        out = []
        for task_type in self.task_types(max_index):
            n = self._field(self.request("GET", "/suite/task_length", {"task_type": task_type}),
                            "length", int, "/suite/task_length")
            for idx in range(min(n, per_type)):
                out.append(aw_task(task_type, idx, goal=self.goal(task_type, idx),
                                   max_steps=max_steps))
        return out

    def reinitialize(self, n_task_combinations: int = 2, seed: int = 42,
                     task_family: str = "android_world") -> None:
        """Re-sample the server's suite (AndroidWorld's parameterised task instances)."""
        self.request("GET", "/suite/reinitialize", {"n_task_combinations": n_task_combinations,
                                                     "seed": seed, "task_family": task_family})

    # -- observation ---------------------------------------------------------------------------
    def screenshot(self) -> Image.Image:
        obj = self.request("GET", "/screenshot", {"wait_to_stabilize": self.wait_to_stabilize})
        pixels = self._field(obj, "pixels", list, "/screenshot")
        try:
            arr = np.asarray(pixels, dtype=np.int64)
        except (ValueError, TypeError) as exc:
            raise ProtocolError(f"/screenshot: pixels are not a rectangular array: {exc}") from exc
        if arr.ndim != 3 or arr.shape[2] not in (3, 4) or 0 in arr.shape[:2]:
            raise ProtocolError(f"/screenshot: pixels must be H x W x 3 (or 4), got {arr.shape}")
        if arr.min() < 0 or arr.max() > 255:
            raise ProtocolError("/screenshot: pixel values outside 0..255")
        img = Image.fromarray(arr[:, :, :3].astype(np.uint8), "RGB")
        self.size = img.size
        return img

    def observe(self) -> Observation:
        img = self.screenshot()
        extras: dict[str, Any] = {"step": self.steps, "backend": self.name, "server": self.url,
                                  "simulated": False}
        if self.current is not None:
            extras["task_type"], extras["task_idx"] = self.current
        return Observation(img, img.size, self.platform, extras)

    def px(self, p: tuple[int, int]) -> tuple[int, int]:
        if self.size is None:
            raise EnvError(f"{self.name}: no screenshot yet (call reset)")
        w, h = self.size
        return (min(w - 1, round(p[0] * w / 1000)), min(h - 1, round(p[1] * h / 1000)))

    # -- action mapping ------------------------------------------------------------------------
    @property
    def supported_actions(self) -> frozenset[str]:
        return SUPPORTED

    def json_actions(self, action: Action) -> list[dict[str, Any]]:
        """The AndroidWorld JSONAction dicts that perform `action` (empty: nothing to send)."""
        name = type(action).NAME
        if name not in SUPPORTED:
            why = {"Drag": "AndroidWorld's JSON actions have no point-to-point swipe",
                   "PressRecent": "AndroidWorld's JSON actions have no recents key"}
            raise UnsupportedAction(self.name, name, why.get(name, "not a phone action"))
        if isinstance(action, (Click, LongPress, DoubleClick)):
            x, y = self.px(action.box)
            kind = {Click: "click", LongPress: "long_press", DoubleClick: "double_tap"}
            return [{"action_type": kind[type(action)], "x": x, "y": y}]
        if isinstance(action, Type):
            if self.focus is None:
                raise UnsupportedAction(self.name, name, "AndroidWorld's input_text needs the "
                                        "field's position: click the field first")
            return [{"action_type": "input_text", "text": action.content,
                     "x": self.focus[0], "y": self.focus[1]}]
        if isinstance(action, Scroll):
            finger = action.direction
            if action.start is not None and action.end is not None:
                dx, dy = action.end[0] - action.start[0], action.end[1] - action.start[1]
                if dx or dy:
                    finger = ("right" if dx > 0 else "left") if abs(dx) > abs(dy) else \
                        ("down" if dy > 0 else "up")
            return [{"action_type": "scroll", "direction": _OPPOSITE[finger]}]
        if type(action) in _KEYS:
            return [{"action_type": _KEYS[type(action)]}]
        if isinstance(action, Launch):
            if action.app is None:
                raise UnsupportedAction(self.name, name, "Launch(url=) is a web action")
            return [{"action_type": "open_app", "app_name": action.app}]
        if isinstance(action, Wait):
            return [{"action_type": "wait"}]
        if isinstance(action, Finished):
            answer = [{"action_type": "answer", "text": action.content}] if action.content else []
            return [*answer, {"action_type": "status", "goal_status": "complete"}]
        assert isinstance(action, CallUser)
        return []

    # -- episode -------------------------------------------------------------------------------
    def _tear_down(self) -> None:
        if self.current is not None:
            task_type, idx = self.current
            self.current = None
            self.request("POST", "/task/tear_down", {"task_type": task_type, "task_idx": idx})

    def reset(self, task: Task) -> Observation:
        self._guard("reset")
        ref = parse_ref(task.success_check) if task.success_check else None
        self._tear_down()
        self.request("POST", "/reset", {"go_home": True})
        if ref is not None:
            self.request("POST", "/task/initialize", {"task_type": ref[0], "task_idx": ref[1]})
            self.current = ref
        self.task, self.steps, self.done, self.focus = task, 0, False, None
        return self.observe()

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        self._guard("step")
        sent = self.json_actions(action)  # raises UnsupportedAction before counting the step
        t0 = time.perf_counter()
        for body in sent:
            self.request("POST", "/execute_action", body=body)
        if isinstance(action, (Click, LongPress)):
            self.focus = (sent[0]["x"], sent[0]["y"])
        self.steps += 1
        terminated = isinstance(action, (Finished, CallUser))
        truncated = not terminated and self.steps >= self.task.max_steps
        self.done = terminated or truncated
        info: dict[str, Any] = {"action": type(action).NAME, "json_actions": sent,
                                "step": self.steps, "terminated": terminated,
                                "truncated": truncated,
                                "act_seconds": round(time.perf_counter() - t0, 4)}
        return self.observe(), self.done, info

    def score(self) -> float:
        """AndroidWorld's own score of the current task (0..1), read from the emulator's state."""
        if self.current is None:
            raise EnvError(f"{self.name}: no AndroidWorld task initialised "
                           f"({self.task.success_check if self.task else 'reset first'!r})")
        task_type, idx = self.current
        obj = self.request("GET", "/task/score", {"task_type": task_type, "task_idx": idx})
        return float(self._field(obj, "score", (int, float), "/task/score"))

    def is_successful(self) -> bool:
        if self.task is None:
            raise EnvError(f"{self.name}: is_successful before reset")
        return self.score() >= self.success_threshold

    def close(self) -> None:
        """Tear the task down and end the session (the server's emulator keeps running: a pod
        serves many episodes; `/close` would shut its env down for every later client)."""
        if self.closed:
            return
        self.closed = True
        try:
            self._tear_down()
        except AndroidWorldError:
            pass  # the server is gone: nothing left to tear down


ENVS.register("androidworld", AndroidWorldEnv,
              description="AndroidWorld's containerized server (HTTP): its emulator, tasks, scores")
