"""AndroidWorldEnv against a FAKE AndroidWorld server on loopback (aw_fake_server.py).

No Android emulator can run on these machines, so the server is a small stand-in that speaks the
real server's HTTP API (endpoints, query parameters, reply shapes, FastAPI error statuses) over a
toy phone whose state the task scores read. What is tested is the adapter: the JSON actions it
sends, the episode protocol (reset, task initialize / score / tear_down), and typed errors.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator

import pytest
from aw_fake_server import APPS, FIELD, FakeAndroidWorld, H, W

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
from venus_core.envs import EnvError, Task, UnsupportedAction
from venus_core.envs.androidworld import (
    AndroidWorldEnv,
    ProtocolError,
    ServerError,
    ServerUnavailable,
    aw_task,
    parse_ref,
)


@pytest.fixture()
def server() -> Iterator[FakeAndroidWorld]:
    srv = FakeAndroidWorld()
    yield srv
    srv.stop()


@pytest.fixture()
def env(server: FakeAndroidWorld) -> Iterator[AndroidWorldEnv]:
    e = AndroidWorldEnv(server.url, timeout=5)
    yield e
    e.close()


def norm(x: int, y: int) -> tuple[int, int]:
    """Pixels of the fake's W x H screen -> the 0-1000 frame."""
    return (round((x + 0.5) * 1000 / W), round((y + 0.5) * 1000 / H))


def test_registered_and_task_references() -> None:
    assert ENVS.get("androidworld") is AndroidWorldEnv
    assert parse_ref(aw_task("ContactsAddContact", 3).success_check) == ("ContactsAddContact", 3)
    for bad in ("androidworld:X", "androidworld::1", "synth:level=1", "androidworld:X:-1"):
        with pytest.raises(EnvError, match="is not 'androidworld:"):
            parse_ref(bad)


def test_suite_tasks_and_reset(env: AndroidWorldEnv, server: FakeAndroidWorld) -> None:
    tasks = env.suite_tasks(per_type=2, max_steps=10)
    assert [t.success_check for t in tasks] == [
        "androidworld:SystemSettingsOpen:0", "androidworld:MarkorWriteNote:0",
        "androidworld:MarkorWriteNote:1", "androidworld:InfoAnswer:0"]
    assert tasks[2].goal == "In Markor, write the note 'shopping list'."
    assert tasks[2].max_steps == 10
    assert [t.success_check for t in env.suite_tasks(max_index=1)] == \
        ["androidworld:SystemSettingsOpen:0"]
    obs = env.reset(tasks[0])
    assert obs.size == (W, H) == obs.screenshot.size and obs.platform == "mobile"
    assert obs.extras["task_type"] == "SystemSettingsOpen" and obs.extras["step"] == 0
    assert obs.screenshot.getpixel((0, 0)) == (230, 230, 230)  # the home screen
    reset_call = next(c for c in server.calls if c[1] == "/reset")
    assert reset_call[:3] == ("POST", "/reset", {"go_home": "true"})
    assert server.initialized == [("SystemSettingsOpen", 0)]
    env.reset(tasks[3])  # the previous task is torn down first
    assert server.torn_down == [("SystemSettingsOpen", 0)]
    assert server.initialized[-1] == ("InfoAnswer", 0)


def test_open_app_task_succeeds_from_server_state(env: AndroidWorldEnv) -> None:
    env.reset(aw_task("SystemSettingsOpen"))
    assert not env.is_successful() and env.score() == 0.0
    obs, done, info = env.step(Launch(app="Settings"))
    assert info["json_actions"] == [{"action_type": "open_app", "app_name": "Settings"}]
    assert obs.screenshot.getpixel((0, 0)) == APPS["Settings"] and not done
    assert env.is_successful()
    env.step(PressBack())
    assert not env.is_successful()


def test_typing_goes_to_the_last_clicked_field(env: AndroidWorldEnv,
                                               server: FakeAndroidWorld) -> None:
    env.reset(aw_task("MarkorWriteNote", 1))
    with pytest.raises(UnsupportedAction, match="click the field first"):
        env.step(Type(content="shopping list"))
    assert env.steps == 0
    env.step(Launch(app="Markor"))
    fx, fy = (FIELD[0] + FIELD[2]) // 2, (FIELD[1] + FIELD[3]) // 2
    env.step(Click(box=norm(fx, fy)))
    _, _, info = env.step(Type(content="shopping list"))
    assert info["json_actions"] == [{"action_type": "input_text", "text": "shopping list",
                                     "x": fx, "y": fy}]
    assert server.phone.note == "shopping list" and env.is_successful()


def test_answer_task_and_wrong_answer(env: AndroidWorldEnv, server: FakeAndroidWorld) -> None:
    env.reset(aw_task("InfoAnswer"))
    _, done, info = env.step(Finished(content="42"))
    assert done and info["terminated"] and env.is_successful()
    assert info["json_actions"] == [{"action_type": "answer", "text": "42"},
                                    {"action_type": "status", "goal_status": "complete"}]
    env.reset(aw_task("InfoAnswer"))
    env.step(Finished(content="41"))
    assert not env.is_successful()
    env.reset(aw_task("InfoAnswer"))
    sent = len(server.actions)
    _, done, info = env.step(CallUser(content="which one?"))
    assert done and info["json_actions"] == [] and len(server.actions) == sent


