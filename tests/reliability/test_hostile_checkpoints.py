"""Hostile checkpoint directories (issue 22 §1): every loader verifies before it reads.

Loaders: `models.loading.load_model` (every stage's model input), `train.checkpoint.load_checkpoint`
(training resume), the merge job's inputs (`runtime.merge.run_merge`) and `venus merge`. Cases: a
pickled checkpoint (HF `.bin` only, a `.pt` beside safetensors, the earlier `optimizer.pt`), a
safetensors file whose header lies (length past the file, offsets past the data, a shape that does
not fit its bytes, overlapping tensors, an unknown dtype, not JSON, too short), an index naming a
missing shard or tensor, no SHA256SUMS, a SHA256SUMS that does not match, a file added after it, a
manifest line that leaves the directory, a listed symlink out, and a `latest` pointer that is a
path. Each is an error naming the file (and the tensor, line or field), raised before any weight
is read: the model handed to the loader, the merge output and the served weights are unchanged.
"""

from __future__ import annotations

import json
import shutil
import struct
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from venus_core.cli import app
from venus_core.config import AgentSpec
from venus_core.config.spec import ModelSpec
from venus_core.models.integrity import CheckpointIntegrityError, verify_checkpoint_dir, write_manifest
from venus_core.models.loading import load_model
from venus_core.models.tiny import build_tiny
from venus_core.runtime.merge import run_merge
from venus_core.train import checkpoint as ck

F32 = "F32"


def _header_file(path: Path, header: dict[str, object], data: bytes, length: int | None = None) -> Path:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw) if length is None else length) + raw + data)
    return path


LYING: dict[str, Callable[[Path], Path]] = {
    "header length past the file": lambda p: _header_file(p, {"w": {"dtype": F32, "shape": [1], "data_offsets": [0, 4]}},
                                                         b"\0" * 4, length=2**40),
    "offsets past the data": lambda p: _header_file(p, {"w": {"dtype": F32, "shape": [4], "data_offsets": [0, 16]}},
                                                   b"\0" * 8),
    "shape does not fit its bytes": lambda p: _header_file(p, {"w": {"dtype": F32, "shape": [100],
                                                                      "data_offsets": [0, 16]}}, b"\0" * 16),
    "overlapping tensors": lambda p: _header_file(p, {"w": {"dtype": F32, "shape": [4], "data_offsets": [0, 16]},
                                                      "v": {"dtype": F32, "shape": [4], "data_offsets": [0, 16]}},
                                                  b"\0" * 16),
    "unknown dtype": lambda p: _header_file(p, {"w": {"dtype": "X9", "shape": [4], "data_offsets": [0, 16]}}, b"\0" * 16),
    "header not JSON": lambda p: (p.write_bytes(struct.pack("<Q", 4) + b"abcd"), p)[1],
    "shorter than its length field": lambda p: (p.write_bytes(b"\1\2"), p)[1],
}


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny(ModelSpec().tiny, tmp_path_factory.mktemp("hostile-tiny") / "model")


def _copy(tiny: Path, dst: Path) -> Path:
    return Path(shutil.copytree(tiny, dst))


def test_the_platform_writes_and_accepts_a_verified_checkpoint(tiny: Path) -> None:
    assert (tiny / "SHA256SUMS").is_file() and verify_checkpoint_dir(tiny).startswith("sha256:")
    model, _ = load_model(tiny, ModelSpec())
    assert model.config.model_type == "qwen3_vl"


def test_pickle_weights_only_are_refused_by_name(tiny: Path, tmp_path: Path) -> None:
    d = _copy(tiny, tmp_path / "bin-only")
    (d / "model.safetensors").unlink()
    torch.save({"w": torch.zeros(1)}, d / "pytorch_model.bin")
    write_manifest(d)
    with pytest.raises(FileNotFoundError, match=r"no \*\.safetensors weights \(found pickle weights pytorch_model\.bin"):
        load_model(d, ModelSpec())


@pytest.mark.parametrize("name", ["extra_state.pt", "optimizer.pt", "sub/rng.pth", "x.ckpt", "y.pkl"])
def test_a_pickle_anywhere_beside_safetensors_is_refused(tiny: Path, tmp_path: Path, name: str) -> None:
    d = _copy(tiny, tmp_path / "pickled")
    (d / name).parent.mkdir(parents=True, exist_ok=True)
    torch.save({"x": torch.zeros(1)}, d / name)
    write_manifest(d)  # listed, with its right digest: refused all the same
    with pytest.raises(CheckpointIntegrityError, match=rf"{name}: pickle file refused"):
        load_model(d, ModelSpec())


