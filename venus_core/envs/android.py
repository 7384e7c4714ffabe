"""AndroidEnv: the unified action space executed on any ADB device, the way UI-Venus does it.

Why: UI-Venus-1.5 acts on phones through adb (the UI-Venus-1.5 report and repository): Click -> `input tap`, Scroll/Drag ->
`input swipe` (~1000 ms), LongPress -> a swipe in place (~500 ms), Type -> the ADB keyboard's
broadcast (clear first) when it is installed, else `input text`, Press* -> key events, Launch ->
start the app's package; coordinates go from the 0–1000 frame to device pixels (x·W/1000, with
W×H from `wm size`); screenshots are `screencap -p`. This class does exactly that over a
`DeviceShell`, so a real phone, an emulator pod and the simulated phone share one code path.

Choices the paper leaves open: Finished / CallUser end the episode without touching the device;
Launch of an app the env cannot map to a package (or that the device lacks) is a no-op reported
in `info["error"]` (a model's mistake, not an env failure); Hover / DoubleClick / Hotkey,
Launch(url=) and a Scroll without start/end raise `UnsupportedAction`; non-ASCII text without
the ADB keyboard raises `UnsupportedAction` (`input text` cannot inject it). Success checks are
pluggable (`success_check`): a real device has no generic notion of success.
"""

from __future__ import annotations

import io
import re
import shlex
import time
from collections.abc import Callable, Mapping
from typing import Any

from PIL import Image, UnidentifiedImageError

from venus_core.actions.space import (
    Action,
    CallUser,
    Click,
    Drag,
    Finished,
    Launch,
    LongPress,
    PressBack,
    PressEnter,
    PressHome,
    PressRecent,
    Scroll,
    Type,
    Wait,
)
from venus_core.envs.base import Env, EnvError, Observation, Task, UnsupportedAction
from venus_core.envs.shells import AdbShell, CommandOutput, DeviceShell

ADB_IME = "com.android.adbkeyboard/.AdbIME"
KEYS = {PressBack: "KEYCODE_BACK", PressHome: "KEYCODE_HOME", PressEnter: "KEYCODE_ENTER",
        PressRecent: "KEYCODE_APP_SWITCH"}
SUPPORTED = frozenset({"Click", "Drag", "Scroll", "Type", "Launch", "Wait", "Finished",
                       "CallUser", "LongPress", "PressBack", "PressHome", "PressEnter",
                       "PressRecent"})
_PACKAGE = re.compile(r"^[A-Za-z][\w]*(\.[A-Za-z_][\w]*)+(/[\w.$]+)?$")
_SIZE = re.compile(r"(Override|Physical) size:\s*(\d+)x(\d+)")

SuccessCheck = Callable[["AndroidEnv", Task], bool]


