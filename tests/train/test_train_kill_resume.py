from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

SPEC = Path(__file__).resolve().parents[2] / "agents" / "venus-tiny"
STEPS = 30
KILL_AT = random.Random(6).randint(1, STEPS - 1)  # killed once its checkpoint pointer names this step or a later one


def _cmd(data: Path, out: Path, tiny: Path, *extra: str) -> list[str]:
    sets = {"model.base": str(tiny), "mid_train.max_steps": str(STEPS), "mid_train.batch_size": "2",
            "mid_train.save_every": "1", "mid_train.eval_every": "1000", "mid_train.warmup_steps": "3",
            "data.validation_fraction": "0.1"}
    argv = [sys.executable, "-m", "venus_core.runtime.mid_train", "--spec", str(SPEC), "--data", str(data),
            "--out", str(out), "--eval-limit", "1", *extra]
    for k, v in sets.items():
        argv += ["--set", f"{k}={v}"]
    return argv


@pytest.mark.slow
def test_sigkilled_run_resumes_to_the_same_weights(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    straight = tmp_path / "straight"
    subprocess.run(_cmd(grounding_l0, straight, train_tiny_dir), env=env, check=True, capture_output=True, timeout=600)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(grounding_l0, killed, train_tiny_dir), env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    latest = killed / "checkpoints" / "latest"
    deadline = time.monotonic() + 600
    while not (latest.is_file() and latest.read_text() >= f"step-{KILL_AT:08d}"):
        assert proc.poll() is None, "the run ended before it could be killed"
        assert time.monotonic() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL
    assert not (killed / "model").exists()
    stopped_at = latest.read_text()
    assert f"step-{KILL_AT:08d}" <= stopped_at < f"step-{STEPS:08d}"

    subprocess.run(_cmd(grounding_l0, killed, train_tiny_dir, "--resume"), env=env, check=True,
                   capture_output=True, timeout=600)
    # venus-tiny publishes the weights interpolated toward the start (mid_train.wise_ft): both the
    # trained weights and the published ones must come out the same
    for sub in ("trained", "model"):
        (fa,), (fb,) = list((straight / sub).glob("*.safetensors")), list((killed / sub).glob("*.safetensors"))
        a, b = load_file(fa), load_file(fb)
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a), \
            f"{sub}: diverged after resuming {stopped_at}"
