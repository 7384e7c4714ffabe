from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

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
    assert list((out / "model").glob("*.safetensors")) and (out / "model" / "tokenizer.json").is_file()
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


def test_wise_ft_publishes_the_interpolation_toward_the_base(grounding_l0: Path, mixture_l2: Path,
                                                             tmp_path: Path) -> None:
    from safetensors import safe_open

    from venus_core.train.base import BOOTSTRAP_DIR

    out = tmp_path / "run"
    assert main(_argv([grounding_l0, mixture_l2], out, "--set", "mid_train.wise_ft=0.25")) == 0
    report = json.loads((out / "report.json").read_text())
    # interpolated toward the weights training started from, as this job saved them (the bootstrap's)
    start = out / "checkpoints" / "start"
    assert report["wise_ft"] == {"alpha": 0.25, "base": str(start), "trained": "trained"}
    assert set(report["held_out_trained"]) == set(report["held_out_after"])
    assert (out / "model" / "SHA256SUMS").is_file() and (out / "trained" / "SHA256SUMS").is_file()
    with safe_open(str(start / "model.safetensors"), "pt") as s, safe_open(str(BOOTSTRAP_DIR / "model.safetensors"),
                                                                             "pt") as b0:
        assert all(torch.equal(s.get_tensor(k), b0.get_tensor(k)) for k in b0.keys())
    checked = 0
    with safe_open(str(start / "model.safetensors"), "pt") as b, \
            safe_open(str(out / "trained" / "model.safetensors"), "pt") as t, \
            safe_open(str(next((out / "model").glob("*.safetensors"))), "pt") as m:
        for key in t.keys():
            base, trained, published = b.get_tensor(key).float(), t.get_tensor(key).float(), m.get_tensor(key).float()
            if torch.equal(base, trained):
                continue
            expected = base + 0.25 * (trained - base)
            assert torch.allclose(published, expected, atol=1e-2 * float(expected.abs().max()) + 1e-6), key
            assert not torch.allclose(published, trained)
            checked += 1
    assert checked > 10
    metrics = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert any("wise_ft/grounding/hit" in (m.get("metrics") or {}) for m in metrics)
    # a resumed finished job writes the published model again from its trained weights
    assert main(_argv([grounding_l0, mixture_l2], out, "--resume", "--set", "mid_train.wise_ft=0.25")) == 0
    assert (out / "model" / "SHA256SUMS").is_file()


def test_wise_ft_alpha_is_checked(tmp_path: Path) -> None:
    from venus_core.merge.wise_ft import interpolate

    with pytest.raises(ValueError, match="alpha must be in"):
        interpolate(tmp_path, tmp_path, tmp_path / "out", 1.5)
