"""mid_train (and the evaluate stage's `base` row) with `model.base: s3://...`: the base is fetched
to the model cache, sha256-checked against its published manifest, before it is loaded.

The S3 server is moto's ThreadedMotoServer on loopback: no MinIO server can be installed here, and
moto speaks the same S3 HTTP protocol the `minio` SDK uses against MinIO in the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer
from typer.testing import CliRunner

from venus_core.cli import app

from venus_core.config import load_spec
from venus_core.io.storage import open_store
from venus_core.runtime.base_model import cache_dir_for, localize_base
from venus_core.runtime.mid_train import main
from venus_core.train.base import BOOTSTRAP_DIR, resolve_base

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
BUCKET = "venus-models"
URI = f"s3://{BUCKET}/venus/tiny-bootstrap"


@pytest.fixture(scope="module")
def s3_base() -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    mp = pytest.MonkeyPatch()
    for k, v in {"VENUS_S3_ENDPOINT": f"http://{host}:{port}", "AWS_ACCESS_KEY_ID": "test",
                 "AWS_SECRET_ACCESS_KEY": "test", "AWS_DEFAULT_REGION": "us-east-1"}.items():
        mp.setenv(k, v)
    open_store(f"s3://{BUCKET}", create_bucket=True)
    published = CliRunner().invoke(app, ["checkpoint", "publish", str(BOOTSTRAP_DIR), URI])
    assert published.exit_code == 0, published.output
    assert f"-> {URI}: 9 files" in published.output
    yield URI
    mp.undo()
    server.stop()


def test_mid_train_fetches_an_s3_base_and_interpolates_toward_it(s3_base: str, grounding_l0: Path,
                                                                  tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("VENUS_MODEL_CACHE", str(tmp_path / "cache"))
    out = tmp_path / "run"
    argv = ["--spec", str(SPEC), "--out", str(out), "--data", str(grounding_l0), "--eval-limit", "2",
            "--set", f"model.base={s3_base}", "--set", "mid_train.max_steps=1", "--set", "mid_train.batch_size=2",
            "--set", "mid_train.warmup_steps=0", "--set", "mid_train.wise_ft=0.5",
            "--set", "data.validation_fraction=0.3"]
    assert main(argv) == 0
    cached = cache_dir_for(s3_base)
    assert cached.parent == tmp_path / "cache"
    for name in ("model.safetensors", "config.json", "SHA256SUMS"):
        assert (cached / name).read_bytes() == (BOOTSTRAP_DIR / name).read_bytes()
    report = json.loads((out / "report.json").read_text())
    assert report["base"] == s3_base and report["wise_ft"]["base"] == str(out / "checkpoints" / "start")
    assert (out / "model" / "SHA256SUMS").is_file()
    assert "9 file(s) downloaded" in capsys.readouterr().err
    # a second job on the same machine downloads nothing
    spec = localize_base(load_spec(SPEC, [f"model.base={s3_base}"]), "evaluate")
    assert "up to date" in capsys.readouterr().err
    assert spec.model.base == str(cached) and resolve_base(spec.model, tmp_path) == cached


def test_an_unpublished_base_is_a_clear_error(s3_base: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VENUS_MODEL_CACHE", str(tmp_path / "cache"))
    spec = load_spec(SPEC, [f"model.base=s3://{BUCKET}/nothing-here"])
    with pytest.raises(RuntimeError, match=r"evaluate: model.base s3://venus-models/nothing-here: .*not a published"):
        localize_base(spec, "evaluate")


def test_resolve_base_refuses_a_uri_it_was_not_given_fetched(tmp_path: Path) -> None:
    spec = load_spec(SPEC, [f"model.base={URI}"])
    with pytest.raises(ValueError, match="is a URI: the job fetches it"):
        resolve_base(spec.model, tmp_path)


def test_publish_refuses_an_unsealed_checkpoint_and_an_existing_artifact(s3_base: str, tmp_path: Path) -> None:
    import shutil

    unsealed = tmp_path / "unsealed"
    shutil.copytree(BOOTSTRAP_DIR, unsealed)
    (unsealed / "SHA256SUMS").unlink()
    result = CliRunner().invoke(app, ["checkpoint", "publish", str(unsealed), f"s3://{BUCKET}/other"])
    assert result.exit_code != 0 and "no SHA256SUMS manifest" in result.output
    again = CliRunner().invoke(app, ["checkpoint", "publish", str(BOOTSTRAP_DIR), s3_base])
    assert again.exit_code != 0 and "already holds" in again.output and "--overwrite replaces it" in again.output


def test_a_base_that_fails_to_fetch_on_one_rank_stops_every_rank(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gloo ranks: rank 0 fetches first and fails; rank 1, waiting for it, is told and stops with
    an error naming the base (before, it waited at a barrier rank 0 never reached)."""
    import os
    import socket
    import subprocess
    import sys

    missing = f"file://{tmp_path / 'no-such-base'}"
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "VENUS_MODEL_CACHE": str(tmp_path / "cache")}
    worker = Path(__file__).with_name("base_fetch_worker.py")
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port",
                           str(port), str(worker), str(SPEC), missing, str(tmp_path)],
                          env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rank0, rank1 = ((tmp_path / f"rank{r}.txt").read_text() for r in (0, 1))
    assert "no-such-base" in rank0 and "another rank" not in rank0
    assert rank1.startswith("RuntimeError: mid_train: rank 1: model.base") and "another rank" in rank1
