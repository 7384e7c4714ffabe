"""offline_rl --checkpoints: a run stopped after a checkpoint and restarted on the same directory
(a pod restarted on its PVC) ends with exactly the weights of an uninterrupted run, for navigation
(history alignment's thought pool, aligned histories and sparse variants are part of the state)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from venus_core.runtime.offline_rl import main

SPEC = str(Path(__file__).resolve().parents[2] / "agents" / "venus-tiny")


def _weights(d: Path) -> dict[str, torch.Tensor]:
    out: dict[str, torch.Tensor] = {}
    for f in sorted(d.glob("*.safetensors")):
        out.update(load_file(f))
    return out


def _argv(tiny: Path, data: Path, out: Path, ckpt: Path, *extra: str) -> list[str]:
    sets = ["offline_rl.mobile.max_steps=5", "offline_rl.mobile.prompts_per_step=6", "offline_rl.mobile.group_size=2",
            "offline_rl.mobile.max_new_tokens=4", "offline_rl.mobile.history_alignment.rollouts=1",
            "offline_rl.mobile.save_every=2", "offline_rl.mobile.lr=0.01", "eval.held_out=2",
            "offline_rl.mobile.reward=rl_test_length"]  # a reward with variance in every group: updates happen
    return ["--domain", "mobile", "--spec", SPEC, "--model", str(tiny), "--data", str(data), "--out", str(out),
            "--checkpoints", str(ckpt), *extra, *[a for s in sets for a in ("--set", s)]]


@pytest.mark.slow
def test_stopped_navigation_run_resumes_to_the_same_weights(tiny_dir: Path, nav_data: Path, tmp_path: Path) -> None:
    assert main(_argv(tiny_dir, nav_data, tmp_path / "straight", tmp_path / "ck-straight")) == 0
    straight = json.loads((tmp_path / "straight" / "report.json").read_text())
    assert len(straight["navigation"]["epochs"]) >= 1  # an epoch boundary (history alignment) inside the run

    assert main(_argv(tiny_dir, nav_data, tmp_path / "killed", tmp_path / "ck", "--stop-at", "3")) == 3
    assert (tmp_path / "ck" / "latest").read_text() == "step-00000002" and not (tmp_path / "killed" / "model").exists()
    assert main(_argv(tiny_dir, nav_data, tmp_path / "restarted", tmp_path / "ck")) == 0
    resumed = json.loads((tmp_path / "restarted" / "report.json").read_text())
    assert resumed["resumed_from_step"] == 2 and straight["resumed_from_step"] is None
    assert resumed["navigation"]["epochs"] == straight["navigation"]["epochs"]
    a, b = _weights(tmp_path / "straight" / "model"), _weights(tmp_path / "restarted" / "model")
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert not all(torch.equal(a[k], w) for k, w in _weights(tiny_dir).items())  # it did train
