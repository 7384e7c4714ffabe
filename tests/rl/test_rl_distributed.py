"""Offline GRPO across processes (venus_core.rl.distributed): two gloo ranks on loopback end with
the weights of one process on the same global batch, with DDP and with FSDP2, straight through and
after a kill and resume; plus the pieces that make it exact (per-group sampling seeds, the loss
divided by the global token count)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from venus_core.config.spec import GroundingRLSpec, ModelSpec
from venus_core.config.training import RLDistributedSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.rl.grpo import OfflineGRPO
from venus_core.rl.losses import grpo_loss
from venus_core.rl.prompts import grounding_item
from venus_core.rl.rollout import sample_groups
from venus_core.train.distributed import DistEnv, setup
from venus_core.train.tracker import MemoryTracker

from rl_helpers import LENGTH_REWARD

WORKER = Path(__file__).with_name("grpo_dist_worker.py")
LR = 1e-2  # the worker's learning rate


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _launch(procs: int, tiny: Path, data: Path, out: Path, mode: str, backend: str, optimizer: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    args = [str(WORKER), str(tiny), str(data), str(out), mode, backend, optimizer]
    cmd = ([sys.executable, *args] if procs == 1 else
           [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr", "127.0.0.1",
            "--master_port", str(_port()), *args])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]


def _max_diff(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> float:
    assert a.keys() == b.keys()
    return max(float((a[k] - b[k]).abs().max()) for k in a)


@pytest.fixture(scope="module")
def one_process(tiny_dir: Path, grounding_data: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The reference runs: one process, the same global batch, with SGD and with the trainer's AdamW."""
    root = tmp_path_factory.mktemp("grpo_one")
    for opt in ("sgd", "adamw"):
        _launch(1, tiny_dir, grounding_data, root / opt, "plain", "auto", opt)
    return {opt: root / opt for opt in ("sgd", "adamw")}


def _check_same_run(ref: Path, got: Path, *, atol: float, rtol: float) -> float:
    r0, r1 = load_file(got / "rank0.safetensors"), load_file(got / "rank1.safetensors")
    assert all(torch.equal(r0[k], r1[k]) for k in r0)  # the ranks agree bit for bit
    one = load_file(ref / "rank0.safetensors")
    assert all(torch.allclose(one[k], r0[k], rtol=rtol, atol=atol) for k in one), _max_diff(one, r0)
    # the same rollouts: rewards of every step equal exactly, the losses to rounding
    a, b = json.loads((ref / "metrics.json").read_text()), json.loads((got / "metrics.json").read_text())
    assert len(a) == len(b) == 2
    for x, y in zip(a, b, strict=True):
        for k in ("reward/mean", "reward/std", "completion_len/mean", "groups/total", "samples"):
            assert x[k] == y[k], (k, x[k], y[k])
        assert x["loss"] == pytest.approx(y["loss"], rel=1e-3, abs=1e-6)
    return _max_diff(one, r0)


@pytest.mark.slow
def test_two_gloo_ddp_ranks_end_with_the_one_process_weights(one_process: dict[str, Path], tiny_dir: Path,
                                                             grounding_data: Path, tmp_path: Path) -> None:
    init = load_file(tiny_dir / "model.safetensors")
    _launch(2, tiny_dir, grounding_data, tmp_path / "sgd", "plain", "ddp", "sgd")
    moved = _max_diff({k: v for k, v in load_file(one_process["sgd"] / "rank0.safetensors").items() if k in init},
                      {k: init[k] for k in init})
    assert moved > 1e-4  # it trained
    # SGD: the update is linear in the gradient, so the averaged gradients show exactly
    # (measured: max |Δ| 7.5e-9 against an update of 8.4e-4)
    assert _check_same_run(one_process["sgd"], tmp_path / "sgd", atol=1e-7, rtol=1e-5) < 1e-7
    # the trainer's AdamW: sign-like first steps amplify rounding in near-zero gradients
    # (measured: max |Δ| 7e-4 = 0.07 lr, against moves of 4 lr); the rollouts are still identical
    _launch(2, tiny_dir, grounding_data, tmp_path / "adamw", "plain", "ddp", "adamw")
    assert _check_same_run(one_process["adamw"], tmp_path / "adamw", atol=0.25 * LR, rtol=0) < 0.25 * LR