@pytest.mark.parametrize("case", sorted(LYING))
def test_a_safetensors_header_that_lies_is_refused_naming_the_file(tiny: Path, tmp_path: Path, case: str) -> None:
    d = _copy(tiny, tmp_path / "lying")
    LYING[case](d / "model.safetensors")
    write_manifest(d)  # a consistent manifest: the header check itself must catch it
    with pytest.raises(CheckpointIntegrityError, match=r"model\.safetensors: invalid safetensors file"):
        load_model(d, ModelSpec())


def test_an_index_naming_a_missing_shard_or_tensor_is_refused(tiny: Path, tmp_path: Path) -> None:
    d = _copy(tiny, tmp_path / "index")
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}))
    write_manifest(d)
    with pytest.raises(CheckpointIntegrityError, match=r"weight_map\.lm_head\.weight names shard 'model-00002"):
        load_model(d, ModelSpec())
    (d / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {}, "weight_map": {"no.such.tensor": "model.safetensors"}}))
    write_manifest(d)
    with pytest.raises(CheckpointIntegrityError, match=r"weight_map\.no\.such\.tensor: model\.safetensors holds no"):
        load_model(d, ModelSpec())


def test_no_manifest_is_refused_where_one_is_required(tiny: Path, tmp_path: Path) -> None:
    d = _copy(tiny, tmp_path / "unsigned")
    (d / "SHA256SUMS").unlink()
    with pytest.raises(CheckpointIntegrityError, match=r"unsigned: no SHA256SUMS manifest"):
        load_model(d, ModelSpec())
    model, _ = load_model(d, ModelSpec(), require_manifest=False)  # a checkpoint from elsewhere
    assert model is not None


def test_a_manifest_that_does_not_match_names_the_file(tiny: Path, tmp_path: Path) -> None:
    d = _copy(tiny, tmp_path / "altered")
    (d / "config.json").write_text((d / "config.json").read_text() + "\n")
    for require in (True, False):  # a present manifest is checked even where none is required
        with pytest.raises(CheckpointIntegrityError, match=r"altered/config\.json: sha256 does not match SHA256SUMS"):
            load_model(d, ModelSpec(), require_manifest=require)


def test_a_file_added_after_the_manifest_is_refused(tiny: Path, tmp_path: Path) -> None:
    d = _copy(tiny, tmp_path / "added")
    (d / "preprocessor_config.json").write_text("{}")
    with pytest.raises(CheckpointIntegrityError, match=r"does not list file preprocessor_config\.json"):
        load_model(d, ModelSpec())


@pytest.mark.parametrize("line", ["0" * 64 + "  ../outside.json", "0" * 64 + "  /etc/passwd", "not a line",
                                  "z" * 64 + "  config.json"])
def test_a_manifest_line_that_is_not_a_file_of_the_directory_is_refused(tiny: Path, tmp_path: Path, line: str) -> None:
    d = _copy(tiny, tmp_path / "lines")
    (d / "SHA256SUMS").write_text((d / "SHA256SUMS").read_text() + line + "\n")
    with pytest.raises(CheckpointIntegrityError, match=r"SHA256SUMS:\d+: not a '<sha256>  <file>' line"):
        load_model(d, ModelSpec())


def test_a_listed_symlink_out_of_the_directory_is_refused(tiny: Path, tmp_path: Path) -> None:
    d = _copy(tiny, tmp_path / "linked")
    outside = tmp_path / "outside.json"
    outside.write_text('{"chat_template": "x"}')
    (d / "chat_template.json").symlink_to(outside)
    write_manifest(d)
    with pytest.raises(CheckpointIntegrityError, match=r"chat_template\.json: a symlink out of the checkpoint"):
        load_model(d, ModelSpec())


# ---- training checkpoints -------------------------------------------------------------------


def _net() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    net = torch.nn.Linear(4, 2)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
    net(torch.randn(3, 4)).sum().backward()
    opt.step()
    return net, opt


@pytest.mark.parametrize("case", ["lying header", "no manifest", "altered", "pickle"])
def test_a_bad_training_checkpoint_is_refused_before_the_model_changes(tmp_path: Path, case: str) -> None:
    net, opt = _net()
    path = ck.save_checkpoint(tmp_path, 1, net, opt, {})
    if case == "lying header":
        LYING["offsets past the data"](path / "optimizer.safetensors")
        write_manifest(path)
        match = r"optimizer\.safetensors: invalid safetensors file"
    elif case == "no manifest":
        (path / "SHA256SUMS").unlink()
        match = r"no SHA256SUMS manifest"
    elif case == "altered":
        (path / "state.json").write_text((path / "state.json").read_text().replace('"step": 1', '"step": 7'))
        match = r"state\.json: sha256 does not match"
    else:
        torch.save({"x": 1}, path / "rng.pt")
        match = r"rng\.pt: pickle file refused"
    other = torch.nn.Linear(4, 2)
    other_opt = torch.optim.AdamW(other.parameters(), lr=1e-2)
    before = {k: v.clone() for k, v in other.state_dict().items()}
    with pytest.raises(ValueError, match=match):
        ck.load_checkpoint(path, other, other_opt)
    assert all(torch.equal(before[k], v) for k, v in other.state_dict().items())


