"""The simulated phone as a *device*: the synthetic world behind the shell commands agents use.

Why: the sim-phone must be driven exactly like a real Android device (same adb commands, same
pixel coordinates), so that the env code tested here is the code that drives real phones. This
module owns the device state (a `Phone` and its `PhoneState`) and the meaning of each command;
`sim_shell` parses command lines and `sim_server` carries them over the ADB protocol.

Input semantics follow Android's `input` tool and Phone.step:
- `input tap X Y` hit-tests the screen in device pixels (mapped onto the logical grid);
- `input swipe X1 Y1 X2 Y2 [ms]`: a swipe shorter than the touch slop is a tap, or a long press
  when it lasts >= 500 ms (ViewConfiguration's long-press timeout); a longer one scrolls the
  container under its start, direction = the finger's dominant direction (planner convention);
- `input text` replaces `%s` by a space and, like the real tool, cannot inject non-ASCII text.
Departures from a real device (the synthetic apps have no such events): KEYCODE_DEL and
ADB_CLEAR_TEXT do nothing (tasks only type into empty fields), APP_SWITCH does nothing (there is
no recents screen), and unknown keycodes are rejected rather than silently ignored.
"""

from __future__ import annotations

import base64
import io
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from PIL import Image

from venus_core.actions.space import PressEnter, Scroll, Type
from venus_core.data.synth.i18n import ViewContext
from venus_core.data.synth.phone import Phone, PhoneState, StepResult, to_norm
from venus_core.data.synth.render import render
from venus_core.envs.state_codec import encode_state

PACKAGE_PREFIX = "com.venus.synth."
LONG_PRESS_MS = 500
MAX_TEXT_CHARS = 2000
KEYCODES: dict[str, int] = {
    "KEYCODE_HOME": 3, "KEYCODE_BACK": 4, "KEYCODE_ENTER": 66, "KEYCODE_DEL": 67,
    "KEYCODE_APP_SWITCH": 187, "KEYCODE_TAB": 61, "KEYCODE_SPACE": 62, "KEYCODE_MENU": 82,
    "KEYCODE_VOLUME_UP": 24, "KEYCODE_VOLUME_DOWN": 25, "KEYCODE_POWER": 26,
    "KEYCODE_DPAD_UP": 19, "KEYCODE_DPAD_DOWN": 20, "KEYCODE_DPAD_LEFT": 21,
    "KEYCODE_DPAD_RIGHT": 22, "KEYCODE_ESCAPE": 111, "KEYCODE_WAKEUP": 224,
}
ADB_IME = "com.android.adbkeyboard/.AdbIME"