class AndroidEnv(Env):
    """Drive the device `serial` behind the adb server at adb_host:adb_port (or a given shell)."""

    name = "android"
    platform = "mobile"

    def __init__(self, serial: str | None = None, *, adb_host: str = "127.0.0.1",
                 adb_port: int = 5037, shell: DeviceShell | None = None,
                 packages: Mapping[str, str] | None = None, swipe_ms: int = 1000,
                 long_press_ms: int = 500, wait_s: float = 1.0, settle_s: float = 0.5,
                 adb_keyboard: bool | None = None, success_check: SuccessCheck | None = None,
                 simulated: bool = False) -> None:
        if shell is None:
            if not serial:
                raise ValueError("AndroidEnv: give a device serial or a shell")
            shell = AdbShell(serial, host=adb_host, port=adb_port)
        self.shell = shell
        self.packages = {k.strip().lower(): v for k, v in (packages or {}).items()}
        self.swipe_ms = swipe_ms
        self.long_press_ms = long_press_ms
        self.wait_s = wait_s
        self.settle_s = settle_s
        self.success_check = success_check
        self.simulated = simulated
        self.size = self._screen_size()
        self.adb_keyboard = self._setup_keyboard() if adb_keyboard is not False else False
        self.task: Task | None = None
        self.steps = 0
        self.done = False
        self.answer: str | None = None
        self.closed = False

    # -- device helpers ------------------------------------------------------------------------
    def run(self, command: str, *, check: bool = True) -> CommandOutput:
        out = self.shell.run(command)
        if check and out.exit_code != 0:
            err = (out.stderr or out.stdout).decode(errors="replace").strip()
            raise EnvError(f"{self.name} {self.shell.serial}: `{command[:120]}` exited "
                           f"{out.exit_code}: {err[:300]}")
        return out

    def _screen_size(self) -> tuple[int, int]:
        text = self.run("wm size").stdout.decode(errors="replace")
        sizes = {m.group(1): (int(m.group(2)), int(m.group(3))) for m in _SIZE.finditer(text)}
        size = sizes.get("Override") or sizes.get("Physical")
        if size is None:
            raise EnvError(f"{self.name} {self.shell.serial}: cannot parse `wm size`: {text!r}")
        return size

    def _setup_keyboard(self) -> bool:
        if ADB_IME not in self.run("ime list -s", check=False).stdout.decode(errors="replace"):
            return False
        self.run(f"ime enable {ADB_IME}")
        self.run(f"ime set {ADB_IME}")
        return True

    def screenshot(self) -> Image.Image:
        png = self.run("screencap -p").stdout
        try:
            img = Image.open(io.BytesIO(png))
            img.load()
        except (UnidentifiedImageError, OSError) as exc:
            raise EnvError(f"{self.name} {self.shell.serial}: screencap returned no image "
                           f"({len(png)} bytes): {exc}") from exc
        return img.convert("RGB")

    def observe(self) -> Observation:
        img = self.screenshot()
        extras: dict[str, Any] = {"serial": self.shell.serial, "step": self.steps,
                                  "simulated": self.simulated, "backend": self.name}
        return Observation(img, img.size, self.platform, extras)

    def px(self, p: tuple[int, int]) -> tuple[int, int]:
        """A 0–1000 point to device pixels (x·W/1000, clamped onto the screen)."""
        w, h = self.size
        return (min(w - 1, round(p[0] * w / 1000)), min(h - 1, round(p[1] * h / 1000)))

    def resolve_package(self, app: str) -> str | None:
        target = self.packages.get(app.strip().lower())
        if target is None and _PACKAGE.match(app.strip()):
            target = app.strip()
        return target

    # -- action mapping ------------------------------------------------------------------------
    def commands(self, action: Action) -> list[str]:
        """The shell commands that perform `action` (empty for device-less actions)."""
        name = type(action).NAME
        if name not in self.supported_actions:
            raise UnsupportedAction(self.name, name, "not a phone action (web only)")
        if isinstance(action, Click):
            x, y = self.px(action.box)
            return [f"input tap {x} {y}"]
        if isinstance(action, LongPress):
            x, y = self.px(action.box)
            return [f"input swipe {x} {y} {x} {y} {self.long_press_ms}"]
        if isinstance(action, (Drag, Scroll)):
            if action.start is None or action.end is None:
                raise UnsupportedAction(self.name, name, "a phone swipe needs start and end")
            (x1, y1), (x2, y2) = self.px(action.start), self.px(action.end)
            return [f"input swipe {x1} {y1} {x2} {y2} {self.swipe_ms}"]
        if isinstance(action, Type):
            if not action.content:
                return []
            if self.adb_keyboard:
                return ["am broadcast -a ADB_CLEAR_TEXT",
                        f"am broadcast -a ADB_INPUT_TEXT --es msg {shlex.quote(action.content)}"]
            if not action.content.isascii():
                raise UnsupportedAction(self.name, name, "non-ASCII text needs the ADB keyboard")
            return [f"input text {shlex.quote(action.content.replace(' ', '%s'))}"]
        if type(action) in KEYS:
            return [f"input keyevent {KEYS[type(action)]}"]
        if isinstance(action, Launch):
            if action.app is None:
                raise UnsupportedAction(self.name, name, "Launch(url=) is a web action")
            target = self.resolve_package(action.app)
            if target is None:
                return []
            if "/" in target:
                return [f"am start -n {shlex.quote(target)}"]
            return [f"monkey -p {shlex.quote(target)} -c android.intent.category.LAUNCHER 1"]
        return []  # Wait, Finished, CallUser

    @property
    def supported_actions(self) -> frozenset[str]:
        return SUPPORTED

    # -- episode -------------------------------------------------------------------------------
    def prepare(self, task: Task) -> None:
        """Put the device into the task's start state (a real device: the home screen)."""
        self.run("input keyevent KEYCODE_HOME")

    def reset(self, task: Task) -> Observation:
        self._guard("reset")
        self.prepare(task)
        self.task, self.steps, self.done, self.answer = task, 0, False, None
        return self.observe()

    def step(self, action: Action) -> tuple[Observation, bool, dict[str, Any]]:
        self._guard("step")
        cmds = self.commands(action)  # raises UnsupportedAction before counting the step
        info: dict[str, Any] = {"action": type(action).NAME, "commands": cmds}
        if isinstance(action, Launch) and not cmds:
            info["error"] = f"unknown app {action.app!r}"
        for cmd in cmds:
            out = self.run(cmd, check=not isinstance(action, Launch))
            if out.exit_code != 0:
                info["error"] = (out.stderr or out.stdout).decode(errors="replace").strip()
        if isinstance(action, Wait):
            time.sleep(self.wait_s)
        elif cmds and self.settle_s > 0:
            time.sleep(self.settle_s)
        self.steps += 1
        terminated = isinstance(action, (Finished, CallUser))
        if terminated:
            self.answer = action.content
        truncated = not terminated and self.steps >= self.task.max_steps
        self.done = terminated or truncated
        info.update(step=self.steps, terminated=terminated, truncated=truncated)
        return self.observe(), self.done, info

    @property
    def has_success_rule(self) -> bool:
        return self.success_check is not None

    def is_successful(self) -> bool:
        if self.task is None:
            raise EnvError(f"{self.name}: is_successful before reset")
        if self.success_check is None:
            raise EnvError(f"{self.name}: no success check configured for "
                           f"{self.task.success_check or 'this task'!r}")
        return self.success_check(self, self.task)

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            self.shell.close()
