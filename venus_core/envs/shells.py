"""How an env reaches a device's shell: through an adb server (any ADB device) or in process.

Why two: `AdbShell` is the production path (adbutils talking to an adb server, which talks to a
phone, an emulator pod behind the device gateway, or the simulated phone served over TCP);
`LocalShell` runs the simulated phone's shell in process, so the same AndroidEnv code can be
measured and tested without sockets. `AdbServerProcess` starts a private Debian/SDK `adb` server
on a free port (tests and the sim-phone env use it so they never touch a user's server on 5037).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from dataclasses import dataclass
from typing import Protocol, Self

from venus_core.envs.base import EnvError
from venus_core.envs.sim_device import SimDevice
from venus_core.envs.sim_shell import run_command


@dataclass(frozen=True)
class CommandOutput:
    stdout: bytes
    stderr: bytes
    exit_code: int


class DeviceShell(Protocol):
    serial: str

    def run(self, command: str, timeout: float = 30.0) -> CommandOutput:
        """Run one shell command line; returns its output and exit status."""

    def close(self) -> None:
        """Release the connection (idempotent)."""


class LocalShell:
    """The simulated phone's shell, in process (no sockets)."""

    def __init__(self, device: SimDevice, serial: str = "sim-inprocess") -> None:
        self.device = device
        self.serial = serial

    def run(self, command: str, timeout: float = 30.0) -> CommandOutput:
        res = run_command(self.device, command)
        return CommandOutput(res.stdout, res.stderr, res.exit_code)

    def close(self) -> None:
        return None


class AdbShell:
    """A device behind an adb server, driven with adbutils (shell v2 when the device has it)."""

    def __init__(self, serial: str, *, host: str = "127.0.0.1", port: int = 5037,
                 connect: bool = False, timeout: float = 15.0) -> None:
        import adbutils  # imported here: only the ADB path needs it

        self.serial = serial
        self._errors = (adbutils.AdbError, adbutils.AdbTimeout, OSError)
        self.client = adbutils.AdbClient(host=host, port=port, socket_timeout=timeout)
        self._connected = False
        try:
            self._attach(connect, timeout)
        except self._errors as exc:  # the adb server is not there (or went away): a typed error naming it
            raise EnvError(f"adb server {host}:{port} for {serial}: {type(exc).__name__}: {exc}") from exc
        self.device = self.client.device(serial)

    def _attach(self, connect: bool, timeout: float) -> None:
        serial = self.serial
        if connect:
            msg = self.client.connect(serial, timeout=timeout)
            if "connected" not in msg or "fail" in msg:
                raise EnvError(f"adb connect {serial}: {msg.strip()}")
            self._connected = True
        deadline = time.monotonic() + timeout
        while True:
            states = {d.serial: d.state for d in self.client.list()}
            if states.get(serial) == "device":
                break
            if time.monotonic() > deadline:
                raise EnvError(f"adb: device {serial} is not online (state {states.get(serial)!r};"
                               f" known: {sorted(states)})")
            time.sleep(0.05)

    def run(self, command: str, timeout: float = 30.0) -> CommandOutput:
        try:
            r = self.device.shell2(command, timeout=timeout, encoding=None, rstrip=False, v2=True)
        except self._errors as exc:
            raise EnvError(f"adb {self.serial}: `{command[:80]}` failed: {exc}") from exc
        if r.stdout or r.stderr:
            return CommandOutput(r.stdout, r.stderr, r.returncode)
        # v1 shell (device without shell_v2): one interleaved stream, reported as stdout
        return CommandOutput(r.output, b"", r.returncode)

    def close(self) -> None:
        if self._connected:
            self._connected = False
            try:
                self.client.disconnect(self.serial)
            except self._errors:
                pass  # the server or the device is already gone


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class AdbServerProcess:
    """A private adb server (`adb -P PORT start-server`), killed by `stop()`.

    An adb server can exit under a long run (killed, crashed, `adb kill-server` by someone else);
    `ensure()` starts it again on the same port, so the envs made after it connect (counted in
    `restarts`). The envs that were connected through the old server fail their next call and are
    replaced like any broken env."""

    def __init__(self, port: int | None = None, adb: str = "adb") -> None:
        path = shutil.which(adb)
        if path is None:
            raise EnvError(f"adb binary {adb!r} not found on PATH (Debian: apt-get install adb)")
        self.adb = path
        self.port = port or free_port()
        self.running = False
        self.restarts = 0

    def _adb(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.adb, "-P", str(self.port), *args], capture_output=True,
                              text=True, timeout=30, check=False)

    def start(self) -> AdbServerProcess:
        res = self._adb("start-server")
        if res.returncode != 0:
            raise EnvError(f"adb start-server on port {self.port} failed: {res.stderr.strip()}")
        self.running = True
        return self

    def alive(self) -> bool:
        """Whether the server accepts connections on its port."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2.0):
                return True
        except OSError:
            return False

    def ensure(self) -> bool:
        """Start the server again when it went away; True when it had to (see the class docstring)."""
        if not self.running:
            raise EnvError(f"adb server on port {self.port} was not started (or was stopped)")
        if self.alive():
            return False
        self.start()
        self.restarts += 1
        return True

    def kill(self) -> None:
        """Make the server exit as if it crashed (`adb kill-server`), keeping it `running`, so that
        `ensure()` starts it again: what a lost server looks like (fault tests, drills)."""
        self._adb("kill-server")

    def stop(self) -> None:
        if self.running:
            self.running = False
            self.kill()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
