"""AndroidEnv's unified action -> adb command mapping, against a recording device shell."""

from __future__ import annotations

import io

import pytest
from PIL import Image

from venus_core.actions import (
    CallUser,
    Click,
    DoubleClick,
    Drag,
    Finished,
    Hotkey,
    Hover,
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
from venus_core.config.registry import ENVS
from venus_core.envs import AndroidEnv, CommandOutput, EnvError, Task, UnsupportedAction

W, H = 540, 1200
_buf = io.BytesIO()
Image.new("RGB", (W, H), (1, 2, 3)).save(_buf, "PNG")
PNG = _buf.getvalue()


class RecordingShell:
    """A device that records commands and answers the queries AndroidEnv makes."""

    serial = "fake-1"

    def __init__(self, keyboard: bool, size: str = f"Physical size: {W}x{H}\n",
                 png: bytes | None = None) -> None:
        self.keyboard = keyboard
        self.size = size
        self.commands: list[str] = []
        self.closed = False
        self.png = PNG if png is None else png

    def run(self, command: str, timeout: float = 30.0) -> CommandOutput:
        self.commands.append(command)
        if command == "wm size":
            return CommandOutput(self.size.encode(), b"", 0)
        if command.startswith("ime list"):
            return CommandOutput(b"com.android.adbkeyboard/.AdbIME\n" if self.keyboard else b"",
                                 b"", 0)
        if command == "screencap -p":
            return CommandOutput(self.png, b"", 0)
        if command.startswith("monkey -p com.missing"):
            return CommandOutput(b"", b"** No activities found to run, monkey aborted.\n", 252)
        return CommandOutput(b"", b"", 0)

    def close(self) -> None:
        self.closed = True


def make(keyboard: bool = True, **kw: object) -> tuple[AndroidEnv, RecordingShell]:
    shell = RecordingShell(keyboard)
    env = AndroidEnv(shell=shell, packages={"Settings": "com.android.settings",
                                            "Maps": "com.google.maps/.MainActivity"},
                     settle_s=0.0, wait_s=0.0, **kw)  # type: ignore[arg-type]
    env.reset(Task(goal="test", max_steps=30))
    shell.commands.clear()
    return env, shell


@pytest.mark.parametrize("action,expected", [
    (Click(box=(500, 500)), ["input tap 270 600"]),
    (Click(box=(1000, 1000)), ["input tap 539 1199"]),
    (LongPress(box=(100, 250)), ["input swipe 54 300 54 300 500"]),
    (Scroll(direction="up", start=(500, 800), end=(500, 200)),
     ["input swipe 270 960 270 240 1000"]),
    (Drag(start=(0, 0), end=(250, 500)), ["input swipe 0 0 135 600 1000"]),
    (PressBack(), ["input keyevent KEYCODE_BACK"]),
    (PressHome(), ["input keyevent KEYCODE_HOME"]),
    (PressEnter(), ["input keyevent KEYCODE_ENTER"]),
    (PressRecent(), ["input keyevent KEYCODE_APP_SWITCH"]),
    (Launch(app="settings"), ["monkey -p com.android.settings -c android.intent.category.LAUNCHER 1"]),
    (Launch(app="Maps"), ["am start -n com.google.maps/.MainActivity"]),
    (Launch(app="org.example.app"), ["monkey -p org.example.app -c android.intent.category.LAUNCHER 1"]),
    (Type(content="it's 5 o'clock"), ["am broadcast -a ADB_CLEAR_TEXT",
                                      "am broadcast -a ADB_INPUT_TEXT --es msg 'it'\"'\"'s 5 o'\"'\"'clock'"]),
    (Wait(), []),
    (Type(content=""), []),
])
def test_action_commands(action: object, expected: list[str]) -> None:
    env, shell = make()
    obs, done, info = env.step(action)  # type: ignore[arg-type]
    assert shell.commands[:-1] == expected  # the last command is the observation's screencap
    assert shell.commands[-1] == "screencap -p"
    assert info["commands"] == expected and not done
    assert obs.size == (W, H) and obs.extras["simulated"] is False


def test_keyboard_setup_and_input_text_fallback() -> None:
    shell = RecordingShell(keyboard=True)
    AndroidEnv(shell=shell)
    assert shell.commands == ["wm size", "ime list -s",
                              "ime enable com.android.adbkeyboard/.AdbIME",
                              "ime set com.android.adbkeyboard/.AdbIME"]
    env, shell = make(keyboard=False)
    env.step(Type(content="a b;c"))
    assert shell.commands[0] == "input text 'a%sb;c'"
    with pytest.raises(UnsupportedAction, match="non-ASCII"):
        env.step(Type(content="你好"))


def test_override_size_wins() -> None:
    shell = RecordingShell(True, size=f"Physical size: {W}x{H}\nOverride size: 720x1600\n")
    assert AndroidEnv(shell=shell).size == (720, 1600)
    with pytest.raises(EnvError, match="cannot parse `wm size`"):
        AndroidEnv(shell=RecordingShell(True, size="error"))


@pytest.mark.parametrize("action", [
    Hover(box=(1, 1)), DoubleClick(box=(1, 1)), Hotkey(keys=("ctrl", "c")),
    Launch(url="https://example.com"), Scroll(direction="up"),
])
def test_unsupported_actions_raise_and_do_not_count(action: object) -> None:
    env, shell = make()
    with pytest.raises(UnsupportedAction) as err:
        env.step(action)  # type: ignore[arg-type]
    assert err.value.backend == "android" and err.value.action == type(action).NAME
    assert shell.commands == [] and env.steps == 0


def test_unknown_or_missing_app_is_a_reported_noop() -> None:
    env, shell = make()
    _, _, info = env.step(Launch(app="Nonexistent App"))
    assert info["error"] == "unknown app 'Nonexistent App'" and shell.commands == ["screencap -p"]
    _, _, info = env.step(Launch(app="com.missing.app"))
    assert "No activities found" in info["error"]


def test_episode_lifecycle() -> None:
    env, shell = make()
    _, done, info = env.step(Finished(content="42"))
    assert done and info["terminated"] and not info["truncated"] and env.answer == "42"
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Click(box=(1, 1)))
    env.reset(Task(goal="again", max_steps=2))
    assert env.step(Click(box=(1, 1)))[1] is False
    _, done, info = env.step(Click(box=(1, 1)))
    assert done and info["truncated"] and not info["terminated"]
    env.reset(Task(goal="ask"))
    assert env.step(CallUser(content="which one?"))[1]
    with pytest.raises(EnvError, match="no success check"):
        env.is_successful()
    env.close()
    assert shell.closed
    with pytest.raises(EnvError, match="after close"):
        env.reset(Task(goal="x"))


def test_step_before_reset_and_bad_screencap() -> None:
    shell = RecordingShell(True, png=b"not a png")
    env = AndroidEnv(shell=shell)
    with pytest.raises(EnvError, match="before reset"):
        env.step(Click(box=(1, 1)))
    with pytest.raises(EnvError, match="no image"):
        env.reset(Task(goal="x"))


def test_registered() -> None:
    # checked without importing every other plugin of the project (slow, not under test here)
    assert ENVS.get("android") is AndroidEnv
    assert "sim-phone" in ENVS.names()
    with pytest.raises(ValueError, match="goal is empty"):
        Task(goal=" ")
    with pytest.raises(ValueError, match="max_steps"):
        Task(goal="g", max_steps=0)
