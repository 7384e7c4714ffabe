"""The data stage end to end: runtime job `score_data` and the `venus data score|clean|mix` commands."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from venus_core.cli.score_cmd import register
from venus_core.data.store import DatasetReader
from venus_core.data.validate import validate_dataset
from venus_core.runtime.score_data import main
from venus_core.scoring.testing_server import ScriptedChatServer, judgement_reply

AGENT = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def _app() -> typer.Typer:
    app = typer.Typer()
    data = typer.Typer()
    register(data)
    app.add_typer(data, name="data")
    return app


def test_runtime_job_rules_judge(tmp_path: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "out"
    assert (
        main(
            [
                "--spec",
                str(AGENT),
                "--data",
                str(synth_dir),
                "--out",
                str(out),
                "--set",
                "data.validation_fraction=0.25",
            ]
        )
        == 0
    )
    printed = capsys.readouterr().out
    assert "kept" in printed and "TOTAL" in printed and "hi-fi before" in printed
    report = json.loads((out / "report.json").read_text())
    n = len(DatasetReader(synth_dir))
    assert report["job"] == "score_data" and report["inputs"][0]["sha256"].startswith("manifest:")
    cleaned = report["clean"]["synth"]["written"]
    decisions = report["scoring"]["synth"]["decisions"]
    assert report["sources"]["synth"]["records"] == n and sum(decisions.values()) == cleaned
    assert report["judge"]["id"] == "rules"
    assert report["final_datasets"] == {"synth": "scored/synth/dataset"}  # what offline RL --data-root reads
    mix = report["mixture"]
    assert mix["train"] + mix["validation"] == sum(mix["selected_by_domain"].values()) > 0
    for part in ("cleaned/synth/dataset", "scored/synth/dataset", "mixture/train"):
        assert validate_dataset(out / part).ok, part
    lines = (out / "scored" / "synth" / "decisions.jsonl").read_text().splitlines()
    assert len(lines) == cleaned


def test_runtime_job_without_scoring(tmp_path: Path, synth_dir: Path) -> None:
    out = tmp_path / "out"
    assert main(["--spec", str(AGENT), "--data", str(synth_dir), "--out", str(out), "--clean-steps", "",
                 "--set", "scoring.enabled=false"]) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["scoring"] == {} and "judge" not in report and not (out / "scored").exists()
    assert report["final_datasets"] == {"synth": "cleaned/synth/dataset"}
    assert report["clean"]["synth"]["steps"] == {} and report["mixture"]["train"] > 0


def test_runtime_job_rejects_invalid_dataset(
    tmp_path: Path, synth_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import shutil

    bad = tmp_path / "bad"
    shutil.copytree(synth_dir, bad)
    shard = next((bad / "shards").iterdir())
    shard.write_text(shard.read_text() + "{not json}\n")
    assert main(["--spec", str(AGENT), "--data", str(bad), "--out", str(tmp_path / "o")]) == 1
    assert "failed validation" in capsys.readouterr().err


def test_cli_score_with_openai_judge_and_cache(tmp_path: Path, synth_dir: Path) -> None:
    runner = CliRunner()
    with ScriptedChatServer(default=lambda _r: judgement_reply(9, 8)) as srv:
        args = [
            "data",
            "score",
            str(synth_dir),
            "-o",
            str(tmp_path / "s"),
            "--set",
            "scoring.judge=openai",
            "--set",
            f"scoring.endpoint={srv.base_url}",
            "--set",
            "scoring.judge_model=qwen3-vl-judge",
            "--json",
        ]
        first = runner.invoke(_app(), args)
        assert first.exit_code == 0, first.output
        calls = len(srv.requests)
        second = runner.invoke(_app(), args)
        assert second.exit_code == 0 and len(srv.requests) == calls == len(DatasetReader(synth_dir))
    assert json.loads(first.output)["decisions"]["kept"] == calls
    bad = runner.invoke(
        _app(), ["data", "score", str(synth_dir), "-o", str(tmp_path / "t"), "--set", "scoring.judge=nope"]
    )
    assert bad.exit_code == 2 and "unknown judges name 'nope'" in bad.output


def test_cli_clean_and_mix(tmp_path: Path, synth_dir: Path) -> None:
    runner = CliRunner()
    r = runner.invoke(
        _app(),
        [
            "data",
            "clean",
            str(synth_dir),
            "-o",
            str(tmp_path / "c"),
            "--step",
            "unify_scroll",
            "--step",
            "filter_inconsistent",
        ],
    )
    assert r.exit_code == 0, r.output
    assert "unify_scroll" in r.output and "resample_actions" not in r.output
    bad = runner.invoke(
        _app(), ["data", "clean", str(synth_dir), "-o", str(tmp_path / "d"), "--step", "nope"]
    )
    assert bad.exit_code == 1 and "unknown cleaning step" in bad.output
    m = runner.invoke(
        _app(),
        [
            "data",
            "mix",
            str(tmp_path / "c" / "dataset"),
            "-o",
            str(tmp_path / "m"),
            "--set",
            "data.validation_fraction=0.0",
            "--json",
        ],
    )
    assert m.exit_code == 0, m.output
    manifest = json.loads(m.output)
    assert manifest["splits"]["validation"]["records"] == 0 and manifest["splits"]["train"]["records"] > 0
