from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from venus_core.config.spec import ModelSpec, TinyModelSpec
from venus_core.train import base
from venus_core.train.bootstrap import DEFAULT_STAGES, scaled, with_steps

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def test_stage_plans() -> None:
    assert [s.level for s in DEFAULT_STAGES] == [0, 1, 2, 3]
    half = scaled(DEFAULT_STAGES, 0.5)
    assert [s.steps for s in half] == [round(s.steps / 2) for s in DEFAULT_STAGES]
    assert [s.n for s in scaled(DEFAULT_STAGES, 3.0)] == [s.n for s in DEFAULT_STAGES]  # data never grows
    plan = with_steps(DEFAULT_STAGES, [0, 5, 0, 2])
    assert [(s.level, s.steps) for s in plan] == [(1, 5), (3, 2)]
    with pytest.raises(ValueError):
        with_steps(DEFAULT_STAGES, [1, 2])
    with pytest.raises(ValueError):
        with_steps(DEFAULT_STAGES, [0, 0, 0, 0])
    with pytest.raises(ValueError):
        scaled(DEFAULT_STAGES, 0)


def test_base_resolution(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert base.resolve_base(ModelSpec(base="tiny"), tmp_path) == "tiny"
    assert base.resolve_base(ModelSpec(base=str(tmp_path)), tmp_path) == tmp_path
    with pytest.raises(FileNotFoundError, match="no such local directory"):
        base.resolve_base(ModelSpec(base=str(tmp_path / "nope")), tmp_path)
    monkeypatch.setattr(base, "BOOTSTRAP_DIR", tmp_path / "missing")
    with pytest.raises(FileNotFoundError, match="venus bootstrap"):
        base.resolve_base(ModelSpec(base="bootstrap"), tmp_path)


def test_shipped_bootstrap_matches_the_default_screen_size() -> None:
    if not (base.BOOTSTRAP_DIR / "config.json").is_file():
        pytest.skip("no shipped bootstrap checkpoint")
    assert base.resolve_base(ModelSpec(base="bootstrap"), "/unused") == base.BOOTSTRAP_DIR
    with pytest.raises(ValueError, match="image_size"):
        base.resolve_base(ModelSpec(base="bootstrap", tiny=TinyModelSpec(image_size=256)), "/unused")
    size = sum(f.stat().st_size for f in base.BOOTSTRAP_DIR.iterdir())
    assert size < 10 * 2**20


@pytest.mark.slow
def test_bootstrap_command_writes_a_loadable_checkpoint(tmp_path: Path) -> None:
    from venus_core.cli.train_cmd import register
    from venus_core.models.loading import load_model

    app = typer.Typer()
    register(app)
    app.command("noop")(lambda: None)  # a second command keeps `bootstrap` a named sub-command
    out = tmp_path / "boot"
    res = CliRunner().invoke(app, ["bootstrap", "--out", str(out), "--spec", str(SPEC), "--scale", "0.001",
                                   "--steps", "1,1,0,1", "--eval-limit", "1"])
    assert res.exit_code == 0, res.output
    report = json.loads((out / "bootstrap_report.json").read_text())
    assert [s["level"] for s in report["stages"]] == [0, 1, 3] and all(s["steps"] == 1 for s in report["stages"])
    load_model(out, ModelSpec())
    again = CliRunner().invoke(app, ["bootstrap", "--out", str(out), "--spec", str(SPEC)])
    assert again.exit_code != 0 and "not empty" in again.output
