"""The buffered tracker against a REAL `mlflow server` process that is stopped mid-run and
restarted: training keeps logging while the server is down, nothing is lost, the gap is reported.

Slow: one server start takes 30-60 s here, and this test starts it twice.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from venus_core.config import apply_overrides, spec_from_dict
from venus_core.io.tracking import make_client, stage_run, start_pipeline_run

pytestmark = pytest.mark.slow


class Server:
    """One `mlflow server` on loopback with a SQLite store; stop() and start() keep port and data."""

    def __init__(self, root: Path) -> None:
        self.root = root
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = int(s.getsockname()[1])
        self.uri = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 180.0) -> None:
        env = {**os.environ, "MLFLOW_DISABLE_TELEMETRY": "true"}
        log = (self.root / "server.log").open("ab")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", f"sqlite:///{self.root}/db.sqlite",
             "--artifacts-destination", str(self.root / "artifacts"), "--host", "127.0.0.1",
             "--port", str(self.port), "--workers", "1"],
            stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True, cwd=self.root)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"mlflow server exited: {(self.root / 'server.log').read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError(f"mlflow server not healthy after {timeout} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    server = Server(tmp_path_factory.mktemp("mlflow-server"))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _outage(server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, down_s: float, rate: float) -> dict:
    """Log 10 steps, stop the server, log `rate` steps a second for `down_s` seconds (at least 50 steps),
    start it again, log 10 more; check nothing was lost and the gap was reported. Returns figures."""
    monkeypatch.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
    spec = spec_from_dict(apply_overrides({}, [f"platform.tracking_uri={server.uri}",
                                               f"platform.experiment=outage-{int(down_s)}"]))
    client = make_client(spec.platform.tracking_uri)
    parent = start_pipeline_run(spec, "outage-pipeline", client=client)
    slowest = 0.0
    with stage_run("mid_train", spec, parent, client=client, spill_dir=tmp_path, max_buffer=20,
                   flush_interval=0.1, backoff=(0.2, 2.0), close_timeout=120,
                   provenance={"inputs": [{"uri": "file:///d", "sha256": "0" * 64}]}) as tracker:
        for step in range(10):
            tracker.log_metrics({"loss": float(step)}, step=step)
        assert tracker.flush(timeout=30)
        server.stop()
        t0 = time.monotonic()
        step = 10
        # the training loop goes on; more steps than max_buffer, so some spill to disk
        while step < 60 or time.monotonic() - t0 < down_s:
            t = time.monotonic()
            tracker.log_metrics({"loss": float(step)}, step=step)
            slowest = max(slowest, time.monotonic() - t)
            step += 1
            time.sleep(1.0 / rate)
        deadline = time.monotonic() + 30
        while not tracker.writer.gap.outages and time.monotonic() < deadline:
            time.sleep(0.1)
        assert tracker.writer.gap.outages, "the outage was not noticed"
        down = time.monotonic() - t0
        server.start()
        last = step + 10
        for step in range(step, last):
            tracker.log_metrics({"loss": float(step)}, step=step)
        rid = tracker.run_id
    assert slowest < 1.0, f"logging blocked for {slowest:.2f} s while the server was down"
    gap = tracker.gap
    assert gap is not None and gap.reported_to_server and gap.metrics_unsent == 0
    assert gap.metrics_spilled >= 20 and gap.metrics_delayed >= 50
    assert len(gap.outages) == 1 and gap.outages[0].end is not None and gap.outages[0].seconds > 1
    history = sorted((m.step, m.value) for m in client.get_metric_history(rid, "loss"))
    assert history == [(s, float(s)) for s in range(last)]
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.data.tags["mlflow.parentRunId"] == parent
    assert run.data.metrics["venus.tracking.metrics_spilled"] == gap.metrics_spilled
    windows = json.loads(run.data.tags["venus.tracking.outages"])
    assert len(windows) == 1 and windows[0]["seconds"] > 1
    assert {f.path for f in client.list_artifacts(rid)} >= {"provenance.json"}
    return {"down_s": round(down, 1), "steps": last, "spilled": gap.metrics_spilled,
            "delayed": gap.metrics_delayed, "slowest_log_s": round(slowest, 4)}


def test_server_stopped_and_restarted_mid_run(mlflow_server: Server, tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    _outage(mlflow_server, tmp_path, monkeypatch, down_s=0.0, rate=100.0)


@pytest.mark.soak_long
def test_server_down_for_minutes(mlflow_server: Server, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The soak job's outage: $VENUS_SOAK_OUTAGE_S seconds (default 180) at 20 steps a second."""
    figures = _outage(mlflow_server, tmp_path, monkeypatch, down_s=float(os.environ.get("VENUS_SOAK_OUTAGE_S", "180")),
                      rate=20.0)
    print("outage figures:", json.dumps(figures))
