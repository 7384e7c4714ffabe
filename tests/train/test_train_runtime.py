from __future__ import annotations

import json
from pathlib import Path

import pytest

from venus_core.runtime.mid_train import main

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


def _argv(data: list[Path], out: Path, *extra: str) -> list[str]:
    argv = ["--spec", str(SPEC), "--out", str(out), "--eval-limit", "2",
            "--set", "mid_train.max_steps=2", "--set", "mid_train.batch_size=2", "--set", "mid_train.save_every=1",
            "--set", "mid_train.eval_every=100", "--set", "mid_train.warmup_steps=1",
            "--set", "mid_train.max_seq_len=1536", "--set", "data.validation_fraction=0.3", *extra]
    for d in data:
        argv += ["--data", str(d)]
    return argv


def test_runtime_job_end_to_end(grounding_l0: Path, mixture_l2: Path, tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(_argv([grounding_l0, mixture_l2], out)) == 0
    report = json.loads((out / "report.json").read_text())
    assert report["job"] == "mid_train" and report["steps"] == 2 and report["backend"] == "single"
    assert {i["uri"] for i in report["inputs"]} == {str(grounding_l0), str(mixture_l2)}
    assert set(report["held_out_after"]) >= {"grounding/hit", "grounding/parse", "navigation/type", "navigation/step"}
    hit = report["held_out_after"]["grounding/hit"]
    assert 0 <= hit["ci95_low"] <= hit["value"] <= hit["ci95_high"] <= 1 and hit["n"] >= 1
    assert report["held_out_before"] is not None
    assert report["mixture"]["samples"] == 4 and report["data"]["held_out"]
    assert (out / "model" / "model.safetensors").is_file() and (out / "model" / "tokenizer.json").is_file()
    kinds = [json.loads(line)["kind"] for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert kinds[0] == "params" and "metrics" in kinds and kinds[-1] == "artifact"
    assert (out / "checkpoints" / "latest").read_text() == "step-00000002"
    # --resume of a finished run trains no further and reports the same step count.
    assert main(_argv([grounding_l0, mixture_l2], out, "--resume")) == 0
    again = json.loads((out / "report.json").read_text())
    assert again["steps"] == 2 and again["held_out_before"] is None


def test_missing_dataset_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="not a Venus dataset"):
        main(_argv([tmp_path / "nope"], tmp_path / "run"))
