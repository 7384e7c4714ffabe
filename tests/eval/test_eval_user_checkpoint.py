"""`venus eval --model DIR` on a checkpoint the user brings: a plain `save_pretrained` directory
(no SHA256SUMS) evaluates; one with a SHA256SUMS that no longer matches is refused. Stage outputs
(the evaluate job, `make_predictor`'s default) still require the manifest."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from venus_core.config import AgentSpec
from venus_core.eval import suites
from venus_core.eval.results import load_result
from venus_core.models.integrity import MANIFEST, CheckpointIntegrityError, write_manifest

from eval_fixtures import write_grounding


@pytest.fixture(scope="module")
def plain_ckpt(tiny_ckpt: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model written by transformers' own `save_pretrained` (model and processor): no SHA256SUMS."""
    from venus_core.models.loading import load_model

    model, processor = load_model(tiny_ckpt, AgentSpec().model)
    out = tmp_path_factory.mktemp("user-ckpt") / "plain"
    model.save_pretrained(out)
    processor.save_pretrained(out)
    assert not (out / MANIFEST).exists() and (out / "model.safetensors").is_file()
    return out


def _app() -> typer.Typer:
    from venus_core.cli.eval_cmd import register

    app = typer.Typer()
    register(app)

    @app.command()
    def version() -> None:  # a second command, so that typer keeps `eval` as a group
        pass

    return app


def test_plain_save_pretrained_dir_evaluates(plain_ckpt: Path, tmp_path: Path) -> None:
    g = write_grounding(tmp_path / "ss")
    out = tmp_path / "out"
    r = CliRunner().invoke(_app(), ["eval", "grounding", "--model", str(plain_ckpt), "--data", str(g),
                                    "--limit", "1", "--batch-size", "1", "--max-new-tokens", "4",
                                    "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert load_result(out / "ss.json").model == "plain"
    # a stage output must still have its manifest (the evaluate job calls make_predictor's default)
    with pytest.raises(CheckpointIntegrityError, match="no SHA256SUMS manifest"):
        suites.make_predictor("m", str(plain_ckpt), AgentSpec().model, device="cpu")


def test_user_dir_with_tampered_manifest_is_refused(plain_ckpt: Path, tmp_path: Path) -> None:
    import shutil

    d = tmp_path / "tampered"
    shutil.copytree(plain_ckpt, d)
    write_manifest(d)
    weights = d / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 0x01  # one bit of the last weight: the header stays valid, the digest does not
    weights.write_bytes(bytes(raw))
    g = write_grounding(tmp_path / "ss")
    r = CliRunner().invoke(_app(), ["eval", "grounding", "--model", str(d), "--data", str(g), "--limit", "1",
                                    "--out", str(tmp_path / "out")])
    assert r.exit_code == 2, r.output
    assert "model.safetensors" in r.output and "sha256 does not match" in r.output
    assert not (tmp_path / "out" / "ss.json").exists()
