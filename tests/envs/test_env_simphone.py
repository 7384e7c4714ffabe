"""The sim-phone env's own pieces: task references, setup checks, the adb CLI, slow end-to-end runs."""

from __future__ import annotations

import io
import random
import subprocess
import time

import pytest
from PIL import Image

from venus_core.actions import Click, PressBack, Type
from venus_core.config.registry import ENVS
from venus_core.data.synth.tasks import get_phone
from venus_core.envs import (
    AdbServerProcess,
    AdbShell,
    AndroidEnv,
    EnvError,
    SimAdbServer,
    SimDevice,
    SimPhoneEnv,
    SynthRef,
    Task,
    free_task,
    synth_packages,
    synth_plan,
    synth_task,
)

SIZE = (360, 640)


def test_synth_ref_roundtrip_and_errors() -> None:
    for ref in (SynthRef(4, 17, "zh", (540, 960)), SynthRef(None, 3, "en", (360, 640))):
        assert SynthRef.parse(str(ref)) == ref
    assert str(SynthRef(None, 3, "en", (360, 640))) == "synth:free,seed=3,lang=en,size=360x640"
    for bad in ("level=1,seed=2,lang=en,size=1x1", "synth:level=x,seed=2,lang=en,size=9x9",
                "synth:level=1,seed=2,lang=en", "synth:level=1,seed=2,lang=fr,size=9x9",
                "synth:level=1,seed=2,lang=en,size=99"):
        with pytest.raises(EnvError, match="success_check"):
            SynthRef.parse(bad)


def test_synth_packages_cover_names_and_titles() -> None:
    pk = synth_packages()
    assert pk["settings"] == pk["Settings"] == "com.venus.synth.settings"
    assert pk["设置"] == "com.venus.synth.settings"


def test_setup_is_checked_and_free_play_has_no_success() -> None:
    env = SimPhoneEnv(transport="inprocess", size=SIZE)
    try:
        task = synth_task(3, 1, size=SIZE)
        with pytest.raises(EnvError, match="was made for"):
            env.reset(synth_task(3, 1, size=(540, 960)))
        with pytest.raises(EnvError, match="does not match"):
            env.reset(Task(goal="something else", success_check=task.success_check))
        with pytest.raises(EnvError, match="not a synthetic task reference"):
            env.reset(Task(goal="x", success_check="androidworld:ContactsAdd"))
        obs = env.reset(free_task(5, size=SIZE))
        assert obs.extras["transport"] == "inprocess"
        assert env.device.state.foreground == "launcher"
        with pytest.raises(EnvError, match="free-play"):
            env.is_successful()
    finally:
        env.close()
    with pytest.raises(ValueError, match="transport"):
        SimPhoneEnv(transport="usb")  # type: ignore[arg-type]


def test_registered() -> None:
    assert ENVS.get("sim-phone") is SimPhoneEnv


def test_adb_cli_drives_the_served_phone() -> None:
    """The stock `adb` client (shell v2 with TERM, exec-out) works against the simulated device."""
    env = SimPhoneEnv(transport="adb", size=SIZE)
    try:
        assert env.adb_server is not None and env.server is not None
        adb = [env.adb_server.adb, "-P", str(env.adb_server.port), "-s", env.server.serial]
        out = subprocess.run(adb + ["shell", "wm size"], capture_output=True, timeout=30,
                             check=True)
        assert out.stdout == b"Physical size: 360x640\n"
        assert subprocess.run(adb + ["shell", "nosuch"], capture_output=True, timeout=30,
                              check=False).returncode == 127
        png = subprocess.run(adb + ["exec-out", "screencap -p"], capture_output=True,
                             timeout=30, check=True).stdout
        assert Image.open(io.BytesIO(png)).size == SIZE
    finally:
        env.close()


def _typing_task(lang: str, non_ascii: bool) -> Task:
    for seed in range(60):
        task = synth_task(4, seed, lang=lang, size=SIZE)
        texts = [a.content for a in synth_plan(task) if isinstance(a, Type)]
        if texts and any(not t.isascii() for t in texts) == non_ascii:
            return task
    raise AssertionError(f"no level-4 typing task in {lang} (non-ASCII={non_ascii})")