@pytest.mark.parametrize(("action", "expected"), [
    (Click(box=(500, 500)), {"action_type": "click", "x": 27, "y": 48}),
    (LongPress(box=(0, 1000)), {"action_type": "long_press", "x": 0, "y": H - 1}),
    (DoubleClick(box=(1000, 0)), {"action_type": "double_tap", "x": W - 1, "y": 0}),
    (Scroll(direction="up", start=(500, 800), end=(500, 300)),
     {"action_type": "scroll", "direction": "down"}),  # finger up = content down (AndroidWorld)
    (Scroll(direction="up", start=(800, 500), end=(200, 510)),
     {"action_type": "scroll", "direction": "right"}),  # the swipe decides, not the label
    (Scroll(direction="down"), {"action_type": "scroll", "direction": "up"}),
    (PressBack(), {"action_type": "navigate_back"}),
    (PressHome(), {"action_type": "navigate_home"}),
    (PressEnter(), {"action_type": "keyboard_enter"}),
    (Wait(), {"action_type": "wait"}),
], ids=lambda v: type(v).__name__ if not isinstance(v, dict) else v["action_type"])
def test_action_mapping(env: AndroidWorldEnv, server: FakeAndroidWorld, action: object,
                        expected: dict[str, object]) -> None:
    env.reset(Task(goal="free play"))
    _, done, info = env.step(action)  # type: ignore[arg-type]
    assert info["json_actions"] == [expected] and server.actions[-1] == expected and not done


@pytest.mark.parametrize("action", [
    Drag(start=(1, 1), end=(9, 9)), PressRecent(), Hover(box=(5, 5)),
    Hotkey(keys=("ctrl", "a")), Launch(url="https://example.org/"),
], ids=lambda a: type(a).NAME)
def test_unsupported_actions_raise_before_anything_is_sent(
        env: AndroidWorldEnv, server: FakeAndroidWorld, action: object) -> None:
    env.reset(Task(goal="free play"))
    with pytest.raises(UnsupportedAction):
        env.step(action)  # type: ignore[arg-type]
    assert env.steps == 0 and server.actions == []


def test_done_after_max_steps_and_misuse(env: AndroidWorldEnv) -> None:
    with pytest.raises(EnvError, match="before reset"):
        env.step(Wait())
    env.reset(Task(goal="free play", max_steps=2))
    with pytest.raises(EnvError, match="no AndroidWorld task"):
        env.is_successful()
    assert env.step(Wait())[1] is False
    _, done, info = env.step(Wait())
    assert done and info["truncated"] and not info["terminated"]
    with pytest.raises(EnvError, match="episode is over"):
        env.step(Wait())


def test_close_tears_down_and_is_idempotent(server: FakeAndroidWorld) -> None:
    env = AndroidWorldEnv(server.url, timeout=5)
    env.reset(aw_task("SystemSettingsOpen"))
    env.close()
    env.close()
    assert server.torn_down == [("SystemSettingsOpen", 0)]
    assert not any(c[1] == "/close" for c in server.calls)  # the pod's emulator stays up
    with pytest.raises(EnvError, match="after close"):
        env.step(Wait())


def test_server_down_is_typed_and_fast() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailable, match="GET http://127.0.0.1"):
        AndroidWorldEnv(f"http://127.0.0.1:{port}", timeout=2)
    assert time.monotonic() - t0 < 2


def test_hanging_server_times_out(server: FakeAndroidWorld) -> None:
    env = AndroidWorldEnv(server.url, timeout=0.5)
    server.mode = "hang"
    t0 = time.monotonic()
    with pytest.raises(ServerUnavailable, match="no answer within 0.5s"):
        env.reset(Task(goal="free play"))
    assert time.monotonic() - t0 < 2


def test_malformed_replies_are_protocol_errors(env: AndroidWorldEnv,
                                               server: FakeAndroidWorld) -> None:
    server.mode = "bad_json"
    with pytest.raises(ProtocolError, match="reply is not JSON"):
        env.reset(Task(goal="free play"))
    server.mode = "bad_pixels"
    with pytest.raises(ProtocolError, match="pixels"):
        env.screenshot()


def test_server_side_errors_keep_their_status(env: AndroidWorldEnv) -> None:
    with pytest.raises(ServerError, match="HTTP 500") as e500:
        env.request("POST", "/execute_action", body={"action_type": "fly"})
    assert e500.value.status == 500
    with pytest.raises(ServerError, match="Field required") as e422:
        env.request("POST", "/reset")
    assert e422.value.status == 422
    with pytest.raises(ServerError) as e500b:
        env.reset(aw_task("NoSuchTask"))
    assert e500b.value.status == 500


def test_an_androidworld_server_leased_through_the_gateway(server: FakeAndroidWorld) -> None:
    """The plug-in path for AndroidWorld pods: the server is a leased device (kind "tcp"),
    reached through the real gateway and the SDK's local forwarder."""
    from venus_core.daas import (
        DevicePool,
        DeviceSpec,
        DeviceTable,
        Gateway,
        GatewayThread,
        LeaseRegistry,
        TokenSigner,
    )

    port = int(server.url.rsplit(":", 1)[1])
    dev = DeviceSpec("aw-0", "tcp", "aw", "127.0.0.1", port, {"suite": "androidworld"})
    signer = TokenSigner(b"aw-test-secret-0123456789abcdef")
    gw = GatewayThread(Gateway(DeviceTable([dev]), signer)).start()
    reg = LeaseRegistry([dev], signer, [f"127.0.0.1:{gw.port}"], probe=None).start()
    try:
        pool = DevicePool(reg, "aw-worker", wait=1.0, io_timeout=5.0)
        with pool.lease("tcp", 1, {"suite": "androidworld"}) as (lease,), \
                lease.forward() as local, \
                AndroidWorldEnv(f"http://127.0.0.1:{local}", timeout=5) as env:
            env.reset(aw_task("SystemSettingsOpen"))
            env.step(Launch(app="Settings"))
            assert env.is_successful()
        assert server.torn_down == [("SystemSettingsOpen", 0)]
        assert reg.status()["leased"] == 0
    finally:
        reg.stop()
        gw.stop()
