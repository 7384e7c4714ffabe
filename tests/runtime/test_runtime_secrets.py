"""Credentials never leave the environment (issue 22 §4): not into compiled IR, pipeline parameters,
MLflow params / tags / artifacts, job outputs or logs.

The process gets test credentials of every kind the platform reads (S3 keys, MLflow password and
token, the gateway's token secret, the evaluation API key), then: both agents' pipelines are
compiled; a real `merge` job runs tracked in MLflow (SQLite store, artifacts on disk) nested under
a Kubeflow run's parent; the same job runs with an MLflow URI that carries a user and password in
it while the server is down (its warning and record name the URI); a gateway and lease registry
sign with the secret and are used. Everything written below the test's directory (the MLflow
database, artifacts, outputs), everything printed, and every log record at DEBUG is scanned for
each credential.
"""

from __future__ import annotations

import logging
import socket
from pathlib import Path

import pytest
from test_runtime_mlflow import _ckpt

from pipelines.compile import compile_pipeline
from venus_core.runtime import merge as merge_job
from venus_core.runtime.tracking import KFP_RUN_ENV, PARENT_ENV, TRACKING_ENV

ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "agents" / "venus-tiny"
URI_PASSWORD = "venus-test-uri-password-4e7a2c"
SECRETS = {
    "AWS_ACCESS_KEY_ID": "AKIAVENUSTESTKEY7F3A",
    "AWS_SECRET_ACCESS_KEY": "venus-test-aws-secret-5b2e8c1d9f",
    "MINIO_ACCESS_KEY": "venus-test-minio-key-2b7d",
    "MINIO_SECRET_KEY": "venus-test-minio-secret-0a4d7e",
    "MLFLOW_TRACKING_USERNAME": "venus-test-mlflow-user-6a1e",
    "MLFLOW_TRACKING_PASSWORD": "venus-test-mlflow-password-3c9b",
    "MLFLOW_TRACKING_TOKEN": "venus-test-mlflow-token-8e1f",
    "VENUS_GATEWAY_SECRET": "venus-test-gateway-secret-6d2a4b8c0e",
    "VENUS_EVAL_API_KEY": "venus-test-eval-api-key-1f7c",
    "VENUS_JUDGE_API_KEY": "venus-test-judge-api-key-9d3b",
}


def assert_clean(blobs: dict[str, bytes]) -> None:
    """No credential in any blob; the failure lists every (where, which) pair."""
    values = [*SECRETS.values(), URI_PASSWORD]
    found = sorted(f"{name}: {value}" for name, blob in blobs.items() for value in values
                   if value.encode() in blob)
    assert not found, "credentials written or logged:\n" + "\n".join(found)


