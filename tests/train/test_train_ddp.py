from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import load_file

from venus_core.config.training import DistributedSpec, MidTrainSpec
from venus_core.train.distributed import deepspeed_config, precision_dtype


@pytest.mark.slow
def test_two_gloo_processes_end_with_identical_weights(train_tiny_dir: Path, grounding_l0: Path, tmp_path: Path) -> None:
    worker = Path(__file__).with_name("ddp_train_worker.py")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
         str(worker), str(train_tiny_dir), str(grounding_l0), str(tmp_path)],
        env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r0, r1 = load_file(tmp_path / "rank0.safetensors"), load_file(tmp_path / "rank1.safetensors")
    init = load_file(train_tiny_dir / "model.safetensors")
    assert r0.keys() == r1.keys() and all(torch.equal(r0[k], r1[k]) for k in r0)
    assert any(not torch.equal(r0[k], init[k]) for k in init if k in r0)  # it trained
    with safe_open(tmp_path / "rank0.safetensors", "pt") as f:
        meta = f.metadata()
    # 3 steps x (2 per micro-batch x 2 accumulation x 2 ranks)
    assert meta == {"backend": "ddp", "world": "2", "samples": "24"}
    assert (tmp_path / "ckpt" / "latest").read_text() == "step-00000003"


def test_deepspeed_config_from_the_spec() -> None:
    spec = MidTrainSpec(batch_size=4, grad_accum=3, max_grad_norm=0.5,
                        distributed=DistributedSpec(backend="deepspeed", zero_stage=3, gradient_checkpointing=True))
    cfg = deepspeed_config(spec, world_size=8)
    assert cfg["train_batch_size"] == 4 * 3 * 8
    assert cfg["train_micro_batch_size_per_gpu"] == 4 and cfg["gradient_accumulation_steps"] == 3
    assert cfg["gradient_clipping"] == 0.5 and cfg["bf16"] == {"enabled": True} and cfg["fp16"] == {"enabled": False}
    assert cfg["zero_optimization"]["stage"] == 3
    assert cfg["zero_optimization"]["stage3_gather_16bit_weights_on_model_save"] is True
    assert "activation_checkpointing" not in cfg  # transformers checkpoints the layers (enable_gradient_checkpointing)
    two = deepspeed_config(spec.model_copy(update={"distributed": DistributedSpec(zero_stage=2), "precision": "fp32"}), 1)
    assert two["zero_optimization"]["stage"] == 2 and "stage3_prefetch_bucket_size" not in two["zero_optimization"]
    assert two["bf16"] == {"enabled": False} and two["train_batch_size"] == 12
    with pytest.raises(ValueError):
        deepspeed_config(spec, 0)


def test_precision_follows_the_device() -> None:
    assert precision_dtype(MidTrainSpec(), torch.device("cpu")) == torch.float32
    assert precision_dtype(MidTrainSpec(), torch.device("cuda", 0)) == torch.bfloat16
    assert precision_dtype(MidTrainSpec(precision="bf16"), torch.device("cpu")) == torch.bfloat16


def test_deepspeed_accepts_the_generated_config() -> None:
    ds_config = pytest.importorskip("deepspeed.runtime.config")
    for stage in (2, 3):
        spec = MidTrainSpec(batch_size=8, grad_accum=2, distributed=DistributedSpec(backend="deepspeed", zero_stage=stage))
        parsed = ds_config.DeepSpeedConfig(deepspeed_config(spec, world_size=1))
        assert parsed.zero_optimization_stage == stage
        assert (parsed.train_batch_size, parsed.gradient_accumulation_steps) == (16, 2)