@pytest.mark.slow
def test_two_gloo_ranks_resume_exactly_and_fsdp2_matches(one_process: dict[str, Path], tiny_dir: Path,
                                                         grounding_data: Path, tmp_path: Path) -> None:
    run = tmp_path / "resumed"
    _launch(2, tiny_dir, grounding_data, run, "stop", "ddp", "sgd")  # killed after step 1 (checkpointed)
    assert (run / "ckpt" / "latest").read_text() == "step-00000001" and not (run / "rank0.safetensors").exists()
    _launch(2, tiny_dir, grounding_data, run, "resume", "ddp", "sgd")
    assert (run / "ckpt" / "latest").read_text() == "step-00000002"
    one = load_file(one_process["sgd"] / "rank0.safetensors")
    got = load_file(run / "rank0.safetensors")
    assert all(torch.allclose(one[k], got[k], rtol=1e-5, atol=1e-7) for k in one), _max_diff(one, got)
    _launch(2, tiny_dir, grounding_data, tmp_path / "fsdp2", "plain", "fsdp2", "sgd")
    fs = load_file(tmp_path / "fsdp2" / "rank0.safetensors")  # gathered from the shards by rank 0
    assert not (tmp_path / "fsdp2" / "rank1.safetensors").exists()
    assert all(torch.allclose(one[k], fs[k], rtol=1e-5, atol=1e-7) for k in one), _max_diff(one, fs)


def test_loss_shares_of_a_split_batch_add_up_to_the_whole() -> None:
    g = torch.Generator().manual_seed(0)
    logp, ref = -torch.rand(6, 5, generator=g), -torch.rand(6, 5, generator=g)
    mask = (torch.rand(6, 5, generator=g) > 0.3).float()
    mask[:, 0] = 1.0
    adv = torch.randn(6, generator=g)
    kw = dict(clip_eps=0.2, kl_coef=0.1)
    whole = grpo_loss(logp, logp + 0.05, ref, adv, mask, **kw)  # type: ignore[arg-type]
    n = float(mask.sum())
    a = grpo_loss(logp[:2], logp[:2] + 0.05, ref[:2], adv[:2], mask[:2], tokens=n, **kw)  # type: ignore[arg-type]
    b = grpo_loss(logp[2:], logp[2:] + 0.05, ref[2:], adv[2:], mask[2:], tokens=n, **kw)  # type: ignore[arg-type]
    assert float(a.loss + b.loss) == pytest.approx(float(whole.loss), rel=1e-6)
    assert a.kl + b.kl == pytest.approx(whole.kl, rel=1e-6)
    assert a.clip_fraction + b.clip_fraction == pytest.approx(whole.clip_fraction, rel=1e-6)
    with pytest.raises(ValueError, match="tokens"):
        grpo_loss(logp, logp, ref, adv, mask, tokens=0.0, **kw)  # type: ignore[arg-type]


def test_a_groups_rollouts_do_not_depend_on_the_other_prompts(tiny_dir: Path, grounding_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    reader = DatasetReader(grounding_data)
    chats = [grounding_item(r, reader.open_image).messages for r in list(reader)[:3]]
    both = sample_groups(model, proc, chats, 3, 6, group_seeds=[11, 12, 13])
    alone = sample_groups(model, proc, chats[1:2], 3, 6, group_seeds=[12])
    assert both.texts[3:6] == alone.texts
    t = alone.completion_ids.shape[1]
    assert torch.equal(both.completion_ids[3:6, :t], alone.completion_ids)
    with pytest.raises(ValueError, match="group seeds"):
        sample_groups(model, proc, chats, 3, 6, group_seeds=[1])


def test_one_process_setup_and_a_batch_smaller_than_the_world(tiny_dir: Path, grounding_data: Path) -> None:
    assert setup(RLDistributedSpec(backend="fsdp2"), "cpu").backend == "single"  # nothing to shard over
    assert setup(RLDistributedSpec(), "cpu").backend == "single"
    model, proc = load_model(tiny_dir, ModelSpec())
    spec = GroundingRLSpec(reward=LENGTH_REWARD, group_size=2, prompts_per_step=1, max_new_tokens=4)
    env = DistEnv(rank=0, world=2, local_rank=0, device=torch.device("cpu"), backend="single")
    trainer = OfflineGRPO(model, proc, spec, MemoryTracker(), env=env)
    reader = DatasetReader(grounding_data)
    with pytest.raises(ValueError, match="every rank needs a group"):
        trainer.step([grounding_item(next(iter(reader)), reader.open_image)], 0)
