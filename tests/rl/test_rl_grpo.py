"""One full GRPO step on the tiny model: weights move, every metric is logged, freezing and LoRA."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from venus_core.config.spec import GroundingRLSpec, LoraSpec, ModelSpec
from venus_core.data.store import DatasetReader
from venus_core.models.loading import load_model
from venus_core.rl.grpo import OfflineGRPO, vision_tower
from venus_core.rl.prompts import grounding_item
from venus_core.train.tracker import MemoryTracker

from rl_helpers import LENGTH_REWARD

EXPECTED = {
    "reward/mean", "reward/std", "reward/short/mean", "reward/short/std", "advantage/mean", "advantage/std",
    "advantage/abs_max", "kl", "entropy", "clip_fraction", "completion_len/mean", "completion_len/max",
    "completion/truncated_frac", "parse_fail_rate", "groups/total", "groups/zero_variance",
    "groups/zero_variance_frac", "loss", "policy_loss", "grad_norm", "lr", "time/generate_s",
    "time/logprob_s", "time/backward_s", "samples", "updated",
}


def _items(grounding_data: Path, n: int = 2):  # type: ignore[no-untyped-def]
    reader = DatasetReader(grounding_data)
    return [grounding_item(r, reader.open_image) for r in list(reader)[:n]]


def _spec(**kw: object) -> GroundingRLSpec:
    base = dict(reward=LENGTH_REWARD, group_size=4, prompts_per_step=2, max_new_tokens=6, lr=1e-2, max_steps=4)
    base.update(kw)
    return GroundingRLSpec(**base)  # type: ignore[arg-type]


def _snapshot(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.named_parameters()}


def test_one_step_changes_weights_and_logs_every_metric(tiny_dir: Path, grounding_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    before = _snapshot(model)
    tracker = MemoryTracker()
    trainer = OfflineGRPO(model, proc, _spec(), tracker, minibatches=2)
    m = trainer.step(_items(grounding_data), 0)
    assert EXPECTED <= set(m), EXPECTED - set(m)
    assert tracker.metrics[0][0] == 0 and set(tracker.metrics[0][1]) == set(m)
    assert m["updated"] == 1.0 and m["samples"] == 8 and m["groups/total"] == 2
    assert m["kl"] >= 0 and math.isfinite(m["entropy"]) and m["entropy"] > 0
    changed = [k for k, v in trainer.model.named_parameters() if not torch.equal(v, before[k])]
    assert changed, "no parameter moved"
    # the reference stays where it started
    assert all(torch.equal(v, before[k]) for k, v in trainer.ref.named_parameters())  # type: ignore[union-attr]


def test_zero_variance_groups_are_counted_and_skipped(tiny_dir: Path, grounding_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    before = _snapshot(model)
    # the grounding reward gives every unparseable answer of the untrained model 0: no variance
    trainer = OfflineGRPO(model, proc, _spec(reward="grounding"), MemoryTracker())
    m = trainer.step(_items(grounding_data), 0)
    assert m["groups/zero_variance"] == 2 and m["updated"] == 0.0 and math.isnan(m["kl"])
    assert all(torch.equal(v, before[k]) for k, v in model.named_parameters())


def test_frozen_vision_tower_does_not_move(tiny_dir: Path, grounding_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    visual_before = _snapshot(vision_tower(model))
    trainer = OfflineGRPO(model, proc, _spec(freeze_vision=True, kl_coef=0.0), MemoryTracker())
    assert trainer.frozen_vision == sum(p.numel() for p in visual_before.values())
    m = trainer.step(_items(grounding_data), 0)
    assert m["updated"] == 1.0
    assert all(torch.equal(v, visual_before[k]) for k, v in vision_tower(model).named_parameters())
    assert any(p.grad is not None for p in model.model.language_model.parameters())


def test_lora_trains_adapters_only_and_merges(tiny_dir: Path, grounding_data: Path, tmp_path: Path) -> None:
    pytest.importorskip("peft")
    model, proc = load_model(tiny_dir, ModelSpec())
    base_before = _snapshot(model)
    spec = _spec(lora=LoraSpec(enabled=True, r=4, alpha=8, dropout=0.0))
    trainer = OfflineGRPO(model, proc, spec, MemoryTracker())
    assert trainer.ref is None and trainer.summary()["reference"] == "adapters disabled"
    total = sum(p.numel() for p in base_before.values())
    assert 0 < trainer.trainable < total / 5
    m = trainer.step(_items(grounding_data), 0)
    assert m["updated"] == 1.0 and m["kl"] >= 0
    merged = trainer.trained_model()
    after = dict(merged.named_parameters())
    assert set(after) == set(base_before)
    moved = [k for k in after if not torch.equal(after[k], base_before[k])]
    assert moved and all(any(t in k for t in ("q_proj", "k_proj", "v_proj", "o_proj")) for k in moved)


def test_train_loop_runs_epochs(tiny_dir: Path, grounding_data: Path) -> None:
    model, proc = load_model(tiny_dir, ModelSpec())
    items = _items(grounding_data, 4)
    epochs: list[int] = []
    trainer = OfflineGRPO(model, proc, _spec(kl_coef=0.0), MemoryTracker())
    hist = trainer.train(lambda e: items, steps=3, after_epoch=epochs.append)
    assert len(hist) == 3 and epochs == [0]
