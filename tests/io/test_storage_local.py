"""The `file://` artifact store: keys, sha256 verification, atomic directory publish, URIs."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import venus_core.io.storage.local as local_mod
from venus_core.io.storage import (MARKER, ArtifactExistsError, ArtifactNotFoundError, IncompleteArtifactError,
                                   IntegrityError, InvalidKeyError, StorageError, open_store)
from venus_core.io.storage.keys import validate_key
from venus_core.io.storage.local import LocalStore

BAD_KEYS = ["/abs/key", "a/../b", "..", "./a", "a//b", "a/", "a\\b", "a\x00b", "a\nb", "tab\there", ".venus/meta/x"]


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _make_dir(root: Path) -> Path:
    files = {"config.json": b'{"a": 1}', "model.safetensors": os.urandom(70_000), "sub/deeper/tok.txt": b"x" * 10}
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return root


@pytest.fixture
def store(tmp_path: Path) -> LocalStore:
    s = open_store((tmp_path / "store").as_uri())
    assert isinstance(s, LocalStore)
    return s


def test_file_round_trip_records_sha256(store: LocalStore, tmp_path: Path) -> None:
    src = tmp_path / "in.bin"
    src.write_bytes(b"venus" * 1000)
    info = store.put_file(src, "runs/1/in.bin")
    assert info.sha256 == hashlib.sha256(src.read_bytes()).hexdigest() and info.size == 5000
    assert store.stat("runs/1/in.bin") == info
    assert store.exists("runs/1/in.bin") and not store.exists("runs/1/other")
    got = store.get_file("runs/1/in.bin", tmp_path / "out" / "x.bin")
    assert got == info and (tmp_path / "out" / "x.bin").read_bytes() == src.read_bytes()
    assert store.uri_for("runs/1/in.bin") == (store.root / "runs/1/in.bin").as_uri()
    store.delete("runs/1/in.bin")
    assert not store.exists("runs/1/in.bin")
    with pytest.raises(ArtifactNotFoundError, match="runs/1/in.bin"):
        store.delete("runs/1/in.bin")
    store.delete("runs/1/in.bin", missing_ok=True)


def test_list_is_segment_wise_and_hides_internals(store: LocalStore) -> None:
    for key in ("a/x", "a/y/z", "ab/x", "b"):
        store.put_bytes(b"1", key)
    assert store.list("a") == ["a/x", "a/y/z"]
    assert store.list() == ["a/x", "a/y/z", "ab/x", "b"]
    assert store.list("b") == ["b"] and store.list("nothing") == []


@pytest.mark.parametrize("key", BAD_KEYS)
def test_bad_keys_are_rejected_naming_the_key(store: LocalStore, tmp_path: Path, key: str) -> None:
    src = tmp_path / "f"
    src.write_bytes(b"1")
    for call in (lambda: store.put_file(src, key), lambda: store.get_file(key, tmp_path / "o"),
                 lambda: store.put_bytes(b"1", key), lambda: store.exists(key), lambda: store.uri_for(key)):
        with pytest.raises(InvalidKeyError) as err:
            call()
        assert repr(key) in str(err.value)
    assert not any(p.is_file() for p in tmp_path.parent.rglob("o"))


@given(st.text(alphabet=st.sampled_from(list("ab./\\\x00\n~:")), max_size=12))
def test_every_accepted_key_stays_inside_the_root(key: str) -> None:
    root = Path("/srv/store")
    try:
        validate_key(key)
    except InvalidKeyError as exc:
        assert repr(key) in str(exc) or key == ""
        return
    resolved = Path(os.path.normpath(root / key))
    assert resolved.is_relative_to(root) and resolved != root and resolved.relative_to(root).as_posix() == key


def test_tampered_object_fails_verification_and_writes_nothing(store: LocalStore, tmp_path: Path) -> None:
    store.put_bytes(b"original", "r/report.json")
    (store.root / "r/report.json").write_bytes(b"tampered")
    with pytest.raises(IntegrityError, match=r"r/report\.json.*sha256 mismatch"):
        store.get_file("r/report.json", tmp_path / "dl" / "report.json")
    assert list((tmp_path / "dl").iterdir()) == []  # neither the file nor a .part leftover
    with pytest.raises(IntegrityError, match="report.json"):
        store.get_bytes("r/report.json")
    (store.root / "foreign.bin").write_bytes(b"no metadata")
    with pytest.raises(IntegrityError, match="foreign.bin.*no recorded sha256"):
        store.get_bytes("foreign.bin")
    with pytest.raises(ArtifactNotFoundError, match="missing.bin"):
        store.get_file("missing.bin", tmp_path / "m")


def test_put_dir_publishes_with_manifest_and_get_dir_round_trips(store: LocalStore, tmp_path: Path) -> None:
    src = _make_dir(tmp_path / "ckpt")
    listing = store.put_dir(src, "mid_train/ckpt")
    assert [o.key for o in listing] == ["mid_train/ckpt/config.json", "mid_train/ckpt/model.safetensors",
                                        "mid_train/ckpt/sub/deeper/tok.txt"]
    for o in listing:
        assert o.sha256 == hashlib.sha256((src / o.key.removeprefix("mid_train/ckpt/")).read_bytes()).hexdigest()
    manifest = json.loads(store.get_bytes(f"mid_train/ckpt/{MARKER}"))
    assert [e["path"] for e in manifest["files"]] == ["config.json", "model.safetensors", "sub/deeper/tok.txt"]
    assert store.is_complete("mid_train/ckpt") and store.read_manifest("mid_train/ckpt") == listing
    assert store.get_dir("mid_train/ckpt", tmp_path / "back") == listing
    assert _tree(tmp_path / "back") == _tree(src)
    assert list((store.root / ".venus" / "tmp").iterdir()) == []


def test_get_dir_refuses_incomplete_and_tampered_artifacts(store: LocalStore, tmp_path: Path) -> None:
    store.put_dir(_make_dir(tmp_path / "d"), "art")
    (store.root / "art" / "config.json").write_bytes(b"changed")
    with pytest.raises(IntegrityError, match="art/config.json"):
        store.get_dir("art", tmp_path / "out1")
    store.put_bytes(b"changed", "art/config.json")  # consistent object, but not what the manifest says
    with pytest.raises(IntegrityError, match="does not match the manifest of 'art'"):
        store.get_dir("art", tmp_path / "out2")
    store.delete(f"art/{MARKER}")
    with pytest.raises(IncompleteArtifactError, match=r"art is not a complete artifact: it holds 3 object"):
        store.get_dir("art", tmp_path / "out3")
    with pytest.raises(IncompleteArtifactError, match="holds nothing"):
        store.read_manifest("never/written")


def test_put_dir_refuses_to_replace_unless_overwrite(store: LocalStore, tmp_path: Path) -> None:
    store.put_dir(_make_dir(tmp_path / "v1"), "art")
    new = tmp_path / "v2"
    new.mkdir()
    (new / "only.txt").write_bytes(b"v2")
    with pytest.raises(ArtifactExistsError, match="art already exists"):
        store.put_dir(new, "art")
    listing = store.put_dir(new, "art", overwrite=True)
    assert [o.key for o in listing] == ["art/only.txt"]
    assert store.list("art") == ["art/_SUCCESS", "art/only.txt"]
    assert store.get_bytes("art/only.txt") == b"v2"


def test_failed_put_dir_leaves_no_partial_artifact(store: LocalStore, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src = _make_dir(tmp_path / "d")
    real, calls = local_mod._copy_hashing, []

    def failing(stream, dst: Path):  # the disk "fills up" on the second file
        calls.append(dst)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        return real(stream, dst)

    monkeypatch.setattr(local_mod, "_copy_hashing", failing)
    with pytest.raises(OSError, match="No space left"):
        store.put_dir(src, "art")
    assert not store.exists("art/config.json") and store.list("art") == []
    assert list((store.root / ".venus" / "tmp").iterdir()) == []


def test_put_dir_rejects_unpublishable_trees(store: LocalStore, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(StorageError, match="contains no files"):
        store.put_dir(empty, "x")
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / MARKER).write_bytes(b"")
    with pytest.raises(StorageError, match="collide with the completion marker"):
        store.put_dir(tmp_path / "m", "x")
    (tmp_path / "bs").mkdir()
    (tmp_path / "bs" / "a\\b").write_bytes(b"")
    with pytest.raises(InvalidKeyError, match=r"a\\\\b.*backslashes"):
        store.put_dir(tmp_path / "bs", "x")
    (tmp_path / "ln").mkdir()
    (tmp_path / "ln" / "dangling").symlink_to(tmp_path / "nowhere")
    with pytest.raises(StorageError, match="dangling is not a regular file"):
        store.put_dir(tmp_path / "ln", "x")
    with pytest.raises(InvalidKeyError, match="'../up'"):
        store.put_dir(_make_dir(tmp_path / "ok"), "../up")
    assert store.list() == []


def test_open_store_uris(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rel = open_store("file://rel/dir")
    assert isinstance(rel, LocalStore) and rel.root == tmp_path / "rel" / "dir"
    assert rel.uri_for("k") == (tmp_path / "rel/dir/k").as_uri()
    with pytest.raises(StorageError, match="unsupported scheme 'gs'"):
        open_store("gs://bucket/x")
    with pytest.raises(StorageError, match="names no bucket"):
        open_store("s3:///x")
    with pytest.raises(StorageError, match="must look like http"):
        open_store("s3://b/x", endpoint="minio:9000")


def test_retry_policy_is_validated_and_maps_onto_urllib3() -> None:
    from venus_core.io.storage import RetryPolicy

    with pytest.raises(ValueError, match="attempts must be >= 1"):
        RetryPolicy(attempts=0)
    with pytest.raises(ValueError, match="jitter must be >= 0"):
        RetryPolicy(jitter=-1)
    r = RetryPolicy(attempts=3, backoff=0.5, max_backoff=4, jitter=0.1).urllib3_retry()
    assert (r.total, r.backoff_factor, r.backoff_max, r.backoff_jitter) == (2, 0.5, 4, 0.1)
    assert set(r.status_forcelist) == {500, 502, 503, 504} and r.allowed_methods is None
