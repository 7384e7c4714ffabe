"""scripts/gpu_check.sh, the device check (issue 20 §4), proven here in its CPU dry run.

Why: the check is run once, on a lent GPU machine with minutes of device time; a broken script
would waste them. The dry run goes through the same pieces on the CPU at the smallest size, so this
test fails when a piece breaks, reports a figure it did not measure, or silently does nothing: each
piece must end ok with every figure of `FIGURES` (a number, a verdict, or "SKIPPED: <reason>"), or
say SKIPPED with a reason, and the pieces that can run on a CPU must have done their work (weights
moved, the synced server samples from them, two mid-training steps with a finite loss).
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.sh"
CPU_PIECES = ("devices", "grpo", "sync_venus_serve", "mid_train")


def _module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_check", ROOT / "scripts" / "gpu_check.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # its dataclasses look their module up while being defined
    spec.loader.exec_module(mod)
    return mod


def _run(tmp_path: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "VENUS_PYTHON": sys.executable}
    proc = subprocess.run(["bash", str(SCRIPT), *args, "--out", str(out), "--workdir", str(tmp_path / "work")],
                          capture_output=True, text=True, env=env, timeout=900, cwd=tmp_path)
    assert out.is_file(), proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc, json.loads(out.read_text())


def _reason(value: Any) -> bool:
    return isinstance(value, str) and value.startswith("SKIPPED: ") and len(value) > len("SKIPPED: ") + 5


@pytest.mark.slow
def test_the_cpu_dry_run_reports_every_figure_or_a_reason(tmp_path: Path) -> None:
    gc = _module()
    proc, report = _run(tmp_path, "--cpu-dry-run")
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert report["meta"]["mode"] == "cpu-dry-run" and report["meta"]["torch"] == torch.__version__
    for piece in gc.PIECES:
        result = report[piece]
        assert f"== {piece}: " in proc.stdout  # printed as well as written
        if result["status"] != "ok":
            assert _reason(result["status"]), (piece, result["status"])
            continue
        for name in gc.FIGURES[piece]:
            assert name in result, (piece, name)
            value = result[name]
            assert value is not None and value != "" and (not isinstance(value, str) or not value.startswith(
                "FAILED")), (piece, name, value)
            if isinstance(value, float):
                assert math.isfinite(value), (piece, name, value)
            if isinstance(value, str) and value.startswith("SKIPPED"):
                assert _reason(value), (piece, name, value)
    assert {p: report[p]["status"] for p in CPU_PIECES} == dict.fromkeys(CPU_PIECES, "ok")
    assert _reason(report["sync_vllm"]["status"])  # vLLM needs a GPU

    devices = report["devices"]
    assert devices["device"] == "cpu" and devices["cuda_device_count"] == torch.cuda.device_count() == 0
    assert all(v.startswith("refused: ") and "torch sees 0" in v for v in devices["tiny_spec_one_gpu"].values())
    assert devices["spec_8b"]["mid_train"] == "refused (8 asked, 0 seen)"

    grpo = report["grpo"]
    assert grpo["device"] == "cpu" and grpo["dtype"] == "float32" and grpo["steps"] == 1
    assert grpo["loss_finite"] and grpo["updated"] == 1.0 and grpo["groups_zero_variance"] < 2
    assert 0 < grpo["weights_changed_frac"] <= 1 and grpo["max_abs_weight_change"] > 0
    assert grpo["step_s"] > 0 and grpo["backward_s"] > 0
    assert _reason(grpo["peak_cuda_mem_mib"])

    sync = report["sync_venus_serve"]
    assert sync["server_placement"].startswith("cpu (float32")
    assert sync["weights_version"] == 1 and sync["completion_tokens"] > 0 and sync["tokens_per_s"] > 0
    # fp32 on both sides: the server scores what it samples as the trainer does, before and after the sync,
    # and after it the served log-probs are the updated weights', not the start weights'
    assert sync["max_abs_logprob_diff_before_sync"] < 1e-4 and sync["max_abs_logprob_diff_vs_trainer"] < 1e-4
    assert sync["max_abs_logprob_diff_vs_start"] > 1e-3 and sync["reflects_new_weights"] is True

    mid = report["mid_train"]
    assert mid["backend"] == "single" and mid["steps"] == 2 and mid["loss_finite"] and mid["loss"] > 0
    assert _reason(mid["deepspeed"]) and mid["job_wall_s"] >= mid["train_wall_s"] > 0


@pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible: the GPU run would not stop")
def test_a_gpu_run_without_a_gpu_stops_after_the_start_up_check(tmp_path: Path) -> None:
    gc = _module()
    proc, report = _run(tmp_path)
    assert proc.returncode == 2, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert report["meta"]["mode"] == "gpu"
    devices = report["devices"]["status"]
    assert devices.startswith("FAILED: no usable CUDA device") and "torch sees 0" in devices
    for piece in gc.PIECES[1:]:
        assert report[piece]["status"] == "SKIPPED: the devices check failed (no usable GPU), so nothing else ran"


def test_the_entry_points_written_for_an_uninstalled_checkout_are_the_installed_ones(tmp_path: Path) -> None:
    """On the device machine venus_core runs from the working tree, not installed: the plugin
    registries find their modules through the dist-info the check writes."""
    gc = _module()
    written = importlib.metadata.Distribution.at(gc.write_entry_points(tmp_path / "site"))
    installed = importlib.metadata.distribution("venus-core")
    plugins = {(e.group, e.name, e.value) for e in installed.entry_points if e.group.startswith("venus_core.")}
    assert plugins and {(e.group, e.name, e.value) for e in written.entry_points} >= plugins
    assert written.metadata["Name"] == "venus-core" and written.version == installed.version
