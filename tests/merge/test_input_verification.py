"""Merge inputs are verified as they are opened (`merge.io.CheckpointReader`): SHA256SUMS checked
when present (`models.integrity.verify_checkpoint_dir`), and hostile safetensors headers refused
with an error naming the file, before anything is mapped or written."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from merge_helpers import random_base, write_ckpt
from venus_core.cli.merge_cmd import register
from venus_core.merge import merge_checkpoints
from venus_core.merge.io import CheckpointError, CheckpointReader
from venus_core.models.integrity import CheckpointIntegrityError, write_manifest


def _app() -> typer.Typer:
    app = typer.Typer()
    register(app)

    @app.command()
    def other() -> None:  # a second command so typer keeps sub-command names
        """Unrelated."""

    return app


def _header_and_data(f: Path) -> tuple[dict, bytes]:
    raw = f.read_bytes()
    (n,) = struct.unpack("<Q", raw[:8])
    return json.loads(raw[8: 8 + n]), raw[8 + n:]


def _write(f: Path, header: dict, data: bytes, length: int | None = None) -> None:
    text = json.dumps(header).encode()
    f.write_bytes(struct.pack("<Q", len(text) if length is None else length) + text + data)


def test_a_plain_directory_without_manifest_is_read(three_models) -> None:
    bp, _, base, _ = three_models
    assert set(CheckpointReader(bp).tensors) == set(base)


def test_a_manifest_is_checked_when_present(three_models, tmp_path: Path) -> None:
    bp, mps, _, _ = three_models
    for d in (bp, *mps):
        write_manifest(d)
    assert CheckpointReader(mps[0]).tensors  # a matching manifest passes
    weights = mps[1] / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0x01  # one bit of the data: the header stays valid
    weights.write_bytes(bytes(raw))
    with pytest.raises(CheckpointIntegrityError, match=r"m1/model\.safetensors: sha256 does not match SHA256SUMS"):
        CheckpointReader(mps[1])
    out = tmp_path / "out"
    with pytest.raises(CheckpointIntegrityError, match="sha256 does not match"):
        merge_checkpoints(bp, mps, out)
    assert not out.exists()
    (mps[2] / "extra.safetensors").write_bytes((mps[2] / "model.safetensors").read_bytes())  # added afterwards
    with pytest.raises(CheckpointIntegrityError, match="does not list weight file extra.safetensors"):
        CheckpointReader(mps[2])
    res = CliRunner().invoke(_app(), ["merge", "--base", str(bp), "--models", *map(str, mps), "-o", str(out)])
    assert res.exit_code == 2 and "m1/model.safetensors: sha256 does not match" in res.output, res.output
    assert not out.exists()


@pytest.mark.parametrize("length", [1 << 62, (1 << 64) - 1, "file + 1"])
def test_a_header_length_past_the_file_is_refused(tmp_path: Path, length: object) -> None:
    d = write_ckpt(tmp_path / "m", random_base(0))
    f = d / "model.safetensors"
    header, data = _header_and_data(f)
    _write(f, header, data)
    size = f.stat().st_size  # the same after the length is changed
    _write(f, header, data, length=size - 8 + 1 if length == "file + 1" else length)  # type: ignore[arg-type]
    assert f.stat().st_size == size
    with pytest.raises(CheckpointError, match=rf"{f}: safetensors header length \d+ bytes is larger than the "
                                              rf"file \({size} bytes\)"):
        CheckpointReader(d)
    write_manifest(d)  # a manifest that matches the hostile file changes nothing
    with pytest.raises(CheckpointError, match="is larger than the file"):
        CheckpointReader(d)


def test_data_offsets_past_the_file_and_malformed_headers_are_refused(tmp_path: Path) -> None:
    d = write_ckpt(tmp_path / "m", random_base(0))
    f = d / "model.safetensors"
    header, data = _header_and_data(f)
    key = next(k for k in header if k != "__metadata__")
    bad = dict(header)
    bad[key] = {**header[key], "data_offsets": [header[key]["data_offsets"][0], len(data) + 4096]}
    _write(f, bad, data)
    with pytest.raises(CheckpointError, match=rf"{f}: tensor '{key}': data_offsets .* outside the file"):
        CheckpointReader(d)
    _write(f, {key: {"dtype": "F32", "shape": [2]}}, data)  # no data_offsets
    with pytest.raises(CheckpointError, match=rf"{f}: unreadable safetensors header \(KeyError"):
        CheckpointReader(d)
    _write(f, header, data, length=3)  # inside the file, but not the JSON's length
    with pytest.raises(CheckpointError, match=rf"{f}: unreadable safetensors header"):
        CheckpointReader(d)
    f.write_bytes(b"\x01\x02")
    with pytest.raises(CheckpointError, match=rf"{f}: not a safetensors file \(shorter than 8 bytes\)"):
        CheckpointReader(d)


def test_a_hostile_shard_of_an_indexed_checkpoint_is_named(tmp_path: Path) -> None:
    from safetensors.torch import save_file

    base = random_base(0)
    d = tmp_path / "sharded"
    d.mkdir()
    keys = sorted(base)
    shards = {"model-00001-of-00002.safetensors": keys[:4], "model-00002-of-00002.safetensors": keys[4:]}
    for name, ks in shards.items():
        save_file({k: base[k].contiguous() for k in ks}, str(d / name))
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"weight_map": {k: name for name, ks in shards.items() for k in ks}}))
    (d / "config.json").write_text('{"model_type": "qwen3_vl"}')
    assert set(CheckpointReader(d).tensors) == set(base)
    f = d / "model-00002-of-00002.safetensors"
    header, data = _header_and_data(f)
    _write(f, header, data, length=1 << 40)
    with pytest.raises(CheckpointError, match=r"model-00002-of-00002\.safetensors: safetensors header length"):
        CheckpointReader(d)


def test_hostile_input_leaves_no_output(three_models, tmp_path: Path) -> None:
    bp, mps, _, _ = three_models
    f = mps[2] / "model.safetensors"
    header, data = _header_and_data(f)
    _write(f, header, data, length=1 << 63)
    out = tmp_path / "out"
    res = CliRunner().invoke(_app(), ["merge", "--base", str(bp), "--models", *map(str, mps), "-o", str(out)])
    assert res.exit_code == 2 and f"{f}: safetensors header length" in res.output, res.output
    assert not out.exists()


@pytest.mark.parametrize("names", [("model.pt",), ("pytorch_model.bin",),
                                   ("pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin")])
@pytest.mark.parametrize("which", ["base", "model"])
def test_an_input_with_only_pickle_weights_is_refused_unloaded(three_models, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                names: tuple[str, ...], which: str) -> None:
    """An old checkpoint (`.pt` / `.bin` only): the error names the file and says that checkpoints are
    safetensors and pickles are never loaded; nothing unpickles it (torch.load / pickle would fail the test)."""
    import pickle

    import torch

    bp, mps, _, _ = three_models
    old = tmp_path / "old"
    old.mkdir()
    for name in names:
        torch.save({"w": torch.zeros(2)}, old / name)
    (old / "config.json").write_text('{"model_type": "qwen3_vl"}')

    def never(*a: object, **k: object) -> None:
        raise AssertionError("a pickle was loaded")

    monkeypatch.setattr(torch, "load", never)
    monkeypatch.setattr(pickle, "load", never)
    monkeypatch.setattr(pickle, "loads", never)
    base, models = (old, mps) if which == "base" else (bp, [mps[0], old, mps[2]])
    want = (rf"{old / names[0]}: {old} holds only pickle weights \({names[0]}.*\) and no \*\.safetensors: "
            r"checkpoints are safetensors; pickles are never loaded")
    with pytest.raises(CheckpointError, match=want):
        CheckpointReader(old)
    out = tmp_path / "out"
    with pytest.raises(CheckpointError, match=want):
        merge_checkpoints(base, models, out)
    res = CliRunner().invoke(_app(), ["merge", "--base", str(base), "--models", *map(str, models), "-o", str(out)])
    assert res.exit_code == 2, res.output
    assert f"{old / names[0]}:" in res.output and "checkpoints are safetensors; pickles are never loaded" in res.output
    assert not out.exists()