@pytest.mark.slow
@pytest.mark.parametrize("lang,keyboard", [("zh", True), ("en", False)])
def test_typing_paths_over_adb(lang: str, keyboard: bool) -> None:
    """Chinese text through the ADB keyboard broadcast; ASCII through `input text` (%s)."""
    task = _typing_task(lang, non_ascii=lang == "zh")
    env = SimPhoneEnv(transport="adb", size=SIZE, lang=lang, adb_keyboard=keyboard)
    try:
        env.reset(task)
        commands: list[str] = []
        for action in synth_plan(task):
            commands += env.step(action)[2]["commands"]
        assert env.is_successful()
        assert any(c.startswith("am broadcast -a ADB_INPUT_TEXT" if keyboard else "input text")
                   for c in commands)
    finally:
        env.close()


def _rate(env: SimPhoneEnv, n: int) -> float:
    """Steps/s of taps that open an app, then Back: every step shows a different screen."""
    env.reset(free_task(0, size=env.size, max_steps=2 * n + 1))
    icon = Click(box=(150, 130))  # the second icon of the home screen's first row
    start = time.perf_counter()
    for _ in range(n):
        env.step(icon)
        env.step(PressBack())
    return 2 * n / (time.perf_counter() - start)


@pytest.mark.slow
def test_throughput_tap_and_screencap() -> None:
    """Env steps/s (one adb input command + one `screencap -p` per step), in process and through
    the adb server, rendering every screen (no PNG cache) and with the default cache."""
    rates: dict[str, float] = {}
    with AdbServerProcess() as adb:
        for size in ((360, 640), (540, 960), (1080, 2400)):
            for transport in ("inprocess", "adb"):
                for cache in (0, 16):
                    env = SimPhoneEnv(transport=transport, size=size, adb_port=adb.port,
                                      png_cache=cache)
                    try:
                        name = f"{transport} {size[0]}x{size[1]} cache={cache}"
                        rates[name] = _rate(env, 5 if size[0] > 600 else 10)
                    finally:
                        env.close()
    print("\nsim-phone steps/s:", {k: round(v, 1) for k, v in rates.items()})
    assert all(v > 1.0 for v in rates.values()), rates
    assert rates["inprocess 540x960 cache=16"] > rates["inprocess 540x960 cache=0"]


def test_sim_server_serial_and_env_close_stop_servers() -> None:
    env = SimPhoneEnv(transport="adb", size=SIZE)
    server: SimAdbServer | None = env.server
    adb = env.adb_server
    assert server is not None and adb is not None and env.shell.serial == server.serial
    env.close()
    assert env.server is None and env.adb_server is None and not adb.running


def test_a_killed_adb_server_is_started_again_by_ensure() -> None:
    with AdbServerProcess() as adb:
        assert adb.alive() and adb.ensure() is False and adb.restarts == 0
        adb.kill()  # exits as a crashed server would; still `running` (it was not stopped)
        deadline = time.monotonic() + 10
        while adb.alive() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not adb.alive() and adb.running
        assert adb.ensure() is True and adb.alive() and adb.restarts == 1
    assert not adb.running


def test_adbshell_exit_codes_on_a_device_without_shell_v2() -> None:
    """Older devices lack shell_v2: adbutils appends `; echo X4EXIT:$?` to read exit codes."""
    phone = get_phone()
    dev = SimDevice(phone, phone.initial(random.Random(0)), size=SIZE)
    with SimAdbServer(dev, features=("cmd",)) as srv, AdbServerProcess() as adb:
        shell = AdbShell(srv.serial, port=adb.port, connect=True)
        try:
            assert shell.run("nosuch").exit_code == 127
            out = shell.run("wm size")
            assert (out.stdout, out.exit_code) == (b"Physical size: 360x640\n", 0)
            assert AndroidEnv(shell=shell).size == SIZE
        finally:
            shell.close()
