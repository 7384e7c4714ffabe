"""mid_train on a checkpoint volume: inside a Kubeflow run with `platform.checkpoints_pvc`, the
launcher (runtime.launch) gives the job `/checkpoints/<KFP run id>/mid_train/checkpoints`, and a
restarted pod of the same run continues from the last checkpoint there without being told to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from venus_core.runtime import launch

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"


@pytest.mark.slow
def test_restarted_pod_resumes_from_the_pvc(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setattr(launch, "CHECKPOINTS_MOUNT", tmp_path / "pvc")
    monkeypatch.setenv("KFP_RUN_ID", "run-42")
    sets = {"model.base": str(train_tiny_dir), "mid_train.max_steps": "4", "mid_train.batch_size": "2",
            "mid_train.save_every": "1", "mid_train.eval_every": "1000", "mid_train.warmup_steps": "0",
            "data.validation_fraction": "0.1", "platform.checkpoints_pvc": "venus-checkpoints"}

    def argv(out: Path, *extra: str) -> list[str]:
        return ["mid_train", "--spec", str(SPEC), "--data", str(grounding_l0), "--out", str(out), "--eval-limit", "1",
                *extra, *[a for k, v in sets.items() for a in ("--set", f"{k}={v}")]]

    assert launch.main(argv(tmp_path / "pod-1", "--stop-at", "2")) == 0  # the pod dies after step 2
    ckpt = tmp_path / "pvc" / "run-42" / "mid_train" / "checkpoints"
    assert (ckpt / "latest").read_text() == "step-00000002" and not (tmp_path / "pod-1" / "model").exists()
    capfd.readouterr()
    assert launch.main(argv(tmp_path / "pod-2")) == 0  # the restarted pod: a fresh output dir, the same PVC
    assert "resuming from" in capfd.readouterr().err
    report = json.loads((tmp_path / "pod-2" / "report.json").read_text())
    assert report["steps"] == 4 and report["held_out_before"] is None  # continued, not restarted
    assert (ckpt / "latest").read_text() == "step-00000004"
