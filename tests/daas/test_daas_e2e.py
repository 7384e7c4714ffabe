"""End to end: lease -> connect through the gateway -> a real upstream -> release.

Upstreams: a TCP echo server; the simulated phone served as an ADB device, driven by the stock
Debian `adb` client through the SDK's local forwarder and the gateway; and the `venus gateway`
command as its own process.
"""

from __future__ import annotations

import io
import os
import random
import shutil
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from daas_helpers import make_stack
from proc_lines import wait_for_line

from venus_core.daas import DevicePool, DeviceSpec, HttpRegistry
from venus_core.daas.probes import probe_device


def test_echo_through_gateway(echo_server, stacks) -> None:  # type: ignore[no-untyped-def]
    stack = make_stack([DeviceSpec("echo", "tcp", "g", "127.0.0.1", echo_server.port)])
    stacks.append(stack)
    with stack.pool().lease(kind="tcp") as (lease,):
        with lease.connect() as t:
            for i in range(50):
                msg = f"step {i}".encode()
                t.sendall(msg)
                assert t.recv_exact(len(msg)) == msg
        with lease.forward() as port:  # the forwarder path, for tools that cannot send tokens
            import socket

            with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
                s.sendall(b"via forwarder")
                got = b""
                while len(got) < 13:
                    got += s.recv(64)
                assert got == b"via forwarder"
    assert stack.registry.status()["leased"] == 0


@pytest.mark.skipif(shutil.which("adb") is None, reason="Debian adb not installed")
def test_real_adb_drives_the_sim_phone_through_the_gateway(stacks) -> None:  # type: ignore[no-untyped-def]
    from PIL import Image

    from venus_core.data.synth.tasks import get_phone
    from venus_core.envs import AdbServerProcess, AdbShell, SimAdbServer, SimDevice

    phone = get_phone()
    dev = SimDevice(phone, phone.initial(random.Random(0)), size=(360, 640))
    with SimAdbServer(dev) as srv:
        spec = DeviceSpec("sim-1", "android", "lab-a", "127.0.0.1", srv.port)
        assert probe_device(spec) is None  # a real ADB handshake probe
        stack = make_stack([spec], probe=probe_device)
        stacks.append(stack)
        with stack.pool(io_timeout=10).lease(kind="android") as (lease,), lease.forward() as port:
            with AdbServerProcess() as adb:
                serial = f"127.0.0.1:{port}"
                shell = AdbShell(serial, port=adb.port, connect=True)
                try:
                    assert shell.run("wm size").stdout == b"Physical size: 360x640\n"
                    cmd = [adb.adb, "-P", str(adb.port), "-s", serial]
                    png = subprocess.run(
                        cmd + ["exec-out", "screencap -p"],
                        capture_output=True,
                        timeout=30,
                        check=True,
                    ).stdout
                    assert Image.open(io.BytesIO(png)).size == (360, 640)
                    served = srv.commands_served
                    assert served >= 2
                finally:
                    shell.close()
            gw = stack.gateway.gateway
            assert gw.metrics.sessions_total >= 1
        assert stack.registry.status()["leased"] == 0


SCRIPT = """
import typer
from venus_core.cli.gateway_cmd import register
app = typer.Typer()
@app.callback()
def main() -> None:
    pass
register(app)
app()
"""


def test_gateway_command_process(echo_server, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    (tmp_path / "devices.yaml").write_text(
        f"- {{id: echo-1, kind: tcp, group: g, endpoint: '127.0.0.1:{echo_server.port}'}}\n"
    )
    (tmp_path / "secret").write_text("cli-secret-0123456789\n")
    script = tmp_path / "venus_gw.py"
    script.write_text(SCRIPT)
    proc = subprocess.Popen(
        [
            sys.executable,
            str(script),
            "gateway",
            "--devices",
            str(tmp_path / "devices.yaml"),
            "--secret-file",
            str(tmp_path / "secret"),
            "--port",
            "0",
            "--metrics-port",
            "0",
            "--registry-port",
            "0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        assert proc.stdout is not None
        line = wait_for_line(proc.stdout, lambda s: bool(s.strip()), timeout=60, what="venus gateway")
        assert line.startswith("gateway shard 0/1 on 127.0.0.1:"), line
        assert "uvloop" in line or "asyncio" in line
        url = line.split(" registry ")[1].strip()
        metrics = line.split(" metrics :")[1].split()[0]
        pool = DevicePool(url, "cli-client", wait=2)
        with pool.lease(kind="tcp") as (lease,), lease.connect(timeout=5) as t:
            t.sendall(b"through the command")
            assert t.recv_exact(19) == b"through the command"
        assert HttpRegistry(url).status()["leased"] == 0
        page = urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5).read()
        assert b'venus_gateway_sessions_total{shard="0"} 1.0' in page
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            assert proc.wait(15) == 0
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()  # closes the pipes


def test_gateway_command_refuses_bad_table(tmp_path: Path) -> None:
    import typer
    from typer.testing import CliRunner

    from venus_core.cli.gateway_cmd import register

    app = typer.Typer()
    app.callback()(lambda: None)
    register(app)
    (tmp_path / "devices.yaml").write_text("- {id: a, kind: tablet, endpoint: 'h:1'}\n")
    args = ["gateway", "--devices", str(tmp_path / "devices.yaml")]
    out = CliRunner().invoke(app, args, env={"VENUS_GATEWAY_SECRET": "x" * 20})
    assert out.exit_code == 2
    assert "devices.yaml: device #0: device a: kind 'tablet'" in out.stderr
    out = CliRunner().invoke(app, args, env={"VENUS_GATEWAY_SECRET": ""})
    assert out.exit_code == 2 and "VENUS_GATEWAY_SECRET" in out.output + out.stderr
