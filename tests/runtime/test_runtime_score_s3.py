"""score_data with an `s3://` data source: fetched (resumably, sha256-checked) before scoring.

The S3 server is moto's ThreadedMotoServer on loopback: no MinIO server can be installed here, and
moto speaks the same S3 HTTP protocol the `minio` SDK uses against MinIO in the cluster.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from moto.server import ThreadedMotoServer

from venus_core.io.storage import StorageError, open_store
from venus_core.io.storage.fetch import STAMP, fetch_dir, split_uri
from venus_core.config import load_spec
from venus_core.runtime.score_data import fetch_source
from venus_core.runtime.score_data import main as score_main

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
BUCKET = "venus-data"


@pytest.fixture(scope="module")
def s3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    endpoint = f"http://{host}:{port}"
    mp = pytest.MonkeyPatch()
    for k, v in {"VENUS_S3_ENDPOINT": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():
        mp.setenv(k, v)
    open_store(f"s3://{BUCKET}", create_bucket=True)
    yield endpoint
    mp.undo()
    server.stop()


@pytest.fixture(scope="module")
def published(s3: str, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, Path]:
    from venus_core.data.synth import synthesize

    local = tmp_path_factory.mktemp("src") / "g0"
    synthesize("grounding", 60, 0, 7, local)
    open_store(f"s3://{BUCKET}").put_dir(local, "datasets/g0")
    return f"s3://{BUCKET}/datasets/g0", local


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()
            and p.name != STAMP}


def test_fetch_is_exact_resumable_and_checks_sha256(published: tuple[str, Path], tmp_path: Path) -> None:
    uri, src = published
    dest = tmp_path / "copy"
    first = fetch_dir(uri, dest)
    assert _files(dest) == _files(src) and first.reused == [] and len(first.downloaded) == len(_files(src))
    assert fetch_dir(uri, dest).up_to_date  # stamp matches the remote manifest: nothing re-read

    # an interrupted fetch: one file never arrived, one is corrupt, the stamp was not written yet
    (dest / STAMP).unlink()
    names = sorted(first.downloaded)
    (dest / names[0]).unlink()
    (dest / names[1]).write_bytes(b"torn")
    again = fetch_dir(uri, dest)
    assert sorted(again.downloaded) == sorted(names[:2]) and len(again.reused) == len(names) - 2
    assert _files(dest) == _files(src)


def test_unpublished_prefixes_and_bad_uris_are_clear_errors(s3: str, tmp_path: Path) -> None:
    store = open_store(f"s3://{BUCKET}")
    store.put_bytes(b"x", "loose/file.txt")  # copied in without put_dir: no manifest
    with pytest.raises(StorageError, match="not a published artifact.*1 object"):
        fetch_dir(f"s3://{BUCKET}/loose", tmp_path / "x")
    with pytest.raises(StorageError, match="expected s3://bucket/prefix"):
        split_uri(f"s3://{BUCKET}")
    with pytest.raises(StorageError, match="unsupported scheme"):
        split_uri("gs://b/p")


@pytest.mark.slow
def test_score_data_fetches_an_s3_source_and_records_where_it_came_from(published: tuple[str, Path],
                                                                         tmp_path: Path) -> None:
    uri, _ = published
    out = tmp_path / "out"
    argv = ["--spec", str(SPEC), "--out", str(out),
            "--set", "offline_rl.grounding.sources=[]",
            "--set", f"data.sources=[{{name: remote-g0, kind: dataset, uri: '{uri}'}}]"]
    assert score_main(argv) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["fetched"]["remote-g0"]["uri"] == uri and report["fetched"]["remote-g0"]["downloaded"] > 0
    (entry,) = report["inputs"]
    assert entry["fetched_from"] == uri and entry["uri"] == str(out / "remote" / "remote-g0")
    assert report["mixture"]["train"] > 0
    spec = load_spec(SPEC, [argv[-3], argv[-1]])
    again, info = fetch_source(spec.data.sources[0], out / "remote")  # what a restarted pod does first
    assert info["up_to_date"] is True and again.uri == str(out / "remote" / "remote-g0")

    missing = ["--spec", str(SPEC), "--out", str(tmp_path / "o2"), "--set", "offline_rl.grounding.sources=[]",
               "--set", f"data.sources=[{{name: gone, kind: dataset, uri: 's3://{BUCKET}/nothing/here'}}]"]
    assert score_main(missing) == 1