def written(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


@pytest.fixture()
def credentials(monkeypatch: pytest.MonkeyPatch) -> None:
    for key, value in SECRETS.items():
        monkeypatch.setenv(key, value)


@pytest.fixture()
def logs(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def _log_text(caplog: pytest.LogCaptureFixture) -> bytes:
    return "\n".join(f"{r.name}: {r.getMessage()} {r.exc_text or ''}" for r in caplog.records).encode()


def test_compiled_pipelines_hold_secret_names_never_values(credentials: None, tmp_path: Path) -> None:
    blobs = {}
    for agent in ("venus-tiny", "ui-venus-1.5-8b"):
        blobs[agent] = compile_pipeline(ROOT / "agents" / agent, tmp_path / f"{agent}.yaml").read_bytes()
    # on a cluster (the 8B spec: S3 artifacts) credentials come from Secrets, by name
    assert b"secretAsEnv" in blobs["ui-venus-1.5-8b"] and b"venus-minio" in blobs["ui-venus-1.5-8b"]
    assert b"secretName: venus-judge" in blobs["ui-venus-1.5-8b"]  # the judge's key (scoring.api_key_secret)
    assert b"VENUS_JUDGE_API_KEY" not in blobs["venus-tiny"]  # the rules judge needs none
    assert_clean(blobs)


def _merge(tmp_path: Path, out: Path, extra: list[str]) -> int:
    base = _ckpt(tmp_path / "base", 0) if not (tmp_path / "base").exists() else None
    for i, name in enumerate(("grounding", "mobile", "web")):
        if not (tmp_path / name).exists():
            _ckpt(tmp_path / name, i + 1, base)
    return merge_job.main(["--spec", str(SPEC), "--set", "platform.experiment=secrets", *extra,
                           "--base", str(tmp_path / "base"), "--out", str(out),
                           *[a for n in ("grounding", "mobile", "web") for a in ("--model", f"{n}={tmp_path / n}")]])


@pytest.mark.slow
def test_a_tracked_stage_writes_and_logs_no_credential(credentials: None, logs: pytest.LogCaptureFixture,
                                                       capfd: pytest.CaptureFixture[str], tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    from mlflow import MlflowClient

    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store}/mlflow.db"
    monkeypatch.setenv(TRACKING_ENV, uri)
    monkeypatch.setenv(KFP_RUN_ENV, "kfp-run-secrets")
    monkeypatch.delenv(PARENT_ENV, raising=False)
    assert _merge(tmp_path, tmp_path / "merge", ["--set", f"platform.artifact_store=file://{store}/art"]) == 0

    client = MlflowClient(tracking_uri=uri)
    runs = client.search_runs([e.experiment_id for e in client.search_experiments()])
    assert {r.data.tags["mlflow.runName"] for r in runs} >= {"merge"} and len(runs) >= 2  # + the parent
    seen = {f"run {r.info.run_id} params+tags": repr((r.data.params, r.data.tags)).encode() for r in runs}
    for r in runs:
        for a in client.list_artifacts(r.info.run_id):
            if not a.is_dir:
                seen[f"artifact {a.path}"] = Path(client.download_artifacts(r.info.run_id, a.path,
                                                                            str(tmp_path / "dl"))).read_bytes()
    assert any(k.startswith("artifact ") for k in seen)
    out, err = capfd.readouterr()
    seen |= written(tmp_path) | {"stdout": out.encode(), "stderr": err.encode(), "logs": _log_text(logs)}
    assert f"MLflow run" in err  # the job did talk about its tracking
    assert_clean(seen)


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def test_a_tracking_uri_with_a_password_is_not_repeated(credentials: None, logs: pytest.LogCaptureFixture,
                                                        capfd: pytest.CaptureFixture[str], tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """MLflow down, the URI carries user:password: the job goes on, its warning and its record name
    the server without the password."""
    monkeypatch.setenv(TRACKING_ENV, f"http://venus:{URI_PASSWORD}@127.0.0.1:{_closed_port()}")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "2")
    monkeypatch.delenv(KFP_RUN_ENV, raising=False)
    monkeypatch.delenv(PARENT_ENV, raising=False)
    out_dir = tmp_path / "merge"
    assert _merge(tmp_path, out_dir, []) == 0
    out, err = capfd.readouterr()
    assert "unavailable" in err and "127.0.0.1" in err  # it says which server, ...
    record = (out_dir / "mlflow_run.json").read_text()
    assert "127.0.0.1" in record
    blobs = written(tmp_path) | {"stdout": out.encode(), "stderr": err.encode(), "logs": _log_text(logs)}
    assert_clean(blobs)  # ... but not its password


def test_the_gateway_secret_stays_in_the_signer(credentials: None, logs: pytest.LogCaptureFixture,
                                                capfd: pytest.CaptureFixture[str]) -> None:
    import os

    from venus_core.daas import DevicePool, DeviceSpec, DeviceTable, Gateway, GatewayThread, LeaseRegistry
    from venus_core.daas import TokenSigner

    srv = socket.create_server(("127.0.0.1", 0))
    dev = DeviceSpec("d0", "tcp", "g", "127.0.0.1", srv.getsockname()[1])
    signer = TokenSigner(os.environ["VENUS_GATEWAY_SECRET"].encode())
    with GatewayThread(Gateway(DeviceTable([dev]), signer)) as gw, \
            LeaseRegistry([dev], signer, [f"127.0.0.1:{gw.port}"], probe=None) as reg:
        pool = DevicePool(reg, "w1", wait=0.5, io_timeout=5.0)
        with pool.lease(kind="tcp") as (lease,), lease.connect():
            grant = repr(lease.grant.to_dict()) + repr(reg.status())
    srv.close()
    out, err = capfd.readouterr()
    blobs = {"grant": grant.encode(), "stdout": out.encode(), "stderr": err.encode(), "logs": _log_text(logs)}
    assert_clean(blobs)
