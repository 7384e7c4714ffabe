"""Length buckets give the padded batch's loss and gradient, with fewer padded tokens."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from venus_core.config.spec import MixtureSpec, ModelSpec
from venus_core.config.training import MidTrainSpec
from venus_core.models.batches import collate
from venus_core.models.loading import load_model
from venus_core.train.buckets import answer_tokens, length_groups, split_batch
from venus_core.train.data import load_corpus
from venus_core.train.distributed import DistEnv
from venus_core.train.sft import train_sft

CPU = DistEnv(0, 1, 0, torch.device("cpu"), "single")


@given(st.lists(st.integers(1, 2000), min_size=1, max_size=40), st.floats(1.0, 4.0))
@settings(max_examples=200, deadline=None)
def test_length_groups_partition_rows_within_the_ratio(lengths: list[int], ratio: float) -> None:
    groups = length_groups(lengths, ratio)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    for g in groups:
        assert max(lengths[i] for i in g) <= ratio * min(lengths[i] for i in g)
    assert length_groups(lengths, 1e9) == [sorted(range(len(lengths)), key=lambda i: (-lengths[i], i))]


def test_length_groups_rejects_a_non_positive_ratio() -> None:
    with pytest.raises(ValueError, match="ratio"):
        length_groups([3, 4], 0)


def _mixed_batch(proc: object, grounding: Path, mixture: Path) -> dict[str, torch.Tensor]:
    corpus = load_corpus([grounding, mixture], validation_fraction=0.0, history_len=5, seed=0)
    examples = [it.example() for it in corpus.train["navigation"][:3]]
    examples += [it.example() for it in corpus.train["grounding"][:4]]
    examples += [it.example() for d in ("perception", "vqa") for it in corpus.train.get(d, [])[:2]]
    return collate(examples, proc)  # type: ignore[arg-type]


def test_split_batch_gives_the_padded_loss_and_gradient(train_tiny_dir: Path, grounding_l0: Path, mixture_l2: Path) -> None:
    model, proc = load_model(train_tiny_dir, ModelSpec())
    model.train()
    batch = _mixed_batch(proc, grounding_l0, mixture_l2)
    vs = int(proc.tokenizer.convert_tokens_to_ids("<|vision_start|>"))
    pieces = split_batch(batch, vs, 2.0)
    assert len(pieces) >= 2, "the batch mixes ~1,000-token navigation steps with short samples"
    assert abs(sum(w for _, w in pieces) - 1.0) < 1e-9
    assert sum(p["input_ids"].shape[0] for p, _ in pieces) == batch["input_ids"].shape[0]
    padded_tokens = batch["input_ids"].numel()
    assert sum(p["input_ids"].numel() for p, _ in pieces) < 0.7 * padded_tokens
    assert sum(answer_tokens(p["labels"]) for p, _ in pieces) == answer_tokens(batch["labels"])
    assert sum(int(p["image_grid_thw"].shape[0]) for p, _ in pieces) == batch["image_grid_thw"].shape[0]

    model.zero_grad()
    full = model(**batch).loss
    full.backward()
    ref = {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad()
    total = torch.zeros(())
    for sub, weight in pieces:
        loss = model(**sub).loss * weight
        loss.backward()
        total += loss.detach()
    assert torch.allclose(total, full.detach(), rtol=1e-5, atol=1e-6)
    for name, p in model.named_parameters():
        if name in ref:
            assert torch.allclose(p.grad, ref[name], rtol=1e-3, atol=1e-6), name


def test_grouped_and_padded_training_reach_the_same_weights(train_tiny_dir: Path, grounding_l0: Path, mixture_l2: Path,
                                                           tmp_path: Path) -> None:
    weights = []
    for ratio in (0.0, 2.0):
        model, proc = load_model(train_tiny_dir, ModelSpec())
        init = {k: v.detach().clone() for k, v in model.state_dict().items()}
        corpus = load_corpus([grounding_l0, mixture_l2], validation_fraction=0.0, history_len=5, seed=0)
        cfg = MidTrainSpec(max_steps=2, batch_size=6, lr=1e-3, warmup_steps=0, save_every=100, eval_every=100, seed=2,
                           max_seq_len=1536, length_group_ratio=ratio)
        train_sft(model, proc, corpus, MixtureSpec(perception=0.2, vqa=0.2, grounding=0.3, navigation=0.3), cfg, CPU,
                  ckpt_dir=tmp_path / f"ck{ratio}", eval_limit=1)
        weights.append({k: v.detach().clone() for k, v in model.state_dict().items()})
        assert any(not torch.equal(init[k], weights[-1][k]) for k in init), "training must move the weights"
    a, b = weights
    for k in a:
        assert torch.allclose(a[k], b[k], rtol=1e-4, atol=2e-5), k


def test_buckets_doctests() -> None:
    import doctest

    from venus_core.train import buckets

    result = doctest.testmod(buckets)
    assert result.attempted >= 1 and result.failed == 0