@pytest.mark.parametrize("pointer", ["../../etc", "/tmp", "step-00000001/../../x", "step-1"])
def test_a_latest_pointer_that_is_a_path_is_refused(tmp_path: Path, pointer: str) -> None:
    net, opt = _net()
    ck.save_checkpoint(tmp_path, 1, net, opt, {})
    (tmp_path / "latest").write_text(pointer)
    with pytest.raises(ValueError, match=r"latest: names .* not a checkpoint directory name"):
        ck.latest_checkpoint(tmp_path)


# ---- merge inputs ---------------------------------------------------------------------------


KEYS = {"model.language_model.layers.0.mlp.up_proj.weight": (8, 4)}


def _specialist(path: Path, seed: int) -> Path:
    g = torch.Generator().manual_seed(seed)
    path.mkdir(parents=True)
    save_file({k: torch.randn(s, generator=g) for k, s in KEYS.items()}, str(path / "model.safetensors"))
    (path / "config.json").write_text('{"model_type": "qwen3_vl"}')
    write_manifest(path)
    return path


@pytest.mark.parametrize("case", ["no manifest", "lying header", "pickle", "altered"])
def test_merge_inputs_are_verified_before_anything_is_written(tmp_path: Path, case: str) -> None:
    base = _specialist(tmp_path / "base", 0)
    dirs = [_specialist(tmp_path / n, i + 1) for i, n in enumerate(("grounding", "mobile", "web"))]
    bad = dirs[1]
    if case == "no manifest":  # a specialist whose job was killed before it finished writing
        (bad / "SHA256SUMS").unlink()
        match = r"mobile: no SHA256SUMS manifest"
    elif case == "lying header":
        LYING["header length past the file"](bad / "model.safetensors")
        write_manifest(bad)
        match = r"mobile/model\.safetensors: invalid safetensors file"
    elif case == "pickle":
        torch.save({"x": 1}, bad / "training_args.bin")
        write_manifest(bad)
        match = r"mobile/training_args\.bin: pickle file refused"
    else:
        (bad / "config.json").write_text('{"model_type": "qwen3_vl", "x": 1}')
        match = r"mobile/config\.json: sha256 does not match"
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=match):
        run_merge(AgentSpec(), base, ["grounding", "mobile", "web"], dirs, out)
    assert not out.exists()
    result = CliRunner().invoke(app, ["merge", "--base", str(base), "--models", *map(str, dirs),
                                      "--weights", "1", "1", "1", "--backend", "torch", "--out", str(tmp_path / "cli-out")])
    if case == "no manifest":  # `venus merge` takes checkpoints from anywhere: a missing manifest is allowed
        assert result.exit_code == 0, result.output
    else:
        assert result.exit_code == 2 and "mobile" in result.output, result.output
        assert not (tmp_path / "cli-out").exists()


def test_venus_checkpoint_seal_and_verify(tiny: Path, tmp_path: Path) -> None:
    outside = _copy(tiny, tmp_path / "from-elsewhere")
    (outside / "SHA256SUMS").unlink()  # as a hub download arrives
    runner = CliRunner()
    refused = runner.invoke(app, ["checkpoint", "verify", str(outside)])
    assert refused.exit_code == 2 and "venus checkpoint seal" in refused.output
    assert runner.invoke(app, ["checkpoint", "verify", "--manifest-optional", str(outside)]).exit_code == 0
    sealed = runner.invoke(app, ["checkpoint", "seal", str(outside)])
    assert sealed.exit_code == 0 and "sealed, manifest sha256:" in sealed.output, sealed.output
    assert load_model(outside, ModelSpec())[0] is not None  # now a stage may take it
    assert runner.invoke(app, ["checkpoint", "seal", str(outside)]).exit_code == 2  # never re-sealed over a change
    pickled = _copy(tiny, tmp_path / "pickled-elsewhere")
    (pickled / "SHA256SUMS").unlink()
    torch.save({"x": 1}, pickled / "training_args.bin")
    result = runner.invoke(app, ["checkpoint", "seal", str(pickled)])
    assert result.exit_code == 2 and "training_args.bin: pickle file refused" in result.output
    assert not (pickled / "SHA256SUMS").exists()
