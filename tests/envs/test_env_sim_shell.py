"""The simulated phone's shell commands: what each adb command does to the synthetic world."""

from __future__ import annotations

import io
import json
import random

import pytest
from PIL import Image

from venus_core.data.synth.tasks import get_phone
from venus_core.envs.sim_device import SimDevice
from venus_core.envs.sim_shell import MAX_COMMAND_BYTES, run_command
from venus_core.envs.state_codec import decode_state

SIZE = (720, 1280)  # twice the logical 360x640 grid: pixel = 2 x logical


@pytest.fixture()
def dev() -> SimDevice:
    phone = get_phone()
    return SimDevice(phone, phone.initial(random.Random(0)), size=SIZE)


def center(dev: SimDevice, key: str) -> tuple[int, int]:
    w = dev.phone.view(dev.state, dev.ctx).get(key)
    return round(w.center[0] * 2), round(w.center[1] * 2)


def ok(dev: SimDevice, cmd: str) -> str:
    res = run_command(dev, cmd)
    assert res.exit_code == 0, (cmd, res)
    return res.stdout.decode()


def test_info_commands(dev: SimDevice) -> None:
    assert ok(dev, "wm size") == "Physical size: 720x1280\n"
    assert ok(dev, "getprop ro.product.model") == "Venus Sim\n"
    assert "[ro.build.version.sdk]: [33]" in ok(dev, "getprop")
    assert "package:com.venus.synth.settings\n" in ok(dev, "pm list packages")
    assert ok(dev, "ime list -s") == "com.android.adbkeyboard/.AdbIME\n"
    assert decode_state(ok(dev, "venus-state")) == dev.state


def test_tap_opens_app_and_back_home(dev: SimDevice) -> None:
    x, y = center(dev, "app:settings")
    ok(dev, f"input tap {x} {y}")
    assert dev.state.foreground == "settings"
    ok(dev, "input keyevent KEYCODE_BACK")
    assert dev.state.foreground == "launcher"
    ok(dev, "monkey -p com.venus.synth.shop -c android.intent.category.LAUNCHER 1")
    assert dev.state.foreground == "shop"
    ok(dev, "input keyevent 3")
    assert dev.state.foreground == "launcher"
    assert "cmp=com.venus.synth.form/.Main" in ok(dev, "am start -n com.venus.synth.form/.Main")
    assert dev.state.foreground == "form"


def test_noop_inputs_leave_state(dev: SimDevice) -> None:
    before = dev.state
    for cmd in ("input tap 5 1270", "input tap 9999 9999", "input keyevent KEYCODE_APP_SWITCH",
                "input keyevent 67", "input text hello", "input keyevent KEYCODE_BACK"):
        ok(dev, cmd)
    assert dev.state == before


def test_swipe_in_place_is_tap_or_long_press(dev: SimDevice) -> None:
    ok(dev, "monkey -p com.venus.synth.messages 1")
    x, y = center(dev, "chat:1")
    ok(dev, f"input swipe {x} {y} {x + 3} {y} 600")  # within the touch slop, >= 500 ms
    assert dev.state.app("messages").menu != -1
    assert dev.state.app("messages").page == "list"
    ok(dev, "input keyevent KEYCODE_BACK")
    ok(dev, f"input swipe {x} {y} {x} {y} 100")  # short: a tap opens the chat
    assert dev.state.app("messages").page == "chat"


def test_swipe_scrolls_by_finger_direction(dev: SimDevice) -> None:
    ok(dev, "monkey -p com.venus.synth.shop 1")
    ok(dev, "input swipe 360 1000 360 400 1000")  # finger up: content moves up
    assert dev.state.app("shop").scroll > 0
    ok(dev, "input swipe 360 400 360 1000 1000")
    assert dev.state.app("shop").scroll == 0
    ok(dev, "input swipe 700 1000 10 1000 1000")  # sideways: the list does not move
    assert dev.state.app("shop").scroll == 0


def test_text_input_and_adb_keyboard(dev: SimDevice) -> None:
    ok(dev, "monkey -p com.venus.synth.shop 1")
    x, y = center(dev, "field:search")
    ok(dev, f"input tap {x} {y}")
    ok(dev, "input text 'red%sapple'")
    assert dev.state.app("shop").draft == "red apple"
    res = run_command(dev, "input text 苹果")
    assert res.exit_code == 1 and b"non-ASCII" in res.stderr
    # the ADB keyboard only receives broadcasts once it is the current input method
    ok(dev, "am broadcast -a ADB_INPUT_TEXT --es msg ' 苹果'")
    assert dev.state.app("shop").draft == "red apple"
    ok(dev, "ime enable com.android.adbkeyboard/.AdbIME")
    ok(dev, "ime set com.android.adbkeyboard/.AdbIME")
    out = ok(dev, "am broadcast -a ADB_INPUT_TEXT --es msg ' 苹果'")
    assert "Broadcast completed: result=0" in out
    assert dev.state.app("shop").draft == "red apple 苹果"
    ok(dev, "am broadcast -a ADB_INPUT_B64 --es msg IQ==")
    assert dev.state.app("shop").draft.endswith("!")
    ok(dev, "input keyevent KEYCODE_ENTER")
    assert dev.state.app("shop").query == "red apple 苹果!"


def test_screencap(dev: SimDevice) -> None:
    png = run_command(dev, "screencap -p").stdout
    img = Image.open(io.BytesIO(png))
    assert img.format == "PNG" and img.size == SIZE
    raw = run_command(dev, "screencap").stdout
    assert int.from_bytes(raw[:4], "little") == 720 and int.from_bytes(raw[4:8], "little") == 1280
    assert len(raw) == 12 + 720 * 1280 * 4
    assert run_command(dev, "screencap -p /sdcard/x.png").exit_code == 1


def test_sequences_exit_codes_and_errors(dev: SimDevice) -> None:
    assert ok(dev, "nosuch; echo X4EXIT:$?").endswith("X4EXIT:127\n")
    res = run_command(dev, "nosuch && echo never")
    assert res.exit_code == 127 and b"never" not in res.stdout
    assert ok(dev, "true && echo yes") == "yes\n"
    for cmd, code in [("wm size | cat", 2), ("echo 'open", 2), ("input keyevent KEYCODE_NOPE", 1),
                      ("input tap a b", 1), ("input", 1), ("monkey -p com.nope 1", 252),
                      ("am start -n com.nope/.Main", 1), ("ime set com.other/.IME", 1),
                      ("am broadcast --es msg x", 1), ("wm density x", 1)]:
        res = run_command(dev, cmd)
        assert res.exit_code == code, (cmd, res)
        assert res.stderr, cmd
    res = run_command(dev, "input text " + "a" * MAX_COMMAND_BYTES)
    assert res.exit_code == 2 and b"longer than" in res.stderr
    assert run_command(dev, "input text " + "a" * 3000).exit_code == 1


def test_state_json_is_the_state(dev: SimDevice) -> None:
    ok(dev, "monkey -p com.venus.synth.settings 1")
    data = json.loads(ok(dev, "venus-state"))
    assert data["foreground"] == "settings"
