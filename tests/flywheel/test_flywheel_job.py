"""The job end to end: `venus data generate` with the shipped bootstrap checkpoint as the policy on
level-0/1 boards (128 x 128) leased through the gateway over ADB, and score_data taking the
generated dataset as its source `flywheel` (what the pipeline option wires)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from venus_core.cli import app
from venus_core.data.validate import validate_dataset
from venus_core.runtime import score_data
from venus_core.runtime.generate_data import run

ROOT = Path(__file__).resolve().parents[2]
TINY = ROOT / "agents" / "venus-tiny"
runner = CliRunner()
needs_adb = pytest.mark.skipif(shutil.which("adb") is None, reason="Debian adb not installed")


@needs_adb
def test_venus_data_generate_runs_rounds_with_the_bootstrap_policy_on_leased_phones(tmp_path: Path) -> None:
    out = tmp_path / "gen"
    res = runner.invoke(app, ["data", "generate", "-o", str(out), "--spec", str(TINY), "--rounds", "2", "--tasks",
                              "4", "--set", "flywheel.candidates_per_round=24", "--set", "flywheel.devices=2"],
                        catch_exceptions=False)
    assert res.exit_code == 0, res.output
    assert "round 1: proposed 4" in res.output and "success [95 % CI]" in res.output
    report = json.loads((out / "report.json").read_text())
    assert [r["proposed"] for r in report["rounds"]] == [4, 4]
    assert report["policy"]["revision"].startswith("venus-tiny-bootstrap@")
    assert report["provenance"]["job"] == "generate_data" and report["provenance"]["inputs"]
    assert report["device_source"]["leased"] == report["device_source"]["released"] >= 2
    assert [s["prompt"] for s in report["seeds"]] == ["Click the <...> button"] * 2
    assert validate_dataset(out / "dataset").ok
    assert sum(1 for _ in (out / "tasks.jsonl").open()) == 8
    bad = runner.invoke(app, ["data", "generate", "-o", str(tmp_path / "x"), "--spec", str(TINY), "--set",
                              "flywheel.judge=true"])
    assert bad.exit_code == 1 and "need an MLLM judge" in bad.output


def test_score_data_scores_the_generated_dataset_as_the_source_flywheel(tmp_path: Path) -> None:
    from venus_core.config import load_spec

    spec = load_spec(TINY, ["flywheel.policy=oracle", "flywheel.rounds=1", "flywheel.tasks_per_round=6",
                            "flywheel.candidates_per_round=16", "online_rl.device_service=local"])
    report = run(spec, tmp_path / "gen", log=lambda m: None)
    assert report["total"]["written"] == 6  # the planner solves every board
    synth = tmp_path / "nav"
    res = runner.invoke(app, ["data", "synth", "--kind", "navigation", "-n", "8", "--level", "1", "--seed", "5",
                              "-o", str(synth)], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    out = tmp_path / "scored"
    rc = score_data.main(["--spec", str(TINY), "--out", str(out), "--data", str(synth), "--generated",
                          str(tmp_path / "gen" / "dataset"), "--clean-steps", ""])
    assert rc == 0
    scored = json.loads((out / "report.json").read_text())
    assert scored["sources"]["flywheel"]["records"] == 6
    assert scored["scoring"]["flywheel"]["read"] == 6
    named = shutil.copytree(synth, tmp_path / "flywheel")  # a --data source already called flywheel: refused
    assert score_data.main(["--spec", str(TINY), "--out", str(tmp_path / "dup"), "--data", str(named),
                            "--generated", str(tmp_path / "gen" / "dataset")]) == 1