class DeviceCommandError(Exception):
    """A command failed; `exit_code` and the message become the shell's exit status and stderr."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


@dataclass(frozen=True)
class ShellResult:
    stdout: bytes
    stderr: bytes = b""
    exit_code: int = 0
    combined: bytes | None = None  # stdout and stderr interleaved as written (the v1 shell)

    @property
    def output(self) -> bytes:
        return self.combined if self.combined is not None else self.stdout + self.stderr


def package_of(app: str) -> str:
    return PACKAGE_PREFIX + app


class SimDevice:
    """A simulated Android device of `size` pixels showing the synthetic world's apps.

    Thread-safe: every command runs under one lock, so the ADB server may serve several streams.
    """

    def __init__(self, phone: Phone, state: PhoneState, *, size: tuple[int, int] = (540, 960),
                 lang: str = "en", theme: str = "light-blue", model: str = "Venus Sim",
                 adb_keyboard: bool = True, png_cache: int = 16) -> None:
        if size[0] < 64 or size[1] < 64 or size[0] > 4096 or size[1] > 4096:
            raise ValueError(f"SimDevice: screen size {size} outside 64..4096 pixels")
        self.size = size
        self.ctx = ViewContext.for_output("mobile", lang, *size)  # type: ignore[arg-type]
        self.theme = theme
        self.adb_keyboard = adb_keyboard
        self.current_ime = "com.android.inputmethod.latin/.LatinIME"
        self.props = {
            "ro.product.model": model, "ro.product.name": "venus_sim",
            "ro.product.device": "venus_sim", "ro.product.manufacturer": "Venus",
            "ro.product.brand": "venus", "ro.build.version.sdk": "33",
            "ro.build.version.release": "13", "ro.product.cpu.abi": "x86_64",
            "ro.serialno": "venus-sim", "ro.kernel.qemu": "0",
        }
        self._lock = threading.RLock()
        self.phone = phone
        self._state = state
        self.last_info = ""
        self.events = 0
        # PNG bytes of recently shown screens: encoding dominates a step (≈25 ms at 360x640, ≈200
        # ms at 1080x2400 here) and no-op actions or re-visited screens show the same state again
        self._png_cache: OrderedDict[tuple[int, PhoneState], bytes] = OrderedDict()
        self.png_cache_size = png_cache

    # -- state ---------------------------------------------------------------------------------
    @property
    def state(self) -> PhoneState:
        with self._lock:
            return self._state

    def load(self, phone: Phone, state: PhoneState) -> None:
        """Install `phone`'s apps and put the device into `state` (an episode's start)."""
        with self._lock:
            if phone is not self.phone:
                self._png_cache.clear()
            self.phone = phone
            self._state = state
            self.last_info = "loaded"

    def _commit(self, res: StepResult) -> None:
        self._state = res.state
        self.last_info = res.info
        self.events += 1

    def packages(self) -> list[str]:
        return [package_of(n) for n in self.phone.apps]

    def app_of_package(self, pkg: str) -> str | None:
        if pkg.startswith(PACKAGE_PREFIX) and pkg[len(PACKAGE_PREFIX):] in self.phone.apps:
            return pkg[len(PACKAGE_PREFIX):]
        return None

    # -- output --------------------------------------------------------------------------------
    def screenshot(self) -> Image.Image:
        with self._lock:
            screen = self.phone.view(self._state, self.ctx)
        return render(screen, self.size, self.theme)

    def screencap_png(self) -> bytes:
        with self._lock:
            key = (id(self.phone), self._state)
            png = self._png_cache.get(key)
            if png is not None:
                self._png_cache.move_to_end(key)
                return png
            img = self.screenshot()
        buf = io.BytesIO()
        img.save(buf, format="PNG", compress_level=1)
        png = buf.getvalue()
        if self.png_cache_size > 0:
            with self._lock:
                self._png_cache[key] = png
                while len(self._png_cache) > self.png_cache_size:
                    self._png_cache.popitem(last=False)
        return png

    def screencap_raw(self) -> bytes:
        """`screencap` without -p: width, height, format (1 = RGBA_8888), then the pixels."""
        img = self.screenshot().convert("RGBA")
        w, h = img.size
        return w.to_bytes(4, "little") + h.to_bytes(4, "little") + (1).to_bytes(4, "little") + \
            img.tobytes()

    def state_json(self) -> str:
        return encode_state(self.state)

    # -- input ---------------------------------------------------------------------------------
    def _logical(self, px: float, py: float) -> tuple[float, float]:
        return (px * self.ctx.width / self.size[0], py * self.ctx.height / self.size[1])

    def _on_screen(self, px: float, py: float) -> bool:
        return 0 <= px < self.size[0] and 0 <= py < self.size[1]

    def tap(self, px: float, py: float, *, long: bool = False) -> None:
        with self._lock:
            if not self._on_screen(px, py):
                self.last_info = f"no effect: ({px}, {py}) is off the screen"
                return
            x, y = self._logical(px, py)
            screen = self.phone.view(self._state, self.ctx)
            widget = screen.hit(x, y, long=long)
            if widget is None or (long and not widget.long_clickable):
                self.last_info = f"no effect: nothing to {'long-press' if long else 'tap'} there"
                return
            self._commit(self.phone.press_widget(self._state, widget, self.ctx, long=long))

    def swipe(self, x1: float, y1: float, x2: float, y2: float, ms: int) -> None:
        slop = 0.02 * self.size[0]
        dx, dy = x2 - x1, y2 - y1
        if abs(dx) <= slop and abs(dy) <= slop:
            self.tap(x1, y1, long=ms >= LONG_PRESS_MS)
            return
        if abs(dy) >= abs(dx):
            direction = "up" if dy < 0 else "down"
        else:
            direction = "left" if dx < 0 else "right"
        with self._lock:
            if not self._on_screen(x1, y1):
                self.last_info = "no effect: swipe starts off the screen"
                return
            clamp = (min(max(x2, 0), self.size[0] - 1), min(max(y2, 0), self.size[1] - 1))
            start = to_norm(*self._logical(x1, y1), self.ctx)
            end = to_norm(*self._logical(*clamp), self.ctx)
            action = Scroll(direction=direction, start=start, end=end)  # type: ignore[arg-type]
            self._commit(self.phone.step(self._state, action, self.ctx))

    def type_text(self, text: str) -> None:
        if len(text) > MAX_TEXT_CHARS:
            raise DeviceCommandError(f"text of {len(text)} chars exceeds {MAX_TEXT_CHARS}")
        if not text:
            return
        with self._lock:
            self._commit(self.phone.step(self._state, Type(content=text), self.ctx))

    def key(self, code: int) -> None:
        with self._lock:
            if code == 4:
                self._commit(self.phone.back(self._state, self.ctx))
            elif code == 3:
                self._commit(self.phone.go_home(self._state, "home"))
            elif code == 66:
                self._commit(self.phone.step(self._state, PressEnter(), self.ctx))
            else:
                self.last_info = f"no effect: keycode {code} has no meaning on the simulated phone"

    def launch(self, pkg: str) -> bool:
        app = self.app_of_package(pkg)
        if app is None:
            return False
        with self._lock:
            self._commit(self.phone.open(self._state, app, f"launch {app}"))
        return True

    def force_stop(self, pkg: str) -> None:
        app = self.app_of_package(pkg)
        with self._lock:
            if app is not None and self._state.foreground == app:
                self._commit(self.phone.go_home(self._state, f"force-stop {app}"))

    def set_ime(self, ime: str) -> None:
        if ime != ADB_IME or not self.adb_keyboard:
            raise DeviceCommandError(f"Unknown input method {ime} cannot be selected for user #0")
        self.current_ime = ime

    def broadcast(self, action: str, extras: dict[str, str]) -> str:
        """The ADB keyboard's intents (only delivered while it is the current input method)."""
        keyboard = self.adb_keyboard and self.current_ime == ADB_IME
        if keyboard and action == "ADB_INPUT_TEXT":
            self.type_text(extras.get("msg", ""))
        elif keyboard and action == "ADB_INPUT_B64":
            try:
                self.type_text(base64.b64decode(extras.get("msg", ""), validate=True).decode())
            except (ValueError, UnicodeDecodeError) as exc:
                raise DeviceCommandError(f"ADB_INPUT_B64: bad base64 message ({exc})") from None
        elif keyboard and action == "ADB_INPUT_CODE":
            self.key(int(extras.get("code", "0")))
        elif keyboard and action == "ADB_CLEAR_TEXT":
            self.last_info = "no effect: the synthetic apps have no clear-text event"
        has = " (has extras)" if extras else ""
        return (f"Broadcasting: Intent {{ act={action} flg=0x400000{has} }}\n"
                "Broadcast completed: result=0\n")

    def getprop(self, names: Sequence[str]) -> str:
        if names:
            return self.props.get(names[0], "") + "\n"
        return "".join(f"[{k}]: [{v}]\n" for k, v in sorted(self.props.items()))
