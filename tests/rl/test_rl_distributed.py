"""Offline GRPO across processes (venus_core.rl.distributed): two gloo ranks on loopback end with
the weights of one process on the same global batch, with DDP and with FSDP2, straight through and
after a kill and resume; an FSDP2 run (whole weights and LoRA) stopped after a checkpoint and
resumed ends with the uninterrupted run's weights bit for bit, and exports its model (LoRA merged
from the gathered weights), also as the `offline_rl` job itself under torchrun; plus the pieces that make it exact (per-group sampling seeds, the loss
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
from venus_core.config.training import LoraSpec, RLDistributedSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.rl.grpo import OfflineGRPO, apply_lora, merge_lora_weights
from venus_core.rl.losses import grpo_loss
from venus_core.rl.prompts import grounding_item
from venus_core.rl.rollout import sample_groups
from venus_core.train.checkpoint import FILES, load_checkpoint
from venus_core.train.distributed import DistEnv, setup
from venus_core.train.fsdp2_checkpoint import latest_fsdp2_checkpoint, load_fsdp2_checkpoint, save_fsdp2_checkpoint
from venus_core.train.tracker import MemoryTracker

from rl_helpers import LENGTH_REWARD

WORKER = Path(__file__).with_name("grpo_dist_worker.py")
LR = 1e-2  # the worker's learning rate


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _run(procs: int, args: list[str], *, ok: bool = True) -> subprocess.CompletedProcess[str]:
    """`python args` as one process, or as `procs` torchrun ranks on loopback; asserts the exit."""
    cmd = ([sys.executable, *args] if procs == 1 else
           [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs), "--master_addr", "127.0.0.1",
            "--master_port", str(_port()), *args])
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1", "PYTHONHASHSEED": "0"}
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    assert (proc.returncode == 0) == ok, proc.stderr[-4000:]
    return proc


def _launch(procs: int, tiny: Path, data: Path, out: Path, mode: str, backend: str, optimizer: str,
            *extra: str, ok: bool = True) -> subprocess.CompletedProcess[str]:
    out.mkdir(parents=True, exist_ok=True)
    return _run(procs, [str(WORKER), str(tiny), str(data), str(out), mode, backend, optimizer, *extra], ok=ok)


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


@pytest.mark.slow
@pytest.mark.parametrize("lora", [False, True], ids=["whole", "lora"])
def test_two_gloo_fsdp2_ranks_resume_exactly_and_export(tiny_dir: Path, grounding_data: Path, tmp_path: Path,
                                                       lora: bool) -> None:
    """FSDP2 with the trainer's AdamW: the same two ranks, the same reduction order, and every state
    restored (weights, AdamW moments and step, each rank's RNG: LoRA dropout draws from it), so the
    resumed run's weights are the straight run's bit for bit."""
    extra = ("lora",) if lora else ()
    straight, run = tmp_path / "straight", tmp_path / "resumed"
    _launch(2, tiny_dir, grounding_data, straight, "plain", "fsdp2", "adamw", *extra)
    _launch(2, tiny_dir, grounding_data, run, "stop", "fsdp2", "adamw", *extra)  # stopped after step 1's checkpoint
    ckpt = run / "ckpt" / "step-00000001"
    assert (run / "ckpt" / "latest").read_text() == ckpt.name and not (run / "rank0.safetensors").exists()
    assert sorted(p.name for p in ckpt.iterdir()) == sorted([*FILES, "SHA256SUMS"])  # no .distcp, no pickle
    state = json.loads((ckpt / "state.json").read_text())
    assert (state["layout"], state["world"], len(state["rng"]), state["loop"]["step"]) == ("fsdp2-full", 2, 2, 1)
    assert set(load_file(ckpt / "rng.safetensors")) >= {"rank0.torch", "rank1.torch"}
    model, proc = load_model(tiny_dir, ModelSpec())
    spec = GroundingRLSpec(reward=LENGTH_REWARD, lora=LoraSpec(enabled=lora, r=4))
    single = OfflineGRPO(model, proc, spec, MemoryTracker())
    with pytest.raises(ValueError, match="'fsdp2-full' run"):  # the parameter-name keyed layout is FSDP2's alone
        load_checkpoint(ckpt, single.model, single.optimizer)
    _launch(2, tiny_dir, grounding_data, run, "resume", "fsdp2", "adamw", *extra)
    assert (run / "ckpt" / "latest").read_text() == "step-00000002"

    want, got = load_file(straight / "rank0.safetensors"), load_file(run / "rank0.safetensors")
    assert want.keys() == got.keys() and all(torch.equal(want[k], got[k]) for k in want), _max_diff(want, got)
    start = single.model.state_dict()  # the starting weights (LoRA: B = 0)
    assert want.keys() == start.keys() and _max_diff(want, start) > 1e-3  # it trained
    a, b = json.loads((straight / "metrics.json").read_text()), json.loads((run / "metrics.json").read_text())
    assert len(a) == 2 and len(b) == 1
    assert {k: v for k, v in a[1].items() if not k.startswith("time/")} == \
        {k: v for k, v in b[0].items() if not k.startswith("time/")}

    exported = load_model(straight / "model", ModelSpec())[0].state_dict()  # verified against its SHA256SUMS
    if lora:  # rank 0 merged the gathered weights as peft merges a whole model
        single.model.load_state_dict(want)
        expected = single.model.merge_and_unload().state_dict()
    else:
        expected = want
    assert exported.keys() == expected.keys()
    assert all(torch.equal(exported[k], expected[k]) for k in expected), _max_diff(exported, expected)

    if lora:
        return
    # a resume that finds its checkpoint altered stops on every rank with rank 0's reason (no rank
    # left waiting in a collective)
    last = run / "ckpt" / "step-00000002" / "model.safetensors"
    data = bytearray(last.read_bytes())
    data[-1] ^= 0xFF
    last.write_bytes(bytes(data))
    failed = _launch(2, tiny_dir, grounding_data, run, "resume", "fsdp2", "adamw", *extra, ok=False)
    assert "model.safetensors" in failed.stderr and "sha256" in failed.stderr.lower()


JOB = """import sys
sys.path.insert(0, {tests!r})
import rl_helpers  # noqa: F401  (registers the test reward)
from venus_core.runtime.offline_rl import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.slow
def test_offline_rl_job_on_two_fsdp2_ranks_stopped_and_resumed_exports_the_straight_runs_model(
        tiny_dir: Path, grounding_data: Path, tmp_path: Path) -> None:
    """The job itself (`runtime.offline_rl` under torchrun, backend fsdp2): evaluation before and
    after, checkpoints, a stop after step 1 and a restart, the exported model."""
    script = tmp_path / "job.py"
    script.write_text(JOB.format(tests=str(Path(__file__).parent)))
    sets = ["platform.tracking_uri=none", "offline_rl.distributed.backend=fsdp2", "eval.held_out=2",
            *(f"offline_rl.grounding.{k}" for k in ("max_steps=3", "prompts_per_step=4", "group_size=2",
                                                     "max_new_tokens=4", "save_every=1", "lr=0.01",
                                                     "reward=rl_test_length"))]

    def job(out: Path, ckpt: Path, *extra: str, ok: bool = True) -> None:
        _run(2, [str(script), "--domain", "grounding", "--spec", str(Path(__file__).parents[2] / "agents" / "venus-tiny"),
                 "--model", str(tiny_dir), "--data", str(grounding_data), "--out", str(out), "--checkpoints", str(ckpt),
                 "--device", "cpu", *(a for kv in sets for a in ("--set", kv)), *extra], ok=ok)

    job(tmp_path / "straight", tmp_path / "ck-straight")
    job(tmp_path / "resumed", tmp_path / "ck", "--stop-at", "1", ok=False)
    assert (tmp_path / "ck" / "latest").read_text() == "step-00000001"
    assert not (tmp_path / "resumed" / "model").exists()
    job(tmp_path / "resumed", tmp_path / "ck")
    report = json.loads((tmp_path / "resumed" / "report.json").read_text())
    assert (report["resumed_from_step"], report["placement"]["backend"], report["placement"]["world_size"]) == \
        (1, "fsdp2", 2)
    assert set(report["held_out_after"]) == {"hit", "parsed"}
    a = load_model(tmp_path / "straight" / "model", ModelSpec())[0].state_dict()  # verified (SHA256SUMS)
    b = load_model(tmp_path / "resumed" / "model", ModelSpec())[0].state_dict()
    assert all(torch.equal(a[k], b[k]) for k in a), _max_diff(a, b)
    assert _max_diff(a, load_model(tiny_dir, ModelSpec())[0].state_dict()) > 1e-3  # it trained


def test_fsdp2_checkpoint_round_trip_in_one_rank(tiny_dir: Path, tmp_path: Path) -> None:
    """FSDP2 over a world of one (the same code path as many ranks, no second process): weights,
    AdamW state and RNG come back exactly, a parameter that had no gradient yet comes back without
    optimizer state (its first step's bias correction), and an altered file is refused."""
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        env = DistEnv(rank=0, world=1, local_rank=0, device=torch.device("cpu"), backend="fsdp2")
        spec = GroundingRLSpec(reward=LENGTH_REWARD)

        def trainer() -> OfflineGRPO:
            model, proc = load_model(tiny_dir, ModelSpec())
            return OfflineGRPO(model, proc, spec, MemoryTracker(), env=env)

        saved = trainer()
        for p in saved.params[::2]:  # every other parameter gets a gradient, the rest none yet
            p.grad = torch.randn_like(p)
        saved.optimizer.step()
        path = save_fsdp2_checkpoint(tmp_path / "ckpt", 1, saved.model, saved.optimizer, {"loop": {"step": 1}}, env)
        draw = torch.rand(3)  # what the RNG gives after the checkpoint
        loaded = trainer()
        assert latest_fsdp2_checkpoint(tmp_path / "ckpt", env) == path
        assert load_fsdp2_checkpoint(path, loaded.model, loaded.optimizer, env)["loop"] == {"step": 1}
        assert torch.equal(torch.rand(3), draw)

        def whole(sd: dict[str, object]) -> dict[str, object]:
            return {k: v.full_tensor() if hasattr(v, "full_tensor") else v for k, v in sd.items()}  # type: ignore[union-attr]

        a, b = whole(saved.model.state_dict()), whole(loaded.model.state_dict())
        assert all(torch.equal(a[k], b[k]) for k in a)  # type: ignore[arg-type]
        sa, sb = saved.optimizer.state_dict()["state"], loaded.optimizer.state_dict()["state"]
        assert set(sa) == set(sb) and len(sa) == (len(saved.params) + 1) // 2
        assert all(torch.equal(whole(sa[i])[k], whole(sb[i])[k]) for i in sa for k in sa[i])  # type: ignore[arg-type]

        data = bytearray((path / "optimizer.safetensors").read_bytes())
        data[-1] ^= 0xFF
        (path / "optimizer.safetensors").write_bytes(bytes(data))
        with pytest.raises(ValueError, match="optimizer.safetensors: sha256 does not match"):
            load_fsdp2_checkpoint(path, loaded.model, loaded.optimizer, env)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_lora_merged_from_whole_weights_is_peft_merge(tiny_dir: Path, dtype: str) -> None:
    model, _ = load_model(tiny_dir, ModelSpec(dtype=dtype))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    peft = apply_lora(model, LoraSpec(enabled=True, r=4, alpha=8))
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in peft.named_parameters():
            if "lora_B" in name:  # B starts at zero: give the adapters something to merge
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    merged = merge_lora_weights(peft, {k: v.clone() for k, v in peft.state_dict().items()})
    want = peft.merge_and_unload().state_dict()
    assert merged.keys() == want.keys()
    assert all(torch.equal(merged[k], want[k]) for k in want)
    assert merged.keys() == before.keys() and not all(torch.equal(merged[k], before[k]) for k in before)


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
